//! A primitive's CUDA lowering as a launch plan: what the
//! `#[cfg(feature = "cuda")]` branch of its family's lowering runs (each
//! arm names it), built from the same pieces (the map operations, folds
//! and rankings the families give, the families' extents and operand
//! helpers, and `xform_kernels::cuda_launch`'s plans, which `cuda::exec`
//! runs on a device), so the host emulation runs what a device runs.

use xform::core::kernels::cuda_launch::{self as plans, Buf, Plan};
use xform::core::kernels::cuda_source::Fold;
use xform::core::kernels::{Layout, Shape};
use xform::core::prim::{ElementwiseOp, IndexOp, LinalgOp, RandomOp, Reduction, SelectOp, ShapeOp, WindowOp};
use xform::core::prims::{indexing, linalg, reduce, window as win};
use xform::{Array, Aval, DType, Prim};

/// What a device runs for one application: the plan, and the arrays it
/// reads (`Buf::Input(k)` is the storage of `operands[k]`; the plan was
/// built with their layouts).
pub struct Lowered {
    pub plan: Plan,
    pub operands: Vec<Array>,
}

fn text<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// The CUDA lowering of `prim` on `ins` (CPU arrays standing for device
/// ones, any layouts) with results `outs`; `None` where the lowering
/// launches no generated kernel: views (broadcast, transpose, slice, rev,
/// a reshape its strides allow), stop_gradient, control flow, and the
/// convolution (cuDNN, or the direct kernel, which the kernels crate's own
/// g++ test checks).
pub fn lower(prim: &Prim, ins: &[Array], outs: &[Aval]) -> Option<Result<Lowered, String>> {
    let plain = |plan: Result<Plan, String>| Some(plan.map(|plan| Lowered { plan, operands: ins.to_vec() }));
    let all = |ks: &[usize]| -> Vec<(DType, &Layout)> { ks.iter().map(|&k| (ins[k].dtype, &ins[k].layout)).collect() };
    let every: Vec<usize> = (0..ins.len()).collect();
    let d = ins.first().map_or(outs[0].dtype, |a| a.dtype);
    let lay = |k: usize| &ins[k].layout;
    let fold = |f: Option<Fold>| f.ok_or_else(|| format!("{prim} has no CUDA fold for {d}"));
    match prim {
        // unary.rs, binary.rs, compare.rs `lower_device`: `Backend::map`;
        // elementwise.rs select: `Backend::map_raw` (the same map operation
        // `Prim::cuda_map_op` gives the fused kernels)
        Prim::Unary(_) | Prim::Binary(_) | Prim::Compare(_) | Prim::Elementwise(ElementwiseOp::Select) => {
            let dtypes: Vec<DType> = ins.iter().map(|a| a.dtype).collect();
            let Some(op) = prim.cuda_map_op(&dtypes) else {
                return Some(Err(format!("{prim} has no CUDA form for {dtypes:?}")));
            };
            plain(plans::map(&op, &all(&every), outs[0].dtype).map_err(text))
        }
        // elementwise.rs convert: `Backend::convert`
        Prim::Elementwise(ElementwiseOp::Convert(to)) => plain(plans::convert(d, lay(0), *to).map_err(text)),
        // copy (and `Array::contiguous_copy`): `Backend::contiguous_copy`
        Prim::Elementwise(ElementwiseOp::Copy) => plain(plans::copy(d, lay(0)).map_err(text)),
        Prim::Elementwise(ElementwiseOp::StopGradient) => None,
        // reduce.rs `lower_device`: `Backend::reduce`, `arg_reduce`, `cumsum`
        Prim::Reduce(Reduction::Reduce { op, axes }) => {
            plain(fold(reduce::reduce_fold(*op, d)).and_then(|f| plans::reduce(&f, d, lay(0), axes, d).map_err(text)))
        }
        Prim::Reduce(Reduction::ArgReduce { op, axis, index_dtype }) => {
            let r = reduce::ranking(*op);
            plain(plans::arg_reduce(&r, d, lay(0), *axis, *index_dtype).map_err(text))
        }
        Prim::Reduce(Reduction::Cumsum { axis, reverse }) => plain(
            fold(reduce::cumsum_fold(d))
                .and_then(|f| plans::cumulative(&f, d, lay(0), *axis, *reverse, d).map_err(text)),
        ),
        // shape.rs `lower_device`: `Backend::pad`, `concatenate`; a reshape its
        // strides do not allow copies (`Backend::contiguous_copy`)
        Prim::Shape(ShapeOp::Pad { low, high, interior }) => {
            plain(plans::pad(d, lay(0), lay(1), low, high, interior).map_err(text))
        }
        Prim::Shape(ShapeOp::Concatenate { axis }) => {
            plain(plans::concatenate(&all(&every), *axis, &outs[0].shape).map_err(text))
        }
        Prim::Shape(ShapeOp::Reshape { shape }) => match lay(0).reshape(shape) {
            Some(_) => None,
            None => plain(plans::copy(d, lay(0)).map_err(text)),
        },
        // `lower_iota` fills on the host and copies to the device; this is
        // the kernel of `exec::iota`
        Prim::Shape(ShapeOp::Iota { shape, dim, dtype, .. }) => plain(plans::iota(shape, *dim, *dtype).map_err(text)),
        Prim::Shape(
            ShapeOp::BroadcastInDim { .. } | ShapeOp::Transpose { .. } | ShapeOp::Slice { .. } | ShapeOp::Rev { .. },
        ) => None,
        // indexing.rs `lower_dynamic_slice` (a view, then `contiguous_copy`)
        Prim::Index(IndexOp::DynamicSlice { sizes }) => {
            let x = &ins[0];
            let start = match indexing::resolved_starts(x.shape(), sizes, &ins[1..].iter().collect::<Vec<_>>()) {
                Ok(s) => s,
                Err(e) => return Some(Err(e.to_string())),
            };
            let limit: Vec<usize> = start.iter().zip(sizes.iter()).map(|(s, n)| s + n).collect();
            let view = x.layout.slice(&start, &limit, &vec![1; sizes.len()]);
            plain(plans::copy(d, &view).map_err(text))
        }
        // `Backend::dynamic_update_slice`
        Prim::Index(IndexOp::DynamicUpdateSlice) => {
            let (x, u) = (&ins[0], &ins[1]);
            let start = match indexing::resolved_starts(x.shape(), u.shape(), &ins[2..].iter().collect::<Vec<_>>()) {
                Ok(s) => s,
                Err(e) => return Some(Err(e.to_string())),
            };
            plain(plans::dynamic_update_slice(d, &x.layout, &u.layout, &start).map_err(text))
        }
        // `Backend::gather`
        Prim::Index(IndexOp::Gather { axis, batch_dims }) => {
            let e = indexing::gather_extents(ins[0].shape(), ins[1].shape(), *axis, *batch_dims);
            plain(plans::gather(d, lay(0), ins[1].dtype, lay(1), e).map_err(text))
        }
        // `Backend::scatter_add`: the half types through f32 (converted on the
        // device, scattered, converted back)
        Prim::Index(IndexOp::ScatterAdd { axis, batch_dims }) => {
            let e = indexing::gather_extents(ins[0].shape(), ins[1].shape(), *axis, *batch_dims);
            if !matches!(d, DType::F16 | DType::BF16) {
                return plain(plans::scatter_add(d, lay(0), ins[1].dtype, lay(1), lay(2), e).map_err(text));
            }
            let contiguous = |s: &Shape| Layout::contiguous(s.clone());
            let wide = || -> Result<Plan, plans::Unsupported> {
                let mut p = Plan::default();
                let wx = p.append(&plans::convert(d, lay(0), DType::F32)?, &[Buf::Input(0)])?[0];
                let wu = p.append(&plans::convert(d, lay(2), DType::F32)?, &[Buf::Input(2)])?[0];
                let (lx, lu) = (contiguous(ins[0].shape()), contiguous(ins[2].shape()));
                let scatter = plans::scatter_add(DType::F32, &lx, ins[1].dtype, lay(1), &lu, e)?;
                let s = p.append(&scatter, &[Buf::Temp(wx), Buf::Input(1), Buf::Temp(wu)])?[0];
                let back = p.append(&plans::convert(DType::F32, &lx, d)?, &[Buf::Temp(s)])?[0];
                p.outputs = vec![back];
                Ok(p)
            };
            plain(wide().map_err(text))
        }
        // linalg.rs `lower_device`: `Backend::gemm`, the tiled kernel (a device with
        // cuBLAS runs the float types there instead)
        Prim::Linalg(LinalgOp::DotGeneral(dims)) => {
            let (a3, b3) = match linalg::gemm_operands(dims, &ins[0], &ins[1]) {
                Ok(ab) => ab,
                Err(e) => return Some(Err(e.to_string())),
            };
            let plan = plans::gemm(a3.dtype, &a3.layout, b3.dtype, &b3.layout).map_err(text);
            Some(plan.map(|plan| Lowered { plan, operands: vec![a3, b3] }))
        }
        // random.rs `lower_device`: `Backend::threefry`
        Prim::Random(RandomOp::Threefry2x32) => plain(plans::threefry([lay(0), lay(1), lay(2), lay(3)]).map_err(text)),
        // window.rs `lower_device`: `Backend::reduce_window`, `select_and_gather`,
        // `select_and_scatter`
        Prim::Window(WindowOp::ReduceWindow { op, window }) => {
            let g = window.geom(ins[0].shape());
            plain(fold(win::window_fold(*op, d)).and_then(|f| plans::reduce_window(&f, d, lay(0), &g).map_err(text)))
        }
        Prim::Window(WindowOp::SelectAndGatherAdd { select, window }) => {
            let g = window.geom(ins[1].shape());
            plain(plans::select_and_gather(*select == SelectOp::Max, ins[1].dtype, lay(0), lay(1), &g).map_err(text))
        }
        Prim::Window(WindowOp::SelectAndScatterAdd { select, window }) => {
            let g = window.geom(ins[1].shape());
            plain(plans::select_and_scatter(*select == SelectOp::Max, ins[1].dtype, lay(0), lay(1), &g).map_err(text))
        }
        // collectives are applied by the maps binding their names, never lowered
        Prim::Conv(_) | Prim::Control(_) | Prim::Collective(_) => None,
        // no kernels of their own: a device factors on the host
        Prim::Decomp(_) => None,
    }
}
