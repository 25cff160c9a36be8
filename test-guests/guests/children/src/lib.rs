//! A plugin with children, version 1.
const GENERATION: &str = "1.0.0";
include!("children.rs");
