//! Typed CPU buffers (the enum is defined beside the dtypes it mirrors, in
//! `dtype.rs`) and the dispatch macros that turn a buffer into a typed
//! slice for a generic kernel.

use crate::dtype::CpuBuffer;
use crate::dtype::{DType, Element};

impl Drop for CpuBuffer {
    fn drop(&mut self) {
        // Hand the elements' memory to the buffer cache (see `pool`).
        crate::match_buffer!(self, v => crate::pool::recycle(std::mem::take(v)))
    }
}

impl CpuBuffer {
    /// Wraps a typed vector.
    pub fn from_vec<T: Element>(v: Vec<T>) -> CpuBuffer {
        T::wrap(v)
    }

    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        match self {
            CpuBuffer::F32(_) => DType::F32,
            CpuBuffer::F64(_) => DType::F64,
            CpuBuffer::F16(_) => DType::F16,
            CpuBuffer::BF16(_) => DType::BF16,
            CpuBuffer::I32(_) => DType::I32,
            CpuBuffer::I64(_) => DType::I64,
            CpuBuffer::U32(_) => DType::U32,
            CpuBuffer::Bool(_) => DType::Bool,
        }
    }

    /// Number of elements held.
    pub fn len(&self) -> usize {
        crate::match_buffer!(self, v => v.len())
    }

    /// True if no elements are held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The typed elements.
    ///
    /// # Panics
    /// If the buffer does not hold `T` (callers check dtypes first).
    #[track_caller]
    pub fn as_slice<T: Element>(&self) -> &[T] {
        match T::view(self) {
            Some(s) => s,
            None => panic!("buffer holds {}, not {}", self.dtype(), T::DTYPE),
        }
    }

    /// The typed elements, mutably.
    ///
    /// # Panics
    /// If the buffer does not hold `T`.
    #[track_caller]
    pub fn as_mut_slice<T: Element>(&mut self) -> &mut [T] {
        let d = self.dtype();
        match T::view_mut(self) {
            Some(s) => s,
            None => panic!("buffer holds {d}, not {}", T::DTYPE),
        }
    }

    /// A buffer of `n` copies of `value` (given as f64, cast like numpy).
    pub fn full(dtype: DType, n: usize, value: f64) -> CpuBuffer {
        crate::with_dtype!(dtype, T => CpuBuffer::from_vec(crate::pool::filled(n, T::from_f64(value))))
    }
}

/// Runs `$body` with `$v` bound to the typed vector inside a buffer.
#[macro_export]
macro_rules! match_buffer {
    ($buf:expr, $v:ident => $body:expr) => {
        match $buf {
            $crate::CpuBuffer::F32($v) => $body,
            $crate::CpuBuffer::F64($v) => $body,
            $crate::CpuBuffer::F16($v) => $body,
            $crate::CpuBuffer::BF16($v) => $body,
            $crate::CpuBuffer::I32($v) => $body,
            $crate::CpuBuffer::I64($v) => $body,
            $crate::CpuBuffer::U32($v) => $body,
            $crate::CpuBuffer::Bool($v) => $body,
        }
    };
}

/// The one dtype dispatch table: each dtype's variant, element type and
/// class (`float`, `int` or `bool`), one row each and no catch-all arm, so
/// a new dtype that is not added here fails to compile every dispatch.
/// [`with_dtype!`](crate::with_dtype!), [`with_float_dtype!`](crate::with_float_dtype!), [`with_numeric_dtype!`](crate::with_numeric_dtype!) and
/// [`with_int_dtype!`](crate::with_int_dtype!) are its views: `$sel` picks the classes that run
/// `$body` (with `$t` the element type); the others run `$other`.
#[doc(hidden)]
#[macro_export]
macro_rules! dispatch_dtype {
    ($sel:ident, $dtype:expr, $t:ident => $body:expr, $other:expr) => {
        match $dtype {
            $crate::DType::F32 => $crate::dtype_arm!($sel, float, $t = f32, $body, $other),
            $crate::DType::F64 => $crate::dtype_arm!($sel, float, $t = f64, $body, $other),
            $crate::DType::F16 => $crate::dtype_arm!($sel, float, $t = $crate::half::f16, $body, $other),
            $crate::DType::BF16 => $crate::dtype_arm!($sel, float, $t = $crate::half::bf16, $body, $other),
            $crate::DType::I32 => $crate::dtype_arm!($sel, int, $t = i32, $body, $other),
            $crate::DType::I64 => $crate::dtype_arm!($sel, int, $t = i64, $body, $other),
            $crate::DType::U32 => $crate::dtype_arm!($sel, int, $t = u32, $body, $other),
            $crate::DType::Bool => $crate::dtype_arm!($sel, bool, $t = bool, $body, $other),
        }
    };
}

/// One arm of [`dispatch_dtype!`](crate::dispatch_dtype!): `$body` with `$t = $ty` where the
/// selection `$sel` takes the class `$class`, else `$other`.
#[doc(hidden)]
#[macro_export]
macro_rules! dtype_arm {
    (all, $class:ident, $t:ident = $ty:ty, $body:expr, $other:expr) => {{
        type $t = $ty;
        $body
    }};
    (float, float, $t:ident = $ty:ty, $body:expr, $other:expr) => {{
        type $t = $ty;
        $body
    }};
    (int, int, $t:ident = $ty:ty, $body:expr, $other:expr) => {{
        type $t = $ty;
        $body
    }};
    (numeric, float, $t:ident = $ty:ty, $body:expr, $other:expr) => {{
        type $t = $ty;
        $body
    }};
    (numeric, int, $t:ident = $ty:ty, $body:expr, $other:expr) => {{
        type $t = $ty;
        $body
    }};
    ($sel:ident, $class:ident, $t:ident = $ty:ty, $body:expr, $other:expr) => {
        $other
    };
}

/// Runs `$body` with the type alias `$t` set to the element type of `$dtype`.
#[macro_export]
macro_rules! with_dtype {
    ($dtype:expr, $t:ident => $body:expr) => {
        $crate::dispatch_dtype!(all, $dtype, $t => $body, unreachable!())
    };
}

/// Like [`with_dtype!`](crate::with_dtype!) for float dtypes only; `$other` runs for the rest.
#[macro_export]
macro_rules! with_float_dtype {
    ($dtype:expr, $t:ident => $body:expr, _ => $other:expr) => {
        $crate::dispatch_dtype!(float, $dtype, $t => $body, $other)
    };
}

/// Like [`with_dtype!`](crate::with_dtype!) for the numeric (non-bool) dtypes; `$other` runs for bool.
#[macro_export]
macro_rules! with_numeric_dtype {
    ($dtype:expr, $t:ident => $body:expr, _ => $other:expr) => {
        $crate::dispatch_dtype!(numeric, $dtype, $t => $body, $other)
    };
}

/// Like [`with_dtype!`](crate::with_dtype!) for the integer dtypes; `$other` runs for the rest.
#[macro_export]
macro_rules! with_int_dtype {
    ($dtype:expr, $t:ident => $body:expr, _ => $other:expr) => {
        $crate::dispatch_dtype!(int, $dtype, $t => $body, $other)
    };
}
