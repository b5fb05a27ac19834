//! Privacy accounting for DP-SGD (Rényi differential privacy of the sampled
//! Gaussian mechanism).
//!
//! One DP-SGD step with Poisson sampling at rate `q` and Gaussian noise of
//! standard deviation `sigma` times the clipping norm is the *sampled
//! Gaussian mechanism*. Its Rényi DP at order `alpha` (Mironov 2017;
//! Mironov, Talwar and Zhang 2019, "Rényi Differential Privacy of the
//! Sampled Gaussian Mechanism", section 3.3) is
//!
//! ```text
//! RDP(alpha) = ln(A_alpha) / (alpha - 1),
//! A_alpha    = E_{z ~ mu0} [((1 - q) + q * mu1(z) / mu0(z))^alpha],
//! ```
//!
//! with `mu0 = N(0, sigma^2)` and `mu1 = N(1, sigma^2)`: a finite binomial
//! sum for integer `alpha`, a convergent series of `erfc` terms for
//! fractional `alpha`, both summed in log space. RDP adds over steps, and
//! an (epsilon, delta) guarantee follows from the best order (Balle et al.
//! 2020, theorem 21):
//!
//! ```text
//! epsilon = min_alpha  RDP(alpha) - (ln(delta) + ln(alpha)) / (alpha - 1) + ln((alpha - 1) / alpha).
//! ```
//!
//! Everything here mirrors Opacus 1.6.0's RDP accountant
//! (`opacus/accountants/rdp.py`, `opacus/accountants/analysis/rdp.py`):
//! the same orders ([`DEFAULT_ORDERS`]), the same sums in the same order of
//! operations, the same choice of the best order and the same handling of
//! `inf` and `NaN`; tests/suite/accountant.rs checks a table of cases
//! computed by Opacus (scripts/opacus_rdp_table.py) within 1e-6 relative.
//! Where Opacus would raise on a lost-precision series (`_log_sub` with a
//! negative result) or loop forever on a `NaN` term, that order's RDP is
//! `NaN` here instead, and the order is skipped as Opacus skips `NaN`s.
//!
//! ```
//! use xform::dp::accountant::{epsilon, noise_multiplier_for_epsilon, RdpAccountant};
//!
//! // 1000 steps of batch 256 out of 60000 examples at noise 1.1:
//! let eps = epsilon(256.0 / 60000.0, 1.1, 1000, 1e-5)?;
//! assert!(eps > 0.5 && eps < 2.0);
//!
//! // The same, step by step.
//! let mut acc = RdpAccountant::new();
//! for _ in 0..1000 {
//!     acc.step(1.1, 256.0 / 60000.0)?;
//! }
//! assert_eq!(acc.epsilon(1e-5)?, eps);
//!
//! // The noise that gives epsilon = 3 for that run.
//! let sigma = noise_multiplier_for_epsilon(3.0, 256.0 / 60000.0, 1000, 1e-5)?;
//! assert!((epsilon(256.0 / 60000.0, sigma, 1000, 1e-5)? - 3.0).abs() < 1e-9);
//! # Ok::<(), xform::Error>(())
//! ```

use crate::{Error, Result};

/// The complementary error functions the fractional-order series needs:
/// the kernels' (`xform_kernels::special`), which the `erfc` primitive
/// computes with too.
pub use xform_kernels::special::{erfc, erfcx, log_erfc};

/// The Rényi orders the accountant tries: `1.1, 1.2, ..., 10.9` and then
/// `12, 13, ..., 63`, Opacus's `RDPAccountant.DEFAULT_ALPHAS` (each
/// fractional order computed as Opacus does, `1 + x / 10`, so the same
/// `f64`).
///
/// ```
/// use xform::dp::accountant::DEFAULT_ORDERS;
/// assert_eq!(DEFAULT_ORDERS.len(), 151);
/// assert_eq!((DEFAULT_ORDERS[0], DEFAULT_ORDERS[98], DEFAULT_ORDERS[99]), (1.1, 10.9, 12.0));
/// assert_eq!(DEFAULT_ORDERS[150], 63.0);
/// ```
pub const DEFAULT_ORDERS: [f64; 151] = default_orders();

