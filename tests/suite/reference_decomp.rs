//! Naive f64 factorizations and solves from their definitions, matrix by
//! matrix over the leading axes: the Cholesky-Banachiewicz recurrence on
//! the symmetrized operand (NaN for the whole factor at a pivot that is not
//! positive), forward / back substitution on `op(A)` built explicitly,
//! Doolittle's LU, modified Gram-Schmidt QR, cyclic Jacobi for eigh and
//! one-sided Jacobi for the SVD (the last three with the kernels' sign
//! conventions).

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

/// Column `j` of the row-major `rows x cols` matrix `x` negated when its
/// first entry of largest magnitude is negative (the kernels' sign
/// convention); true when it was.
fn make_largest_positive(x: &mut [f64], rows: usize, cols: usize, j: usize) -> bool {
    let p = (0..rows).fold(0, |b, i| if x[i * cols + j].abs() > x[b * cols + j].abs() { i } else { b });
    let flip = x[p * cols + j] < 0.0;
    if flip {
        (0..rows).for_each(|i| x[i * cols + j] = -x[i * cols + j]);
    }
    flip
}

/// Modified Gram-Schmidt on the first `min(m, n)` columns (a positive
/// diagonal of R), the other columns of R as `Qᵀ A`: `[q, r]`. A complete
/// Q is drawn only where it is the thin one (m <= n).
pub fn qr(full: bool, a: &Nd) -> Vec<Nd> {
    let (count, m, n) = stack(a);
    let k = m.min(n);
    assert!(!full || m <= n, "a complete Q of a tall matrix is not unique");
    let lead = &a.shape[..a.shape.len() - 2];
    let (mut qs, mut rs) = (Vec::new(), Vec::new());
    for b in 0..count {
        let x = &a.data[b * m * n..(b + 1) * m * n];
        let mut q = vec![0.0; m * k];
        let mut r = vec![0.0; k * n];
        for j in 0..k {
            let mut v: Vec<f64> = (0..m).map(|i| x[i * n + j]).collect();
            for p in 0..j {
                let d: f64 = (0..m).map(|i| q[i * k + p] * v[i]).sum();
                r[p * n + j] = d;
                (0..m).for_each(|i| v[i] -= d * q[i * k + p]);
            }
            let norm = v.iter().map(|t| t * t).sum::<f64>().sqrt();
            r[j * n + j] = norm;
            (0..m).for_each(|i| q[i * k + j] = v[i] / norm);
        }
        for j in k..n {
            for p in 0..k {
                r[p * n + j] = (0..m).map(|i| q[i * k + p] * x[i * n + j]).sum();
            }
        }
        qs.extend(q);
        rs.extend(r);
    }
    let with = |last: [usize; 2]| lead.iter().copied().chain(last).collect::<Vec<_>>();
    vec![Nd::new(with([m, k]), qs), Nd::new(with([k, n]), rs)]
}

/// The cyclic Jacobi eigenvalue iteration on the symmetrized matrices:
/// `[v, w]`, eigenvalues ascending, each eigenvector's largest entry
/// positive.
pub fn eigh(a: &Nd) -> Vec<Nd> {
    let (count, n, _) = stack(a);
    let (mut vs, mut ws) = (Vec::new(), Vec::new());
    for b in 0..count {
        let x = &a.data[b * n * n..(b + 1) * n * n];
        let mut s: Vec<f64> = (0..n * n).map(|i| 0.5 * (x[i] + x[(i % n) * n + i / n])).collect();
        let mut v: Vec<f64> = (0..n * n).map(|i| f64::from(u8::from(i % (n + 1) == 0))).collect();
        for _sweep in 0..100 {
            let off: f64 = (0..n * n).filter(|i| i % (n + 1) != 0).map(|i| s[i] * s[i]).sum();
            if off < 1e-60 {
                break;
            }
            for p in 0..n {
                for q in p + 1..n {
                    if s[p * n + q] == 0.0 {
                        continue;
                    }
                    let theta = (s[q * n + q] - s[p * n + p]) / (2.0 * s[p * n + q]);
                    let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                    let c = 1.0 / (t * t + 1.0).sqrt();
                    let sn = t * c;
                    for k in 0..n {
                        let (kp, kq) = (s[k * n + p], s[k * n + q]);
                        s[k * n + p] = c * kp - sn * kq;
                        s[k * n + q] = sn * kp + c * kq;
                    }
                    for k in 0..n {
                        let (pk, qk) = (s[p * n + k], s[q * n + k]);
                        s[p * n + k] = c * pk - sn * qk;
                        s[q * n + k] = sn * pk + c * qk;
                    }
                    for k in 0..n {
                        let (kp, kq) = (v[k * n + p], v[k * n + q]);
                        v[k * n + p] = c * kp - sn * kq;
                        v[k * n + q] = sn * kp + c * kq;
                    }
                }
            }
        }
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&i, &j| s[i * n + i].total_cmp(&s[j * n + j]));
        let mut sorted: Vec<f64> = (0..n * n).map(|i| v[(i / n) * n + order[i % n]]).collect();
        for j in 0..n {
            make_largest_positive(&mut sorted, n, n, j);
        }
        vs.extend(sorted);
        ws.extend(order.iter().map(|&i| s[i * n + i]));
    }
    let lead = &a.shape[..a.shape.len() - 2];
    let with = |last: &[usize]| lead.iter().chain(last).copied().collect::<Vec<_>>();
    vec![Nd::new(with(&[n, n]), vs), Nd::new(with(&[n]), ws)]
}

