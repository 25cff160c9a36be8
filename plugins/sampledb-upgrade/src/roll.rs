//! The roll once the data is migrated: the replicas first, then a planned switchover to an
//! updated replica, then the old primary — one primary change instead of a failover whenever
//! the roll restarts the primary's Pod.
//!
//! A StatefulSet's `RollingUpdate` replaces outdated Pods one at a time from the highest ordinal
//! down, while every Pod is ready, and its `partition` holds back every Pod with a lower
//! ordinal. With the primary (`status.primary`, the primary plugin's record) on ordinal `k`:
//!
//! 1. `partition = k + 1`: the replicas above the primary are updated;
//! 2. once they all run the new version and are ready, the primary plugin is asked (the
//!    [`SWITCHOVER_TO`] annotation on the desired StatefulSet, with [`SWITCHOVER_FROM`]
//!    naming the primary it was asked from) to hand the primary over to the lowest of them;
//!    the partition stays until `status.primary` names it;
//! 3. `partition = 0`: the old primary and any replicas below it are updated; the new primary
//!    already runs the new template and is not restarted again.
//!
//! A primary on the highest ordinal has no replica above it, and a partition cannot update a
//! lower ordinal before a higher one: the primary is first handed (planned) to the lowest
//! ready replica, with every Pod held (`partition = replicas`), and the steps above follow —
//! two planned changes there, no failover. A single replica just restarts (nothing to hand
//! over to); with no primary recorded (no primary plugin), the StatefulSet rolls as it would.
//!
//! A switchover asked is waited for only so long (config `switchoverTimeoutSeconds`, from the
//! [`SWITCHOVER_SINCE`] the request carries): a primary plugin removed or failing mid-roll
//! would otherwise hold the old primary's Pod, and the upgrade, for ever. Past it, the
//! partition drops to 0 with a Warning (`SwitchoverTimedOut`): the old primary's Pod is updated
//! without a planned switchover, and the request stays in case the primary plugin comes back.

use std::time::Duration;

use sampledb_api::{
    CONTAINER, SWITCHOVER_FOR, SWITCHOVER_FROM, SWITCHOVER_SINCE, SWITCHOVER_TO, names,
    unix_seconds,
};
use windlass_sdk::{Context, Output, Value, json};

/// What the roll does in this run.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// `spec.updateStrategy.rollingUpdate.partition`: Pods below it keep running the old
    /// template.
    pub partition: i64,
    /// The Pod the primary should move to before its own Pod is updated.
    pub switchover: Option<String>,
    /// When that switchover was first asked (RFC 3339).
    pub since: Option<String>,
    /// What the roll is doing or waiting for (the `RollingOut` condition's message).
    pub doing: String,
    /// The switchover was asked longer ago than the config allows: why the roll goes on
    /// without it (a Warning).
    pub gave_up: Option<String>,
}

/// A database Pod as the roll sees it.
#[derive(Debug)]
struct DbPod {
    name: String,
    ordinal: i64,
    ready: bool,
    /// Runs the new version.
    updated: bool,
}

/// The plan for rolling `name`'s `replicas` Pods to `image`, a switchover waited for at most
/// `patience`.
pub(crate) fn plan(
    ctx: &Context,
    name: &str,
    image: &str,
    replicas: i64,
    patience: Duration,
) -> Plan {
    let mut plan = planned(ctx, name, image, replicas);
    let Some(to) = plan.switchover.as_deref() else {
        return plan;
    };
    // The same request as last time (same Pod) keeps its time; a new one starts now.
    let set = names::statefulset(name);
    let asked = ctx
        .observed_json("apps/v1/StatefulSet")
        .find(|s| s.pointer("/metadata/name").and_then(Value::as_str) == Some(&set))
        .and_then(|s| s.pointer("/metadata/annotations"))
        .filter(|a| a.get(SWITCHOVER_TO).and_then(Value::as_str) == Some(to))
        .and_then(|a| a.get(SWITCHOVER_SINCE)?.as_str())
        .filter(|t| unix_seconds(t).is_some());
    let since = asked.unwrap_or(ctx.now()).to_string();
    let waited = unix_seconds(ctx.now())
        .zip(unix_seconds(&since))
        .map_or(0, |(now, since)| now.saturating_sub(since).max(0));
    let patience_secs = i64::try_from(patience.as_secs()).unwrap_or(i64::MAX);
    let primary = ctx.status("/primary").and_then(Value::as_str).unwrap_or("");
    if waited >= patience_secs {
        let why = format!(
            "no switchover from {primary} to {to} within {}s of asking (is the primary plugin \
             serving?): {primary} is updated without one, and the primary fails over",
            patience.as_secs()
        );
        plan.partition = 0;
        plan.doing = format!("{why}; rolling every replica to {image}");
        plan.gave_up = Some(why);
    } else {
        plan.doing = format!(
            "{} (asked {waited}s ago; after {}s {primary} is updated without it)",
            plan.doing,
            patience.as_secs()
        );
    }
    plan.since = Some(since);
    plan
}

