//! Example programs live in `examples/`; run them with `cargo run --example NAME`.
