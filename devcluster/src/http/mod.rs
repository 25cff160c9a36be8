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
    // Straight into bytes: `to_string` goes through `Display`'s formatter a piece at a time.
    let body = serde_json::to_vec(v).unwrap_or_default();
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Body::from(body))
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
    let call = Call {
        method: &method,
        query: &query,
        headers: &headers,
        body: &body,
        path: uri.path(),
    };
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
        (_, ["api", v, rest @ ..]) if !rest.is_empty() => resource(&st, &call, "", v, rest).await,
        ("POST", ["apis", g, v, r]) if review::answer(g, v, r, &json!({})).is_some() => {
            let body: Value = serde_json::from_slice(&body).unwrap_or_default();
            review::answer(g, v, r, &body)
                .map(|answer| (StatusCode::CREATED, axum::Json(answer)).into_response())
                .ok_or_else(|| ApiError::no_route(uri.path()))
        }
        (_, ["apis", g, v, rest @ ..]) if !rest.is_empty() => {
            resource(&st, &call, g, v, rest).await
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

/// What came with a request, whatever its path.
struct Call<'a> {
    method: &'a Method,
    query: &'a HashMap<String, String>,
    headers: &'a HeaderMap,
    body: &'a Bytes,
    path: &'a str,
}

impl Call<'_> {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    fn query(&self, name: &str) -> &str {
        self.query.get(name).map(String::as_str).unwrap_or("")
    }
}

/// The verbs of a resource path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
}

impl Verb {
    /// The verb of `method` on a path naming an object or not.
    fn of(method: &Method, named: bool, watch: bool) -> Option<Verb> {
        Some(match (method.as_str(), named) {
            ("GET", true) => Verb::Get,
            ("GET", false) if watch => Verb::Watch,
            ("GET", false) => Verb::List,
            ("POST", false) => Verb::Create,
            ("PUT", true) => Verb::Update,
            ("PATCH", true) => Verb::Patch,
            ("DELETE", true) => Verb::Delete,
            ("DELETE", false) => Verb::DeleteCollection,
            _ => return None,
        })
    }

    /// Its name, as fault injection and the scale subresource know it.
    fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }
}

/// A request on a resource path, parsed once: the handlers below each take one.
struct Request<'a> {
    call: &'a Call<'a>,
    target: Target,
    /// The version of the path.
    version: &'a str,
    verb: Verb,
    /// The namespace, empty for none.
    ns: String,
    /// The object's name, empty for none.
    name: String,
    opts: WriteOpts,
    content_type: &'a str,
    /// `Accept` asks for a Table.
    as_table: bool,
}

impl<'a> Request<'a> {
    fn parse(
        st: &AppState,
        call: &'a Call<'a>,
        group: &str,
        version: &'a str,
        rest: &[&str],
    ) -> Result<Self> {
        let target = resolve(st, group, version, rest, call.path)?;
        let rt = &target.rt;
        if !rt.namespaced && target.ns.is_some() {
            return Err(ApiError::no_route(call.path));
        }
        if let Some(sub) = &target.sub {
            let served = match sub.as_str() {
                "status" => rt.status_subresource || rt.kind == "Namespace",
                "scale" => rt.scale.is_some(),
                _ => false,
            };
            if !served
                && rt.kind == "Pod"
                && matches!(sub.as_str(), "log" | "exec" | "attach" | "portforward")
            {
                return Err(ApiError::method_not_allowed(format!(
                    "pods/{sub} is not supported by the devcluster: it runs no containers"
                )));
            }
            if !served {
                return Err(ApiError::no_route(call.path));
            }
        }
        let watch = matches!(call.query("watch"), "true" | "1");
        let verb = Verb::of(call.method, target.name.is_some(), watch).ok_or_else(|| {
            ApiError::method_not_allowed(format!(
                "{} is not supported on {}",
                call.method, call.path
            ))
        })?;
        let content_type = call.header("content-type");
        if content_type.starts_with("application/cbor") {
            return Err(ApiError::unsupported_media_type(content_type));
        }
        let opts = WriteOpts {
            dry_run: call.query("dryRun") == "All",
            field_manager: field_manager(call.query, call.headers),
            force: call.query("force") == "true",
            subresource: target.sub.clone().unwrap_or_default(),
            strict: call.query("fieldValidation") == "Strict",
        };
        Ok(Request {
            call,
            ns: target.ns.clone().unwrap_or_default(),
            name: target.name.clone().unwrap_or_default(),
            target,
            version,
            verb,
            opts,
            content_type,
            as_table: table::wants_table(call.header("accept")),
        })
    }

