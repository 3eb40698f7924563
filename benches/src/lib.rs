//! Shared helpers for the tidelog benchmarks.
