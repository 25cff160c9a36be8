//! What a Job's Pod does when its container runs `kubectl delete pod …`: no container runs in
//! the simulator, so when such a Pod would succeed the simulator carries out its command through
//! the API, as kubectl in the Pod would have, and the Pod succeeds or fails as kubectl would
//! exit. Only this one command is understood (the SampleDB chaos CronJob's): `kubectl delete
//! pod|pods|po [NAME…] [--namespace|-n NS] [--selector|-l SELECTOR]`, other flags ignored. The
//! namespace defaults to the Pod's own.
//!
//! On a real control plane ([`super::remote`]) the command runs with a token of the Pod's
//! ServiceAccount from a TokenRequest, so RBAC decides: a refusal fails the Pod with kubectl's
//! message (`Error from server (Forbidden): …`) as its container's termination message. The
//! devcluster has no RBAC: there the simulator's own writes carry it out.

use serde_json::Value;

use super::Sim;
use crate::selector::LabelSelector;

/// A parsed `kubectl delete pod` command.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeletePods {
    /// `--namespace`; the Pod's own when not given.
    pub namespace: Option<String>,
    /// `--selector`.
    pub selector: Option<String>,
    /// Pods named on the command line.
    pub names: Vec<String>,
}

impl DeletePods {
    fn parse(argv: &[&str]) -> Option<DeletePods> {
        let (program, rest) = argv.split_first()?;
        if program.rsplit('/').next() != Some("kubectl") {
            return None;
        }
        let [verb, kind, flags @ ..] = rest else {
            return None;
        };
        if *verb != "delete" || !matches!(*kind, "pod" | "pods" | "po") {
            return None;
        }
        let mut cmd = DeletePods {
            namespace: None,
            selector: None,
            names: Vec::new(),
        };
        let mut i = 0;
        while i < flags.len() {
            let flag = flags[i];
            let value = |long: &str, short: &str| -> Option<(String, usize)> {
                if let Some(v) = flag.strip_prefix(&format!("{long}=")) {
                    Some((v.to_string(), 1))
                } else if flag == long || flag == short {
                    flags.get(i + 1).map(|v| (v.to_string(), 2))
                } else {
                    None
                }
            };
            if let Some((ns, used)) = value("--namespace", "-n") {
                cmd.namespace = Some(ns);
                i += used;
            } else if let Some((selector, used)) = value("--selector", "-l") {
                cmd.selector = Some(selector);
                i += used;
            } else {
                if !flag.starts_with('-') {
                    cmd.names.push(flag.to_string());
                }
                i += 1;
            }
        }
        Some(cmd)
    }

    /// Carries the command out with the simulator's own writes (no RBAC: the devcluster's way).
    pub(super) fn run(&self, sim: &Sim, pod_ns: &str) {
        let ns = self.namespace.as_deref().unwrap_or(pod_ns);
        let selector = match self.selector.as_deref().map(LabelSelector::parse) {
            Some(Ok(selector)) => Some(selector),
            // kubectl would refuse the command: nothing is deleted.
            Some(Err(e)) => {
                tracing::warn!(error = %e, "simulated kubectl: the selector does not parse");
                return;
            }
            None => None,
        };
        if selector.is_none() && self.names.is_empty() {
            return;
        }
        for pod in sim.list_all("/pods") {
            let meta = &pod["metadata"];
            let Some(name) = meta["name"].as_str() else {
                continue;
            };
            if meta["namespace"] != ns || meta.get("deletionTimestamp").is_some() {
                continue;
            }
            let named = self.names.iter().any(|n| n == name);
            let selected = selector.as_ref().is_some_and(|s| s.matches(&pod));
            if named || selected {
                tracing::info!(
                    namespace = ns,
                    pod = name,
                    "simulated kubectl deletes a Pod"
                );
                sim.delete("/pods", ns, name);
            }
        }
    }
}

/// The `kubectl delete pod` command of a Pod's containers, if one has it.
pub(super) fn command(containers: &[Value]) -> Option<DeletePods> {
    containers.iter().find_map(|container| {
        let argv: Vec<&str> = ["command", "args"]
            .iter()
            .filter_map(|k| container[*k].as_array())
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        DeletePods::parse(&argv)
    })
}

#[cfg(test)]
mod tests {
    use super::DeletePods;

    #[test]
    fn parses_the_chaos_command_and_its_spellings() {
        let cmd = DeletePods::parse(&[
            "kubectl",
            "delete",
            "pod",
            "--namespace",
            "shop",
            "--selector",
            "app.kubernetes.io/instance=orders,samples.windlass.dev/role=primary",
            "--wait=false",
        ])
        .unwrap();
        assert_eq!(cmd.namespace.as_deref(), Some("shop"));
        assert_eq!(
            cmd.selector.as_deref(),
            Some("app.kubernetes.io/instance=orders,samples.windlass.dev/role=primary")
        );
        assert!(cmd.names.is_empty());
        let short = DeletePods::parse(&[
            "/usr/bin/kubectl",
            "delete",
            "po",
            "-n=x",
            "-l",
            "a=b",
            "p-0",
        ]);
        // `-n=x` is not kubectl's spelling of a short flag with a value: taken as a flag, ignored.
        let short = short.unwrap();
        assert_eq!(short.namespace, None);
        assert_eq!(short.selector.as_deref(), Some("a=b"));
        assert_eq!(short.names, ["p-0"]);
        assert_eq!(
            DeletePods::parse(&["kubectl", "get", "pods"]),
            None,
            "other verbs"
        );
        assert_eq!(
            DeletePods::parse(&["kubectl", "delete", "secret", "x"]),
            None,
            "other kinds"
        );
        assert_eq!(
            DeletePods::parse(&["sh", "-c", "kubectl delete pod x"]),
            None
        );
    }
}