    fn rt(&self) -> &Arc<ResourceType> {
        &self.target.rt
    }

    /// The body as JSON (or YAML, or protobuf by its content type).
    fn parse_body(&self) -> Result<Value> {
        let body = self.call.body;
        if self
            .content_type
            .starts_with("application/vnd.kubernetes.protobuf")
        {
            return crate::protobuf::decode_body(body);
        }
        serde_json::from_slice(body)
            .or_else(|_| serde_yaml::from_slice(body))
            .map_err(|e| ApiError::bad_request(format!("invalid body: {e}")))
    }

    /// The object as the request's version shows it.
    fn present(&self, obj: &Value) -> Value {
        self.rt().present(obj, self.version)
    }

    /// The answer with `obj` as the request's version shows it: serialised as stored when it
    /// is shown as stored (no copy of the object), else [`Self::present`]ed first.
    fn answer(&self, code: u16, obj: &Value) -> Response {
        if self.rt().shown_as_stored(obj, self.version) {
            json_response(code, obj)
        } else {
            json_response(code, &self.present(obj))
        }
    }

    /// `includeObject` of a Table request.
    fn include(&self) -> &str {
        self.call
            .query
            .get("includeObject")
            .map(String::as_str)
            .unwrap_or("Metadata")
    }
}

async fn resource(
    st: &AppState,
    call: &Call<'_>,
    group: &str,
    version: &str,
    rest: &[&str],
) -> Result<Response> {
    let req = Request::parse(st, call, group, version, rest)?;
    let (latency, injected) = st.cluster.faults.decide(req.verb.as_str());
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    if let Some(e) = injected {
        return Err(e);
    }
    st.cluster
        .faults
        .held(|| crate::faults::RequestInfo {
            verb: req.verb.as_str().to_string(),
            group: req.rt().group.clone(),
            resource: req.rt().plural.clone(),
            subresource: req.target.sub.clone(),
            namespace: req.ns.clone(),
            name: req.name.clone(),
        })
        .await;
    if req.target.sub.as_deref() == Some("scale") {
        let kind = (req.verb == Verb::Patch)
            .then(|| PatchType::from_content_type(req.content_type))
            .transpose()?;
        let scale = scale::handle(
            &st.cluster,
            req.rt(),
            version,
            &req.ns,
            &req.name,
            req.verb.as_str(),
            kind,
            call.body,
            &req.opts,
        )?;
        return Ok(ok(&scale));
    }
    match req.verb {
        Verb::Get => get(st, &req),
        Verb::List => list::list(
            st,
            req.rt(),
            version,
            req.target.ns.as_deref(),
            call.query,
            req.as_table,
            req.include(),
        ),
        Verb::Watch => watch(st, &req),
        Verb::Create | Verb::Update => write(st, &req),
        Verb::Patch => patch(st, &req),
        Verb::Delete => delete(st, &req),
        Verb::DeleteCollection => delete_collection(st, &req),
    }
}

fn get(st: &AppState, req: &Request<'_>) -> Result<Response> {
    let cluster = &st.cluster;
    let obj = cluster.get(req.rt(), &req.ns, &req.name)?;
    if req.as_table {
        return Ok(ok(&table::table(
            req.rt(),
            &[Arc::new(req.present(&obj))],
            cluster.store.current_rv(),
            None,
            req.include(),
        )));
    }
    Ok(req.answer(200, &obj))
}

