//! Examples of embedding Keel live beside this file; run one with `cargo run --example NAME`.
