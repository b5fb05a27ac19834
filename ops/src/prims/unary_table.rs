//! The macro behind the unary op table (`unary.rs`), and the helpers the
//! op tables share (`present!`, also used by `binary_table!` in
//! `binary.rs`). From one entry per op it derives the `UnaryOp` enum and
//! its kinds, names, accepted dtypes, the CPU kernels, the CUDA
//! expressions, the JVP, the transpose of the linear ones, the registry
//! samples, the `lax` function and the `Tensor` method. A missing field is
//! a compile error.
//!
//! An entry:
//!
//! ```text
//! /// doc
//! Variant(param: type; samples v1, v2)? => lax_fn "printed_name" {
//!     cost: relative cost per element (1 = an add),
//!     float: |x| CPU expression on x: R (R: Real), cuda: |c| CudaExpr,   (optional group)
//!     int:   |x| CPU expression on x: T (T: IntOps), cuda: |c| CudaExpr, (optional group)
//!     bool:  |x| CPU expression on x: bool, cuda: |c| CudaExpr,          (optional group)
//!     jvp: |t, x, y| Result<Option<Tensor>> (tangent of y = op(x)),
//!     linear: true if op(x) = a * x (then its transpose is the op itself),
//!     method: float name | exact name | round name | none,
//!     sample: Dom of the float operands,
//!     jax: "the op in JAX, as Python over {x} (and the parameter {p})",
//! }
//! ```
//!
//! The dtypes an op accepts are those it has an implementation for, so a
//! lowering cannot be missing for a dtype the shape rule lets through.

/// Counts as `true` when its argument is present (for optional groups).
macro_rules! present {
    () => {
        false
    };
    ($($t:tt)+) => {
        true
    };
}

/// An op's parameter as text, or `None` for an op without one.
macro_rules! unary_param {
    () => {
        None
    };
    ($p:ident) => {
        Some($p.to_string())
    };
}

/// The example values of an op, for registries: one per listed parameter.
macro_rules! unary_examples {
    ($v:ident, $out:ident) => {
        $out.push(UnaryOp::$v);
    };
    ($v:ident, $out:ident, $($pv:expr),+) => {
        $( $out.push(UnaryOp::$v($pv)); )+
    };
}

