//! The windowed kernels: `reduce_window` (with a caller's [`Fold`]) and the
//! selections of select-and-gather and select-and-scatter-add, with the
//! semantics of `crate::cpu::window`.

use super::{compute_type, header, is_half, kernel_name, load, storage_type, store, Fold, Kernel};
use crate::dtype::DType;
use std::fmt::Write;

/// The parameters of the windowed kernels (`reduce_window`, the
/// selections), matching `WinParams` in `exec.rs`; the semantics are those
/// of `crate::cpu::window`. `x*` describe the operand x, `y*` a second
/// array: the tangent t (shaped like x) for select-and-gather, the
/// cotangent ct (shaped like the windows) for select-and-scatter.
const WINDOW_STRUCT: &str = r#"struct XfWin {
    long long nout;
    long long nin;
    long long taps;
    int rank;
    int pad;
    long long oshape[XF_MAXD];
    long long ishape[XF_MAXD];
    long long window[XF_MAXD];
    long long stride[XF_MAXD];
    long long lo[XF_MAXD];
    long long bdil[XF_MAXD];
    long long wdil[XF_MAXD];
    long long xstride[XF_MAXD];
    long long ystride[XF_MAXD];
    long long xoffset;
    long long yoffset;
};
// The output position of window o along each axis.
static __device__ __forceinline__ void xf_win_pos(const XfWin& w, long long o, long long* pos) {
    for (int d = w.rank - 1; d >= 0; --d) { pos[d] = o % w.oshape[d]; o /= w.oshape[d]; }
}
// Tap j (row-major over the window) of the window at pos: false where it
// lands on padding or a hole; else the operand's row-major index and the
// offsets of that element in x and in y (when y is shaped like x).
static __device__ __forceinline__ bool xf_win_tap(const XfWin& w, const long long* pos, long long j, long long* flat, long long* xo, long long* yo) {
    long long f = 0, mult = 1, xoff = w.xoffset, yoff = w.yoffset;
    for (int d = w.rank - 1; d >= 0; --d) {
        const long long k = j % w.window[d];
        j /= w.window[d];
        const long long p = pos[d] * w.stride[d] + k * w.wdil[d] - w.lo[d];
        if (p < 0 || p % w.bdil[d] != 0) return false;
        const long long q = p / w.bdil[d];
        if (q >= w.ishape[d]) return false;
        f += q * mult;
        mult *= w.ishape[d];
        xoff += q * w.xstride[d];
        yoff += q * w.ystride[d];
    }
    *flat = f;
    *xo = xoff;
    *yo = yoff;
    return true;
}
"#;

/// `reduce_window` with fold `f` over dtype `d`: one thread per window,
/// folding its valid taps from `f.init` (the identity that padding and
/// holes hold).
pub fn reduce_window_kernel(f: &Fold, d: DType) -> Kernel {
    let name = kernel_name("reduce_window", &f.tag, &[d]);
    let half = is_half(d);
    let acc = &f.acc;
    let mut s = header(half, &f.helpers);
    s.push_str(WINDOW_STRUCT);
    let x = load(d, "in[xo]");
    let fin = store(d, &format!("({})", f.finish));
    let _ = write!(
        s,
        r#"extern "C" __global__ void {name}({t}* __restrict__ out, const {t}* __restrict__ in, const XfWin w) {{
    XF_GRID_LOOP(o, w.nout) {{
        long long pos[XF_MAXD];
        xf_win_pos(w, o, pos);
        {acc} a = ({init});
        for (long long j = 0; j < w.taps; ++j) {{
            long long flat, xo, yo;
            if (!xf_win_tap(w, pos, j, &flat, &xo, &yo)) continue;
            const {ct} x = {x};
            const {acc} b = ({acc})x;
            a = ({combine});
        }}
        out[o] = {fin};
    }}
}}
"#,
        t = storage_type(d),
        ct = compute_type(d),
        init = f.init,
        combine = f.combine,
    );
    Kernel { name, source: s, needs_half: half }
}

/// The selection test of the window kernels: tap `a` takes the selection
/// from the earlier tap `b` unless `b >= a` (`max`; `b <= a` else), as
/// `crate::cpu::window` (JAX's `ge`/`le` select, NaNs included).
fn window_beats(max: bool) -> String {
    let cmp = if max { "!(b >= a)" } else { "!(b <= a)" };
    format!("static __device__ __forceinline__ bool xf_beats(double a, double b) {{ return {cmp}; }}\n")
}

fn select_tag(max: bool) -> &'static str {
    if max {
        "max"
    } else {
        "min"
    }
}

