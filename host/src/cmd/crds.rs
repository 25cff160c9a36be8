//! `windlass crds`: the CustomResourceDefinitions as YAML documents.

use anyhow::Result;

pub fn run() -> Result<()> {
    let mut out = String::new();
    for crd in windlass::crds() {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd)?);
    }
    super::print(&out)
}
