//! Typed CPU buffers and the dispatch macros that turn a buffer into a typed
//! slice for a generic kernel.

use crate::dtype::{DType, Element};
use half::{bf16, f16};

/// The elements of one CPU array, typed.
#[derive(Clone, Debug, PartialEq)]
pub enum CpuBuffer {
    /// f32 elements.
    F32(Vec<f32>),
    /// f64 elements.
    F64(Vec<f64>),
    /// f16 elements.
    F16(Vec<f16>),
    /// bf16 elements.
    BF16(Vec<bf16>),
    /// i32 elements.
    I32(Vec<i32>),
    /// i64 elements.
    I64(Vec<i64>),
    /// u32 elements.
    U32(Vec<u32>),
    /// bool elements.
    Bool(Vec<bool>),
}

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

/// Runs `$body` with the type alias `$t` set to the element type of `$dtype`.
#[macro_export]
macro_rules! with_dtype {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $t = f32;
                $body
            }
            $crate::DType::F64 => {
                type $t = f64;
                $body
            }
            $crate::DType::F16 => {
                type $t = $crate::half::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $t = $crate::half::bf16;
                $body
            }
            $crate::DType::I32 => {
                type $t = i32;
                $body
            }
            $crate::DType::I64 => {
                type $t = i64;
                $body
            }
            $crate::DType::U32 => {
                type $t = u32;
                $body
            }
            $crate::DType::Bool => {
                type $t = bool;
                $body
            }
        }
    };
}

/// Like [`with_dtype!`] for float dtypes only; `$other` runs for the rest.
#[macro_export]
macro_rules! with_float_dtype {
    ($dtype:expr, $t:ident => $body:expr, _ => $other:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $t = f32;
                $body
            }
            $crate::DType::F64 => {
                type $t = f64;
                $body
            }
            $crate::DType::F16 => {
                type $t = $crate::half::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $t = $crate::half::bf16;
                $body
            }
            _ => $other,
        }
    };
}

/// Like [`with_dtype!`] for the numeric (non-bool) dtypes; `$other` runs for bool.
#[macro_export]
macro_rules! with_numeric_dtype {
    ($dtype:expr, $t:ident => $body:expr, _ => $other:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $t = f32;
                $body
            }
            $crate::DType::F64 => {
                type $t = f64;
                $body
            }
            $crate::DType::F16 => {
                type $t = $crate::half::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $t = $crate::half::bf16;
                $body
            }
            $crate::DType::I32 => {
                type $t = i32;
                $body
            }
            $crate::DType::I64 => {
                type $t = i64;
                $body
            }
            $crate::DType::U32 => {
                type $t = u32;
                $body
            }
            _ => $other,
        }
    };
}

/// Like [`with_dtype!`] for the integer dtypes; `$other` runs for the rest.
#[macro_export]
macro_rules! with_int_dtype {
    ($dtype:expr, $t:ident => $body:expr, _ => $other:expr) => {
        match $dtype {
            $crate::DType::I32 => {
                type $t = i32;
                $body
            }
            $crate::DType::I64 => {
                type $t = i64;
                $body
            }
            $crate::DType::U32 => {
                type $t = u32;
                $body
            }
            _ => $other,
        }
    };
}