/// The plan, before any wait for a switchover is judged.
fn planned(ctx: &Context, name: &str, image: &str, replicas: i64) -> Plan {
    let set = names::statefulset(name);
    let pods = pods(ctx, name, image, replicas);
    let unready: Vec<&str> = pods
        .iter()
        .filter(|p| !p.ready)
        .map(|p| p.name.as_str())
        .collect();
    let stalled = if unready.is_empty() {
        String::new()
    } else {
        format!(
            "; waiting for {} to be ready (the StatefulSet replaces a Pod only while every Pod is ready)",
            unready.join(", ")
        )
    };
    let primary = ctx
        .status("/primary")
        .and_then(Value::as_str)
        .and_then(|p| Some((p, ordinal(&set, p).filter(|o| *o < replicas)?)));
    let Some((primary, k)) = primary.filter(|_| replicas > 1) else {
        let why = if replicas > 1 {
            "no primary recorded"
        } else {
            "a single replica, nothing to hand over to"
        };
        return Plan {
            partition: 0,
            switchover: None,
            since: None,
            gave_up: None,
            doing: format!("rolling every replica to {image} ({why}){stalled}"),
        };
    };
    let pod = |o: i64| pods.iter().find(|p| p.ordinal == o);
    if pod(k).is_some_and(|p| p.updated) {
        return Plan {
            partition: 0,
            switchover: None,
            since: None,
            gave_up: None,
            doing: format!(
                "the primary {primary} runs {image}; updating the other replicas{stalled}"
            ),
        };
    }
    if k + 1 < replicas {
        let above = k + 1..replicas;
        let above_updated = above
            .clone()
            .all(|o| pod(o).is_some_and(|p| p.updated && p.ready));
        if let Some(to) = pod(k + 1).filter(|_| above_updated).map(|p| &p.name) {
            return Plan {
                partition: k + 1,
                switchover: Some(to.clone()),
                since: None,
                gave_up: None,
                doing: format!(
                    "the replicas above {primary} run {image}; planned switchover from {primary} to {to} before {primary} is updated"
                ),
            };
        }
        let waiting: Vec<String> = above.map(|o| format!("{set}-{o}")).collect();
        return Plan {
            partition: k + 1,
            switchover: None,
            since: None,
            gave_up: None,
            doing: format!(
                "updating the replicas {} to {image} first; the primary {primary} follows after a planned switchover{stalled}",
                waiting.join(", ")
            ),
        };
    }
    // The primary is on the highest ordinal, which the StatefulSet would update first.
    let to = pods
        .iter()
        .filter(|p| p.ready && p.ordinal != k)
        .min_by_key(|p| (!p.updated, p.ordinal));
    Plan {
        partition: replicas,
        switchover: to.map(|p| p.name.clone()),
        since: None,
        gave_up: None,
        doing: match to {
            Some(to) => format!(
                "the primary {primary} is on the highest ordinal, which the StatefulSet updates first: planned switchover to {} before the roll",
                to.name
            ),
            None => format!(
                "the primary {primary} is on the highest ordinal, which the StatefulSet updates first: waiting for a ready replica to hand over to{stalled}"
            ),
        },
    }
}

/// Writes `plan` into the desired StatefulSet: the partition, and the switchover request the
/// primary plugin reads — from `primary` (the primary plugin acts on it only while that is
/// still the primary, so a request made on a stale status is not carried out).
pub(crate) fn apply(
    out: &mut Output,
    name: &str,
    plan: &Plan,
    target: &str,
    primary: Option<&str>,
) {
    let Some(sts) = out.find_mut("apps/v1/StatefulSet", &names::statefulset(name)) else {
        return;
    };
    sts["spec"]["updateStrategy"] =
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": plan.partition}});
    if let Some(to) = &plan.switchover {
        let meta = &mut sts["metadata"];
        if !meta["annotations"].is_object() {
            meta["annotations"] = json!({});
        }
        meta["annotations"][SWITCHOVER_TO] = to.as_str().into();
        if let Some(from) = primary {
            meta["annotations"][SWITCHOVER_FROM] = from.into();
        }
        meta["annotations"][SWITCHOVER_FOR] = format!("the upgrade to {target}").into();
        if let Some(since) = &plan.since {
            meta["annotations"][SWITCHOVER_SINCE] = since.as_str().into();
        }
    }
}

/// The ordinal of `pod` when it is `<set>-<ordinal>`.
fn ordinal(set: &str, pod: &str) -> Option<i64> {
    pod.strip_prefix(set)?
        .strip_prefix('-')?
        .parse()
        .ok()
        .filter(|o| *o >= 0)
}

/// The database Pods below `replicas`, not being deleted. A Pod counts as updated when its
/// database container runs `image`: that is read from the Pod itself, so a run that sees the
/// StatefulSet's status behind its spec (each partition change is a new generation) still
/// knows which Pods run the new version, and never takes the new primary for an old one.
fn pods(ctx: &Context, name: &str, image: &str, replicas: i64) -> Vec<DbPod> {
    let set = names::statefulset(name);
    ctx.observed_json("v1/Pod")
        .filter(|p| {
            p.pointer("/metadata/labels/app.kubernetes.io~1instance")
                .and_then(Value::as_str)
                == Some(name)
                && p.pointer("/metadata/deletionTimestamp").is_none()
        })
        .filter_map(|p| {
            let pod = p.pointer("/metadata/name")?.as_str()?;
            let ordinal = ordinal(&set, pod).filter(|o| *o < replicas)?;
            Some(DbPod {
                name: pod.to_string(),
                ordinal,
                ready: is_ready(p),
                updated: runs(p.pointer("/spec/containers"), image),
            })
        })
        .collect()
}

/// Whether the database container of `containers` runs `image`.
pub(crate) fn runs(containers: Option<&Value>, image: &str) -> bool {
    containers.and_then(Value::as_array).is_some_and(|cs| {
        cs.iter().any(|c| {
            c.get("name").and_then(Value::as_str) == Some(CONTAINER)
                && c.get("image").and_then(Value::as_str) == Some(image)
        })
    })
}

fn is_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some("Ready")
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}
