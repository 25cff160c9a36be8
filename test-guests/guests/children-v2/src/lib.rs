//! The same plugin, version 2: its children say so.
const GENERATION: &str = "2.0.0";
include!("../../children/src/children.rs");
