//! Constructors, conversions and reading values back.

use crate::array::{Array, Device};
use crate::error::{Error, OrRaise, Result};
use crate::lax;
use crate::prims::check_size;
use crate::tensor::Tensor;
use xform_kernels::{CpuBuffer, DType, Element, Shape};

/// `shape` filled with `value` for the constructor `op` (which its errors
/// name).
fn filled(op: &str, shape: Shape, value: f64, dtype: DType) -> Result<Tensor> {
    check_size(op, &shape, dtype)?;
    super::check_scalar_fits(op, value, dtype)?;
    let a = Array::try_full(op, shape, dtype, value)?;
    Ok(Tensor::from_array(a.to_device(crate::array::default_device())?))
}

impl Tensor {
    /// A tensor over `data` with `shape` (row-major).
    ///
    /// # Panics
    /// If `data.len()` differs from the number of elements of `shape`.
    #[track_caller]
    pub fn from_vec<T: Element>(data: Vec<T>, shape: impl Into<Shape>) -> Tensor {
        Tensor::try_from_vec(data, shape).or_raise()
    }

    /// [`Tensor::from_vec`] returning an error instead of panicking.
    pub fn try_from_vec<T: Element>(data: Vec<T>, shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = shape.into();
        check_size("from_vec", &shape, T::DTYPE)?;
        if data.len() != shape.numel() {
            return Err(Error::shape(
                "from_vec",
                format!("{} values cannot fill a tensor of {} elements", data.len(), shape.numel()),
                &[&shape],
            ));
        }
        let a = Array::from_cpu(CpuBuffer::from_vec(data), shape);
        Ok(Tensor::from_array(a.to_device(crate::array::default_device())?))
    }

    /// A tensor copied from `data` with `shape`.
    ///
    /// # Panics
    /// If the length does not match the shape.
    #[track_caller]
    pub fn from_slice<T: Element>(data: &[T], shape: impl Into<Shape>) -> Tensor {
        Tensor::from_vec(data.to_vec(), shape)
    }

    /// A rank-0 tensor.
    pub fn scalar<T: Element>(v: T) -> Tensor {
        Tensor::from_vec(vec![v], Shape::scalar())
    }

    /// `shape` filled with `value` (cast to `dtype`), in fresh writable storage.
    /// Into an integer dtype a float is truncated toward zero, as numpy's
    /// and JAX's `full` do.
    ///
    /// # Panics
    /// As [`Tensor::try_full`].
    #[track_caller]
    pub fn full(shape: impl Into<Shape>, value: f64, dtype: DType) -> Tensor {
        Tensor::try_full(shape, value, dtype).or_raise()
    }

    /// [`Tensor::full`] returning an error: an
    /// [`ErrorKind::Overflow`](crate::ErrorKind::Overflow) if the shape's element count or bytes pass
    /// `isize::MAX`, or if an integer `dtype` cannot hold `value` (NaN,
    /// infinite or out of its range; numpy 2 refuses these too); an
    /// out-of-memory error if the buffer cannot be allocated.
    pub fn try_full(shape: impl Into<Shape>, value: f64, dtype: DType) -> Result<Tensor> {
        filled("full", shape.into(), value, dtype)
    }

    /// Zeros.
    ///
    /// # Panics
    /// As [`Tensor::try_full`] (the error names `zeros`).
    #[track_caller]
    pub fn zeros(shape: impl Into<Shape>, dtype: DType) -> Tensor {
        filled("zeros", shape.into(), 0.0, dtype).or_raise()
    }

    /// Ones.
    ///
    /// # Panics
    /// As [`Tensor::try_full`] (the error names `ones`).
    #[track_caller]
    pub fn ones(shape: impl Into<Shape>, dtype: DType) -> Tensor {
        filled("ones", shape.into(), 1.0, dtype).or_raise()
    }

    /// `value` shaped, typed and placed like `self` (fresh storage; under a
    /// transform, an unbatched constant of the logical shape).
    #[track_caller]
    pub fn full_like(&self, value: f64) -> Tensor {
        let a = self.aval();
        super::check_scalar_fits("full_like", value, a.dtype).or_raise();
        let arr = Array::try_full("full_like", a.shape, a.dtype, value).or_raise();
        Tensor::from_array(arr.to_device(a.device).or_raise())
    }

    /// Zeros like `self`.
    pub fn zeros_like(&self) -> Tensor {
        self.full_like(0.0)
    }

    /// Ones like `self`.
    pub fn ones_like(&self) -> Tensor {
        self.full_like(1.0)
    }

    /// `start, start + step, ...` below `end` (numpy's arange).
    ///
    /// # Panics
    /// If `step` is zero.
    #[track_caller]
    pub fn arange(start: f64, end: f64, step: f64, dtype: DType) -> Tensor {
        if step == 0.0 {
            Error::invalid("arange", "step must not be zero").raise();
        }
        let n = ((end - start) / step).ceil().max(0.0);
        if n >= (isize::MAX as usize / 8) as f64 {
            Error::overflow("arange", format!("{start}..{end} step {step} has {n} elements, more than an array holds"))
                .raise();
        }
        let n = n as usize;
        let a = Array::try_from_fn("arange", Shape::from([n]), |i| start + i as f64 * step).or_raise();
        Tensor::from_array(a.to_device(crate::array::default_device()).or_raise()).cast(dtype)
    }

    /// `n` evenly spaced values from `start` to `end` inclusive.
    #[track_caller]
    pub fn linspace(start: f64, end: f64, n: usize, dtype: DType) -> Tensor {
        // (computed in f64 first, then cast: both must fit)
        check_size("linspace", &Shape::from([n]), dtype).or_raise();
        check_size("linspace", &Shape::from([n]), DType::F64).or_raise();
        let at = |i: usize| if n == 1 { start } else { start + (end - start) * i as f64 / (n - 1) as f64 };
        let a = Array::try_from_fn("linspace", Shape::from([n]), at).or_raise();
        Tensor::from_array(a.to_device(crate::array::default_device()).or_raise()).cast(dtype)
    }

