//! Declares and returns a ClusterRoleBinding to cluster-admin: never allowed unless granted.
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
use windlass_sdk::{Context, Info, Output, Plugin, Result, json};

struct Escalate;

windlass_sdk::export!(Escalate);

impl Plugin for Escalate {
    fn info() -> Info {
        Info::new("guest-cluster-role-binding", "0.0.0")
            .parent("example.com/v1/Thing")
            .child_kind("rbac.authorization.k8s.io/v1/ClusterRoleBinding")
    }

    fn reconcile(ctx: &Context) -> Result<Output> {
        let mut out = ctx.output();
        out.apply(&json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "i-am-admin"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "default"}],
        }))?;
        Ok(out)
    }
}
