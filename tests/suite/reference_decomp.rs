//! Naive f64 factorizations and solves from their definitions, matrix by
//! matrix over the leading axes: the Cholesky-Banachiewicz recurrence on
//! the symmetrized operand (NaN for the whole factor at a pivot that is not
//! positive), and forward / back substitution on `op(A)` built explicitly.

use super::reference::Nd;
use xform::core::prim::TriangularSpec;

/// The matrices of `x` (last two axes `r x c`): count, r, c.
fn stack(x: &Nd) -> (usize, usize, usize) {
    let k = x.shape.len();
    let (r, c) = (x.shape[k - 2], x.shape[k - 1]);
    (x.data.len().checked_div(r * c).unwrap_or(0), r, c)
}

pub fn cholesky(x: &Nd) -> Nd {
    let (count, n, _) = stack(x);
    let mut out = vec![0.0; x.data.len()];
    for b in 0..count {
        let a = |i: usize, j: usize| 0.5 * (x.data[b * n * n + i * n + j] + x.data[b * n * n + j * n + i]);
        let l = &mut out[b * n * n..(b + 1) * n * n];
        let mut ok = true;
        for i in 0..n {
            for j in 0..=i {
                let s: f64 = (0..j).map(|k| l[i * n + k] * l[j * n + k]).sum();
                if i == j {
                    let d = a(i, i) - s;
                    ok &= d > 0.0;
                    l[i * n + i] = d.max(0.0).sqrt();
                } else {
                    l[i * n + j] = (a(i, j) - s) / l[j * n + j];
                }
            }
        }
        if !ok {
            for i in 0..n {
                l[i * n..=i * n + i].fill(f64::NAN);
            }
        }
    }
    Nd::new(x.shape.clone(), out)
}

pub fn triangular_solve(s: &TriangularSpec, a: &Nd, b: &Nd) -> Nd {
    let (count, m, n) = stack(b);
    let k = if s.left_side { m } else { n };
    let mut out = vec![0.0; b.data.len()];
    for q in 0..count {
        // op(A) with only the triangle that is read
        let at = |i: usize, j: usize| {
            let (i, j) = if s.transpose_a { (j, i) } else { (i, j) };
            match () {
                _ if i == j && s.unit_diagonal => 1.0,
                _ if i == j || (s.lower && i > j) || (!s.lower && i < j) => a.data[q * k * k + i * k + j],
                _ => 0.0,
            }
        };
        // op(A) is lower triangular when exactly one of lower / transposed
        let op_lower = s.lower != s.transpose_a;
        let bm = |i: usize, j: usize| b.data[q * m * n + i * n + j];
        let x = &mut out[q * m * n..(q + 1) * m * n];
        if s.left_side {
            // op(A) X = B, column by column
            for j in 0..n {
                let rows: Vec<usize> = if op_lower { (0..m).collect() } else { (0..m).rev().collect() };
                for &i in &rows {
                    let done: f64 = rows.iter().take_while(|&&r| r != i).map(|&r| at(i, r) * x[r * n + j]).sum();
                    x[i * n + j] = (bm(i, j) - done) / at(i, i);
                }
            }
        } else {
            // X op(A) = B, row by row: x_i op(A) = b_i
            for i in 0..m {
                let cols: Vec<usize> = if op_lower { (0..n).rev().collect() } else { (0..n).collect() };
                for &j in &cols {
                    let done: f64 = cols.iter().take_while(|&&c| c != j).map(|&c| x[i * n + c] * at(c, j)).sum();
                    x[i * n + j] = (bm(i, j) - done) / at(j, j);
                }
            }
        }
    }
    Nd::new(b.shape.clone(), out)
}

/// Doolittle's elimination with partial pivoting (the first entry of
/// largest magnitude; a zero pivot's column left as it is), in f64: the
/// factors, the row swaps and the permutation, as `lax::lu` gives them.
pub fn lu(a: &Nd) -> Vec<Nd> {
    let (count, m, n) = stack(a);
    let k = m.min(n);
    let lead = &a.shape[..a.shape.len() - 2];
    let (mut f, mut piv, mut perm) = (a.data.clone(), Vec::new(), Vec::new());
    for q in 0..count {
        let x = &mut f[q * m * n..(q + 1) * m * n];
        let mut p: Vec<usize> = (0..m).collect();
        for j in 0..k {
            let best = (j..m).fold(j, |b, i| if x[i * n + j].abs() > x[b * n + j].abs() { i } else { b });
            piv.push(best as f64);
            p.swap(j, best);
            if x[best * n + j] != 0.0 {
                for c in 0..n {
                    x.swap(best * n + c, j * n + c);
                }
                for i in j + 1..m {
                    x[i * n + j] /= x[j * n + j];
                }
            }
            for i in j + 1..m {
                for c in j + 1..n {
                    x[i * n + c] -= x[i * n + j] * x[j * n + c];
                }
            }
        }
        perm.extend(p.iter().map(|&v| v as f64));
    }
    let with = |last: usize| lead.iter().copied().chain([last]).collect::<Vec<_>>();
    vec![Nd::new(a.shape.clone(), f), Nd::new(with(k), piv), Nd::new(with(m), perm)]
}
