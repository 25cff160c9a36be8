//! `windlass trace KIND/NAME`: a parent and its children as the cluster holds them, with the
//! parent's last run from the leading host (see `windlass::trace`). As `kubectl-windlass` on the
//! PATH it is a kubectl plugin (`kubectl windlass trace sdb/x`) and takes kubectl's flags.

use std::{collections::HashMap, time::Duration};

use anyhow::{Context as _, Result, bail};
use clap::ValueEnum;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;
use kube::{
    Api, Client,
    api::{DynamicObject, ListParams},
    config::Kubeconfig,
    core::{ApiResource, GroupVersionKind},
};
use serde_json::Value;
use windlass::{
    crd::WasmPlugin,
    trace::{self, LastRun, Report},
};

/// The kubeconfig extension `windlass dev` writes on its cluster: `{admin: URL}`, the admin
/// address of the host it runs.
pub const KUBECONFIG_EXTENSION: &str = "windlass.dev";

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The parent: KIND/NAME (`sdb/example-database`), KIND NAME, or KIND for every parent of
    /// the kind. KIND is any name kubectl takes: kind, plural, singular or short name.
    #[arg(required = true, num_args = 1..=2, value_name = "KIND/NAME")]
    target: Vec<String>,
    #[command(flatten)]
    kube: super::KubeArgs,
    /// Output format: a tree (`text`), with digests and every drifted field (`wide`), or the
    /// report as `json` or `yaml`.
    #[arg(short, long, value_enum, default_value_t = Format::Text)]
    output: Format,
    /// The leading host's admin address (`http://127.0.0.1:8080`), for the parent's last run.
    /// Default: the one `windlass dev` writes into its kubeconfig.
    #[arg(long, env = "WINDLASS_ADMIN")]
    admin: Option<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Wide,
    Json,
    Yaml,
}

/// The admin address `windlass dev` recorded on the context's cluster.
fn admin_of(file: &Kubeconfig, context: Option<&str>) -> Option<String> {
    let context = context.or(file.current_context.as_deref())?;
    let cluster = file
        .contexts
        .iter()
        .find(|c| c.name == context)?
        .context
        .as_ref()?
        .cluster
        .clone();
    file.clusters
        .iter()
        .find(|c| c.name == cluster)?
        .cluster
        .as_ref()?
        .extensions
        .as_ref()?
        .iter()
        .find(|e| e.name == KUBECONFIG_EXTENSION)?
        .extension
        .get("admin")?
        .as_str()
        .map(str::to_string)
}

/// The API resources of one group version, cached.
struct Resources {
    client: Client,
    lists: HashMap<String, Option<Vec<APIResource>>>,
}

impl Resources {
    /// The resource of `api_version`/`kind`; `None` when the server does not serve it.
    async fn find(&mut self, api_version: &str, kind: &str) -> Option<(ApiResource, APIResource)> {
        if !self.lists.contains_key(api_version) {
            let list = if api_version.contains('/') {
                self.client.list_api_group_resources(api_version).await
            } else {
                self.client.list_core_api_resources(api_version).await
            };
            self.lists
                .insert(api_version.to_string(), list.ok().map(|l| l.resources));
        }
        let found = self.lists[api_version]
            .as_ref()?
            .iter()
            .find(|r| r.kind == kind && !r.name.contains('/'))?
            .clone();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, version, kind),
            &found.name,
        );
        Some((resource, found))
    }
}

