//! Traces: `windlass dev` with the standard OTLP variables pointing at a receiver this test
//! runs sends a span per reconcile and per plugin call, with what they did, and a SampleDB
//! carrying a `tracing.k8s.io/traceparent` annotation is reconciled inside that trace.

use std::{
    collections::BTreeMap,
    path::Path,
    process::Command,
    sync::{Arc, Mutex},
};

use opentelemetry_proto::tonic::{
    collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse},
    common::v1::{KeyValue, any_value::Value},
    trace::v1::Span,
};
use prost::Message as _;

/// A span as received, with its service's name.
#[derive(Debug, Clone)]
struct Received {
    service: String,
    span: Span,
}

impl Received {
    fn attr(&self, key: &str) -> Option<String> {
        attribute(&self.span.attributes, key)
    }
}

fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    let value = attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?;
    Some(match value.value.as_ref()? {
        Value::StringValue(s) => s.clone(),
        Value::IntValue(i) => i.to_string(),
        Value::BoolValue(b) => b.to_string(),
        Value::DoubleValue(d) => d.to_string(),
        other => format!("{other:?}"),
    })
}

/// An OTLP/HTTP receiver on 127.0.0.1: its address, what it received, and its server thread.
fn receiver() -> (std::net::SocketAddr, Arc<Mutex<Vec<Received>>>) {
    let received = Arc::new(Mutex::new(Vec::new()));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port for the receiver");
    listener.set_nonblocking(true).expect("non-blocking");
    let addr = listener.local_addr().expect("its address");
    let store = received.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let app = axum::Router::new().route(
                "/v1/traces",
                axum::routing::post(move |body: axum::body::Bytes| {
                    let store = store.clone();
                    async move {
                        let request = ExportTraceServiceRequest::decode(body)
                            .expect("an OTLP/HTTP protobuf trace export");
                        let mut store = store.lock().unwrap();
                        for resource in request.resource_spans {
                            let service = resource
                                .resource
                                .as_ref()
                                .and_then(|r| attribute(&r.attributes, "service.name"))
                                .unwrap_or_default();
                            for scope in resource.scope_spans {
                                for span in scope.spans {
                                    store.push(Received {
                                        service: service.clone(),
                                        span,
                                    });
                                }
                            }
                        }
                        (
                            [("content-type", "application/x-protobuf")],
                            ExportTraceServiceResponse::default().encode_to_vec(),
                        )
                    }
                }),
            );
            let listener = tokio::net::TcpListener::from_std(listener).expect("the listener");
            axum::serve(listener, app)
                .await
                .expect("the receiver serves");
        });
    });
    (addr, received)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn reconciles_and_plugin_calls_are_sent_as_spans_and_join_the_trace_a_parent_carries() {
    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const SPAN: &str = "00f067aa0ba902b7";
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let (addr, received) = receiver();
    let dir = tempfile::tempdir().unwrap();
    // The README's SampleDB, carrying the trace context of whoever created it.
    let mut db: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(root.join("examples/sampledb.yaml")).unwrap(),
    )
    .unwrap();
    db["metadata"]["annotations"] = serde_yaml::from_str(&format!(
        "{{tracing.k8s.io/traceparent: 00-{TRACE}-{SPAN}-01}}"
    ))
    .unwrap();
    let mut plain = db.clone();
    plain["metadata"]["name"] = "untraced".into();
    plain["metadata"]
        .as_mapping_mut()
        .unwrap()
        .remove("annotations");
    plain["spec"]["replicas"] = 1.into();
    let manifest = dir.path().join("traced.yaml");
    std::fs::write(
        &manifest,
        format!(
            "{}---\n{}",
            serde_yaml::to_string(&db).unwrap(),
            serde_yaml::to_string(&plain).unwrap()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_windlass"))
        .args(["--cache-dir"])
        .arg(root.join("target/e2e-plugin-cache"))
        .args([
            "dev",
            "--admin-addr",
            "127.0.0.1:0",
            "--exit-when-reconciled",
        ])
        .arg("--kubeconfig-out")
        .arg(dir.path().join("kubeconfig"))
        .arg("--manifest")
        .arg(root.join("examples/backup-volume.yaml"))
        .arg("--manifest")
        .arg(&manifest)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}"))
        .env("OTEL_BSP_SCHEDULE_DELAY", "200")
        .env_remove("OTEL_SERVICE_NAME")
        .env_remove("OTEL_RESOURCE_ATTRIBUTES")
        .env_remove("OTEL_SDK_DISABLED")
        .env_remove("OTEL_TRACES_EXPORTER")
        .env_remove("OTEL_EXPORTER_OTLP_PROTOCOL")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .current_dir(root)
        .output()
        .expect("windlass dev runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stderr:\n{stderr}");
    assert!(
        stderr.contains("exporting traces over OTLP/HTTP"),
        "{stderr}"
    );
    // Sent before the process exited (its last batch when the exporter was shut down).
    let spans = received.lock().unwrap().clone();
    assert!(!spans.is_empty(), "no span received:\n{stderr}");
    assert!(
        spans.iter().all(|s| s.service == "windlass"),
        "services: {:?}",
        spans.iter().map(|s| &s.service).collect::<Vec<_>>()
    );
    let reconciles: Vec<&Received> = spans
        .iter()
        .filter(|s| {
            s.span.name == "reconcile" && s.attr("name").as_deref() == Some("example-database")
        })
        .collect();
    assert!(
        !reconciles.is_empty(),
        "no reconcile span of example-database"
    );
    for r in &reconciles {
        assert_eq!(
            r.attr("kind").as_deref(),
            Some("samples.windlass.dev/v1alpha1/SampleDB")
        );
        assert_eq!(r.attr("namespace").as_deref(), Some("default"));
        assert!(
            ["success", "requeue_after"].contains(&r.attr("result").unwrap_or_default().as_str()),
            "{:?}",
            r.span.attributes
        );
        // The reconcile a change led to is inside the trace the parent came with, under the
        // span that made the change; later ones (requeues, children's changes) link to it.
        let joined = hex(&r.span.trace_id) == TRACE && hex(&r.span.parent_span_id) == SPAN;
        let linked = r
            .span
            .links
            .iter()
            .any(|l| hex(&l.trace_id) == TRACE && hex(&l.span_id) == SPAN);
        assert!(
            joined != linked,
            "joined {joined}, linked {linked}: {:?}",
            r.span
        );
    }
    assert!(
        reconciles
            .iter()
            .any(|r| hex(&r.span.parent_span_id) == SPAN),
        "no reconcile joined the trace"
    );
    let reconcile_ids: BTreeMap<Vec<u8>, &Received> = reconciles
        .iter()
        .map(|r| (r.span.span_id.clone(), *r))
        .collect();
    let calls: Vec<&Received> = spans
        .iter()
        .filter(|s| {
            s.span.name == "plugin_call" && reconcile_ids.contains_key(&s.span.parent_span_id)
        })
        .collect();
    let plugins: std::collections::BTreeSet<String> = calls
        .iter()
        .filter(|c| c.attr("outcome").as_deref() == Some("ok"))
        .filter_map(|c| c.attr("plugin"))
        .collect();
    for plugin in [
        "sampledb-storage",
        "sampledb-backup",
        "sampledb-upgrade",
        "sampledb-primary",
    ] {
        assert!(plugins.contains(plugin), "no call of {plugin}: {plugins:?}");
    }
    for call in &calls {
        assert_eq!(
            call.span.trace_id,
            reconcile_ids[&call.span.parent_span_id].span.trace_id
        );
        assert!(
            call.attr("digest")
                .unwrap_or_default()
                .starts_with("sha256:"),
            "{:?}",
            call.span.attributes
        );
        assert_eq!(call.attr("phase").as_deref(), Some("Reconcile"));
        assert!(call.attr("outcome").is_some(), "{:?}", call.span.attributes);
        let memory: u64 = call.attr("memory_bytes").unwrap().parse().unwrap();
        assert!(memory > 0, "{:?}", call.span.attributes);
        assert!(call.attr("reused").is_some());
        assert!(call.span.end_time_unix_nano > call.span.start_time_unix_nano);
    }
    // A parent without the annotation is reconciled in a trace the host starts: up from its
    // reconcile span, every parent is one of the host's spans, to a root.
    let by_id: BTreeMap<&[u8], &Received> = spans
        .iter()
        .map(|s| (s.span.span_id.as_slice(), s))
        .collect();
    let untraced: Vec<&Received> = spans
        .iter()
        .filter(|s| s.span.name == "reconcile" && s.attr("name").as_deref() == Some("untraced"))
        .collect();
    assert!(!untraced.is_empty(), "no reconcile span of untraced");
    for r in untraced {
        assert_ne!(hex(&r.span.trace_id), TRACE);
        let mut span: &Received = r;
        while !span.span.parent_span_id.is_empty() {
            span = *by_id
                .get(span.span.parent_span_id.as_slice())
                .unwrap_or_else(|| panic!("{} has a parent the host did not send", span.span.name));
            assert_eq!(span.span.trace_id, r.span.trace_id);
        }
    }
}