    /// The `n x n` identity matrix.
    pub fn eye(n: usize, dtype: DType) -> Tensor {
        Tensor::eye_nm(n, n, 0, dtype)
    }

    /// A `rows x cols` matrix with ones on diagonal `k` (`out[r, c] = 1` where
    /// `c = r + k`) and zeros elsewhere, like numpy's `eye(N, M, k)`.
    #[track_caller]
    pub fn eye_nm(rows: usize, cols: usize, k: isize, dtype: DType) -> Tensor {
        let shape = Shape::from([rows, cols]);
        check_size("eye", &shape, dtype).or_raise();
        let a = Array::try_full("eye", shape, dtype, 0.0).or_raise();
        xform_kernels::with_dtype!(dtype, T => {
            let mut buf = a.write();
            let v = buf.cpu_mut("eye").or_raise().as_mut_slice::<T>();
            for r in 0..rows {
                let c = r as i128 + k as i128; // k may be near isize::MIN or MAX
                if c >= 0 && c < cols as i128 {
                    v[r * cols + c as usize] = T::ONE;
                }
            }
        });
        Tensor::from_array(a.to_device(crate::array::default_device()).or_raise())
    }

    /// The elements, row-major, as `T`.
    ///
    /// # Panics
    /// If `T` is not the dtype, or the value is not known here: under
    /// grad, jvp, linearize, jacfwd and jacrev a tracer's primal is read
    /// (as in JAX without jit, and torch.func), so plain Rust control flow
    /// works; under vmap (a value per example) and trace (no value yet) it
    /// is an error that points to `where`/`select` and `cond`.
    #[track_caller]
    pub fn to_vec<T: Element>(&self) -> Vec<T> {
        self.try_to_vec().or_raise()
    }

    /// [`Tensor::to_vec`] returning an error instead of panicking.
    pub fn try_to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.known("to_vec")?.to_vec::<T>()
    }

    /// The elements converted to f64, whatever the dtype.
    ///
    /// # Panics
    /// If the value is not known here (see [`Tensor::to_vec`]).
    #[track_caller]
    pub fn to_vec_f64(&self) -> Vec<f64> {
        let a = self.known("to_vec_f64").or_raise();
        let c = lax::convert(&Tensor::from_array(a), DType::F64).or_raise();
        c.to_vec::<f64>()
    }

    /// The single element of a one-element tensor.
    ///
    /// # Panics
    /// If the tensor has more than one element, `T` is not its dtype, or
    /// its value is not known here (see [`Tensor::to_vec`]).
    #[track_caller]
    pub fn item<T: Element>(&self) -> T {
        if self.numel() != 1 {
            Error::shape("item", "needs a tensor with exactly one element", &[&self.shape()]).raise();
        }
        // (named `item` in its errors: a staged value, a wrong dtype)
        let values = self.try_to_vec::<T>().map_err(|e| e.named("item"));
        values.or_raise()[0]
    }

    /// The single element as f64, whatever the dtype.
    ///
    /// # Panics
    /// As [`Tensor::item`].
    #[track_caller]
    pub fn item_f64(&self) -> f64 {
        if self.numel() != 1 {
            Error::shape("item", "needs a tensor with exactly one element", &[&self.shape()]).raise();
        }
        self.to_vec_f64()[0]
    }

    /// Converted to `dtype` (a no-op if it already is).
    pub fn cast(&self, dtype: DType) -> Tensor {
        lax::convert(self, dtype).or_raise()
    }

    /// A copy in fresh, contiguous storage (PyTorch's `clone`): in-place ops
    /// on the copy leave `self` alone.
    pub fn copy(&self) -> Tensor {
        lax::copy(self).or_raise()
    }

    /// The same values on `device`.
    ///
    /// # Panics
    /// If the device is unavailable (use [`Tensor::try_to_device`]).
    #[track_caller]
    pub fn to_device(&self, device: Device) -> Tensor {
        self.try_to_device(device).or_raise()
    }

    /// [`Tensor::to_device`] returning an error instead of panicking.
    pub fn try_to_device(&self, device: Device) -> Result<Tensor> {
        if self.device() == device {
            return Ok(self.clone());
        }
        let a = self.concrete("to_device")?;
        Ok(Tensor::from_array(a.to_device(device)?))
    }

    /// True if the elements are stored row-major without gaps (always true
    /// for tracers, whose layout is not observable).
    pub fn is_contiguous(&self) -> bool {
        self.array().is_none_or(|a| a.layout.is_contiguous())
    }

    /// True if both tensors are concrete views of one storage.
    pub fn shares_storage(&self, other: &Tensor) -> bool {
        match (self.array(), other.array()) {
            (Some(a), Some(b)) => a.shares_storage(&b),
            _ => false,
        }
    }
}

impl From<f32> for Tensor {
    fn from(v: f32) -> Tensor {
        Tensor::scalar(v)
    }
}
impl From<f64> for Tensor {
    fn from(v: f64) -> Tensor {
        Tensor::scalar(v)
    }
}
impl From<Vec<f32>> for Tensor {
    fn from(v: Vec<f32>) -> Tensor {
        let n = v.len();
        Tensor::from_vec(v, [n])
    }
}
impl From<Vec<f64>> for Tensor {
    fn from(v: Vec<f64>) -> Tensor {
        let n = v.len();
        Tensor::from_vec(v, [n])
    }
}