fn watch(st: &AppState, req: &Request<'_>) -> Result<Response> {
    let call = req.call;
    let since = match call.query("resourceVersion") {
        "" => None,
        rv => Some(
            rv.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {rv:?}")))?,
        ),
    };
    let watch = watch::WatchRequest {
        rt: req.rt().clone(),
        version: req.version.to_string(),
        namespace: req.target.ns.clone(),
        labels: LabelSelector::parse(call.query("labelSelector"))?,
        fields: FieldSelector::for_kind(call.query("fieldSelector"), req.rt())?,
        since,
        bookmarks: call.query("allowWatchBookmarks") == "true",
        initial_events: call.query("sendInitialEvents") == "true",
        timeout: call
            .query
            .get("timeoutSeconds")
            .and_then(|s| s.parse().ok())
            .map(Duration::from_secs),
        table: req.as_table,
        bookmark_every: st.bookmark_every,
    };
    Ok(watch::start(st.cluster.clone(), watch))
}

/// Create or update; a view (events.k8s.io Events) is written as the kind it is stored as.
fn write(st: &AppState, req: &Request<'_>) -> Result<Response> {
    let cluster = &st.cluster;
    let mut body = req.parse_body()?;
    let (rt, version) = match req.rt().view {
        Some(view) => {
            body = view::to_stored(view, &body);
            view::stored_kind(cluster, view)?
        }
        None => (req.rt().clone(), req.version),
    };
    if req.verb == Verb::Create {
        let obj = cluster.create(&rt, version, req.target.ns.as_deref(), body, &req.opts)?;
        return Ok(req.answer(201, &obj));
    }
    let obj = cluster.update(&rt, version, &req.ns, &req.name, body, &req.opts)?;
    Ok(req.answer(200, &obj))
}

fn patch(st: &AppState, req: &Request<'_>) -> Result<Response> {
    let cluster = &st.cluster;
    let kind = PatchType::from_content_type(req.content_type)?;
    let (rt, version, body) = (req.rt(), req.version, req.call.body);
    let obj = match rt.view {
        Some(v) => view::patch(
            cluster, rt, version, v, &req.ns, &req.name, kind, body, &req.opts,
        )?,
        None => cluster.patch(rt, version, &req.ns, &req.name, kind, body, &req.opts)?,
    };
    Ok(req.answer(200, &obj))
}

fn delete(st: &AppState, req: &Request<'_>) -> Result<Response> {
    let body: Value = if req.call.body.is_empty() {
        json!({})
    } else {
        req.parse_body()?
    };
    let dopts = DeleteOpts {
        dry_run: req.opts.dry_run
            || body["dryRun"]
                .as_array()
                .is_some_and(|d| d.iter().any(|x| x == "All")),
        propagation: req
            .call
            .query
            .get("propagationPolicy")
            .cloned()
            .or_else(|| body["propagationPolicy"].as_str().map(String::from)),
        uid: body["preconditions"]["uid"].as_str().map(String::from),
        resource_version: body["preconditions"]["resourceVersion"]
            .as_str()
            .map(String::from),
    };
    let obj = st.cluster.delete(req.rt(), &req.ns, &req.name, &dopts)?;
    Ok(req.answer(200, &obj))
}

fn delete_collection(st: &AppState, req: &Request<'_>) -> Result<Response> {
    let (cluster, rt) = (&st.cluster, req.rt());
    let labels = LabelSelector::parse(req.call.query("labelSelector"))?;
    let fields = FieldSelector::for_kind(req.call.query("fieldSelector"), rt)?;
    let (items, _) = cluster.store.list(&rt.key(), req.target.ns.as_deref());
    let dopts = DeleteOpts {
        dry_run: req.opts.dry_run,
        ..DeleteOpts::default()
    };
    let mut deleted = Vec::new();
    for o in items
        .iter()
        .filter(|o| labels.matches(o) && fields.matches(o))
    {
        let n = o["metadata"]["name"].as_str().unwrap_or_default();
        let ons = o["metadata"]["namespace"].as_str().unwrap_or_default();
        if let Ok(d) = cluster.delete(rt, ons, n, &dopts) {
            deleted.push(req.present(&d));
        }
    }
    Ok(ok(&json!({
        "kind": format!("{}List", rt.kind), "apiVersion": rt.api_version(req.version),
        "metadata": {"resourceVersion": cluster.store.current_rv().to_string()}, "items": deleted,
    })))
}
