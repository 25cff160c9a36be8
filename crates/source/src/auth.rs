//! Registry credentials, as they come from flags or from an imagePullSecret-style Secret
//! (`kubernetes.io/dockerconfigjson`).

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::Deserialize;

use super::{Error, Result};

/// Basic-auth credentials for one registry. `Debug` never prints the password.
#[derive(Clone, PartialEq, Eq)]
pub struct RegistryAuth {
    /// The user name.
    pub username: String,
    /// The password or access token.
    pub password: String,
}

impl std::fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryAuth")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

#[derive(Deserialize)]
struct DockerConfig {
    auths: BTreeMap<String, DockerAuth>,
}

#[derive(Deserialize)]
struct DockerAuth {
    username: Option<String>,
    password: Option<String>,
    auth: Option<String>,
}

impl RegistryAuth {
    /// Picks the credentials for `registry` (`host[:port]`, as in a reference) from the
    /// `.dockerconfigjson` payload of a Secret: `{"auths": {"host:port": {"username", "password"}
    /// | {"auth": base64("user:password")}}}`. Keys may carry a scheme and a path
    /// (`https://index.docker.io/v1/`); Docker Hub's aliases are one registry. `Ok(None)` when no
    /// entry is for this registry (pull anonymously).
    ///
    /// # Errors
    /// [`Error::InvalidDockerConfig`] when the payload is not such JSON, or the matching entry
    /// has neither a username/password pair nor a decodable `auth`.
    pub fn from_docker_config(json: &[u8], registry: &str) -> Result<Option<RegistryAuth>> {
        let config: DockerConfig = serde_json::from_slice(json)
            .map_err(|e| Error::InvalidDockerConfig { why: e.to_string() })?;
        let wanted = normalize_registry(registry);
        let Some((key, entry)) = config
            .auths
            .iter()
            .find(|(key, _)| normalize_registry(key) == wanted)
        else {
            return Ok(None);
        };
        let invalid = |why: String| Error::InvalidDockerConfig {
            why: format!("entry {key:?}: {why}"),
        };
        if let Some(encoded) = &entry.auth {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(encoded.trim())
                .map_err(|e| invalid(format!("auth is not base64: {e}")))?;
            let decoded =
                String::from_utf8(decoded).map_err(|_| invalid("auth is not UTF-8".to_string()))?;
            let (username, password) = decoded
                .split_once(':')
                .ok_or_else(|| invalid("auth is not base64(username:password)".to_string()))?;
            return Ok(Some(RegistryAuth {
                username: username.to_string(),
                password: password.to_string(),
            }));
        }
        match (&entry.username, &entry.password) {
            (Some(username), Some(password)) => Ok(Some(RegistryAuth {
                username: username.clone(),
                password: password.clone(),
            })),
            _ => Err(invalid(
                "neither username and password nor auth is set".to_string(),
            )),
        }
    }
}

/// `https://index.docker.io/v1/` → `docker.io`; `http://host:5000/x` → `host:5000`.
fn normalize_registry(key: &str) -> String {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = key.split('/').next().unwrap_or(key).to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" | "docker.io" => "docker.io".to_string(),
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(user: &str, pass: &str) -> Option<RegistryAuth> {
        Some(RegistryAuth {
            username: user.into(),
            password: pass.into(),
        })
    }

    #[test]
    fn docker_config_entry_with_username_and_password_is_picked_by_host_and_port() {
        let json = br#"{"auths": {"other:5000": {"username": "x", "password": "y"},
                                  "127.0.0.1:5000": {"username": "alice", "password": "s3cret"}}}"#;
        let got = RegistryAuth::from_docker_config(json, "127.0.0.1:5000").unwrap();
        assert_eq!(got, auth("alice", "s3cret"));
    }

    #[test]
    fn docker_config_auth_field_is_base64_of_user_colon_password() {
        // base64("bob:pa:ss") — the password may itself contain a colon.
        let json = br#"{"auths": {"https://registry.example.com/v2/": {"auth": "Ym9iOnBhOnNz"}}}"#;
        let got = RegistryAuth::from_docker_config(json, "registry.example.com").unwrap();
        assert_eq!(got, auth("bob", "pa:ss"));
    }

    #[test]
    fn docker_hub_aliases_are_one_registry() {
        let json = br#"{"auths": {"https://index.docker.io/v1/": {"auth": "dTpw"}}}"#;
        let got = RegistryAuth::from_docker_config(json, "docker.io").unwrap();
        assert_eq!(got, auth("u", "p"));
    }

    #[test]
    fn docker_config_without_an_entry_for_the_registry_means_anonymous() {
        let json = br#"{"auths": {"other:5000": {"auth": "dTpw"}}}"#;
        assert_eq!(
            RegistryAuth::from_docker_config(json, "127.0.0.1:5000").unwrap(),
            None
        );
    }

    #[test]
    fn docker_config_that_is_not_usable_is_an_error_naming_the_entry() {
        let bad_json = RegistryAuth::from_docker_config(b"{", "r").unwrap_err();
        assert_eq!(bad_json.reason(), "InvalidPullSecret");
        let json = br#"{"auths": {"r:1": {"auth": "not base64!"}}}"#;
        let err = RegistryAuth::from_docker_config(json, "r:1").unwrap_err();
        assert!(err.to_string().contains("\"r:1\""), "{err}");
        let json = br#"{"auths": {"r:1": {"username": "only"}}}"#;
        let err = RegistryAuth::from_docker_config(json, "r:1").unwrap_err();
        assert!(err.to_string().contains("neither"), "{err}");
    }

    #[test]
    fn debug_output_never_shows_the_password() {
        let text = format!("{:?}", auth("alice", "s3cret").unwrap());
        assert!(!text.contains("s3cret") && text.contains("alice"), "{text}");
    }
}