const fn default_orders() -> [f64; 151] {
    let mut orders = [0.0; 151];
    let mut x = 1;
    while x < 100 {
        orders[x - 1] = 1.0 + x as f64 / 10.0;
        x += 1;
    }
    let mut k = 12;
    while k < 64 {
        orders[99 + k - 12] = k as f64;
        k += 1;
    }
    orders
}

/// Opacus's `MAX_SIGMA`: the noise-multiplier search gives up past it.
const MAX_SIGMA: f64 = 1e6;

/// Terms of the fractional-order series before it counts as diverged (its
/// order's RDP is then `NaN`). Converging series take at most a few
/// thousand.
const MAX_SERIES_TERMS: usize = 1_000_000;

/// An (epsilon, delta) guarantee and the Rényi order it came from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PrivacySpent {
    /// The epsilon at the requested delta (`inf` with no noise).
    pub epsilon: f64,
    /// The order that gives `epsilon`: the first of the smallest, as numpy's
    /// `nanargmin`; `NaN` when every order's bound is `NaN` (Opacus returns
    /// `(inf, nan)` then), and `0` for an accountant with no steps (Opacus's
    /// `(0, 0)`).
    pub order: f64,
}

/// One phase of an accountant's history: `steps` consecutive steps with the
/// same noise multiplier and sample rate (Opacus's `(sigma, q, steps)`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Phase {
    /// The noise standard deviation over the clipping norm.
    pub noise_multiplier: f64,
    /// The Poisson sampling probability of each example.
    pub sample_rate: f64,
    /// How many steps.
    pub steps: u64,
}

/// The RDP accountant of the sampled Gaussian mechanism, like Opacus's
/// `RDPAccountant`: record each step, ask for epsilon at any time.
///
/// ```
/// use xform::dp::accountant::{Phase, RdpAccountant};
///
/// let mut acc = RdpAccountant::new();
/// acc.step(1.0, 0.01)?;
/// acc.step(1.0, 0.01)?;
/// acc.step(2.0, 0.05)?;
/// assert_eq!(
///     acc.history(),
///     &[
///         Phase { noise_multiplier: 1.0, sample_rate: 0.01, steps: 2 },
///         Phase { noise_multiplier: 2.0, sample_rate: 0.05, steps: 1 },
///     ]
/// );
/// let spent = acc.epsilon_and_order(1e-5)?;
/// assert!(spent.epsilon > 0.0 && spent.order > 1.0);
/// # Ok::<(), xform::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RdpAccountant {
    history: Vec<Phase>,
}

impl RdpAccountant {
    /// An accountant with no steps (epsilon 0).
    ///
    /// ```
    /// let acc = xform::dp::accountant::RdpAccountant::new();
    /// assert_eq!(acc.epsilon(1e-5)?, 0.0);
    /// # Ok::<(), xform::Error>(())
    /// ```
    pub fn new() -> RdpAccountant {
        RdpAccountant::default()
    }

    /// Records one step. A step with the same noise multiplier and sample
    /// rate as the last merges into its phase, as in Opacus's history.
    ///
    /// # Errors
    /// A noise multiplier that is negative or not finite, or a sample rate
    /// outside `[0, 1]`.
    ///
    /// ```
    /// let mut acc = xform::dp::accountant::RdpAccountant::new();
    /// acc.step(1.1, 0.004)?;
    /// assert!(acc.step(-1.0, 0.004).is_err());
    /// assert_eq!(acc.history().len(), 1);
    /// # Ok::<(), xform::Error>(())
    /// ```
    pub fn step(&mut self, noise_multiplier: f64, sample_rate: f64) -> Result<()> {
        self.step_n(noise_multiplier, sample_rate, 1)
    }

