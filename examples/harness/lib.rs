//! The examples' shared set-up: nothing but a place for Cargo to hang the
//! `examples/` targets of this package (`cargo run --example <name>`), each
//! of which is self-contained so that a reader can copy one file.
