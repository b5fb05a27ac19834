//! xform's error type: every failure names the op, the shapes or dtypes
//! involved, and the transforms in force when it happened.

use std::fmt;
use xform_kernels::DType;
use xform_kernels::Shape;

/// What went wrong, with the data a user needs to fix the call.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Operand shapes that do not fit the op.
    Shape {
        /// What is wrong, in words.
        message: String,
        /// The offending shapes.
        shapes: Vec<Shape>,
    },
    /// Operand dtypes that do not fit the op.
    DType {
        /// What is wrong, in words.
        message: String,
        /// The offending dtypes.
        dtypes: Vec<DType>,
    },
    /// An axis outside `[-rank, rank)`, or repeated.
    Axis {
        /// The axis as given.
        axis: isize,
        /// The rank of the operand.
        rank: usize,
    },
    /// An index outside `[-size, size)` (gather, scatter, take).
    IndexOutOfRange {
        /// The offending index.
        index: i64,
        /// The size of the indexed axis.
        size: usize,
    },
    /// A size, an index or a scalar beyond what its type can represent
    /// (an element count past `isize::MAX`, 3e9 into an `i32` tensor).
    Overflow {
        /// What overflowed, in words.
        message: String,
    },
    /// A tracer used after the transform that made it returned.
    EscapedTracer {
        /// The transform that made the tracer, e.g. "vmap".
        transform: String,
    },
    /// A tracer used on another thread than the one running its transform
    /// (it escaped its transform: a tracer belongs to its transform's
    /// thread, while concrete tensors are `Send + Sync`).
    ForeignTracer {
        /// The transform that made the tracer, e.g. "grad".
        transform: String,
    },
    /// A transform applied to a function or argument it cannot handle.
    Transform {
        /// What is wrong, in words.
        message: String,
    },
    /// A bad batch specification (in_axes, out_axes, sizes) for vmap.
    Batching {
        /// What is wrong, in words (names the pytree path).
        message: String,
    },
    /// Operands on different devices, or a device that is not available.
    Device {
        /// What is wrong, in words.
        message: String,
    },
    /// An in-place op whose target cannot hold the result.
    InPlace {
        /// What is wrong, in words.
        message: String,
    },
    /// Memory for a result could not be had (see `NOTE: [allocation
    /// failure]` in xform-kernels' pool); the process stays usable.
    OutOfMemory {
        /// The shape of the array being allocated (`None` where only the
        /// size is known: scratch space, or a failure no op converted).
        shape: Option<Shape>,
        /// Its dtype (`None` as for `shape`).
        dtype: Option<DType>,
        /// Where it was to live.
        device: crate::device::Device,
        /// The bytes requested (exact, even past `usize`).
        bytes: u128,
    },
    /// Transforms nested so deep that this thread's native stack is used
    /// down to its limit (NOTE: [stack guard] in [`crate::stack`]): one
    /// more level could overflow it, which would abort the process.
    TooDeep {
        /// The interpreters on the thread's stack when it was refused.
        depth: usize,
        /// The bytes kept free below the deepest level
        /// ([`crate::stack::RESERVE`]).
        reserve: usize,
    },
    /// A collective over an axis name that no transform in force binds
    /// (JAX's `NameError: unbound axis name`).
    UnboundAxis {
        /// The name.
        name: String,
        /// Which names are bound, or how to bind one.
        hint: String,
    },
    /// Any other invalid argument.
    Invalid {
        /// What is wrong, in words.
        message: String,
    },
}

/// An xform error: the op, what went wrong, and the transforms in force.
///
/// The fields live behind one pointer (see [`ErrorInfo`]) so that every
/// `Result` in the library stays small; they read as `e.op`, `e.kind`,
/// `e.transforms`.
#[derive(Clone, Debug, PartialEq)]
pub struct Error(Box<ErrorInfo>);

/// The contents of an [`Error`].
#[derive(Clone, Debug, PartialEq)]
pub struct ErrorInfo {
    /// The op or transform that failed, e.g. "add" or "grad".
    pub op: String,
    /// What went wrong.
    pub kind: ErrorKind,
    /// The transforms in force, outermost first, e.g. "vmap(size 8) > grad";
    /// empty when none.
    pub transforms: String,
}

impl std::ops::Deref for Error {
    type Target = ErrorInfo;
    fn deref(&self) -> &ErrorInfo {
        &self.0
    }
}

impl std::ops::DerefMut for Error {
    fn deref_mut(&mut self) -> &mut ErrorInfo {
        &mut self.0
    }
}

/// `Result` with xform's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

