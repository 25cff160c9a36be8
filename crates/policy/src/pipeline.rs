//! A parent kind's plugins run in order, each one's output checked by the [`Policy`] before the
//! next one sees it. This is the one implementation of a reconcile's run step (each plugin in
//! order, then the policy on its output; docs/ARCHITECTURE.md, "pipeline") that both the
//! controller and `windlass render` use.
//!
//! # Guarantees
//! - A plugin error (trap, timeout, memory, plugin-error) or a policy violation stops the run
//!   with an [`Error`] naming the plugin: the caller applies nothing and prunes nothing.
//! - A plugin whose failure policy is [`FailurePolicy::Ignore`] is skipped on failure, and the
//!   outcome is marked [`Outcome::incomplete`]: the caller must then not prune, since the
//!   skipped plugin's children are missing from the desired set, not unwanted.
//! - Each plugin sees only the observed objects of the kinds it declared, and Secrets — observed
//!   or produced by an earlier plugin — only when its grants name `v1/Secret`. Secrets withheld
//!   from a plugin are passed on past it unchanged (it cannot have edited what it never saw).
//! - Condition messages and event notes are cut to the API server's limits; more conditions or
//!   events in one call than the policy allows refuse the output.
//! - A plugin in `Reuse` mode never shares an instance across namespaces (the tenant of a call
//!   is the parent's namespace, or the parent itself when it is cluster-scoped).

use crate::At as _;
use std::{collections::HashMap, sync::Arc, time::Duration};

use serde_json::{Map, Value};

use windlass_contract::{
    self as contract, CallStats, Condition, Event, Phase, Reconciler, Request,
};

use crate::{
    self as policy, Checked, Family, Grants, MAX_CONDITION_MESSAGE, MAX_EVENT_NOTE, ObjectKey,
    PodGrants, Policy, SECRET, Subject, Violation, kind_of,
};

/// What to do when a plugin fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailurePolicy {
    /// Stop the run: apply nothing, prune nothing (the default).
    #[default]
    Fail,
    /// Skip the plugin and go on; the run is then marked incomplete and nothing is pruned.
    Ignore,
}

/// One plugin in a pipeline, with what its WasmPlugin gave it.
#[derive(Debug, Clone)]
pub struct Stage {
    /// The loaded plugin.
    pub plugin: Arc<dyn Reconciler>,
    /// Its config as a JSON object.
    pub config: Value,
    /// The kinds the operator granted it.
    pub grants: Grants,
    /// What the pods it produces may do.
    pub pods: PodGrants,
    /// What a failure of this plugin does to the run.
    pub failure_policy: FailurePolicy,
}

impl Stage {
    /// A stage with an empty config, the declared kinds granted, and failure stopping the run.
    pub fn new(plugin: Arc<dyn Reconciler>) -> Self {
        Stage {
            plugin,
            config: Value::Object(Map::new()),
            grants: Grants::Declared,
            pods: PodGrants::default(),
            failure_policy: FailurePolicy::Fail,
        }
    }

    /// The kinds this stage observes: what it produces and what it reads.
    pub fn observed_kinds(&self) -> impl Iterator<Item = &str> {
        let info = self.plugin.info();
        info.child_kinds
            .iter()
            .chain(&info.reads_kinds)
            .map(String::as_str)
    }
}

/// The plugins of one parent kind, in order. Held as an immutable snapshot: swapping a plugin
/// builds a new pipeline, so a run never sees a half-swapped one.
#[derive(Debug, Clone, Default)]
pub struct Pipeline {
    /// The stages in the order they run.
    pub stages: Vec<Stage>,
    /// The output policy.
    pub policy: Arc<Policy>,
}

/// A desired object and the plugin that last produced or changed it.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    /// The checked object.
    pub object: Checked,
    /// The producing plugin's name.
    pub plugin: String,
    /// The producing plugin's digest.
    pub digest: String,
}

/// A condition and the plugin that reported it.
#[derive(Debug, Clone)]
pub struct Reported<T> {
    /// The plugin's name.
    pub plugin: String,
    /// What it reported.
    pub item: T,
}