/// What `KIND` names among the kinds WasmPlugins reconcile: the parent resource and the child
/// kinds its plugins declared.
async fn parent_kind(
    client: &Client,
    resources: &mut Resources,
    wanted: &str,
) -> Result<(ApiResource, bool, Vec<String>)> {
    let plugins: Api<WasmPlugin> = Api::all(client.clone());
    let plugins = plugins
        .list(&ListParams::default())
        .await
        .context("listing WasmPlugins (is Windlass installed on this cluster?)")?;
    let mut kinds: Vec<(String, String)> = plugins
        .items
        .iter()
        .map(|p| {
            (
                p.spec.parent.api_version.clone(),
                p.spec.parent.kind.clone(),
            )
        })
        .collect();
    kinds.sort();
    kinds.dedup();
    let mut known = Vec::new();
    for (api_version, kind) in &kinds {
        let Some((resource, found)) = resources.find(api_version, kind).await else {
            continue;
        };
        let names = trace::kind_names(
            &resource.group,
            &found.name,
            &found.singular_name,
            kind,
            found.short_names.as_deref().unwrap_or_default(),
        );
        if names.contains(&wanted.to_lowercase()) {
            let children = plugins
                .items
                .iter()
                .filter(|p| {
                    p.spec.parent.api_version == *api_version && p.spec.parent.kind == *kind
                })
                .filter_map(|p| p.status.as_ref())
                .flat_map(|s| s.child_kinds.iter().map(String::as_str))
                .collect::<Vec<_>>();
            return Ok((resource, found.namespaced, trace::child_kinds(children)));
        }
        known.push(format!("{kind} ({})", names.join(", ")));
    }
    if known.is_empty() {
        bail!(
            "no WasmPlugin reconciles a kind the API server serves; `{wanted}` is not a parent kind"
        );
    }
    bail!(
        "`{wanted}` is not a kind the WasmPlugins reconcile; they reconcile: {}",
        known.join("; ")
    )
}

/// A listed object as JSON with its apiVersion and kind (list items may come without).
fn as_json(obj: &DynamicObject, resource: &ApiResource) -> Value {
    windlass::k8s::typed_json(obj, resource).unwrap_or(Value::Null)
}

pub async fn run(args: Args) -> Result<()> {
    let (kind, name) = trace::target(&args.target)?;
    let (client, default_namespace, file) = args.kube.connect().await?;
    let admin = args.admin.clone().or_else(|| {
        file.as_ref()
            .and_then(|f| admin_of(f, args.kube.context.as_deref()))
    });
    let mut resources = Resources {
        client: client.clone(),
        lists: HashMap::new(),
    };
    let (resource, namespaced, child_kinds) = parent_kind(&client, &mut resources, &kind).await?;
    let namespace = args.kube.namespace.clone().unwrap_or(default_namespace);
    let api: Api<DynamicObject> = if namespaced && !args.kube.all_namespaces {
        Api::namespaced_with(client.clone(), &namespace, &resource)
    } else {
        Api::all_with(client.clone(), &resource)
    };
    let where_ = if !namespaced {
        String::new()
    } else if args.kube.all_namespaces {
        " in any namespace".to_string()
    } else {
        format!(" in namespace {namespace}")
    };
    let parents: Vec<DynamicObject> = match &name {
        Some(name) if !namespaced || !args.kube.all_namespaces => {
            vec![
                api.get_opt(name)
                    .await?
                    .with_context(|| format!("{} {name} not found{where_}", resource.kind))?,
            ]
        }
        _ => {
            let mut all = api.list(&ListParams::default()).await?.items;
            if let Some(name) = &name {
                all.retain(|p| p.metadata.name.as_deref() == Some(name));
                if all.len() > 1 {
                    let places: Vec<String> = all
                        .iter()
                        .filter_map(|p| p.metadata.namespace.clone())
                        .collect();
                    bail!(
                        "{} {name} exists in several namespaces ({}): say which with -n",
                        resource.kind,
                        places.join(", ")
                    );
                }
                if all.is_empty() {
                    bail!("{} {name} not found{where_}", resource.kind);
                }
            }
            all
        }
    };
    if parents.is_empty() {
        eprintln!("no {}{where_}", resource.plural);
    }
    let mut reports = Vec::new();
    for parent in &parents {
        reports.push(
            report(
                &client,
                &mut resources,
                &resource,
                parent,
                &child_kinds,
                admin.as_deref(),
            )
            .await,
        );
    }
    let text = match args.output {
        Format::Text | Format::Wide => reports
            .iter()
            .map(|r| trace::render(r, matches!(args.output, Format::Wide)))
            .collect::<Vec<_>>()
            .join("\n"),
        Format::Json | Format::Yaml => {
            let doc = if name.is_some() && reports.len() == 1 {
                serde_json::to_value(&reports[0])?
            } else {
                serde_json::to_value(&reports)?
            };
            if matches!(args.output, Format::Json) {
                serde_json::to_string_pretty(&doc)? + "\n"
            } else {
                serde_yaml::to_string(&doc)?
            }
        }
    };
    super::print(&text)
}