// `Error::new`, which records the transforms in force, is defined beside
// the interpreter stack it reads (interp.rs), through `with_transforms`.
// The constructors are `#[cold]`: the code that builds an error's message
// at a call site is then laid out away from the hot path (smaller
// instruction-cache footprint of every op).
impl Error {
    /// An error in `op` with the transforms in force described as
    /// `transforms` (what `Error::new` passes).
    #[cold]
    pub(crate) fn with_transforms(op: String, kind: ErrorKind, transforms: String) -> Error {
        Error(Box::new(ErrorInfo { op, kind, transforms }))
    }

    /// A shape error.
    #[cold]
    pub fn shape(op: impl Into<String>, message: impl Into<String>, shapes: &[&Shape]) -> Error {
        Error::new(
            op,
            ErrorKind::Shape { message: message.into(), shapes: shapes.iter().map(|s| (*s).clone()).collect() },
        )
    }

    /// A dtype error.
    #[cold]
    pub fn dtype(op: impl Into<String>, message: impl Into<String>, dtypes: &[DType]) -> Error {
        Error::new(op, ErrorKind::DType { message: message.into(), dtypes: dtypes.to_vec() })
    }

    /// An invalid-argument error.
    #[cold]
    pub fn invalid(op: impl Into<String>, message: impl Into<String>) -> Error {
        Error::new(op, ErrorKind::Invalid { message: message.into() })
    }

    /// A transform error (non-scalar output to grad, integer input, ...).
    #[cold]
    pub fn transform(op: impl Into<String>, message: impl Into<String>) -> Error {
        Error::new(op, ErrorKind::Transform { message: message.into() })
    }

    /// A vmap specification error.
    #[cold]
    pub fn batching(op: impl Into<String>, message: impl Into<String>) -> Error {
        Error::new(op, ErrorKind::Batching { message: message.into() })
    }

    /// An in-place error.
    #[cold]
    pub fn in_place(op: impl Into<String>, message: impl Into<String>) -> Error {
        Error::new(op, ErrorKind::InPlace { message: message.into() })
    }

    /// A device error.
    #[cold]
    pub fn device(op: impl Into<String>, message: impl Into<String>) -> Error {
        Error::new(op, ErrorKind::Device { message: message.into() })
    }

    /// A broken invariant of xform itself (a bug to report), such as a CPU
    /// path given an array on another device: a device error whose message
    /// says so, never a panic and never a silent transfer.
    #[cold]
    pub fn internal(op: impl Into<String>, message: impl Into<String>) -> Error {
        Error::new(op, ErrorKind::Device { message: format!("internal error (please report it): {}", message.into()) })
    }

    /// An overflow error.
    #[cold]
    pub fn overflow(op: impl Into<String>, message: impl Into<String>) -> Error {
        Error::new(op, ErrorKind::Overflow { message: message.into() })
    }

    /// An axis error.
    #[cold]
    pub fn axis(op: impl Into<String>, axis: isize, rank: usize) -> Error {
        Error::new(op, ErrorKind::Axis { axis, rank })
    }

    /// An out-of-memory error for a `shape` / `dtype` array on `device`.
    #[cold]
    pub fn out_of_memory(
        op: impl Into<String>,
        shape: &Shape,
        dtype: DType,
        device: crate::device::Device,
        bytes: u128,
    ) -> Error {
        Error::new(op, ErrorKind::OutOfMemory { shape: Some(shape.clone()), dtype: Some(dtype), device, bytes })
    }

    /// Panics with this error's message at the caller's location (or
    /// returns it as `Err` from an enclosing [`catch`]).
    #[track_caller]
    pub fn raise(self) -> ! {
        raise(self)
    }

