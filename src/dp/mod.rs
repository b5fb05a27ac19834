//! Differential privacy: per-example gradient norms and clipped gradient
//! sums without per-example gradients, and privacy accounting.

pub mod accountant;