/// One parent's report: its children from every child kind, its events, its last run.
async fn report(
    client: &Client,
    resources: &mut Resources,
    resource: &ApiResource,
    parent: &DynamicObject,
    child_kinds: &[String],
    admin: Option<&str>,
) -> Report {
    let parent_json = as_json(parent, resource);
    let uid = parent.metadata.uid.clone().unwrap_or_default();
    let namespace = parent.metadata.namespace.clone();
    let mut warnings = Vec::new();
    let mut children = Vec::new();
    let selector = ListParams::default().labels(&format!("{}={uid}", trace::PARENT_UID_LABEL));
    for key in child_kinds {
        let Some((api_version, kind)) = trace::split_kind_key(key) else {
            continue;
        };
        let Some((child, found)) = resources.find(&api_version, &kind).await else {
            // A declared kind the server does not serve is news; a derived one is not.
            if !trace::DERIVED_KINDS.contains(&key.as_str()) {
                warnings.push(format!("{key}: the API server does not serve it"));
            }
            continue;
        };
        let api: Api<DynamicObject> = match (&namespace, found.namespaced) {
            (Some(ns), true) => Api::namespaced_with(client.clone(), ns, &child),
            _ => Api::all_with(client.clone(), &child),
        };
        match api.list(&selector).await {
            Ok(list) => children.extend(
                list.items
                    .iter()
                    .filter(|c| c.metadata.uid.as_deref() != Some(uid.as_str()))
                    .map(|c| as_json(c, &child)),
            ),
            Err(e) => warnings.push(format!("listing {key}: {e}")),
        }
    }
    let events_in = namespace.clone().unwrap_or_else(|| "default".into());
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(client.clone(), &events_in);
    let events = match events.list(&ListParams::default()).await {
        Ok(list) => {
            let all: Vec<Value> = list
                .items
                .iter()
                .filter_map(|e| serde_json::to_value(e).ok())
                .collect();
            trace::events(&all, &uid)
        }
        Err(e) => {
            warnings.push(format!("listing events in {events_in}: {e}"));
            Vec::new()
        }
    };
    let (last_run, last_run_unavailable) = match admin {
        Some(admin) => match last_run(admin, &uid).await {
            Ok(run) => (Some(run), None),
            Err(e) => (None, Some(format!("{e:#}"))),
        },
        None => (
            None,
            Some(
                "the host's admin address is not known: give --admin URL (or WINDLASS_ADMIN), \
                 e.g. after `kubectl port-forward` to the leading host's Pod, port 8080"
                    .to_string(),
            ),
        ),
    };
    Report {
        tree: trace::tree(&parent_json, &children),
        last_run,
        last_run_unavailable,
        conditions: parent_json
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        events,
        warnings,
    }
}

/// The parent's last run from the host's admin address.
async fn last_run(admin: &str, uid: &str) -> Result<LastRun> {
    let url = format!("{}/debug/runs/{uid}", admin.trim_end_matches('/'));
    let (status, body) = super::probe::get(&url, Duration::from_secs(5)).await?;
    if status != hyper::StatusCode::OK {
        bail!("{url} answered {status}: {}", body.trim());
    }
    serde_json::from_str(&body).with_context(|| format!("{url}: not a run record"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_admin_address_is_read_from_the_contexts_cluster() {
        let file: Kubeconfig = serde_yaml::from_str(
            "apiVersion: v1\nkind: Config\ncurrent-context: dev\n\
             clusters:\n- name: devcluster\n  cluster:\n    server: http://127.0.0.1:1\n    \
             extensions:\n    - name: windlass.dev\n      extension: {admin: 'http://127.0.0.1:9'}\n\
             - name: prod\n  cluster: {server: 'https://x'}\n\
             contexts:\n- name: dev\n  context: {cluster: devcluster}\n- name: prod\n  context: {cluster: prod}\n",
        )
        .unwrap();
        assert_eq!(admin_of(&file, None).as_deref(), Some("http://127.0.0.1:9"));
        assert_eq!(admin_of(&file, Some("prod")), None);
        assert_eq!(admin_of(&file, Some("nope")), None);
    }
}