    /// The same error named after `op`: the call the user made, where the
    /// error came from a primitive or helper it is built on
    /// (`broadcast_to`'s `broadcast_in_dim`, `zeros`' `full`).
    pub fn named(mut self, op: &str) -> Error {
        op.clone_into(&mut self.0.op);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.op)?;
        match &self.kind {
            ErrorKind::Shape { message, shapes } => {
                write!(f, "{message}")?;
                if !shapes.is_empty() {
                    f.write_str(" (shapes ")?;
                    for (i, s) in shapes.iter().enumerate() {
                        if i > 0 {
                            f.write_str(", ")?;
                        }
                        write!(f, "{s}")?;
                    }
                    f.write_str(")")?;
                }
            }
            ErrorKind::DType { message, dtypes } => {
                write!(f, "{message}")?;
                if !dtypes.is_empty() {
                    f.write_str(" (dtypes ")?;
                    for (i, d) in dtypes.iter().enumerate() {
                        if i > 0 {
                            f.write_str(", ")?;
                        }
                        write!(f, "{d}")?;
                    }
                    f.write_str(")")?;
                }
            }
            ErrorKind::Axis { axis, rank } => write!(f, "axis {axis} is out of range for an operand of rank {rank}")?,
            ErrorKind::IndexOutOfRange { index, size } => {
                write!(f, "index {index} is out of range for an axis of size {size}")?
            }
            ErrorKind::EscapedTracer { transform } => write!(
                f,
                "a value traced by {transform} was used after {transform} returned (an escaped tracer); \
                 return it from the transformed function instead of storing it outside"
            )?,
            ErrorKind::ForeignTracer { transform } => write!(
                f,
                "a value traced by {transform} was used on another thread: the tracer belongs to the thread \
                 running {transform} and escaped its transform there; send concrete values between threads \
                 (return them from the transformed function first)"
            )?,
            ErrorKind::OutOfMemory { shape, dtype, device, bytes } => {
                write!(f, "out of memory: cannot allocate {bytes} bytes on {device}")?;
                if let (Some(shape), Some(dtype)) = (shape, dtype) {
                    write!(f, " for a {dtype} array of shape {shape}")?;
                }
            }
            ErrorKind::UnboundAxis { name, hint } => write!(f, "unbound axis name '{name}': {hint}")?,
            ErrorKind::TooDeep { depth, reserve } => write!(
                f,
                "transforms nested too deep for this thread's stack: {depth} interpreters use it down to the \
                 last {} KiB, which are kept for the innermost function and the kernels; run the computation \
                 on a thread with a larger stack (std::thread::Builder::stack_size), or nest less",
                reserve >> 10
            )?,
            ErrorKind::Transform { message }
            | ErrorKind::Overflow { message }
            | ErrorKind::Batching { message }
            | ErrorKind::Device { message }
            | ErrorKind::InPlace { message }
            | ErrorKind::Invalid { message } => f.write_str(message)?,
        }
        if !self.transforms.is_empty() {
            write!(f, " [under {}]", self.transforms)?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

/// Unwraps a result, panicking at the caller with the error's message.
pub trait OrRaise<T> {
    /// The value, or a panic carrying the [`Error`] at the caller's location.
    fn or_raise(self) -> T;
}

impl<T> OrRaise<T> for Result<T> {
    #[track_caller]
    #[inline]
    fn or_raise(self) -> T {
        match self {
            Ok(v) => v,
            Err(e) => raise(e),
        }
    }
}

/// Raises `e`: a panic with its message at the caller, or, inside
/// [`catch`], a silent unwind that `catch` turns back into `Err(e)`.
#[track_caller]
#[cold]
pub fn raise(e: Error) -> ! {
    if CATCH_DEPTH.with(|d| d.get()) > 0 {
        LAST_ERROR.with(|l| *l.borrow_mut() = Some(e));
        // resume_unwind skips the panic hook: nothing is printed.
        std::panic::resume_unwind(Box::new(CaughtError));
    }
    panic!("{e}")
}

thread_local! {
    static CATCH_DEPTH: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    static LAST_ERROR: std::cell::RefCell<Option<Error>> = const { std::cell::RefCell::new(None) };
}

/// Unwind payload of an error raised inside `catch`.
struct CaughtError;

/// The message of a panic's payload (a `panic!` with a string), for
/// reporting a panic that is not an xform error.
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic".to_string())
}

/// Runs `f`, turning an xform error raised inside it into `Err`.
///
/// This is the `Result` path for code written with the panicking API:
/// transforms, methods and operators all raise [`Error`]s that `catch`
/// recovers, silently. Panics that are not xform errors propagate
/// unchanged. The interpreter stack is restored either way.
pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T> {
    CATCH_DEPTH.with(|d| d.set(d.get() + 1));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    CATCH_DEPTH.with(|d| d.set(d.get() - 1));
    match r {
        Ok(v) => Ok(v),
        Err(payload) => {
            if payload.is::<CaughtError>() {
                let e = LAST_ERROR.with(|l| l.borrow_mut().take());
                Err(e.expect("an xform error was raised"))
            } else if let Some(f) = payload.downcast_ref::<xform_kernels::pool::AllocFailure>() {
                // A buffer allocation that no op boundary converted.
                let kind = ErrorKind::OutOfMemory {
                    shape: None,
                    dtype: None,
                    device: crate::device::Device::Cpu,
                    bytes: f.bytes,
                };
                Err(Error::new("allocation", kind))
            } else {
                std::panic::resume_unwind(payload)
            }
        }
    }
}
