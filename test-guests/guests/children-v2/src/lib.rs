//! The same plugin, version 2: its children say so.
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
const GENERATION: &str = "2.0.0";
include!("../../children/src/children.rs");
