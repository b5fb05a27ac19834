//! Printing tensors like numpy: nested brackets, aligned columns, and
//! summarization ("...") for large arrays.

use crate::array::{Array, Device};
use crate::tensor::{Tensor, Value};
use std::fmt;
use xform_kernels::layout::for_each_index;
use xform_kernels::{DType, Element};

/// Above this many elements, only the edges of each axis are printed.
const SUMMARIZE_ABOVE: usize = 1000;
/// How many items at each edge are printed when summarizing.
const EDGE: usize = 3;

fn format_values(vals: &[f64], dtype: DType) -> Vec<String> {
    if dtype == DType::Bool {
        return vals.iter().map(|&v| if v != 0.0 { "true".into() } else { "false".into() }).collect();
    }
    if !dtype.is_float() {
        return vals.iter().map(|&v| format!("{}", v as i64)).collect();
    }
    let finite: Vec<f64> = vals.iter().copied().filter(|v| v.is_finite()).collect();
    let max = finite.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let min_nz = finite.iter().filter(|v| **v != 0.0).fold(f64::INFINITY, |m, v| m.min(v.abs()));
    let integral = finite.iter().all(|v| v.fract() == 0.0) && max < 1e16;
    let scientific = max >= 1e8 || (min_nz < 1e-4 && min_nz.is_finite());
    // Fixed notation: the fewest decimals (at most 4) that show every value.
    let decimals = (1..=4)
        .find(|&d| {
            let scale = 10f64.powi(d);
            finite.iter().all(|v| ((v * scale).round() / scale - v).abs() <= 1e-9 * v.abs().max(1.0))
        })
        .unwrap_or(4) as usize;
    vals.iter()
        .map(|&v| {
            if v.is_nan() {
                "nan".into()
            } else if v.is_infinite() {
                if v > 0.0 {
                    "inf".into()
                } else {
                    "-inf".into()
                }
            } else if integral {
                format!("{v:.0}.")
            } else if scientific {
                format!("{v:.4e}")
            } else {
                format!("{v:.decimals$}")
            }
        })
        .collect()
}

/// Writes the shown cells (row-major over the shown indices of each axis;
/// `shown[d]` lists axis `d`'s, `None` for "...") in nested brackets.
fn write_nested(
    f: &mut fmt::Formatter<'_>,
    cells: &[String],
    shown: &[Vec<Option<usize>>],
    width: usize,
    indent: usize,
) -> fmt::Result {
    if shown.is_empty() {
        return write!(f, "{:>width$}", cells[0]);
    }
    // Cells per shown index of this axis.
    let inner: usize = shown[1..].iter().map(|s| s.iter().flatten().count()).product();
    f.write_str("[")?;
    let mut k = 0;
    for (j, item) in shown[0].iter().enumerate() {
        if j > 0 {
            if shown.len() == 1 {
                f.write_str(", ")?;
            } else {
                f.write_str(",")?;
                for _ in 1..shown.len() {
                    f.write_str("\n")?;
                }
                write!(f, "{:indent$}", "", indent = indent + 1)?;
            }
        }
        match item {
            Some(_) => {
                write_nested(f, &cells[k * inner..(k + 1) * inner], &shown[1..], width, indent + 1)?;
                k += 1;
            }
            None => f.write_str("...")?,
        }
    }
    f.write_str("]")
}

/// The indices of an axis of length `n` that are printed: all of them, or
/// the first and last [`EDGE`] when summarizing (`None` marks the "...").
fn shown(n: usize, summarize: bool) -> Vec<Option<usize>> {
    if summarize && n > 2 * EDGE {
        (0..EDGE).map(Some).chain(std::iter::once(None)).chain((n - EDGE..n).map(Some)).collect()
    } else {
        (0..n).map(Some).collect()
    }
}

/// The printed elements of `a`, row-major over the shown indices of each
/// axis, as f64. Reads only those elements: a summarized tensor costs a few
/// hundred reads however large it is (a device array is read block by
/// block, each block a view of shown indices).
fn shown_values(a: &Array, summarize: bool) -> crate::error::Result<Vec<f64>> {
    let dims = a.shape().dims();
    // Per axis, the runs of consecutive shown indices: one, or two around "...".
    let runs: Vec<Vec<(usize, usize)>> = dims
        .iter()
        .map(|&n| if summarize && n > 2 * EDGE { vec![(0, EDGE), (n - EDGE, n)] } else { vec![(0, n)] })
        .collect();
    let kept: Vec<usize> = runs.iter().map(|r| r.iter().map(|(s, e)| e - s).sum()).collect();
    let total: usize = kept.iter().product();
    let mut out = vec![0.0; total];
    // Every combination of one run per axis is a block: a strided view.
    let nblocks: usize = runs.iter().map(|r| r.len()).product();
    for b in 0..nblocks {
        let (mut start, mut limit, mut base) = (vec![0; dims.len()], vec![0; dims.len()], vec![0; dims.len()]);
        let mut rest = b;
        for d in (0..dims.len()).rev() {
            let k = rest % runs[d].len();
            rest /= runs[d].len();
            (start[d], limit[d]) = runs[d][k];
            base[d] = if k == 0 { 0 } else { runs[d][0].1 };
        }
        let ones = vec![1; dims.len()];
        let block = a.with_layout(a.layout.slice(&start, &limit, &ones)).to_device(Device::Cpu)?;
        block.with_cpu("display", |buf, l| {
            xform_kernels::match_buffer!(buf, v => for_each_index(&l.shape, |idx| {
                let mut pos = 0;
                for d in 0..idx.len() {
                    pos = pos * kept[d] + base[d] + idx[d];
                }
                out[pos] = v[l.offset_of(idx)].to_f64();
            }))
        })?;
    }
    Ok(out)
}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.value_cloned();
        let a = match v {
            Value::Tracer(t) => return write!(f, "Tracer<{}> of {}#{}", t.aval, t.tag.name, t.tag.id),
            Value::Array(a) => a,
        };
        let shape: Vec<usize> = a.shape().to_vec();
        let numel = if shape.contains(&0) {
            0
        } else {
            shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).unwrap_or(usize::MAX)
        };
        let summarize = numel > SUMMARIZE_ABOVE;
        f.write_str("tensor(")?;
        if numel == 0 {
            write!(f, "[], shape={}", a.shape())?;
        } else {
            let vals = match shown_values(&a, summarize) {
                Ok(v) => v,
                // A device array that cannot be read back (a device error).
                Err(e) => return write!(f, "<unreadable: {e}>, shape={}, dtype={})", a.shape(), a.dtype),
            };
            let cells = format_values(&vals, a.dtype);
            let width = cells.iter().map(|c| c.len()).max().unwrap_or(0);
            let kept: Vec<Vec<Option<usize>>> = shape.iter().map(|&n| shown(n, summarize)).collect();
            write_nested(f, &cells, &kept, width, 7)?;
        }
        write!(f, ", dtype={})", a.dtype)
    }
}