/// One `Tensor` method of an op, by its method kind.
macro_rules! unary_method {
    (none, $($rest:tt)*) => {};
    (float $m:ident, $v:ident $(($p:ident : $pt:ty))?, [$(#[$doc:meta])*]) => {
        $(#[$doc])*
        ///
        /// Integer and bool inputs are converted to f32 first.
        #[track_caller]
        pub fn $m(&self $(, $p: $pt)?) -> Tensor {
            crate::promote::as_float(self).and_then(|x| unary(UnaryOp::$v $(($p))?, &x)).or_raise()
        }
    };
    (exact $m:ident, $v:ident $(($p:ident : $pt:ty))?, [$(#[$doc:meta])*]) => {
        $(#[$doc])*
        #[track_caller]
        pub fn $m(&self $(, $p: $pt)?) -> Tensor {
            unary(UnaryOp::$v $(($p))?, self).or_raise()
        }
    };
    (round $m:ident, $v:ident $(($p:ident : $pt:ty))?, [$(#[$doc:meta])*]) => {
        $(#[$doc])*
        ///
        /// The identity on integers.
        #[track_caller]
        pub fn $m(&self $(, $p: $pt)?) -> Tensor {
            if self.dtype().is_float() {
                unary(UnaryOp::$v $(($p))?, self).or_raise()
            } else {
                self.clone()
            }
        }
    };
}

/// Generates the unary family from its table (see the module docs).
macro_rules! unary_table {
    ($(
        $(#[$doc:meta])*
        $v:ident $( ( $p:ident : $pt:ty ; samples $($pv:expr),+ ) )? => $fname:ident $name:literal {
            cost: $cost:expr,
            $( float: |$fx:ident| $fbody:expr, cuda: |$fc:ident| $fcuda:expr, )?
            $( int: |$ix:ident| $ibody:expr, cuda: |$ic:ident| $icuda:expr, )?
            $( bool: |$bx:ident| $bbody:expr, cuda: |$bc:ident| $bcuda:expr, )?
            jvp: |$t:ident, $x:ident, $y:ident| $jvp:expr,
            linear: $linear:literal,
            method: $mkind:ident $($mname:ident)?,
            sample: $dom:expr,
            jax: $jax:literal $(,)?
        }
    )*) => {
        /// The elementwise unary primitives (one table entry each, in `unary.rs`).
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
        pub enum UnaryOp {
            $( $(#[$doc])* $v $( ($pt) )? ),*
        }

        /// The variants of [`UnaryOp`] without their parameters.
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
        pub enum UnaryKind {
            $( #[doc = concat!("[`UnaryOp::", stringify!($v), "`].")] $v ),*
        }

        impl UnaryKind {
            /// Every kind, in table order.
            pub const ALL: &'static [UnaryKind] = &[$(UnaryKind::$v),*];
        }

        #[allow(unused_variables)]
        impl UnaryOp {
            /// The name programs print.
            pub fn name(self) -> &'static str {
                match self { $( UnaryOp::$v { .. } => $name ),* }
            }

            /// The variant without its parameter.
            pub fn kind(self) -> UnaryKind {
                match self { $( UnaryOp::$v { .. } => UnaryKind::$v ),* }
            }

            /// Every op, parameterized ones once per sample parameter of
            /// the table: what registries and catalogs iterate.
            #[allow(clippy::vec_init_then_push)]
            pub fn examples() -> Vec<UnaryOp> {
                let mut out = Vec::new();
                $( unary_examples!($v, out $(, $($pv),+)?); )*
                out
            }

            /// Rough cost per element relative to an add (for the
            /// parallel threshold).
            fn cost(self) -> usize {
                match self { $( UnaryOp::$v { .. } => $cost ),* }
            }

            /// The dtype classes with an implementation: what the op accepts.
            pub fn classes(self) -> super::DtypeClasses {
                match self {
                    $( UnaryOp::$v { .. } => super::DtypeClasses {
                        float: present!($($fx)?),
                        int: present!($($ix)?),
                        bool: present!($($bx)?),
                    } ),*
                }
            }

            /// True if `op(x) = a * x` for a constant `a` (its transpose is
            /// itself).
            pub fn is_linear(self) -> bool {
                match self { $( UnaryOp::$v { .. } => $linear ),* }
            }

            /// The value domain the registry draws float operands from.
            /// The op in JAX, as Python: a template over the operand `{x}`
            /// and the parameter `{p}` (the JAX differential test prints
            /// it; a new op is compared with JAX from this alone).
            pub fn jax(self) -> &'static str {
                match self { $( UnaryOp::$v { .. } => $jax ),* }
            }

            /// The parameter, as the JAX template's `{p}` prints it.
            pub fn param(self) -> Option<String> {
                match self { $( UnaryOp::$v $(($p))? => unary_param!($($p)?) ),* }
            }

            /// The values the registry draws the operand from (the JAX
            /// differential test maps its values into this domain too).
            pub fn sample_dom(self) -> Dom {
                match self { $( UnaryOp::$v $(($p))? => $dom ),* }
            }
        }

        /// The float kernel of `op`, or `None` where it has none.
        #[allow(unused_variables, unreachable_code)]
        fn float_kernel<T: Float<Compute = R>, R: Real>(op: UnaryOp, v: &[T], l: &Layout) -> Option<Vec<T>> {
            let par = Par::for_work(l.numel(), op.cost());
            match op {
                $( UnaryOp::$v $(($p))? => {
                    $( return Some(map1(v, l, par, |a: T| {
                        let $fx: R = a.up();
                        T::down($fbody)
                    })); )?
                    None
                } )*
            }
        }

        /// `out[i] = op(x[i])` over contiguous slices of a float dtype: the
        /// very expression `float_kernel` maps, for the jit's fused loops.
        /// `false` where `op` has no float kernel.
        #[allow(unused_variables, unreachable_code)]
        pub(crate) fn float_slice<T: Float<Compute = R>, R: Real>(op: UnaryOp, x: &[T], out: &mut [std::mem::MaybeUninit<T>]) -> bool {
            match op {
                $( UnaryOp::$v $(($p))? => {
                    $(
                        xform_kernels::cpu::elementwise::slice1(x, out, &|a: T| {
                            let $fx: R = a.up();
                            T::down($fbody)
                        });
                        return true;
                    )?
                    false
                } )*
            }
        }

        /// The integer kernel of `op`, or `None` where it has none.
        #[allow(unused_variables, unreachable_code)]
        fn int_kernel<T: IntOps>(op: UnaryOp, v: &[T], l: &Layout) -> Option<Vec<T>> {
            let par = Par::for_work(l.numel(), op.cost());
            match op {
                $( UnaryOp::$v $(($p))? => {
                    $( return Some(map1(v, l, par, |$ix: T| $ibody)); )?
                    None
                } )*
            }
        }

        /// The bool kernel of `op`, or `None` where it has none.
        #[allow(unused_variables, unreachable_code)]
        fn bool_kernel(op: UnaryOp, v: &[bool], l: &Layout) -> Option<Vec<bool>> {
            let par = Par::for_work(l.numel(), op.cost());
            match op {
                $( UnaryOp::$v $(($p))? => {
                    $( return Some(map1(v, l, par, |$bx: bool| $bbody)); )?
                    None
                } )*
            }
        }

        /// The CUDA expression of `op` on dtype `d`, or `None` where the
        /// shape rule refuses `d`.
        #[allow(unused_variables, unreachable_code)]
        pub fn cuda_expr(op: UnaryOp, d: DType) -> Option<CudaExpr> {
            let cx = CudaCx::new(d);
            match op {
                $( UnaryOp::$v $(($p))? => {
                    if d.is_float() {
                        $( let $fc = cx; return Some($fcuda); )?
                    } else if d == DType::Bool {
                        $( let $bc = cx; return Some($bcuda); )?
                    } else {
                        $( let $ic = cx; return Some($icuda); )?
                    }
                    None
                } )*
            }
        }

        /// The tangent of `y = op(x)` for the float tangent `t`.
        #[allow(unused_variables)]
        fn tangent(op: UnaryOp, t: &Tensor, x: &Tensor, y: &Tensor) -> Result<Option<Tensor>> {
            match op {
                $( UnaryOp::$v $(($p))? => {
                    let ($t, $x, $y) = (t, x, y);
                    $jvp
                } )*
            }
        }

        /// One function per op, re-exported by `crate::lax`.
        pub mod api {
            use super::*;
            $(
                $(#[$doc])*
                pub fn $fname(x: &Tensor $(, $p: $pt)?) -> Result<Tensor> {
                    unary(UnaryOp::$v $(($p))?, x)
                }
            )*
        }

        impl Tensor {
            $( unary_method!($mkind $($mname)?, $v $(($p : $pt))?, [$(#[$doc])*]); )*
        }
    };
}
