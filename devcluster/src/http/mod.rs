//! The HTTP API: path routing, verbs, list/get/Table responses, fault injection per request.

pub mod discovery;
mod list;
pub mod openapi;
pub mod review;
pub mod scale;
pub mod table;
mod view;
pub mod watch;

use crate::api::{Cluster, DeleteOpts, WriteOpts};
use crate::error::{ApiError, Result};
use crate::faults::FaultConfig;
use crate::patch::PatchType;
use crate::resources::ResourceType;
use crate::selector::{FieldSelector, LabelSelector};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// What handlers share.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The cluster.
    pub cluster: Arc<Cluster>,
    /// `host:port`, for `/api`'s serverAddressByClientCIDRs.
    pub addr: String,
    /// Interval between watch bookmarks.
    pub bookmark_every: Duration,
}

/// The router: everything goes through one dispatcher, since Kubernetes paths are not a fixed
/// set of routes (CRDs add resources at run time).
pub fn router(state: AppState) -> Router {
    Router::new()
        .fallback(dispatch)
        .layer(DefaultBodyLimit::max(16 << 20))
        .with_state(state)
}

fn json_response(code: u16, v: &Value) -> Response {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Body::from(v.to_string()))
        .unwrap_or_default()
}

fn ok(v: &Value) -> Response {
    json_response(200, v)
}

