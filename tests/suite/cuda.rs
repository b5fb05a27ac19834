//! CUDA tests (being written).