    /// Records `n` steps with the same parameters (as `n` calls of
    /// [`step`](Self::step)).
    ///
    /// # Errors
    /// As [`step`](Self::step).
    ///
    /// ```
    /// use xform::dp::accountant::{epsilon, RdpAccountant};
    /// let mut acc = RdpAccountant::new();
    /// acc.step_n(1.1, 0.004, 500)?;
    /// acc.step_n(1.1, 0.004, 500)?;
    /// assert_eq!(acc.history().len(), 1);
    /// assert_eq!(acc.epsilon(1e-5)?, epsilon(0.004, 1.1, 1000, 1e-5)?);
    /// # Ok::<(), xform::Error>(())
    /// ```
    pub fn step_n(&mut self, noise_multiplier: f64, sample_rate: f64, n: u64) -> Result<()> {
        check_mechanism("RdpAccountant::step", noise_multiplier, sample_rate)?;
        if n == 0 {
            return Ok(());
        }
        match self.history.last_mut() {
            Some(last) if last.noise_multiplier == noise_multiplier && last.sample_rate == sample_rate => {
                last.steps += n;
            }
            _ => self.history.push(Phase { noise_multiplier, sample_rate, steps: n }),
        }
        Ok(())
    }

    /// The phases recorded so far, oldest first.
    ///
    /// ```
    /// let mut acc = xform::dp::accountant::RdpAccountant::new();
    /// acc.step(1.0, 0.5)?;
    /// assert_eq!(acc.history()[0].steps, 1);
    /// # Ok::<(), xform::Error>(())
    /// ```
    pub fn history(&self) -> &[Phase] {
        &self.history
    }

    /// The epsilon spent so far at `delta` (0 with no steps).
    ///
    /// # Errors
    /// `delta` outside `(0, 1)`.
    ///
    /// ```
    /// let mut acc = xform::dp::accountant::RdpAccountant::new();
    /// acc.step_n(1.0, 0.01, 1000)?;
    /// let eps = acc.epsilon(1e-5)?;
    /// assert!((eps - 2.1).abs() < 0.01);
    /// # Ok::<(), xform::Error>(())
    /// ```
    pub fn epsilon(&self, delta: f64) -> Result<f64> {
        self.epsilon_and_order(delta).map(|s| s.epsilon)
    }

    /// The epsilon spent so far at `delta` and the order that gives it.
    ///
    /// # Errors
    /// `delta` outside `(0, 1)`.
    ///
    /// ```
    /// let mut acc = xform::dp::accountant::RdpAccountant::new();
    /// acc.step_n(0.0, 0.01, 10)?; // no noise: no privacy
    /// assert_eq!(acc.epsilon_and_order(1e-5)?.epsilon, f64::INFINITY);
    /// # Ok::<(), xform::Error>(())
    /// ```
    pub fn epsilon_and_order(&self, delta: f64) -> Result<PrivacySpent> {
        check_delta("RdpAccountant::epsilon", delta)?;
        if self.history.is_empty() {
            return Ok(PrivacySpent { epsilon: 0.0, order: 0.0 });
        }
        // Opacus: sum([compute_rdp(...) for each phase]), left to right from 0.
        let mut total = [0.0; DEFAULT_ORDERS.len()];
        for phase in &self.history {
            let rdp = rdp(phase.sample_rate, phase.noise_multiplier, phase.steps, &DEFAULT_ORDERS);
            for (t, r) in total.iter_mut().zip(rdp) {
                *t += r;
            }
        }
        Ok(privacy_spent(&DEFAULT_ORDERS, &total, delta))
    }
}

/// Epsilon at `delta` after `steps` steps of the sampled Gaussian mechanism
/// (Poisson sampling at `sample_rate`, noise `noise_multiplier` times the
/// clipping norm), as Opacus's RDP accountant computes it.
///
/// `noise_multiplier = 0` gives `inf`; `sample_rate = 1` is the Gaussian
/// mechanism without sampling (`RDP(alpha) = alpha / (2 sigma^2)`);
/// `sample_rate = 0` spends nothing per step, and epsilon is then the
/// floor of the RDP-to-DP conversion alone (as in Opacus).
///
/// # Errors
/// A sample rate outside `[0, 1]`, a noise multiplier that is negative, any
/// non-finite argument, or `delta` outside `(0, 1)`.
///
/// ```
/// use xform::dp::accountant::epsilon;
/// let eps = epsilon(0.01, 1.0, 1000, 1e-5)?;
/// assert!(eps > 2.0 && eps < 3.5);
/// assert_eq!(epsilon(0.01, 0.0, 1000, 1e-5)?, f64::INFINITY);
/// assert!(epsilon(1.5, 1.0, 1000, 1e-5).is_err());
/// # Ok::<(), xform::Error>(())
/// ```
pub fn epsilon(sample_rate: f64, noise_multiplier: f64, steps: u64, delta: f64) -> Result<f64> {
    epsilon_and_order(sample_rate, noise_multiplier, steps, delta).map(|s| s.epsilon)
}