/// One-sided (Hestenes) Jacobi SVD of a `m x n` matrix with m >= n
/// (row-major): `(s, u m x n, v n x n)`, unsorted.
fn hestenes(x: &[f64], m: usize, n: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut u = x.to_vec();
    let mut v: Vec<f64> = (0..n * n).map(|i| f64::from(u8::from(i % (n + 1) == 0))).collect();
    for _sweep in 0..100 {
        let mut rotated = false;
        for p in 0..n {
            for q in p + 1..n {
                let col = |u: &[f64], a: usize, b: usize| (0..m).map(|i| u[i * n + a] * u[i * n + b]).sum::<f64>();
                let (alpha, beta, gamma) = (col(&u, p, p), col(&u, q, q), col(&u, p, q));
                if gamma.abs() <= 1e-17 * (alpha * beta).sqrt() {
                    continue;
                }
                rotated = true;
                let zeta = (beta - alpha) / (2.0 * gamma);
                let sign = if zeta >= 0.0 { 1.0 } else { -1.0 };
                let t = sign / (zeta.abs() + (1.0 + zeta * zeta).sqrt());
                let c = 1.0 / (1.0 + t * t).sqrt();
                let sn = c * t;
                for (w, rows) in [(&mut u, m), (&mut v, n)] {
                    for i in 0..rows {
                        let (a, b) = (w[i * n + p], w[i * n + q]);
                        w[i * n + p] = c * a - sn * b;
                        w[i * n + q] = sn * a + c * b;
                    }
                }
            }
        }
        if !rotated {
            break;
        }
    }
    let s: Vec<f64> = (0..n).map(|j| (0..m).map(|i| u[i * n + j] * u[i * n + j]).sum::<f64>().sqrt()).collect();
    for i in 0..m {
        for j in 0..n {
            u[i * n + j] /= s[j];
        }
    }
    (s, u, v)
}

/// The singular values (descending) and, with `compute_uv`, the thin
/// `U` and `Vᵀ` (each column of U with its largest entry positive), by
/// one-sided Jacobi: `[s]` or `[s, u, vt]`. Complete factors are drawn
/// only where they are the thin ones (m == n).
pub fn svd(full: bool, compute_uv: bool, a: &Nd) -> Vec<Nd> {
    let (count, m, n) = stack(a);
    let k = m.min(n);
    assert!(!(full && compute_uv) || m == n, "complete singular vectors of a non-square matrix are not unique");
    let (mut ss, mut us, mut vts) = (Vec::new(), Vec::new(), Vec::new());
    for b in 0..count {
        let x = &a.data[b * m * n..(b + 1) * m * n];
        // A = U S Vᵀ, or for a wide matrix Aᵀ = V S Uᵀ
        let (s, u, v) = if m >= n {
            hestenes(x, m, n)
        } else {
            let xt: Vec<f64> = (0..m * n).map(|i| x[(i % m) * n + i / m]).collect();
            let (s, ut, vt) = hestenes(&xt, n, m);
            (s, vt, ut)
        };
        // u is m x k, v is n x k
        let mut order: Vec<usize> = (0..k).collect();
        order.sort_by(|&i, &j| s[j].total_cmp(&s[i]));
        let mut u: Vec<f64> = (0..m * k).map(|i| u[(i / k) * k + order[i % k]]).collect();
        let mut v: Vec<f64> = (0..n * k).map(|i| v[(i / k) * k + order[i % k]]).collect();
        for j in 0..k {
            if make_largest_positive(&mut u, m, k, j) {
                (0..n).for_each(|i| v[i * k + j] = -v[i * k + j]);
            }
        }
        ss.extend(order.iter().map(|&i| s[i]));
        us.extend(u);
        vts.extend((0..k * n).map(|i| v[(i % n) * k + i / n]));
    }
    let lead = &a.shape[..a.shape.len() - 2];
    let with = |last: &[usize]| lead.iter().chain(last).copied().collect::<Vec<_>>();
    let s = Nd::new(with(&[k]), ss);
    if !compute_uv {
        return vec![s];
    }
    vec![s, Nd::new(with(&[m, k]), us), Nd::new(with(&[k, n]), vts)]
}
