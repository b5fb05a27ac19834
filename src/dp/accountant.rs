//! Privacy accounting for DP-SGD (Rényi differential privacy of the sampled
//! Gaussian mechanism).