/// [`epsilon`] and the Rényi order that gives it.
///
/// # Errors
/// As [`epsilon`].
///
/// ```
/// use xform::dp::accountant::epsilon_and_order;
/// let spent = epsilon_and_order(0.01, 1.0, 1000, 1e-5)?;
/// assert!(xform::dp::accountant::DEFAULT_ORDERS.contains(&spent.order));
/// # Ok::<(), xform::Error>(())
/// ```
pub fn epsilon_and_order(sample_rate: f64, noise_multiplier: f64, steps: u64, delta: f64) -> Result<PrivacySpent> {
    check_mechanism("epsilon", noise_multiplier, sample_rate)?;
    check_delta("epsilon", delta)?;
    Ok(spent_one(sample_rate, noise_multiplier, steps, delta))
}

/// The smallest noise multiplier whose epsilon after `steps` steps at
/// `sample_rate` is at most `target_epsilon` at `delta`, to about 1e-12
/// relative (the epsilon of the answer equals the target to about 1e-11
/// relative).
///
/// Opacus's `get_noise_multiplier` answers the same question coarsely: it
/// bisects only until its epsilon is within `epsilon_tolerance = 0.01`
/// below the target, so its sigma is a little larger than this one (its
/// epsilon lies in `[target - 0.01, target]`).
/// [`noise_multiplier_for_epsilon_within`] reproduces that search exactly.
///
/// # Errors
/// Invalid arguments (as [`epsilon`]; `target_epsilon` must be positive and
/// finite), or a target no noise reaches: the conversion from RDP to
/// (epsilon, delta) alone costs a little epsilon (about 0.1 at
/// `delta = 1e-5` with the default orders), and like Opacus the search
/// gives up past a noise multiplier of 1e6.
///
/// ```
/// use xform::dp::accountant::{epsilon, noise_multiplier_for_epsilon};
/// let sigma = noise_multiplier_for_epsilon(8.0, 0.01, 1000, 1e-5)?;
/// assert!((epsilon(0.01, sigma, 1000, 1e-5)? - 8.0).abs() < 1e-8);
/// assert!(noise_multiplier_for_epsilon(0.01, 0.01, 1000, 1e-5).is_err());
/// # Ok::<(), xform::Error>(())
/// ```
pub fn noise_multiplier_for_epsilon(target_epsilon: f64, sample_rate: f64, steps: u64, delta: f64) -> Result<f64> {
    const OP: &str = "noise_multiplier_for_epsilon";
    check_search(OP, target_epsilon, sample_rate, delta)?;
    let eps = |sigma: f64| spent_one(sample_rate, sigma, steps, delta).epsilon;
    if eps(0.0) <= target_epsilon {
        // Nothing sampled (sample_rate = 0), or no steps: no noise needed.
        return Ok(0.0);
    }
    let (mut lo, mut hi) = bracket(OP, target_epsilon, sample_rate, steps, delta, &eps)?;
    // Invariant: eps(lo) > target >= eps(hi) (epsilon falls as sigma grows).
    while hi - lo > 1e-12 * hi {
        let mid = 0.5 * (lo + hi);
        if eps(mid) <= target_epsilon {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(hi)
}

/// Opacus's `get_noise_multiplier(target_epsilon, delta, sample_rate,
/// steps, accountant="rdp", epsilon_tolerance)`, step for step: double
/// sigma from 20 until epsilon is at most the target, then bisect between 0
/// and that sigma until epsilon is within `epsilon_tolerance` below the
/// target. With `epsilon_tolerance = 0.01` (Opacus's default) this gives
/// Opacus's sigma.
///
/// # Errors
/// As [`noise_multiplier_for_epsilon`], and a tolerance that is not positive
/// and finite.
///
/// ```
/// use xform::dp::accountant::{epsilon, noise_multiplier_for_epsilon_within};
/// let sigma = noise_multiplier_for_epsilon_within(3.0, 0.01, 1000, 1e-5, 0.01)?;
/// let eps = epsilon(0.01, sigma, 1000, 1e-5)?;
/// assert!(eps <= 3.0 && eps >= 3.0 - 0.01);
/// # Ok::<(), xform::Error>(())
/// ```
pub fn noise_multiplier_for_epsilon_within(
    target_epsilon: f64,
    sample_rate: f64,
    steps: u64,
    delta: f64,
    epsilon_tolerance: f64,
) -> Result<f64> {
    const OP: &str = "noise_multiplier_for_epsilon_within";
    if !(epsilon_tolerance.is_finite() && epsilon_tolerance > 0.0) {
        return Err(Error::invalid(
            OP,
            format!("epsilon_tolerance must be positive and finite, got {epsilon_tolerance}"),
        ));
    }
    check_search(OP, target_epsilon, sample_rate, delta)?;
    let eps = |sigma: f64| spent_one(sample_rate, sigma, steps, delta).epsilon;
    let (_, mut sigma_high) = bracket(OP, target_epsilon, sample_rate, steps, delta, &eps)?;
    let mut eps_high = eps(sigma_high);
    let mut sigma_low = 0.0;
    while target_epsilon - eps_high > epsilon_tolerance {
        let sigma = (sigma_low + sigma_high) / 2.0;
        let e = eps(sigma);
        if e < target_epsilon {
            sigma_high = sigma;
            eps_high = e;
        } else {
            sigma_low = sigma;
        }
    }
    Ok(sigma_high)
}

fn check_search(op: &str, target_epsilon: f64, sample_rate: f64, delta: f64) -> Result<()> {
    if !(target_epsilon.is_finite() && target_epsilon > 0.0) {
        return Err(Error::invalid(op, format!("target_epsilon must be positive and finite, got {target_epsilon}")));
    }
    check_mechanism(op, 0.0, sample_rate)?;
    check_delta(op, delta)
}

/// Opacus's bracket: sigma = 20, 40, 80, ... until epsilon is at most the
/// target, giving up past [`MAX_SIGMA`]. Returns the last sigma tried above
/// the target (0 if none) and the first at or below it.
fn bracket(
    op: &str,
    target_epsilon: f64,
    sample_rate: f64,
    steps: u64,
    delta: f64,
    eps: &impl Fn(f64) -> f64,
) -> Result<(f64, f64)> {
    // As sigma grows RDP falls to 0, leaving only the cost of converting
    // RDP to (epsilon, delta): no target at or below it is reachable.
    let floor = privacy_spent(&DEFAULT_ORDERS, &[0.0; DEFAULT_ORDERS.len()], delta).epsilon;
    if target_epsilon <= floor {
        return Err(Error::invalid(
            op,
            format!(
                "target_epsilon {target_epsilon} is unreachable: at delta {delta} epsilon is above {floor} \
                 however large the noise multiplier"
            ),
        ));
    }
    let (mut low, mut high) = (0.0, 10.0);
    loop {
        let sigma = 2.0 * high;
        let e = eps(sigma);
        // Opacus tests the limit after computing epsilon, reached or not.
        if sigma > MAX_SIGMA {
            return Err(Error::invalid(
                op,
                format!(
                    "target_epsilon {target_epsilon} is unreachable: it needs a noise multiplier above {MAX_SIGMA} \
                     (sample_rate {sample_rate}, steps {steps}, delta {delta})"
                ),
            ));
        }
        if e <= target_epsilon {
            return Ok((low, sigma));
        }
        low = sigma;
        high = sigma;
    }
}

fn check_mechanism(op: &str, noise_multiplier: f64, sample_rate: f64) -> Result<()> {
    if !(sample_rate.is_finite() && (0.0..=1.0).contains(&sample_rate)) {
        return Err(Error::invalid(op, format!("sample_rate must be in [0, 1], got {sample_rate}")));
    }
    if !(noise_multiplier.is_finite() && noise_multiplier >= 0.0) {
        return Err(Error::invalid(
            op,
            format!("noise_multiplier must be finite and non-negative, got {noise_multiplier}"),
        ));
    }
    Ok(())
}

fn check_delta(op: &str, delta: f64) -> Result<()> {
    if !(delta > 0.0 && delta < 1.0) {
        return Err(Error::invalid(op, format!("delta must be in (0, 1), got {delta}")));
    }
    Ok(())
}

/// Epsilon of one phase with the default orders (arguments checked).
fn spent_one(sample_rate: f64, noise_multiplier: f64, steps: u64, delta: f64) -> PrivacySpent {
    let rdp = rdp(sample_rate, noise_multiplier, steps, &DEFAULT_ORDERS);
    privacy_spent(&DEFAULT_ORDERS, &rdp, delta)
}

/// RDP of `steps` steps at each order (Opacus's `compute_rdp`: one step's
/// RDP times `steps`, so `steps = 0` with no noise gives `inf * 0 = NaN`
/// as there).
fn rdp<const N: usize>(q: f64, sigma: f64, steps: u64, orders: &[f64; N]) -> [f64; N] {
    orders.map(|alpha| rdp_one_step(q, sigma, alpha) * steps as f64)
}

/// Opacus's `_compute_rdp`: RDP of one step at order `alpha > 1`.
fn rdp_one_step(q: f64, sigma: f64, alpha: f64) -> f64 {
    if q == 0.0 {
        return 0.0;
    }
    if sigma == 0.0 {
        return f64::INFINITY; // no noise, no privacy
    }
    if q == 1.0 {
        return alpha / (2.0 * (sigma * sigma)); // the Gaussian mechanism
    }
    if alpha.is_infinite() {
        return f64::INFINITY;
    }
    let log_a = if alpha.fract() == 0.0 { log_a_int(q, sigma, alpha as u64) } else { log_a_frac(q, sigma, alpha) };
    log_a / (alpha - 1.0)
}

/// `ln(A_alpha)` for integer `alpha`: the binomial expansion
/// `A_alpha = sum_i C(alpha, i) q^i (1 - q)^(alpha - i) exp((i^2 - i) / (2 sigma^2))`.
fn log_a_int(q: f64, sigma: f64, alpha: u64) -> f64 {
    let mut log_a = f64::NEG_INFINITY;
    for i in 0..=alpha {
        let log_coef = binom(alpha as f64, i).ln() + i as f64 * q.ln() + (alpha - i) as f64 * (1.0 - q).ln();
        let s = log_coef + (i * i - i) as f64 / (2.0 * (sigma * sigma));
        log_a = log_add(log_a, s);
    }
    log_a
}

/// `ln(A_alpha)` for fractional `alpha`: `A_alpha` split at
/// `z0 = sigma^2 ln(1/q - 1) + 1/2` into two series of generalized binomial
/// terms times Gaussian tails (`erfc`), summed until both terms fall below
/// `exp(-30)`. A `NaN` term, a negative partial sum (lost precision) or a
/// series that does not converge gives `NaN`.
fn log_a_frac(q: f64, sigma: f64, alpha: f64) -> f64 {
    let (mut log_a0, mut log_a1) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    let z0 = sigma * sigma * (1.0 / q - 1.0).ln() + 0.5;
    let two_sigma_sq = 2.0 * (sigma * sigma);
    let scale = std::f64::consts::SQRT_2 * sigma;
    // C(alpha, i), updated term by term (scipy's `binom` per term costs O(i)
    // here or a beta function there).
    let mut coef = 1.0;
    for i in 0..MAX_SERIES_TERMS {
        if i > 0 {
            coef *= (alpha - (i - 1) as f64) / i as f64;
        }
        let log_coef = coef.abs().ln();
        let i = i as f64;
        let j = alpha - i;
        let log_t0 = log_coef + i * q.ln() + j * (1.0 - q).ln();
        let log_t1 = log_coef + j * q.ln() + i * (1.0 - q).ln();
        let log_e0 = 0.5f64.ln() + log_erfc((i - z0) / scale);
        let log_e1 = 0.5f64.ln() + log_erfc((z0 - j) / scale);
        let log_s0 = log_t0 + (i * i - i) / two_sigma_sq + log_e0;
        let log_s1 = log_t1 + (j * j - j) / two_sigma_sq + log_e1;
        if coef > 0.0 {
            log_a0 = log_add(log_a0, log_s0);
            log_a1 = log_add(log_a1, log_s1);
        } else {
            log_a0 = log_sub(log_a0, log_s0);
            log_a1 = log_sub(log_a1, log_s1);
        }
        if log_s0.is_nan() || log_s1.is_nan() {
            return f64::NAN;
        }
        if log_s0.max(log_s1) < -30.0 {
            return log_add(log_a0, log_a1);
        }
    }
    f64::NAN
}

/// The binomial coefficient `C(n, k)` for integer `n >= k >= 0`, as scipy's
/// `binom` computes it for small `k` (the product `(n - k + 1) ... n / k!`
/// after `k -> n - k`), for every `k` (scipy switches to a beta function
/// from `k = 20`; the product is the more accurate of the two).
fn binom(n: f64, k: u64) -> f64 {
    let mut kx = k as f64;
    if n.fract() == 0.0 && n > 0.0 && kx > n / 2.0 {
        kx = n - kx;
    }
    let (mut num, mut den) = (1.0f64, 1.0f64);
    let mut i = 1.0;
    while i <= kx {
        num *= i + n - kx;
        den *= i;
        if num.abs() > 1e50 {
            num /= den;
            den = 1.0;
        }
        i += 1.0;
    }
    num / den
}

/// Opacus's `get_privacy_spent`: epsilon at each order from its RDP, and the
/// smallest (the first of equals), ignoring `NaN`s; `(inf, NaN)` when all
/// are `NaN`.
fn privacy_spent(orders: &[f64], rdp: &[f64], delta: f64) -> PrivacySpent {
    let eps: Vec<f64> = orders
        .iter()
        .zip(rdp)
        .map(|(&alpha, &r)| r - (delta.ln() + alpha.ln()) / (alpha - 1.0) + ((alpha - 1.0) / alpha).ln())
        .collect();
    if eps.iter().all(|e| e.is_nan()) {
        return PrivacySpent { epsilon: f64::INFINITY, order: f64::NAN };
    }
    // numpy's nanargmin: NaN counts as +inf; the first of equal minima wins.
    let key = |e: f64| if e.is_nan() { f64::INFINITY } else { e };
    let mut best = 0;
    for (i, &e) in eps.iter().enumerate() {
        if key(e) < key(eps[best]) {
            best = i;
        }
    }
    PrivacySpent { epsilon: eps[best], order: orders[best] }
}

/// `ln(e^x + e^y)` without overflow (Opacus's `_log_add`; `-inf` is 0, and
/// a `NaN` operand gives `NaN`).
///
/// ```
/// use xform::dp::accountant::log_add;
/// assert!((log_add(1000.0, 1000.0) - (1000.0 + 2f64.ln())).abs() < 1e-12);
/// assert_eq!(log_add(f64::NEG_INFINITY, 3.0), 3.0);
/// ```
pub fn log_add(x: f64, y: f64) -> f64 {
    if x.is_nan() || y.is_nan() {
        return f64::NAN;
    }
    let (a, b) = (x.min(y), x.max(y));
    if a == f64::NEG_INFINITY {
        return b;
    }
    (a - b).exp().ln_1p() + b
}

/// `ln(e^x - e^y)` for `x >= y` (Opacus's `_log_sub`): `-inf` when `x == y`;
/// `x` when `e^(x - y)` overflows; `NaN` when `x < y` (where Opacus raises).
///
/// ```
/// use xform::dp::accountant::log_sub;
/// assert!((log_sub(2f64.ln(), 0.0) - 0.0).abs() < 1e-15);
/// assert_eq!(log_sub(5.0, 5.0), f64::NEG_INFINITY);
/// assert!(log_sub(1.0, 2.0).is_nan());
/// ```
pub fn log_sub(x: f64, y: f64) -> f64 {
    if x.is_nan() || y.is_nan() || x < y {
        return f64::NAN;
    }
    if y == f64::NEG_INFINITY {
        return x;
    }
    if x == y {
        return f64::NEG_INFINITY;
    }
    let d = (x - y).exp_m1();
    if d.is_infinite() {
        return x; // Python's math.expm1 raises OverflowError; Opacus returns x
    }
    d.ln() + y
}
