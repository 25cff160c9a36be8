//! The host's metrics as monitoring meets them: the chart's Grafana dashboard and PrometheusRule
//! alerts rendered only when asked, every query in them accepted by promtool, the alerts firing
//! on the series they are about and quiet on healthy ones (`promtool test rules`), and — with
//! `sampledb::a_host_serving_sampledbs_exports_clean_metrics_and_every_query_names_them` —
//! every metric and label those queries name exported by a real host.

use std::{
    collections::{BTreeMap, BTreeSet},
    process::Command,
};

use serde_json::Value;

use crate::{
    helm::{NAMESPACE, RELEASE, documents, root, template},
    support::tools::{promtool, try_run},
};

/// One metric selector of a PromQL expression: the metric's name and the labels it matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    pub name: String,
    pub labels: Vec<String>,
}

/// Words of PromQL that are not metric names; those marked `true` take a parenthesised label
/// list (`by (controller, le)`), which names no metric.
const KEYWORDS: &[(&str, bool)] = &[
    ("by", true),
    ("without", true),
    ("on", true),
    ("ignoring", true),
    ("group_left", true),
    ("group_right", true),
    ("and", false),
    ("or", false),
    ("unless", false),
    ("bool", false),
    ("offset", false),
    ("atan2", false),
];

/// The index just past the string literal opening at `i`.
fn skip_string(b: &[u8], i: usize) -> usize {
    let quote = b[i];
    let mut j = i + 1;
    while j < b.len() && b[j] != quote {
        j += if b[j] == b'\\' { 2 } else { 1 };
    }
    j + 1
}

