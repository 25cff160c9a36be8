//! A plugin with children, version 1.
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
const GENERATION: &str = "1.0.0";
include!("children.rs");
