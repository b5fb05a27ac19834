//! Printing tensors like numpy: nested brackets, aligned columns, and
//! summarization ("...") for large arrays.

use crate::tensor::{Tensor, Value};
use std::fmt;
use xform_kernels::DType;

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

fn write_nested(
    f: &mut fmt::Formatter<'_>,
    cells: &[String],
    shape: &[usize],
    width: usize,
    indent: usize,
    summarize: bool,
) -> fmt::Result {
    if shape.is_empty() {
        return write!(f, "{:>width$}", cells[0]);
    }
    let n = shape[0];
    let inner: usize = shape[1..].iter().product();
    f.write_str("[")?;
    let show: Vec<Option<usize>> = if summarize && n > 2 * EDGE {
        (0..EDGE).map(Some).chain(std::iter::once(None)).chain((n - EDGE..n).map(Some)).collect()
    } else {
        (0..n).map(Some).collect()
    };
    for (k, item) in show.iter().enumerate() {
        if k > 0 {
            if shape.len() == 1 {
                f.write_str(", ")?;
            } else {
                f.write_str(",")?;
                for _ in 1..shape.len() {
                    f.write_str("\n")?;
                }
                write!(f, "{:indent$}", "", indent = indent + 1)?;
            }
        }
        match item {
            Some(i) => write_nested(f, &cells[i * inner..(i + 1) * inner], &shape[1..], width, indent + 1, summarize)?,
            None => f.write_str("...")?,
        }
    }
    f.write_str("]")
}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.value_cloned();
        let a = match v {
            Value::Tracer(t) => return write!(f, "Tracer<{}> of {}#{}", t.aval, t.tag.name, t.tag.id),
            Value::Array(a) => a,
        };
        let vals: Vec<f64> = Tensor::from_array(a.clone()).to_vec_f64();
        let shape: Vec<usize> = a.shape().to_vec();
        let summarize = vals.len() > SUMMARIZE_ABOVE;
        let cells = format_values(&vals, a.dtype);
        let width = cells.iter().map(|c| c.len()).max().unwrap_or(0);
        f.write_str("tensor(")?;
        if vals.is_empty() {
            write!(f, "[], shape={}", a.shape())?;
        } else {
            write_nested(f, &cells, &shape, width, 7, summarize)?;
        }
        write!(f, ", dtype={})", a.dtype)
    }
}