/// The index just past the bracket closing the one opening at `i`.
fn skip_group(b: &[u8], i: usize, open: u8, close: u8) -> usize {
    let mut depth = 0;
    let mut j = i;
    while j < b.len() {
        match b[j] {
            b'"' | b'\'' | b'`' => {
                j = skip_string(b, j);
                continue;
            }
            c if c == open => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
        j += 1;
    }
    j
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c == b':'
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b':'
}

/// The label names of the matchers in the braces opening at `i`, and the index past them.
fn matchers(b: &[u8], i: usize) -> (Vec<String>, usize) {
    let mut labels = Vec::new();
    let mut j = i + 1;
    while j < b.len() && b[j] != b'}' {
        if b[j] == b'"' || b[j] == b'\'' || b[j] == b'`' {
            j = skip_string(b, j);
        } else if is_ident_start(b[j]) {
            let start = j;
            while j < b.len() && is_ident(b[j]) {
                j += 1;
            }
            labels.push(String::from_utf8_lossy(&b[start..j]).into_owned());
        } else {
            j += 1;
        }
    }
    (labels, j + 1)
}

/// Every metric selector in a PromQL expression, in order.
pub fn selectors(expr: &str) -> Vec<Selector> {
    let b = expr.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'"' || c == b'\'' || c == b'`' {
            i = skip_string(b, i);
        } else if c == b'[' {
            i = skip_group(b, i, b'[', b']');
        } else if c == b'{' {
            // A selector by labels alone: no name to check.
            i = matchers(b, i).1;
        } else if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            // A number or a duration: 0.99, 1e-9, 10m.
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                let exponent = matches!(b[i], b'e' | b'E');
                i += 1;
                if exponent && i < b.len() && matches!(b[i], b'+' | b'-') {
                    i += 1;
                }
            }
        } else if is_ident_start(c) {
            let start = i;
            while i < b.len() && is_ident(b[i]) {
                i += 1;
            }
            let word = String::from_utf8_lossy(&b[start..i]).into_owned();
            let mut next = i;
            while next < b.len() && b[next].is_ascii_whitespace() {
                next += 1;
            }
            if let Some((_, takes_labels)) = KEYWORDS.iter().find(|(k, _)| *k == word) {
                if *takes_labels && b.get(next) == Some(&b'(') {
                    i = skip_group(b, next, b'(', b')');
                }
            } else if b.get(next) == Some(&b'(') || {
                let rest = &expr[next..];
                ["by", "without"].iter().any(|m| {
                    rest.starts_with(m)
                        && !rest.as_bytes().get(m.len()).is_some_and(|c| is_ident(*c))
                })
            } {
                // A function, or an aggregation (`sum by (…) (…)`).
            } else if b.get(next) == Some(&b'{') {
                let (labels, end) = matchers(b, next);
                out.push(Selector { name: word, labels });
                i = end;
            } else {
                out.push(Selector {
                    name: word,
                    labels: Vec::new(),
                });
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The labels an expression groups or matches by: those listed after `by`, `without`, `on`,
/// `ignoring`, `group_left` and `group_right`.
pub fn grouping_labels(expr: &str) -> Vec<String> {
    let b = expr.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'"' || b[i] == b'\'' || b[i] == b'`' {
            i = skip_string(b, i);
        } else if is_ident_start(b[i]) {
            let start = i;
            while i < b.len() && is_ident(b[i]) {
                i += 1;
            }
            let word = &expr[start..i];
            let mut next = i;
            while next < b.len() && b[next].is_ascii_whitespace() {
                next += 1;
            }
            if KEYWORDS.iter().any(|(k, takes)| *takes && *k == word) && b.get(next) == Some(&b'(')
            {
                let end = skip_group(b, next, b'(', b')');
                out.extend(
                    expr[next + 1..end - 1]
                        .split(',')
                        .map(str::trim)
                        .filter(|l| !l.is_empty())
                        .map(str::to_string),
                );
                i = end;
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The labels a text refers to as `{{label}}` (a Grafana legend) or `$labels.label` (an alert's
/// annotation).
pub fn referenced_labels(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for part in text.split("{{").skip(1) {
        let inner = part.split("}}").next().unwrap_or("").trim();
        if let Some(label) = inner.strip_prefix("$labels.") {
            out.push(label.split_whitespace().next().unwrap_or("").to_string());
        } else if !inner.is_empty() && !inner.starts_with('$') && inner.bytes().all(is_ident) {
            out.push(inner.to_string());
        }
    }
    out
}

/// A Grafana query with its variables given values PromQL accepts.
pub fn grafana_to_promql(query: &str) -> String {
    query
        .replace("$__rate_interval", "5m")
        .replace("$job", "windlass")
        .replace("$controller", ".*")
}

/// A query of the dashboard or the alerts: where it is, its PromQL, and the labels of its
/// result it shows (a legend's `{{label}}`, an annotation's `$labels.label`).
#[derive(Debug, Clone)]
pub struct Query {
    pub place: String,
    pub expr: String,
    pub shows: Vec<String>,
}

/// The queries of the chart's dashboard: every panel's targets, then every templating
/// variable's (`label_values(SELECTOR, LABEL)` as the selector and the label it reads).
pub fn dashboard_queries(dashboard: &Value) -> (Vec<Query>, Vec<(String, String)>) {
    let mut panels = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            panels.push(Query {
                place: format!(
                    "dashboard panel {:?}",
                    panel["title"].as_str().unwrap_or("?")
                ),
                expr: target["expr"]
                    .as_str()
                    .expect("a target's expr")
                    .to_string(),
                shows: referenced_labels(target["legendFormat"].as_str().unwrap_or("")),
            });
        }
    }
    let mut variables = Vec::new();
    for var in dashboard["templating"]["list"]
        .as_array()
        .expect("variables")
    {
        if var["type"] != "query" {
            continue;
        }
        let query = var["query"]["query"].as_str().expect("a variable's query");
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .unwrap_or_else(|| panic!("variable query {query} is not label_values(…)"));
        let (selector, label) = inner
            .rsplit_once(',')
            .expect("label_values(SELECTOR, LABEL)");
        variables.push((selector.trim().to_string(), label.trim().to_string()));
    }
    (panels, variables)
}

/// The chart's dashboard, as shipped.
pub fn dashboard() -> Value {
    let path = root().join("deploy/helm/windlass/dashboards/windlass.json");
    serde_json::from_str(&std::fs::read_to_string(&path).expect("the dashboard file"))
        .expect("the dashboard is JSON")
}

/// The chart's alerting rules (the PrometheusRule's `spec`), rendered for `wl` in
/// `windlass-system` with `sets`.
pub fn alert_rules(sets: &[&str]) -> Value {
    let mut all = vec![
        "metrics.alerts.enabled=true",
        "metrics.serviceMonitor.enabled=true",
    ];
    all.extend_from_slice(sets);
    let rendered = template(&[], &all).expect("the chart renders with alerts");
    documents(&rendered)
        .into_iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .expect("a PrometheusRule")["spec"]
        .clone()
}

/// Every alert's expression, with the labels its annotations show.
pub fn alert_queries(rules: &Value) -> Vec<Query> {
    rules["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").iter())
        .map(|r| Query {
            place: format!("alert {}", r["alert"].as_str().expect("an alert name")),
            expr: r["expr"].as_str().expect("an expr").to_string(),
            shows: r["annotations"]
                .as_object()
                .into_iter()
                .flatten()
                .flat_map(|(_, v)| referenced_labels(v.as_str().unwrap_or("")))
                .collect(),
        })
        .collect()
}

/// Labels Prometheus adds when it scrapes (its target's), which no exporter writes.
const TARGET_LABELS: &[&str] = &[
    "job",
    "namespace",
    "instance",
    "pod",
    "service",
    "endpoint",
    "container",
];

/// What a host exports, read from the Prometheus text format: every sample name its families
/// declare, and the label names seen on each sample name's series.
#[derive(Debug, Default)]
pub struct Exported {
    pub names: BTreeSet<String>,
    pub labels: BTreeMap<String, BTreeSet<String>>,
}

impl Exported {
    pub fn parse(text: &str) -> Exported {
        let mut out = Exported::default();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("# TYPE NAME KIND");
                match kind {
                    "histogram" => {
                        for suffix in ["_bucket", "_sum", "_count"] {
                            out.names.insert(format!("{name}{suffix}"));
                        }
                    }
                    _ => {
                        out.names.insert(name.to_string());
                    }
                }
            } else if !line.starts_with('#') && !line.is_empty() {
                let end = line
                    .find(['{', ' '])
                    .unwrap_or_else(|| panic!("a sample line without a value: {line}"));
                let name = &line[..end];
                let labels = out.labels.entry(name.to_string()).or_default();
                if line.as_bytes()[end] == b'{' {
                    labels.extend(matchers(line.as_bytes(), end).0);
                }
            }
        }
        out
    }

    /// What is wrong with `selector` against this export (`None`: nothing), and whether its
    /// metric has series at all (a family with no series yet cannot show its labels).
    pub fn check(&self, selector: &Selector) -> (Option<String>, bool) {
        if !self.names.contains(&selector.name) {
            return (
                Some(format!(
                    "{} is not a metric the host exports",
                    selector.name
                )),
                false,
            );
        }
        let Some(seen) = self.labels.get(&selector.name) else {
            return (None, false);
        };
        let missing: Vec<&String> = selector
            .labels
            .iter()
            .filter(|l| !TARGET_LABELS.contains(&l.as_str()) && !seen.contains(*l))
            .collect();
        let problem = (!missing.is_empty()).then(|| {
            format!(
                "{} has no label {missing:?} (its labels: {seen:?})",
                selector.name
            )
        });
        (problem, true)
    }
}

/// Metrics the queries may name that a host serving SampleDBs for a minute has no series of
/// (prometheus-client writes a family only once it has one), and why.
pub const SERIES_ONLY_LATER: &[(&str, &str)] = &[
    (
        "windlass_reconcile_errors_total",
        "counted once a reconcile fails",
    ),
    (
        "windlass_policy_refusals_total",
        "counted once the host refuses a plugin's output",
    ),
    (
        "windlass_plugin_fuel_total",
        "counted only with fuel metering on (--fuel)",
    ),
];

/// The metrics of [`SERIES_ONLY_LATER`] as the host writes them once they happen: recorded
/// through the same calls the host makes, into a fresh registry, in the Prometheus text format.
fn recorded_later() -> Exported {
    let metrics = windlass::metrics::Metrics::default();
    metrics.record_reconcile(
        "samples.windlass.dev/v1alpha1/SampleDB",
        Err("PluginFailed"),
        0.1,
    );
    metrics.record_refusal("sampledb-storage", "SelectorNotOwned");
    metrics.record_call(
        "sampledb-storage",
        &windlass::contract::CallStats {
            fuel_consumed: Some(1_000),
            ..Default::default()
        },
        "ok",
    );
    Exported::parse(&metrics.encode_for(None).1)
}

/// Checks every query of the chart's dashboard and alerts against what a host exported
/// (`text`, the Prometheus text format): each metric they name is exported, with the labels
/// they match on. The metrics a host had no series of yet must be those of
/// [`SERIES_ONLY_LATER`], and are checked as the host writes them once it has. Returns how many
/// selectors were checked.
pub fn check_queries_against(text: &str) -> usize {
    let exported = Exported::parse(text);
    let later = recorded_later();
    let later_names: BTreeSet<&str> = SERIES_ONLY_LATER.iter().map(|(n, _)| *n).collect();
    let (panels, variables) = dashboard_queries(&dashboard());
    let rules = alert_rules(&[]);
    let mut queries: Vec<(Query, Vec<Selector>)> = Vec::new();
    for query in panels.into_iter().chain(alert_queries(&rules)) {
        let found = selectors(&grafana_to_promql(&query.expr));
        queries.push((query, found));
    }
    for (selector, label) in &variables {
        let mut found = selectors(&grafana_to_promql(selector));
        for s in &mut found {
            s.labels.push(label.clone());
        }
        let query = Query {
            place: format!("dashboard variable reading {label}"),
            expr: selector.clone(),
            shows: Vec::new(),
        };
        queries.push((query, found));
    }
    let mut problems = Vec::new();
    let mut checked = 0;
    for (query, found) in &queries {
        let place = &query.place;
        assert!(!found.is_empty(), "{place} names no metric");
        // The labels the query's series carry, as exported (or as recorded, for those with no
        // series yet), and those Prometheus adds.
        let mut carried: BTreeSet<String> = TARGET_LABELS.iter().map(|l| l.to_string()).collect();
        for selector in found {
            checked += 1;
            let live = exported.check(selector);
            let (problem, source) = match live {
                (None, true) => (None, &exported),
                _ if later_names.contains(selector.name.as_str()) => match later.check(selector) {
                    (None, true) => (None, &later),
                    (problem, _) => (
                        Some(problem.unwrap_or_else(|| {
                            format!("{} has no series even once recorded", selector.name)
                        })),
                        &later,
                    ),
                },
                (Some(problem), _) => (Some(problem), &exported),
                (None, false) => (
                    Some(format!(
                        "the host exported no series of {}, and SERIES_ONLY_LATER does not say why",
                        selector.name
                    )),
                    &exported,
                ),
            };
            if let Some(problem) = problem {
                problems.push(format!("{place}: {problem}"));
            }
            carried.extend(
                source
                    .labels
                    .get(&selector.name)
                    .into_iter()
                    .flatten()
                    .cloned(),
            );
        }
        let grouping = grouping_labels(&grafana_to_promql(&query.expr));
        for label in &grouping {
            checked += 1;
            if !carried.contains(label) {
                problems.push(format!(
                    "{place}: groups by {label}, which none of its series carries ({carried:?})"
                ));
            }
        }
        for label in &query.shows {
            checked += 1;
            if !grouping.contains(label) {
                problems.push(format!(
                    "{place}: shows {label}, which its result does not keep (it keeps {grouping:?})"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    checked
}

/// `GET /metrics` of the admin server at `addr` with `accept` as the Accept header: the
/// response's content type and body.
pub async fn scrape(addr: std::net::SocketAddr, accept: &str) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("the admin server answers");
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\nAccept: {accept}\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("the request sent");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("the response read");
    let (head, body) = response.split_once("\r\n\r\n").expect("a head and a body");
    assert!(head.contains(" 200 "), "{head}");
    let content_type = head
        .lines()
        .find_map(|l| {
            l.split_once(':')
                .filter(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        })
        .map(|(_, v)| v.trim().to_string())
        .expect("a content type");
    (content_type, body.to_string())
}

/// `promtool check metrics` on `text`: its findings, or the failure.
pub fn promtool_check_metrics(text: &str) -> Result<String, String> {
    try_run(
        Command::new(promtool()).args(["check", "metrics"]),
        Some(text),
    )
}

/// Runs promtool with `args` in `dir`: its stdout, or the failure with both outputs.
fn promtool_in(dir: &std::path::Path, args: &[&str]) -> Result<String, String> {
    try_run(Command::new(promtool()).current_dir(dir).args(args), None)
}

#[test]
fn selectors_name_each_metric_and_the_labels_it_matches_and_nothing_else() {
    let expr = r#"histogram_quantile(0.99, sum by (controller, le) (rate(foo_seconds_bucket{job="a,b}", controller=~"x"}[5m]))) / on (controller) group_left bar_total offset 1m or vector(1e-9) > 0.5 unless absent(baz{x!~'y'})"#;
    assert_eq!(
        selectors(expr),
        vec![
            Selector {
                name: "foo_seconds_bucket".into(),
                labels: vec!["job".into(), "controller".into()],
            },
            Selector {
                name: "bar_total".into(),
                labels: vec![],
            },
            Selector {
                name: "baz".into(),
                labels: vec!["x".into()],
            },
        ]
    );
    // The check catches a misspelt metric and a label its series do not carry.
    let exported = Exported::parse(
        "# HELP foo_total Foo.\n# TYPE foo_total counter\nfoo_total{kind=\"a\",result=\"ok\"} 1\n\
         # TYPE lat histogram\nlat_bucket{le=\"1\"} 1\nlat_sum 1\nlat_count 1\n# TYPE idle gauge\n",
    );
    let check = |expr: &str| {
        selectors(expr)
            .iter()
            .map(|s| exported.check(s))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        check(r#"rate(foo_total{job="x",kind="a"}[1m])"#),
        [(None, true)]
    );
    assert_eq!(check("lat_count + lat_sum"), [(None, true), (None, true)]);
    assert_eq!(check("idle"), [(None, false)]);
    let (problem, _) = check("fo_total").remove(0);
    assert!(problem.unwrap().contains("fo_total is not a metric"));
    let (problem, _) = check(r#"foo_total{controller="a"}"#).remove(0);
    assert!(problem.unwrap().contains(r#"no label ["controller"]"#));
    // What a query groups by, and what a legend or an annotation shows.
    assert_eq!(
        grouping_labels(expr),
        ["controller", "le", "controller"].map(String::from)
    );
    assert_eq!(
        grouping_labels(r#"sum(x{a="by (b)"}) without (c) / ignoring(d) group_right (e) y"#),
        ["c", "d", "e"].map(String::from)
    );
    assert_eq!(
        referenced_labels(
            "{{controller}} {{ result }} p99 {{$labels.plugin}} {{ $value | humanize }}"
        ),
        ["controller", "result", "plugin"].map(String::from)
    );
}

#[test]
fn the_dashboard_and_alerts_render_only_when_asked_and_promtool_accepts_every_query() {
    let off = template(&[], &[]).expect("default values");
    assert!(!off.contains("kind: PrometheusRule"));
    assert!(!off.contains("grafana_dashboard"));
    let sets = [
        "metrics.dashboard.enabled=true",
        "metrics.alerts.enabled=true",
        "metrics.serviceMonitor.enabled=true",
    ];
    let on = template(&[], &sets).expect("with the dashboard and alerts");
    let docs = documents(&on);
    let config_map = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "wl-windlass-dashboard")
        .expect("the dashboard's ConfigMap");
    assert_eq!(
        config_map["metadata"]["labels"]["grafana_dashboard"], "1",
        "the label Grafana's sidecar looks for"
    );
    let shipped: Value = serde_json::from_str(
        config_map["data"]["windlass.json"]
            .as_str()
            .expect("windlass.json"),
    )
    .expect("the ConfigMap holds JSON");
    assert_eq!(
        shipped,
        dashboard(),
        "the ConfigMap holds the dashboard file"
    );
    // Alerts select the ServiceMonitor's scrape job, unless told how else to find the series.
    // (A ServiceMonitor without the metrics Service is refused by its own template.)
    let refused = template(&[], &["metrics.alerts.enabled=true"])
        .expect_err("alerts selecting a job that is not scraped");
    assert!(
        refused.contains(
            "enable metrics.service and metrics.serviceMonitor, or say in metrics.alerts.selector"
        ),
        "{refused}"
    );
    let own = alert_rules(&[r#"metrics.alerts.selector=job="prom-windlass""#]);
    let exprs: Vec<String> = alert_queries(&own).into_iter().map(|q| q.expr).collect();
    assert!(
        exprs
            .iter()
            .all(|e| e.contains(r#"{job="prom-windlass"}"#) && !e.contains("wl-windlass-metrics")),
        "{exprs:?}"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let rules = alert_rules(&[]);
    std::fs::write(
        dir.path().join("alerts.yaml"),
        serde_yaml::to_string(&rules).expect("YAML"),
    )
    .expect("write the rules");
    let out = promtool_in(dir.path(), &["check", "rules", "alerts.yaml"])
        .unwrap_or_else(|e| panic!("promtool refuses the chart's alerts: {e}"));
    assert!(out.contains("SUCCESS: 5 rules found"), "{out}");
    // Every dashboard query, as a recording rule, so that promtool parses each.
    let (panels, variables) = dashboard_queries(&dashboard());
    assert!(panels.len() >= 20, "{} panel queries", panels.len());
    let exprs: Vec<String> = panels
        .iter()
        .map(|q| grafana_to_promql(&q.expr))
        .chain(variables.iter().map(|(s, _)| grafana_to_promql(s)))
        .collect();
    let recording = serde_json::json!({"groups": [{
        "name": "dashboard",
        "rules": exprs.iter().enumerate()
            .map(|(i, e)| serde_json::json!({"record": format!("dashboard:query{i}"), "expr": e}))
            .collect::<Vec<_>>(),
    }]});
    std::fs::write(
        dir.path().join("dashboard.yaml"),
        serde_yaml::to_string(&recording).expect("YAML"),
    )
    .expect("write the queries");
    let out = promtool_in(dir.path(), &["check", "rules", "dashboard.yaml"])
        .unwrap_or_else(|e| panic!("promtool refuses a dashboard query: {e}"));
    assert!(
        out.contains(&format!("SUCCESS: {} rules found", exprs.len())),
        "{out}"
    );
}

/// A series of the release's scrape job, with more labels.
fn series(name: &str, labels: &str) -> String {
    let job = format!(r#"job="{RELEASE}-windlass-metrics",namespace="{NAMESPACE}""#);
    if labels.is_empty() {
        format!("{name}{{{job}}}")
    } else {
        format!("{name}{{{job},{labels}}}")
    }
}

#[test]
fn each_alert_fires_on_what_it_is_about_and_not_on_a_healthy_host() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rules = alert_rules(&[]);
    std::fs::write(
        dir.path().join("alerts.yaml"),
        serde_yaml::to_string(&rules).expect("YAML"),
    )
    .expect("write the rules");
    let (bad, good) = (r#"controller="bad/v1/Bad""#, r#"controller="good/v1/Good""#);
    let (bad_q, good_q) = (
        r#"name="bad/v1/Bad",controller="bad/v1/Bad""#,
        r#"name="good/v1/Good",controller="good/v1/Good""#,
    );
    let input = |s: String, values: &str| serde_json::json!({"series": s, "values": values});
    // A host with one failing kind (20% of its reconciles fail, its parents wait ~100 s, one
    // reconcile never ends), a WasmPlugin with no serving version, and one healthy kind, plugin
    // and leader.
    let unhealthy = vec![
        input(
            series(
                "controller_runtime_reconcile_total",
                &format!(r#"{bad},result="success""#),
            ),
            "0+8x60",
        ),
        input(
            series(
                "controller_runtime_reconcile_total",
                &format!(r#"{bad},result="error""#),
            ),
            "0+2x60",
        ),
        input(
            series("controller_runtime_reconcile_errors_total", bad),
            "0+2x60",
        ),
        input(
            series(
                "controller_runtime_reconcile_total",
                &format!(r#"{good},result="success""#),
            ),
            "0+10x60",
        ),
        input(
            series("controller_runtime_reconcile_errors_total", good),
            "0x60",
        ),
        input(
            series("windlass_plugin_serving", r#"plugin="broken""#),
            "0x60",
        ),
        input(
            series("windlass_plugin_serving", r#"plugin="fine""#),
            "1x60",
        ),
        input(series("windlass_leader", r#"instance="a""#), "1x60"),
        input(series("windlass_leader", r#"instance="b""#), "0x60"),
        input(
            series("workqueue_longest_running_processor_seconds", bad_q),
            "0+60x60",
        ),
        input(
            series("workqueue_longest_running_processor_seconds", good_q),
            "0x60",
        ),
        input(
            series("workqueue_queue_duration_seconds_sum", bad_q),
            "0+1000x60",
        ),
        input(
            series("workqueue_queue_duration_seconds_count", bad_q),
            "0+10x60",
        ),
        input(
            series("workqueue_queue_duration_seconds_sum", good_q),
            "0+1x60",
        ),
        input(
            series("workqueue_queue_duration_seconds_count", good_q),
            "0+10x60",
        ),
    ];
    let alert = |labels: Value, summary: &str, description: &str| serde_json::json!({"exp_labels": labels, "exp_annotations": {"summary": summary, "description": description}});
    let test = serde_json::json!({
        "rule_files": ["alerts.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": unhealthy,
                "alert_rule_test": [
                    // Not yet: each holds a while (15 minutes, or 5) before it fires.
                    {"eval_time": "3m", "alertname": "WindlassReconcileErrors", "exp_alerts": []},
                    {"eval_time": "12m", "alertname": "WindlassReconcileErrors", "exp_alerts": []},
                    {"eval_time": "3m", "alertname": "WindlassPluginNotServing", "exp_alerts": []},
                    {"eval_time": "3m", "alertname": "WindlassQueueStarved", "exp_alerts": []},
                    {"eval_time": "3m", "alertname": "WindlassReconcileStuck", "exp_alerts": []},
                    {"eval_time": "40m", "alertname": "WindlassReconcileErrors", "exp_alerts": [alert(
                        serde_json::json!({"severity": "warning", "namespace": NAMESPACE, "controller": "bad/v1/Bad"}),
                        "Reconciles of bad/v1/Bad are failing",
                        "20% of the reconciles of bad/v1/Bad failed over 10 minutes. windlass_reconcile_errors_total says why, and each failing parent's conditions say which plugin.",
                    )]},
                    {"eval_time": "40m", "alertname": "WindlassPluginNotServing", "exp_alerts": [alert(
                        serde_json::json!({"severity": "warning", "namespace": NAMESPACE, "plugin": "broken"}),
                        "WasmPlugin broken has no serving version",
                        "No version of WasmPlugin broken serves: its Ready condition and Events say why (kubectl describe wasmplugin broken).",
                    )]},
                    {"eval_time": "40m", "alertname": "WindlassQueueStarved", "exp_alerts": [alert(
                        serde_json::json!({"severity": "warning", "namespace": NAMESPACE, "name": "bad/v1/Bad"}),
                        "Parents of bad/v1/Bad wait long for a reconcile",
                        "Parents of bad/v1/Bad waited 1m 40s on average over 10 minutes for their reconcile to start: more are due than --concurrency lets run.",
                    )]},
                    {"eval_time": "40m", "alertname": "WindlassReconcileStuck", "exp_alerts": [alert(
                        serde_json::json!({"severity": "warning", "namespace": NAMESPACE, "name": "bad/v1/Bad"}),
                        "A reconcile of bad/v1/Bad has run for 40m 0s",
                        "A reconcile of bad/v1/Bad has not finished: a host API call that does not return (plugin calls are bounded by their timeouts).",
                    )]},
                    {"eval_time": "40m", "alertname": "WindlassNoLeader", "exp_alerts": []},
                ],
            },
            {
                // Every host a standby, then none scraped at all.
                "interval": "1m",
                "input_series": [
                    input(series("windlass_leader", r#"instance="a""#), "0x20"),
                    input(series("windlass_leader", r#"instance="b""#), "0x20"),
                ],
                "alert_rule_test": [
                    {"eval_time": "3m", "alertname": "WindlassNoLeader", "exp_alerts": []},
                    {"eval_time": "10m", "alertname": "WindlassNoLeader", "exp_alerts": [alert(
                        serde_json::json!({"severity": "critical", "namespace": NAMESPACE}),
                        &format!("No Windlass host leads in {NAMESPACE}"),
                        "No scraped host of this release leads (or none is scraped): nothing reconciles. The Lease's holder and the hosts' logs say why.",
                    )]},
                ],
            },
            {
                "interval": "1m",
                "input_series": [input(series("windlass_plugin_serving", r#"plugin="fine""#), "1x20")],
                "alert_rule_test": [
                    {"eval_time": "10m", "alertname": "WindlassNoLeader", "exp_alerts": [alert(
                        serde_json::json!({"severity": "critical", "namespace": NAMESPACE, "job": format!("{RELEASE}-windlass-metrics")}),
                        "No Windlass host leads in windlass-system",
                        "No scraped host of this release leads (or none is scraped): nothing reconciles. The Lease's holder and the hosts' logs say why.",
                    )]},
                    {"eval_time": "10m", "alertname": "WindlassPluginNotServing", "exp_alerts": []},
                ],
            },
        ],
    });
    std::fs::write(
        dir.path().join("test.yaml"),
        serde_yaml::to_string(&test).expect("YAML"),
    )
    .expect("write the test");
    let out = promtool_in(dir.path(), &["test", "rules", "test.yaml"])
        .unwrap_or_else(|e| panic!("the alerts do not behave: {e}"));
    assert!(out.contains("SUCCESS"), "{out}");
}
