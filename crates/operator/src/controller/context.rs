//! What the reconciles of one parent kind share: the kind, its resource and scope, the watch
//! caches of the kinds its plugins observe, what is remembered per parent, and the queue.

use std::sync::Arc;

use kube::discovery::ApiResource;

use super::{index::Cache, queue::Queue, remembered::Remembered, shared::Shared};
use crate::crd::ParentKind;

/// What a parent kind's reconciles share.
pub struct KindCtx {
    /// Everything.
    pub shared: Arc<Shared>,
    /// The parent kind.
    pub parent: ParentKind,
    /// The parent resource.
    pub resource: ApiResource,
    /// Whether parents are namespaced.
    pub namespaced: bool,
    /// Watch caches of observed kinds.
    pub caches: Arc<[Cache]>,
    /// What is remembered per parent (its reference, its failures), until it is deleted.
    pub remembered: Remembered,
    /// Parents waiting for a reconcile (the queue-depth metric).
    pub queue: Arc<Queue>,
}

impl std::fmt::Debug for KindCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KindCtx")
            .field("parent", &self.parent)
            .finish_non_exhaustive()
    }
}
