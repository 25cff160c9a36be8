//! The server a scenario suite runs against: the devcluster (the default), or with
//! `WINDLASS_TEST_CLUSTER=real` a real control plane of the test's own (`windlass_kubeplane`:
//! etcd, kube-apiserver and kube-controller-manager built from source), so the same scenarios
//! measure the devcluster's fidelity (docs/DEVCLUSTER.md). A scenario that needs what only the
//! devcluster has (compaction on demand, injected faults) asks [`Server::dev`] and skips on the
//! real one, saying so.
#![allow(dead_code)]

use std::path::Path;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client,
    api::{ListParams, PostParams},
};
use windlass_devcluster::{DevCluster, Options};
use windlass_kubeplane::ControlPlane;

pub enum Server {
    Dev(DevCluster),
    Real(ControlPlane, Client),
}

/// Whether the suites run against a real control plane (`WINDLASS_TEST_CLUSTER=real`).
pub fn real() -> bool {
    std::env::var("WINDLASS_TEST_CLUSTER").is_ok_and(|v| v == "real")
}

impl Server {
    /// The devcluster without its simulator, or a real control plane.
    pub async fn start() -> Server {
        Self::start_with(Options {
            simulator: false,
            ..Options::default()
        })
        .await
    }

    /// The devcluster with `options`, or a real control plane (which has none of them).
    pub async fn start_with(options: Options) -> Server {
        if real() {
            let plane = ControlPlane::start()
                .await
                .expect("the real control plane starts");
            let client = plane.client().await.expect("a client");
            Server::Real(plane, client)
        } else {
            Server::Dev(DevCluster::start(options).await.expect("devcluster starts"))
        }
    }

    pub fn client(&self) -> Client {
        match self {
            Server::Dev(dc) => dc.client(),
            Server::Real(_, client) => client.clone(),
        }
    }

    /// The devcluster, for a scenario that needs what only it has (`why`). On a real control
    /// plane the scenario fails rather than passing having checked nothing: `cargo xtask ci`
    /// leaves such tests out of its real pass by name (`DEVCLUSTER_ONLY_TESTS` in xtask).
    pub fn dev_only(&self, why: &str) -> &DevCluster {
        match self {
            Server::Dev(dc) => dc,
            Server::Real(..) => {
                panic!("devcluster only ({why}): run it without WINDLASS_TEST_CLUSTER=real")
            }
        }
    }

    /// The server's current resource version: that of a list (of ConfigMaps in `default`),
    /// which both servers answer with their latest.
    pub async fn resource_version(&self) -> String {
        let api: Api<ConfigMap> = Api::namespaced(self.client(), "default");
        api.list_metadata(&ListParams::default().limit(1))
            .await
            .expect("list")
            .metadata
            .resource_version
            .expect("a list has a resourceVersion")
    }

    /// Writes a kubeconfig for kubectl.
    pub fn write_kubeconfig(&self, path: &Path) {
        match self {
            Server::Dev(dc) => dc.write_kubeconfig(path).expect("kubeconfig"),
            Server::Real(plane, _) => {
                std::fs::copy(plane.kubeconfig(), path).expect("kubeconfig copied");
            }
        }
    }

    /// Makes a namespace, which a real server needs to exist before anything goes in it (the
    /// devcluster accepts any).
    pub async fn namespace(&self, name: &str) {
        let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client());
        let ns = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
            .expect("namespace");
        match api.create(&PostParams::default(), &ns).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("namespace {name}: {e}"),
        }
    }

    pub async fn shutdown(self) {
        match self {
            Server::Dev(dc) => dc.shutdown().await,
            Server::Real(plane, _) => drop(plane),
        }
    }
}