/// Select-and-gather over float dtype `d` (`None` otherwise): per window,
/// the element of y (the tangent, shaped like x) at the first extreme
/// valid tap of x, or 0.
pub fn select_gather_kernel(max: bool, d: DType) -> Option<Kernel> {
    if !d.is_float() {
        return None;
    }
    let name = kernel_name("select_gather", select_tag(max), &[d]);
    let half = is_half(d);
    let mut s = header(half, &window_beats(max));
    s.push_str(WINDOW_STRUCT);
    let _ = write!(
        s,
        r#"extern "C" __global__ void {name}({t}* __restrict__ out, const {t}* __restrict__ x, const {t}* __restrict__ y, const XfWin w) {{
    XF_GRID_LOOP(o, w.nout) {{
        long long pos[XF_MAXD];
        xf_win_pos(w, o, pos);
        long long best = -1;
        double bv = 0.0;
        for (long long j = 0; j < w.taps; ++j) {{
            long long flat, xo, yo;
            if (!xf_win_tap(w, pos, j, &flat, &xo, &yo)) continue;
            const double v = (double)({xv});
            if (best < 0 || xf_beats(v, bv)) {{ best = yo; bv = v; }}
        }}
        out[o] = best < 0 ? {zero} : y[best];
    }}
}}
"#,
        t = storage_type(d),
        xv = load(d, "x[xo]"),
        zero = store(d, "0.0f"),
    );
    Some(Kernel { name, source: s, needs_half: half })
}

/// The selection of select-and-scatter over float dtype `d` (`None`
/// otherwise): per window, the operand's row-major index of the first
/// extreme valid tap of x, or -1.
pub fn window_select_kernel(max: bool, d: DType) -> Option<Kernel> {
    if !d.is_float() {
        return None;
    }
    let name = kernel_name("window_select", select_tag(max), &[d]);
    let half = is_half(d);
    let mut s = header(half, &window_beats(max));
    s.push_str(WINDOW_STRUCT);
    let _ = write!(
        s,
        r#"extern "C" __global__ void {name}(long long* __restrict__ sel, const {t}* __restrict__ x, const XfWin w) {{
    XF_GRID_LOOP(o, w.nout) {{
        long long pos[XF_MAXD];
        xf_win_pos(w, o, pos);
        long long best = -1;
        double bv = 0.0;
        for (long long j = 0; j < w.taps; ++j) {{
            long long flat, xo, yo;
            if (!xf_win_tap(w, pos, j, &flat, &xo, &yo)) continue;
            const double v = (double)({xv});
            if (best < 0 || xf_beats(v, bv)) {{ best = flat; bv = v; }}
        }}
        sel[o] = best;
    }}
}}
"#,
        t = storage_type(d),
        xv = load(d, "x[xo]"),
    );
    Some(Kernel { name, source: s, needs_half: half })
}

/// The sums of select-and-scatter over float dtype `d` (`None` otherwise):
/// one thread per operand element, adding the cotangent (y, shaped like
/// the windows) of every window that covers the element and selected it
/// (`sel`, from [`window_select_kernel`]). No atomics: deterministic, and
/// the half types accumulate in float.
pub fn window_scatter_kernel(d: DType) -> Option<Kernel> {
    if !d.is_float() {
        return None;
    }
    let name = kernel_name("window_scatter", "", &[d]);
    let half = is_half(d);
    let acc = if d == DType::F64 { "double" } else { "float" };
    let mut s = header(half, "");
    s.push_str(WINDOW_STRUCT);
    let _ = write!(
        s,
        r#"extern "C" __global__ void {name}({t}* __restrict__ out, const long long* __restrict__ sel, const {t}* __restrict__ y, const XfWin w) {{
    XF_GRID_LOOP(i, w.nin) {{
        long long q[XF_MAXD];
        long long rem = i;
        for (int d = w.rank - 1; d >= 0; --d) {{ q[d] = rem % w.ishape[d]; rem /= w.ishape[d]; }}
        {acc} a = 0;
        for (long long j = 0; j < w.taps; ++j) {{
            // the window that reads element i with tap j, if any
            long long jj = j, o = 0, mult = 1, yoff = w.yoffset;
            bool ok = true;
            for (int d = w.rank - 1; d >= 0 && ok; --d) {{
                const long long k = jj % w.window[d];
                jj /= w.window[d];
                const long long num = q[d] * w.bdil[d] + w.lo[d] - k * w.wdil[d];
                if (num < 0 || num % w.stride[d] != 0 || num / w.stride[d] >= w.oshape[d]) {{ ok = false; break; }}
                const long long od = num / w.stride[d];
                o += od * mult;
                mult *= w.oshape[d];
                yoff += od * w.ystride[d];
            }}
            if (ok && sel[o] == i) a += ({acc})({yv});
        }}
        out[i] = {fin};
    }}
}}
"#,
        t = storage_type(d),
        yv = load(d, "y[yoff]"),
        fin = store(d, "a"),
    );
    Some(Kernel { name, source: s, needs_half: half })
}
