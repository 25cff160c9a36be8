//! Which resource serves a `group/version/Kind`, cached.

use std::{collections::HashMap, sync::Mutex};

use kube::{
    Client,
    core::GroupVersionKind,
    discovery::{ApiCapabilities, ApiResource, Scope, pinned_kind},
};

use super::error::DiscoveryError;

/// A cache of kind → resource, filled on demand from the API server's discovery.
pub struct Discovery {
    client: Client,
    cache: Mutex<HashMap<String, (ApiResource, bool)>>,
}

impl std::fmt::Debug for Discovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discovery").finish_non_exhaustive()
    }
}

/// Splits `group/version/Kind` (or `v1/Kind`) into a GroupVersionKind.
/// The apiVersion must be canonical: `/v1/Kind` would otherwise resolve to the core group.
pub fn parse_kind(key: &str) -> Option<GroupVersionKind> {
    let parsed = windlass_policy::KindKey::parse(key)?;
    windlass_policy::check_api_version(&parsed.api_version()).ok()?;
    Some(GroupVersionKind::gvk(
        parsed.group,
        parsed.version,
        parsed.kind,
    ))
}

impl Discovery {
    /// An empty cache.
    pub fn new(client: Client) -> Self {
        Discovery {
            client,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The resource of a kind and whether it is namespaced.
    ///
    /// # Errors
    /// [`DiscoveryError`] when the API server does not serve the kind.
    pub async fn resolve(&self, key: &str) -> Result<(ApiResource, bool), DiscoveryError> {
        if let Some(hit) = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
        {
            return Ok(hit.clone());
        }
        let gvk = parse_kind(key).ok_or_else(|| DiscoveryError::Unfit {
            kind: key.to_string(),
            why: "not of the form group/version/Kind".into(),
        })?;
        let (ar, caps): (ApiResource, ApiCapabilities) = pinned_kind(&self.client, &gvk)
            .await
            .map_err(|source| DiscoveryError::Api {
                kind: key.to_string(),
                source,
            })?;
        let namespaced = matches!(caps.scope, Scope::Namespaced);
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_string(), (ar.clone(), namespaced));
        Ok((ar, namespaced))
    }

    /// [`Discovery::resolve`], telling a kind the API server does not serve (`None`: its group
    /// or version is not found, or the kind is not in it) from a failure to ask (an error).
    pub async fn resolve_served(
        &self,
        key: &str,
    ) -> Result<Option<(ApiResource, bool)>, DiscoveryError> {
        match self.resolve(key).await {
            Ok(hit) => Ok(Some(hit)),
            Err(e) => {
                let Some(gvk) = parse_kind(key) else {
                    return Ok(None);
                };
                match pinned_kind(&self.client, &gvk).await {
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
                    Err(kube::Error::Discovery(kube::error::DiscoveryError::MissingKind(_))) => {
                        Ok(None)
                    }
                    _ => Err(e),
                }
            }
        }
    }

    /// Forgets a kind (its CRD changed or went away).
    pub fn forget(&self, key: &str) {
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_keys_split_into_group_version_kind() {
        let gvk = parse_kind("apps/v1/StatefulSet").unwrap();
        assert_eq!(
            (gvk.group.as_str(), gvk.version.as_str(), gvk.kind.as_str()),
            ("apps", "v1", "StatefulSet")
        );
        let gvk = parse_kind("v1/Service").unwrap();
        assert_eq!((gvk.group.as_str(), gvk.version.as_str()), ("", "v1"));
        assert!(parse_kind("Service").is_none());
    }
}
