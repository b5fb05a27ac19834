//! Neural-network helpers (being written).