async fn dispatch(
    State(st): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let query: HashMap<String, String> = axum::extract::Query::try_from_uri(&uri)
        .map(|q| q.0)
        .unwrap_or_default();
    let path = uri.path().trim_matches('/').to_string();
    let segs: Vec<&str> = if path.is_empty() {
        Vec::new()
    } else {
        path.split('/').collect()
    };
    let reg = &st.cluster.registry;
    let result: Result<Response> = match (method.as_str(), segs.as_slice()) {
        ("GET", ["version"]) => Ok(ok(&discovery::version())),
        ("GET", ["healthz" | "livez" | "readyz"]) => Ok("ok".into_response()),
        ("GET", ["api"]) => Ok(ok(&discovery::core_versions(&st.addr))),
        ("GET", ["apis"]) => Ok(ok(&discovery::group_list(reg))),
        ("GET", ["apis", g]) => discovery::group(reg, g)
            .map(|v| ok(&v))
            .ok_or_else(|| ApiError::no_route(uri.path())),
        ("GET", ["api", v]) => discovery::resource_list(reg, "", v)
            .map(|v| ok(&v))
            .ok_or_else(|| ApiError::no_route(uri.path())),
        ("GET", ["apis", g, v]) => discovery::resource_list(reg, g, v)
            .map(|v| ok(&v))
            .ok_or_else(|| ApiError::no_route(uri.path())),
        ("GET", ["openapi", "v3"]) => Ok(ok(&openapi::index(reg))),
        ("GET", ["openapi", "v3", "api", v]) => Ok(ok(&openapi::doc(reg, "", v))),
        ("GET", ["openapi", "v3", "apis", g, v]) => Ok(ok(&openapi::doc(reg, g, v))),
        ("GET", ["devcluster", "faults"]) => Ok(ok(&serde_json::to_value(
            st.cluster.faults.config(),
        )
        .unwrap_or_default())),
        ("PUT" | "POST", ["devcluster", "faults"]) => {
            match serde_json::from_slice::<FaultConfig>(&body) {
                Ok(c) => {
                    st.cluster.faults.set(c);
                    Ok(ok(
                        &serde_json::to_value(st.cluster.faults.config()).unwrap_or_default()
                    ))
                }
                Err(e) => Err(ApiError::bad_request(format!("invalid fault config: {e}"))),
            }
        }
        ("POST", ["devcluster", "restart"]) => {
            st.cluster.faults.restart();
            Ok(ok(&json!({"restarted": true})))
        }
        ("POST", ["devcluster", "compact"]) => {
            st.cluster.store.compact();
            Ok(ok(&json!({"compacted": st.cluster.store.current_rv()})))
        }
        (_, ["api", v, rest @ ..]) if !rest.is_empty() => {
            resource(
                &st,
                &method,
                "",
                v,
                rest,
                &query,
                &headers,
                &body,
                uri.path(),
            )
            .await
        }
        ("POST", ["apis", g, v, r]) if review::answer(g, v, r, &json!({})).is_some() => {
            let body: Value = serde_json::from_slice(&body).unwrap_or_default();
            review::answer(g, v, r, &body)
                .map(|answer| (StatusCode::CREATED, axum::Json(answer)).into_response())
                .ok_or_else(|| ApiError::no_route(uri.path()))
        }
        (_, ["apis", g, v, rest @ ..]) if !rest.is_empty() => {
            resource(
                &st,
                &method,
                g,
                v,
                rest,
                &query,
                &headers,
                &body,
                uri.path(),
            )
            .await
        }
        _ => Err(ApiError::no_route(uri.path())),
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

/// A resolved resource path.
struct Target {
    rt: Arc<ResourceType>,
    ns: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

fn resolve(st: &AppState, group: &str, version: &str, rest: &[&str], path: &str) -> Result<Target> {
    let reg = &st.cluster.registry;
    if rest.len() >= 3
        && rest[0] == "namespaces"
        && let Some(rt) = reg.find(group, version, rest[2]).filter(|r| r.namespaced)
    {
        if rest.len() > 5 {
            return Err(ApiError::no_route(path));
        }
        return Ok(Target {
            rt,
            ns: Some(rest[1].to_string()),
            name: rest.get(3).map(|s| s.to_string()),
            sub: rest.get(4).map(|s| s.to_string()),
        });
    }
    let rt = reg
        .find(group, version, rest[0])
        .ok_or_else(|| ApiError::no_route(path))?;
    if rest.len() > 3 {
        return Err(ApiError::no_route(path));
    }
    Ok(Target {
        rt,
        ns: None,
        name: rest.get(1).map(|s| s.to_string()),
        sub: rest.get(2).map(|s| s.to_string()),
    })
}

fn field_manager(query: &HashMap<String, String>, headers: &HeaderMap) -> String {
    if let Some(m) = query.get("fieldManager").filter(|m| !m.is_empty()) {
        return m.clone();
    }
    let ua = headers
        .get("user-agent")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("unknown");
    ua.split('/').next().unwrap_or("unknown").to_string()
}

fn present(obj: &Value, rt: &ResourceType, version: &str) -> Value {
    rt.present(obj, version)
}

#[allow(clippy::too_many_arguments)]
async fn resource(
    st: &AppState,
    method: &Method,
    group: &str,
    version: &str,
    rest: &[&str],
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
    path: &str,
) -> Result<Response> {
    let t = resolve(st, group, version, rest, path)?;
    let rt = t.rt.clone();
    if !rt.namespaced && t.ns.is_some() {
        return Err(ApiError::no_route(path));
    }
    let subresource_served = |sub: &str| match sub {
        "status" => rt.status_subresource || rt.kind == "Namespace",
        "scale" => rt.scale.is_some(),
        _ => false,
    };
    if let Some(sub) = &t.sub
        && !subresource_served(sub)
    {
        if rt.kind == "Pod" && matches!(sub.as_str(), "log" | "exec" | "attach" | "portforward") {
            return Err(ApiError::method_not_allowed(format!(
                "pods/{sub} is not supported by the devcluster: it runs no containers"
            )));
        }
        return Err(ApiError::no_route(path));
    }
    let watch = query.get("watch").is_some_and(|w| w == "true" || w == "1");
    let verb = match (method.as_str(), t.name.is_some()) {
        ("GET", true) => "get",
        ("GET", false) if watch => "watch",
        ("GET", false) => "list",
        ("POST", false) => "create",
        ("PUT", true) => "update",
        ("PATCH", true) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => {
            return Err(ApiError::method_not_allowed(format!(
                "{method} is not supported on {path}"
            )));
        }
    };
    let (latency, injected) = st.cluster.faults.decide(verb);
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    if let Some(e) = injected {
        return Err(e);
    }
    let cluster = &st.cluster;
    let ns = t.ns.clone().unwrap_or_default();
    let accept = headers
        .get("accept")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let as_table = table::wants_table(accept);
    let include = query
        .get("includeObject")
        .map(String::as_str)
        .unwrap_or("Metadata");
    let opts = WriteOpts {
        dry_run: query.get("dryRun").is_some_and(|d| d == "All"),
        field_manager: field_manager(query, headers),
        force: query.get("force").is_some_and(|f| f == "true"),
        subresource: t.sub.clone().unwrap_or_default(),
        strict: query.get("fieldValidation").is_some_and(|v| v == "Strict"),
    };
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if content_type.starts_with("application/cbor") {
        return Err(ApiError::unsupported_media_type(content_type));
    }
    let protobuf = content_type.starts_with("application/vnd.kubernetes.protobuf");
    let parse_body = || -> Result<Value> {
        if protobuf {
            return crate::protobuf::decode_body(body);
        }
        serde_json::from_slice(body)
            .or_else(|_| serde_yaml::from_slice(body))
            .map_err(|e| ApiError::bad_request(format!("invalid body: {e}")))
    };
    let name = t.name.clone().unwrap_or_default();
    if t.sub.as_deref() == Some("scale") {
        let kind = (verb == "patch")
            .then(|| PatchType::from_content_type(content_type))
            .transpose()?;
        let scale = scale::handle(cluster, &rt, version, &ns, &name, verb, kind, body, &opts)?;
        return Ok(ok(&scale));
    }
    // A view (events.k8s.io Events) is written as the kind it is stored as.
    let stored = rt
        .view
        .map(|v| view::stored_kind(cluster, v).map(|(s, sv)| (v, s, sv)))
        .transpose()?;
    let (write_rt, write_version) = stored
        .as_ref()
        .map_or((&rt, version), |(_, s, sv)| (s, *sv));
    let write_body = |body: Value| match &stored {
        Some((v, _, _)) => view::to_stored(*v, &body),
        None => body,
    };
    match verb {
        "get" => {
            let obj = cluster.get(&rt, &ns, &name)?;
            if as_table {
                return Ok(ok(&table::table(
                    &rt,
                    &[Arc::new(present(&obj, &rt, version))],
                    cluster.store.current_rv(),
                    None,
                    include,
                )));
            }
            Ok(ok(&present(&obj, &rt, version)))
        }
        "list" => list::list(st, &rt, version, t.ns.as_deref(), query, as_table, include),
        "watch" => {
            let since = match query.get("resourceVersion").map(String::as_str) {
                None | Some("") => None,
                Some(rv) => Some(rv.parse::<u64>().map_err(|_| {
                    ApiError::bad_request(format!("invalid resourceVersion {rv:?}"))
                })?),
            };
            let req = watch::WatchRequest {
                rt: rt.clone(),
                version: version.to_string(),
                namespace: t.ns.clone(),
                labels: LabelSelector::parse(
                    query.get("labelSelector").map(String::as_str).unwrap_or(""),
                )?,
                fields: FieldSelector::for_kind(
                    query.get("fieldSelector").map(String::as_str).unwrap_or(""),
                    &rt,
                )?,
                since,
                bookmarks: query
                    .get("allowWatchBookmarks")
                    .is_some_and(|b| b == "true"),
                initial_events: query.get("sendInitialEvents").is_some_and(|b| b == "true"),
                timeout: query
                    .get("timeoutSeconds")
                    .and_then(|s| s.parse().ok())
                    .map(Duration::from_secs),
                table: as_table,
                bookmark_every: st.bookmark_every,
            };
            Ok(watch::start(cluster.clone(), req))
        }
        "create" => {
            let obj = cluster.create(
                write_rt,
                write_version,
                t.ns.as_deref(),
                write_body(parse_body()?),
                &opts,
            )?;
            Ok(json_response(201, &present(&obj, &rt, version)))
        }
        "update" => {
            let obj = cluster.update(
                write_rt,
                write_version,
                &ns,
                &name,
                write_body(parse_body()?),
                &opts,
            )?;
            Ok(ok(&present(&obj, &rt, version)))
        }
        "patch" => {
            let ct = headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let kind = PatchType::from_content_type(ct)?;
            let obj = match rt.view {
                Some(v) => view::patch(cluster, &rt, version, v, &ns, &name, kind, body, &opts)?,
                None => cluster.patch(&rt, version, &ns, &name, kind, body, &opts)?,
            };
            Ok(ok(&present(&obj, &rt, version)))
        }
        "delete" => {
            let body: Value = if body.is_empty() {
                json!({})
            } else {
                parse_body()?
            };
            let dopts = DeleteOpts {
                dry_run: opts.dry_run
                    || body["dryRun"]
                        .as_array()
                        .is_some_and(|d| d.iter().any(|x| x == "All")),
                propagation: query
                    .get("propagationPolicy")
                    .cloned()
                    .or_else(|| body["propagationPolicy"].as_str().map(String::from)),
                uid: body["preconditions"]["uid"].as_str().map(String::from),
                resource_version: body["preconditions"]["resourceVersion"]
                    .as_str()
                    .map(String::from),
            };
            let obj = cluster.delete(&rt, &ns, &name, &dopts)?;
            Ok(ok(&present(&obj, &rt, version)))
        }
        _ => {
            let labels =
                LabelSelector::parse(query.get("labelSelector").map(String::as_str).unwrap_or(""))?;
            let fields = FieldSelector::for_kind(
                query.get("fieldSelector").map(String::as_str).unwrap_or(""),
                &rt,
            )?;
            let (items, _) = cluster.store.list(&rt.key(), t.ns.as_deref());
            let dopts = DeleteOpts {
                dry_run: opts.dry_run,
                ..DeleteOpts::default()
            };
            let mut deleted = Vec::new();
            for o in items
                .iter()
                .filter(|o| labels.matches(o) && fields.matches(o))
            {
                let n = o["metadata"]["name"].as_str().unwrap_or_default();
                let ons = o["metadata"]["namespace"].as_str().unwrap_or_default();
                if let Ok(d) = cluster.delete(&rt, ons, n, &dopts) {
                    deleted.push(present(&d, &rt, version));
                }
            }
            Ok(ok(
                &json!({"kind": format!("{}List", rt.kind), "apiVersion": rt.api_version(version),
                "metadata": {"resourceVersion": cluster.store.current_rv().to_string()}, "items": deleted}),
            ))
        }
    }
}