/// The result of a successful run.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The desired set after the last plugin.
    pub desired: Vec<Desired>,
    /// The status fragments, composed in order into one JSON merge patch (a `null` deletes).
    pub status: Map<String, Value>,
    /// Conditions, with the plugin that reported each.
    pub conditions: Vec<Reported<Condition>>,
    /// Events, with the plugin that reported each.
    pub events: Vec<Reported<Event>>,
    /// The earliest requeue any plugin asked for.
    pub requeue_after: Option<Duration>,
    /// Finalize phase: true when every plugin that finalizes reported true.
    pub finalized: bool,
    /// Finalize phase: the plugins that reported not finalized yet, in pipeline order.
    pub unfinalized: Vec<String>,
    /// Plugins skipped under [`FailurePolicy::Ignore`], with why.
    pub skipped: Vec<Error>,
}

impl Outcome {
    /// True when a plugin was skipped: the desired set may lack objects that are still wanted,
    /// so nothing may be pruned on the strength of it.
    pub fn incomplete(&self) -> bool {
        !self.skipped.is_empty()
    }
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A plugin failed (trap, timeout, memory limit, or an error it reported).
    #[error(transparent)]
    Plugin(#[from] contract::Error),
    /// A plugin's output broke the policy.
    #[error(transparent)]
    Output(#[from] Violation),
    /// The parent is not an object the pipeline can run on.
    #[error("invalid parent: {0}")]
    Parent(String),
    /// A plugin of the pipeline has no version serving (its WasmPlugin exists, with
    /// `failurePolicy: Ignore`): left out of the run, which is then incomplete.
    #[error("plugin {0}: no version serves")]
    NotServing(String),
}

impl Error {
    /// A stable, one-word reason for metrics labels and condition reasons.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Plugin(e) => e.reason(),
            Error::Output(_) => "InvalidOutput",
            Error::Parent(_) => "InvalidParent",
            Error::NotServing(_) => "NotServing",
        }
    }

    /// The policy rule that refused the output, when one did.
    pub fn rule(&self) -> Option<policy::Rule> {
        match self {
            Error::Output(v) => Some(v.rule),
            _ => None,
        }
    }

    /// Whether the parent is at fault rather than a plugin: the host cannot run on it, or a
    /// plugin reported that its spec cannot be acted on. A canary does not hold that against a
    /// new plugin version.
    pub fn blames_parent(&self) -> bool {
        matches!(
            self,
            Error::Parent(_)
                | Error::Plugin(contract::Error::Plugin {
                    kind: contract::PluginErrorKind::InvalidParent,
                    ..
                })
        )
    }

    /// The plugin at fault, when one is.
    pub fn plugin(&self) -> Option<&str> {
        match self {
            Error::Plugin(e) => e.plugin(),
            Error::Output(v) => Some(&v.plugin),
            Error::NotServing(p) => Some(p),
            Error::Parent(_) => None,
        }
    }
}

/// What one run is given.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// Which phase.
    pub phase: Phase,
    /// The parent object.
    pub parent: &'a Value,
    /// The observed children and read objects.
    pub observed: &'a [Value],
    /// The desired set plugins before this pipeline produced (conformance cases give a plugin
    /// its predecessors' output); empty for a kind's whole pipeline.
    pub earlier: &'a [Value],
    /// The time given to plugins (RFC 3339).
    pub now: &'a str,
    /// Record each call for replay ([`Recorded`]): each runs in an instance of its own, its
    /// randomness on tape.
    pub record: bool,
}

impl<'a> Input<'a> {
    /// A run of a kind's whole pipeline (nothing desired before it).
    pub fn new(phase: Phase, parent: &'a Value, observed: &'a [Value], now: &'a str) -> Self {
        Input {
            phase,
            parent,
            observed,
            earlier: &[],
            now,
            record: false,
        }
    }
}

/// One plugin call as the pipeline reports it to [`Observe`].
#[derive(Debug)]
pub struct Call<'a> {
    /// The plugin.
    pub plugin: &'a dyn Reconciler,
    /// What the call cost.
    pub stats: &'a CallStats,
    /// How it ended: the error, with its reason and rule, when it failed (the plugin's own
    /// error, or the output policy's refusal).
    pub result: Result<(), &'a Error>,
    /// With [`Input::record`]: what reproduces it.
    pub recorded: Option<Recorded<'a>>,
}

