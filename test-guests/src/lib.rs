//! Paths of the plugins and misbehaving test guests, built for wasm32-wasip2 by this crate's
//! build script. Each misbehaving guest does one thing the sandbox must contain.

include!(concat!(env!("OUT_DIR"), "/components.rs"));

/// Reads a component's bytes.
///
/// # Panics
/// When the file is missing: the build script writes the Rust components; the Python and
/// JavaScript plugins ([`PRIMARY`], [`CONVENTIONS`]) come from `cargo xtask plugins`.
pub fn bytes(path: &str) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| {
        panic!("reading {path}: {e} (the Python and JavaScript plugins are built by `cargo xtask plugins`)")
    })
}
