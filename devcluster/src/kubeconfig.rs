//! A kubeconfig pointing at the devcluster, for kubectl and any other client.

use std::io;
use std::path::Path;

/// The kubeconfig text for a server URL (context and cluster both named `devcluster`).
pub fn render(server: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: devcluster
  cluster:
    server: {server}
users:
- name: devcluster
  user:
    token: devcluster
contexts:
- name: devcluster
  context:
    cluster: devcluster
    user: devcluster
    namespace: default
current-context: devcluster
preferences: {{}}
"
    )
}

/// Writes the kubeconfig to `path` (creating parent directories).
///
/// # Errors
/// I/O errors.
pub fn write(path: &Path, server: &str) -> io::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, render(server))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubeconfig_parses_and_points_at_the_server() {
        let text = render("http://127.0.0.1:1234");
        let kc: kube::config::Kubeconfig = serde_yaml::from_str(&text).expect("valid kubeconfig");
        assert_eq!(kc.current_context.as_deref(), Some("devcluster"));
        let cluster = kc.clusters[0].cluster.as_ref().expect("cluster");
        assert_eq!(cluster.server.as_deref(), Some("http://127.0.0.1:1234"));
    }
}