/// What reproduces a call: its request and the randomness it drew give the same response again
/// from the same component.
#[derive(Debug)]
pub struct Recorded<'a> {
    /// The request as the plugin got it.
    pub request: &'a Request,
    /// The randomness it drew.
    pub entropy: &'a contract::Entropy,
    /// What the plugin answered, before the output policy: its response or its error.
    pub response: Result<&'a contract::Response, String>,
}

/// Called after every plugin call ([`Call`]), for metrics, the parent's last run and
/// recordings.
pub type Observe<'a> = &'a (dyn Fn(&Call<'_>) + Sync);

impl Pipeline {
    /// Runs every stage for the input's parent given what was observed.
    ///
    /// # Errors
    /// The first failing plugin's [`Error`], unless its failure policy is `Ignore`.
    pub fn run(&self, input: Input<'_>) -> Result<Outcome, Error> {
        self.run_observed(input, &|_| {})
    }

    /// [`Pipeline::run`], reporting every plugin call to `observe`.
    ///
    /// # Errors
    /// As [`Pipeline::run`].
    pub fn run_observed(&self, input: Input<'_>, observe: Observe<'_>) -> Result<Outcome, Error> {
        let mut run = Run::start(&input)?;
        for stage in &self.stages {
            if input.phase == Phase::Finalize && !stage.plugin.info().finalizes {
                continue;
            }
            let (req, withheld) = run.request(stage, &input);
            let plugin = &stage.plugin;
            // One span per call, through the policy's check of its output: what a trace
            // (OTLP, when configured) shows of it.
            let span = tracing::info_span!(
                "plugin_call",
                plugin = plugin.name(),
                digest = plugin.digest(),
                phase = ?input.phase,
                outcome = tracing::field::Empty,
                memory_bytes = tracing::field::Empty,
                fuel = tracing::field::Empty,
                reused = tracing::field::Empty,
                otel.status_code = tracing::field::Empty,
                otel.status_description = tracing::field::Empty,
            );
            let entered = span.enter();
            let (called, stats, entropy) = if input.record {
                plugin.call_recorded(&run.tenant, &req, contract::Tape::Record)
            } else {
                let (called, stats) = plugin.call_for(&run.tenant, &req);
                (called, stats, None)
            };
            let raw = entropy.as_ref().map(|_| {
                called
                    .as_ref()
                    .map(Clone::clone)
                    .map_err(ToString::to_string)
            });
            let step = called.map_err(Error::from).and_then(|mut resp| {
                resp.desired.extend(withheld.iter().cloned());
                let mut family = run.family.clone();
                family.add_names(&stage.config);
                self.check(
                    stage,
                    (&run.name, policy::nesting_of(input.parent)),
                    run.namespace.as_deref(),
                    &run.desired_text,
                    &family,
                    resp,
                )
            });
            let outcome = step.as_ref().map_or_else(Error::reason, |_| "ok");
            span.record("outcome", outcome);
            span.record(
                "memory_bytes",
                u64::try_from(stats.memory_peak_bytes).unwrap_or(u64::MAX),
            );
            if let Some(fuel) = stats.fuel_consumed {
                span.record("fuel", fuel);
            }
            span.record("reused", stats.reused);
            if let Err(e) = &step {
                span.record("otel.status_code", "ERROR");
                span.record("otel.status_description", tracing::field::display(e));
            }
            drop(entered);
            observe(&Call {
                plugin: plugin.as_ref(),
                stats: &stats,
                result: step.as_ref().map(|_| ()),
                recorded: entropy
                    .as_ref()
                    .zip(raw.as_ref())
                    .map(|(entropy, raw)| Recorded {
                        request: &req,
                        entropy,
                        response: raw.as_ref().map_err(Clone::clone),
                    }),
            });
            match step {
                Ok((checked, resp, status)) => {
                    run.absorb(stage, &req, &withheld, checked, resp, status);
                }
                Err(e) if stage.failure_policy == FailurePolicy::Ignore => {
                    tracing::warn!(plugin = plugin.name(), error = %e, "plugin failed; skipped under failurePolicy Ignore");
                    run.out.skipped.push(e);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(run.out)
    }

    /// Applies the policy to one plugin's response.
    #[allow(clippy::type_complexity)]
    fn check(
        &self,
        stage: &Stage,
        (parent, nesting): (&str, u32),
        namespace: Option<&str>,
        inherited: &[String],
        family: &Family,
        resp: contract::Response,
    ) -> Result<(Vec<Checked>, contract::Response, Option<Map<String, Value>>), Error> {
        let plugin = stage.plugin.name();
        let inherited: Vec<Value> = inherited
            .iter()
            .filter_map(|text| serde_json::from_str(text).ok())
            .collect();
        let pods = stage.pods.for_parent(parent);
        let who = Subject {
            inherited: &inherited,
            plugin,
            declared: &stage.plugin.info().child_kinds,
            grants: &stage.grants,
            pods: &pods,
            namespace,
            family,
            nesting,
        };
        let checked = self.policy.check_desired(who, &resp.desired)?;
        self.policy
            .check_counts(plugin, resp.conditions.len(), resp.events.len())?;
        let status = resp
            .status
            .as_deref()
            .map(|s| self.policy.check_status(plugin, s))
            .transpose()?;
        for c in &resp.conditions {
            self.policy.check_reason(
                plugin,
                &format!("condition {}", c.kind),
                Some(&c.kind),
                &c.reason,
            )?;
        }
        for e in &resp.events {
            self.policy.check_reason(plugin, "event", None, &e.reason)?;
        }
        Ok((checked, resp, status))
    }
}

/// The state of one run between stages.
struct Run {
    /// The parent's name.
    name: String,
    /// The parent's namespace; none for a cluster-scoped parent.
    namespace: Option<String>,
    /// Whose instances a Reuse plugin may use: the namespace, or the cluster-scoped parent.
    tenant: String,
    parent_text: String,
    /// What references by name may point at besides the desired set (policy::references).
    family: Family,
    /// Observed objects as (kind, text).
    observed: Vec<(String, String)>,
    /// The desired set so far, as text, and the kind of each.
    desired_text: Vec<String>,
    desired_kinds: Vec<String>,
    /// Who last produced or changed each desired object: (plugin, digest).
    producers: HashMap<ObjectKey, (String, String)>,
    out: Outcome,
}

/// `value` as JSON text, as its `Display` writes it. `serde_json::to_string` writes into a byte
/// buffer; `Display` goes through a formatter a few bytes at a time, which cost twice as much
/// for the observed children of every reconcile.
fn text(value: &Value) -> String {
    // A `Value`'s keys are strings and its numbers finite: it always serialises.
    serde_json::to_string(value).unwrap_or_default()
}

impl Run {
    fn start(input: &Input<'_>) -> Result<Self, Error> {
        let parent = input.parent;
        let Some(name) = parent.at("/metadata/name").and_then(Value::as_str) else {
            return Err(Error::Parent("metadata.name is missing".into()));
        };
        let namespace = parent
            .at("/metadata/namespace")
            .and_then(Value::as_str)
            .map(str::to_string);
        let tenant = match &namespace {
            Some(ns) => ns.clone(),
            None => format!("cluster-scoped/{name}"),
        };
        let mut family = Family::named_in(parent, &Value::Null);
        let observed = input
            .observed
            .iter()
            .map(|o| {
                let kind = kind_of(o);
                family.add(&kind, o);
                (kind, text(o))
            })
            .collect();
        Ok(Run {
            name: name.to_string(),
            namespace,
            tenant,
            parent_text: text(parent),
            family,
            observed,
            desired_text: input.earlier.iter().map(text).collect(),
            desired_kinds: input.earlier.iter().map(kind_of).collect(),
            producers: HashMap::new(),
            out: Outcome {
                finalized: true,
                ..Outcome::default()
            },
        })
    }

    /// The request for `stage`, and the desired Secrets withheld from it (passed on after it
    /// unchanged: it cannot have edited what it never saw).
    fn request(&self, stage: &Stage, input: &Input<'_>) -> (Request, Vec<String>) {
        let wanted: Vec<&str> = stage.observed_kinds().collect();
        let secrets = stage.grants.reads_secrets();
        let mut shown = Vec::with_capacity(self.desired_text.len());
        let mut withheld = Vec::new();
        for (text, kind) in self.desired_text.iter().zip(&self.desired_kinds) {
            if secrets || kind != SECRET {
                shown.push(text.clone());
            } else {
                withheld.push(text.clone());
            }
        }
        let req = Request {
            phase: input.phase,
            parent: self.parent_text.clone(),
            observed: self
                .observed
                .iter()
                .filter(|(kind, _)| wanted.contains(&kind.as_str()))
                .filter(|(kind, _)| secrets || kind != SECRET)
                .map(|(_, text)| text.clone())
                .collect(),
            desired: shown,
            config: text(&stage.config),
            now: input.now.to_string(),
        };
        (req, withheld)
    }

    /// Takes a stage's checked output in: the new desired set with each object's producer, the
    /// status fragment, conditions, events, requeue and finalized.
    fn absorb(
        &mut self,
        stage: &Stage,
        req: &Request,
        withheld: &[String],
        checked: Vec<Checked>,
        resp: contract::Response,
        status: Option<Map<String, Value>>,
    ) {
        let plugin = &stage.plugin;
        for (object, text) in checked.iter().zip(&resp.desired) {
            let id = object.key();
            // A withheld Secret was not this plugin's to change: its producer stays.
            if withheld.contains(text) && self.producers.contains_key(&id) {
                continue;
            }
            if !req.desired.contains(text) || !self.producers.contains_key(&id) {
                self.producers
                    .insert(id, (plugin.name().to_string(), plugin.digest().to_string()));
            }
        }
        let out = &mut self.out;
        out.desired = checked
            .into_iter()
            .map(|object| {
                let (plugin, digest) = self
                    .producers
                    .get(&object.key())
                    .cloned()
                    .unwrap_or_default();
                Desired {
                    object,
                    plugin,
                    digest,
                }
            })
            .collect();
        self.desired_kinds = out.desired.iter().map(|d| d.object.kind.clone()).collect();
        self.desired_text = resp.desired;
        if let Some(status) = status {
            merge(&mut out.status, status);
        }
        let name = plugin.name().to_string();
        out.conditions
            .extend(resp.conditions.into_iter().map(|mut item| {
                item.message = policy::cut_message(&item.message, MAX_CONDITION_MESSAGE);
                Reported {
                    plugin: name.clone(),
                    item,
                }
            }));
        out.events.extend(resp.events.into_iter().map(|mut item| {
            item.message = policy::cut_message(&item.message, MAX_EVENT_NOTE);
            Reported {
                plugin: name.clone(),
                item,
            }
        }));
        if let Some(secs) = resp.requeue_after_secs {
            let after = Duration::from_secs(secs.into());
            out.requeue_after = Some(out.requeue_after.map_or(after, |r| r.min(after)));
        }
        if req.phase == Phase::Finalize {
            out.finalized &= resp.finalized;
            if !resp.finalized {
                out.unfinalized.push(name);
            }
        }
    }
}

/// Composes two JSON merge patches (RFC 7386): `target` becomes one patch that does what
/// `target` and then `patch` do. A `null` stays in the result, so a later plugin can delete a
/// field from the parent's status (an earlier plugin's value for it is dropped).
///
/// One case a single merge patch cannot express: an earlier fragment deletes an object field
/// (`null`) and a later one sets it to an object again. Applied in turn, the later object would
/// replace the old one whole; composed, it merges into the old one, so keys only the old one
/// had survive. No SampleDB plugin does this.
pub fn merge(target: &mut Map<String, Value>, patch: Map<String, Value>) {
    for (key, value) in patch {
        match value {
            Value::Object(patch) => match target.get_mut(&key) {
                Some(Value::Object(existing)) => merge(existing, patch),
                _ => {
                    target.insert(key, Value::Object(patch));
                }
            },
            other => {
                target.insert(key, other);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn status_fragments_compose_as_json_merge_patches() {
        let mut status = Map::new();
        let obj = |v: Value| v.as_object().cloned().unwrap();
        merge(
            &mut status,
            obj(json!({"phase": "Provisioning", "storage": {"ready": 0, "size": "1Gi"}})),
        );
        merge(
            &mut status,
            obj(json!({"phase": "Ready", "storage": {"ready": 3, "size": null}})),
        );
        // `size: null` deletes the field from the parent's status when the patch is written.
        assert_eq!(
            Value::Object(status),
            json!({"phase": "Ready", "storage": {"ready": 3, "size": null}})
        );
    }

    #[test]
    fn only_an_invalid_parent_is_blamed_on_the_parent() {
        let plugin = |kind| {
            Error::Plugin(contract::Error::Plugin {
                plugin: "p".into(),
                kind,
                message: "m".into(),
            })
        };
        assert!(plugin(contract::PluginErrorKind::InvalidParent).blames_parent());
        assert!(Error::Parent("metadata.name is missing".into()).blames_parent());
        assert!(!plugin(contract::PluginErrorKind::InvalidConfig).blames_parent());
        assert!(!plugin(contract::PluginErrorKind::Failed).blames_parent());
        let timeout = Error::Plugin(contract::Error::Timeout {
            plugin: "p".into(),
            limit: Duration::from_secs(1),
        });
        assert!(!timeout.blames_parent());
    }

    #[test]
    fn kind_of_joins_api_version_and_kind() {
        assert_eq!(
            kind_of(&json!({"apiVersion": "apps/v1", "kind": "StatefulSet"})),
            "apps/v1/StatefulSet"
        );
        assert_eq!(
            kind_of(&json!({"apiVersion": "v1", "kind": "Pod"})),
            "v1/Pod"
        );
    }

    /// Runs of whole pipelines, with plugins written in Rust behind the contract's traits
    /// (`windlass_contract::testing`): no component is built.
    mod runs {
        use std::sync::Mutex;

        use windlass_contract::{
            Response,
            testing::{Native, failed, info},
        };

        use super::*;

        const PARENT: &str = "samples.windlass.dev/v1alpha1/SampleDB";

        fn parent() -> Value {
            json!({
                "apiVersion": "samples.windlass.dev/v1alpha1", "kind": "SampleDB",
                "metadata": {"name": "db", "namespace": "apps", "uid": "u-1", "generation": 1},
                "spec": {},
            })
        }

        fn config_map(name: &str, data: Value) -> String {
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "apps"}, "data": data,
            })
            .to_string()
        }

        fn stage(plugin: Native) -> (Stage, Arc<Native>) {
            let plugin = Arc::new(plugin);
            (Stage::new(plugin.clone()), plugin)
        }

        fn pipeline(stages: Vec<Stage>) -> Pipeline {
            Pipeline {
                stages,
                policy: Arc::new(Policy::default()),
            }
        }

        fn run(p: &Pipeline, phase: Phase) -> Result<Outcome, Error> {
            let parent = parent();
            p.run(Input::new(phase, &parent, &[], "2026-01-01T00:00:00Z"))
        }

        #[test]
        fn plugins_run_in_order_each_seeing_the_desired_set_so_far() {
            let seen = Arc::new(Mutex::new(Vec::new()));
            let (first, _) = stage(Native::new(
                info("first", PARENT, &["v1/ConfigMap"]),
                |_| {
                    Ok(Response {
                        desired: vec![config_map("db-config", json!({"a": "1"}))],
                        status: Some(json!({"phase": "Provisioning", "first": true}).to_string()),
                        conditions: vec![Condition {
                            kind: "Configured".into(),
                            status: true,
                            reason: "Written".into(),
                            message: "".into(),
                        }],
                        requeue_after_secs: Some(30),
                        ..Response::default()
                    })
                },
            ));
            let saw = seen.clone();
            let (second, _) = stage(Native::new(
                info("second", PARENT, &["v1/ConfigMap"]),
                move |req| {
                    saw.lock().unwrap().extend(req.desired.clone());
                    // Hands the first plugin's object on, edited, and adds its own.
                    let mut edited: Value = serde_json::from_str(&req.desired[0]).unwrap();
                    edited["data"]["b"] = json!("2");
                    Ok(Response {
                        desired: vec![edited.to_string(), config_map("db-extra", json!({}))],
                        status: Some(json!({"phase": "Ready"}).to_string()),
                        requeue_after_secs: Some(10),
                        ..Response::default()
                    })
                },
            ));
            let outcome = run(&pipeline(vec![first, second]), Phase::Reconcile).expect("runs");
            let seen = seen.lock().unwrap();
            assert_eq!(seen.len(), 1, "the second plugin sees the first's output");
            assert!(seen[0].contains("db-config"), "{seen:?}");
            let names: Vec<(&str, &str)> = outcome
                .desired
                .iter()
                .map(|d| (d.object.name.as_str(), d.plugin.as_str()))
                .collect();
            // The edited object is the second plugin's now (its provenance); order is kept.
            assert_eq!(names, [("db-config", "second"), ("db-extra", "second")]);
            assert_eq!(
                Value::Object(outcome.status.clone()),
                json!({"phase": "Ready", "first": true})
            );
            assert_eq!(outcome.conditions.len(), 1);
            assert_eq!(outcome.conditions[0].plugin, "first");
            assert_eq!(outcome.requeue_after, Some(Duration::from_secs(10)));
            assert!(!outcome.incomplete());
        }

        #[test]
        fn a_failing_plugin_stops_the_run_naming_it_and_later_plugins_are_not_called() {
            let (first, _) = stage(Native::new(
                info("broken", PARENT, &["v1/ConfigMap"]),
                |_| Err(failed("broken", "no disk")),
            ));
            let (second, later) = stage(Native::new(
                info("later", PARENT, &["v1/ConfigMap"]),
                |_| Ok(Response::default()),
            ));
            let Err(e) = run(&pipeline(vec![first, second]), Phase::Reconcile) else {
                panic!("a failing plugin's run succeeded");
            };
            assert_eq!(e.plugin(), Some("broken"));
            assert_eq!(e.reason(), "PluginFailed");
            assert_eq!(later.calls(), 0, "a plugin after the failure was called");
        }

        /// The fields recorded on `plugin_call` spans, in order: what a trace exporter gets.
        #[derive(Clone, Default)]
        struct CallFields(Arc<Mutex<Vec<(String, String)>>>);

        impl tracing::field::Visit for CallFields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0
                    .lock()
                    .unwrap()
                    .push((field.name().to_string(), format!("{value:?}")));
            }

            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                self.0
                    .lock()
                    .unwrap()
                    .push((field.name().to_string(), value.to_string()));
            }
        }

        impl<S> tracing_subscriber::Layer<S> for CallFields
        where
            S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
        {
            fn on_new_span(
                &self,
                attrs: &tracing::span::Attributes<'_>,
                _: &tracing::span::Id,
                _: tracing_subscriber::layer::Context<'_, S>,
            ) {
                if attrs.metadata().name() == "plugin_call" {
                    attrs.record(&mut self.clone());
                }
            }

            fn on_record(
                &self,
                id: &tracing::span::Id,
                values: &tracing::span::Record<'_>,
                ctx: tracing_subscriber::layer::Context<'_, S>,
            ) {
                if ctx.span(id).is_some_and(|s| s.name() == "plugin_call") {
                    values.record(&mut self.clone());
                }
            }
        }

        #[test]
        fn each_call_is_a_span_saying_which_plugin_what_it_cost_and_how_it_ended() {
            use tracing_subscriber::layer::SubscriberExt as _;
            let (first, _) = stage(Native::new(
                info("first", PARENT, &["v1/ConfigMap"]),
                |_| Ok(Response::default()),
            ));
            let (second, _) = stage(Native::new(
                info("broken", PARENT, &["v1/ConfigMap"]),
                |_| Err(failed("broken", "no disk")),
            ));
            // tracing caches a callsite's interest process-wide when the callsite is first
            // reached, asking the subscriber of the thread that reaches it: a test on another
            // thread, with none, cached "never" for `plugin_call` and this test saw no span (one
            // run of this crate's tests in eight). With a global subscriber that takes every span
            // no thread is without one; the interest is asked again once this test's is current.
            let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry());
            let fields = CallFields::default();
            let subscriber = tracing_subscriber::registry().with(fields.clone());
            let result = tracing::subscriber::with_default(subscriber, || {
                tracing::callsite::rebuild_interest_cache();
                run(&pipeline(vec![first, second]), Phase::Reconcile)
            });
            assert!(result.is_err());
            let fields = fields.0.lock().unwrap().clone();
            let values = |name: &str| -> Vec<&str> {
                fields
                    .iter()
                    .filter(|(n, _)| n == name)
                    .map(|(_, v)| v.as_str())
                    .collect()
            };
            assert_eq!(values("plugin"), ["first", "broken"]);
            assert_eq!(values("phase"), ["Reconcile", "Reconcile"]);
            assert_eq!(values("digest").len(), 2);
            assert_eq!(values("outcome"), ["ok", "PluginFailed"]);
            assert_eq!(values("memory_bytes").len(), 2);
            assert_eq!(values("reused").len(), 2);
            // Only the failed call carries an error status, with the failure.
            assert_eq!(values("otel.status_code"), ["ERROR"]);
            let description = values("otel.status_description");
            assert!(
                description.len() == 1 && description[0].contains("no disk"),
                "{description:?}"
            );
        }

        #[test]
        fn an_ignored_failure_skips_the_plugin_and_marks_the_run_incomplete() {
            let (mut first, _) = stage(Native::new(
                info("optional", PARENT, &["v1/ConfigMap"]),
                |_| Err(failed("optional", "flaky")),
            ));
            first.failure_policy = FailurePolicy::Ignore;
            let (second, later) = stage(Native::new(
                info("storage", PARENT, &["v1/ConfigMap"]),
                |_| {
                    Ok(Response {
                        desired: vec![config_map("db", json!({}))],
                        ..Response::default()
                    })
                },
            ));
            let outcome = run(&pipeline(vec![first, second]), Phase::Reconcile).expect("runs");
            assert!(outcome.incomplete(), "nothing may be pruned on this run");
            assert_eq!(outcome.skipped.len(), 1);
            assert_eq!(outcome.skipped[0].plugin(), Some("optional"));
            assert_eq!(later.calls(), 1);
            assert_eq!(outcome.desired.len(), 1);
        }

        #[test]
        fn output_the_policy_refuses_stops_the_run_with_the_rule_and_the_plugin() {
            let (thief, _) = stage(Native::new(
                info("thief", PARENT, &["v1/ConfigMap"]),
                |_| {
                    let mut other =
                        serde_json::from_str::<Value>(&config_map("x", json!({}))).unwrap();
                    other["metadata"]["namespace"] = json!("kube-system");
                    Ok(Response {
                        desired: vec![other.to_string()],
                        ..Response::default()
                    })
                },
            ));
            let Err(e) = run(&pipeline(vec![thief]), Phase::Reconcile) else {
                panic!("an object in another namespace was accepted");
            };
            assert_eq!(e.plugin(), Some("thief"));
            assert!(e.rule().is_some(), "{e}");
        }

        #[test]
        fn the_finalize_phase_runs_only_finalizing_plugins_and_completes_when_all_say_so() {
            let finalizer = |name: &'static str, done: bool| {
                let mut i = info(name, PARENT, &["v1/ConfigMap"]);
                i.finalizes = true;
                Native::new(i, move |req| {
                    assert_eq!(req.phase, Phase::Finalize);
                    Ok(Response {
                        finalized: done,
                        ..Response::default()
                    })
                })
            };
            let (plain, plain_plugin) = stage(Native::new(
                info("plain", PARENT, &["v1/ConfigMap"]),
                |_| Ok(Response::default()),
            ));
            let (backup, _) = stage(finalizer("backup", true));
            let (storage, _) = stage(finalizer("storage", false));
            let p = pipeline(vec![plain, backup.clone(), storage]);
            let outcome = run(&p, Phase::Finalize).expect("runs");
            assert_eq!(
                plain_plugin.calls(),
                0,
                "a plugin that does not finalize ran"
            );
            assert!(!outcome.finalized);
            assert_eq!(outcome.unfinalized, ["storage"]);
            let (storage, _) = stage(finalizer("storage", true));
            let done = run(&pipeline(vec![backup, storage]), Phase::Finalize).expect("runs");
            assert!(done.finalized);
            assert!(done.unfinalized.is_empty());
        }
    }
}
