//! The launch of the direct convolution kernel ([`crate::cuda_source::conv`]),
//! the fallback where cuDNN is absent or declines a case.

use super::{unsupported, Arg, Buf, Plan, Ptr, Result};
use crate::conv_geom::ConvGeometry;
use crate::cuda_source::conv::{conv_kernel, conv_params};
use crate::dtype::DType;

/// The convolution of geometry `g` (checked: `cuda::exec::check_geometry`)
/// over the canonical contiguous lhs `Input(0)` (`[N, C, D, H, W]`) and rhs
/// `Input(1)` (`[O, C/fg, KD, KH, KW]`) of dtype `d`, into a contiguous
/// `[N/bg, O, OD, OH, OW]`: one work item per output position and block
/// of up to `CONV_RB` output features of a group.
pub fn conv(g: &ConvGeometry, d: DType) -> Result<Plan> {
    let kernel =
        conv_kernel(d).ok_or_else(|| unsupported(format!("conv_general_dilated of {d} (f32, f64, f16, bf16)")))?;
    let mut plan = Plan::default();
    let y = plan.temp(d, g.out_len());
    let p = conv_params(g);
    if p.threads > 0 {
        let args = vec![
            Arg::Ptr(Ptr::at(Buf::Temp(y))),
            Arg::Ptr(Ptr::at(Buf::Input(0))),
            Arg::Ptr(Ptr::at(Buf::Input(1))),
            Arg::Conv(Box::new(p)),
        ];
        plan.launch_1d(kernel, p.threads as usize, args);
    }
    Ok(plan.with_output(y))
}
