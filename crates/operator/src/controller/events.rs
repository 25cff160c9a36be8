//! The host's events (events.k8s.io/v1) on parents: its own warnings and the plugins' events.
//!
//! # Why not kube-runtime's `Recorder`
//! It counts an event into the series of an earlier one with the same type, reason, action and
//! object, whatever its note, and keeps the earlier note: "primary moved from -0 to -1 (x8)" was
//! shown when the primary had moved back, "backup …460 completed (x7)" named the first backup
//! seven times. Events that say different things are different events, as client-go counts
//! them (its key holds the note).
//!
//! # Guarantees
//! - Two events are one series exactly when their object, type, reason and note are equal and
//!   the earlier one was seen within [`SERIES_TTL`]; the series' event then carries the count
//!   and the time it was last seen (`series`), its note unchanged because it is the same.
//! - A series whose event is gone from the API server (its events expire) starts again as a new
//!   event.
//! - What is remembered is forgotten [`SERIES_TTL`] after it was last seen: it counts no event
//!   into its series from then on, and is dropped by the next sweep ([`SWEEP_EVERY`]), so that a
//!   publish costs O(1), not O(events remembered).
//! - A note over the API's limit is cut ([`windlass_policy::MAX_EVENT_NOTE`] bytes), here and
//!   only here, for every caller.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::{
        core::v1::ObjectReference,
        events::v1::{Event, EventSeries},
    },
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;

/// How long after it was last seen an event can still be counted into a series (client-go's
/// series window is six minutes too).
pub const SERIES_TTL: Duration = Duration::from_secs(6 * 60);

/// How often what is remembered is swept of series older than [`SERIES_TTL`].
pub const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// What one event says, on one object.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    namespace: String,
    regarding: String,
    warning: bool,
    reason: String,
    note: String,
}

/// The event a series is counted on.
#[derive(Debug, Clone)]
struct Series {
    name: String,
    count: i32,
    seen: Instant,
}

/// The series seen within [`SERIES_TTL`] (and, until the next sweep, some older ones).
#[derive(Debug)]
struct Remembered {
    series: HashMap<Key, Series>,
    swept: Instant,
}

impl Remembered {
    fn new(now: Instant) -> Self {
        Remembered {
            series: HashMap::new(),
            swept: now,
        }
    }

    /// The series `key` counts into at `now`, if one was seen within [`SERIES_TTL`]; sweeps
    /// the older ones at most once per [`SWEEP_EVERY`].
    fn earlier(&mut self, key: &Key, now: Instant) -> Option<Series> {
        if now.duration_since(self.swept) >= SWEEP_EVERY {
            self.series
                .retain(|_, s| now.duration_since(s.seen) < SERIES_TTL);
            self.swept = now;
        }
        self.series
            .get(key)
            .filter(|s| now.duration_since(s.seen) < SERIES_TTL)
            .cloned()
    }
}

/// Publishes events on objects as one reporting controller and instance.
pub struct Recorder {
    client: Client,
    controller: String,
    instance: String,
    series: Mutex<Remembered>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("controller", &self.controller)
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// A recorder reporting as `controller` (events' `reportingController`) from `instance`.
    pub fn new(client: Client, controller: &str, instance: &str) -> Self {
        Recorder {
            client,
            controller: controller.to_string(),
            instance: instance.to_string(),
            series: Mutex::new(Remembered::new(Instant::now())),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Remembered> {
        self.series.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes an event on `regarding`, as a new event or counted into the series of an
    /// equal one (see the module's guarantees). `action` is what the controller was doing; a
    /// `note` over the API's limit is cut.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        warning: bool,
        reason: &str,
        action: &str,
        note: &str,
    ) -> kube::Result<()> {
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string());
        let note = windlass_policy::cut_message(note, windlass_policy::MAX_EVENT_NOTE);
        let key = Key {
            namespace: namespace.clone(),
            regarding: regarding
                .uid
                .clone()
                .or_else(|| regarding.name.clone())
                .unwrap_or_default(),
            warning,
            reason: reason.to_string(),
            note: note.clone(),
        };
        let now = Instant::now();
        let earlier = self.lock().earlier(&key, now);
        let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let stamp = Timestamp::now();
        if let Some(earlier) = earlier {
            let count = earlier.count + 1;
            let patch = json!({"series": EventSeries {
                count,
                last_observed_time: MicroTime(stamp),
            }});
            match events
                .patch(
                    &earlier.name,
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(_) => {
                    self.lock().series.insert(
                        key,
                        Series {
                            name: earlier.name,
                            count,
                            seen: now,
                        },
                    );
                    return Ok(());
                }
                // The event expired: the series starts again.
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let name = format!(
            "{}.{:x}",
            regarding.name.as_deref().unwrap_or(&self.controller),
            stamp.as_nanosecond()
        );
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(namespace),
                ..ObjectMeta::default()
            },
            action: Some(action.to_string()),
            reason: Some(reason.to_string()),
            note: Some(note),
            type_: Some(if warning { "Warning" } else { "Normal" }.to_string()),
            event_time: Some(MicroTime(stamp)),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Event::default()
        };
        let created = events.create(&PostParams::default(), &event).await?;
        self.lock().series.insert(
            key,
            Series {
                name: created.metadata.name.unwrap_or_default(),
                count: 1,
                seen: now,
            },
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(note: &str) -> Key {
        Key {
            namespace: "shop".into(),
            regarding: "uid-1".into(),
            warning: true,
            reason: "FailedOver".into(),
            note: note.into(),
        }
    }

    #[test]
    fn a_series_counts_only_within_its_ttl_and_old_ones_are_swept_once_a_while() {
        let start = Instant::now();
        let mut remembered = Remembered::new(start);
        let series = |name: &str, seen: Instant| Series {
            name: name.into(),
            count: 1,
            seen,
        };
        remembered.series.insert(key("a"), series("a.1", start));
        let later = start + Duration::from_secs(30);
        remembered.series.insert(key("b"), series("b.1", later));
        assert_eq!(
            remembered.earlier(&key("a"), later).map(|s| s.name),
            Some("a.1".into())
        );
        // Past its TTL "a" counts nothing, though the sweep has not run yet.
        let past_a = start + SERIES_TTL + Duration::from_secs(10);
        assert_eq!(
            remembered.earlier(&key("b"), past_a).map(|s| s.name),
            Some("b.1".into())
        );
        assert!(remembered.earlier(&key("a"), past_a).is_none());
        // The sweep ran (more than SWEEP_EVERY since the last): "a" is gone, "b" stays.
        assert_eq!(remembered.series.len(), 1);
        assert_eq!(remembered.swept, past_a);
        // Within SWEEP_EVERY of the last sweep nothing is swept, even what expired.
        let past_b = later + SERIES_TTL + Duration::from_secs(1);
        assert!(past_b.duration_since(past_a) < SWEEP_EVERY);
        assert!(remembered.earlier(&key("b"), past_b).is_none());
        assert_eq!(remembered.series.len(), 1);
    }
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::{Resource as _, api::DeleteParams};
    use windlass_devcluster::{DevCluster, Options};

    /// (note, count) of every event on `name`, oldest first.
    async fn series_of(events: &Api<Event>, name: &str) -> Vec<(String, i32)> {
        let mut listed: Vec<Event> = events
            .list(&Default::default())
            .await
            .expect("events")
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .collect();
        listed.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
        listed
            .into_iter()
            .map(|e| (e.note.unwrap_or_default(), e.series.map_or(1, |s| s.count)))
            .collect()
    }

    #[tokio::test]
    async fn events_that_say_different_things_are_different_events_and_equal_ones_a_series() {
        let dev = DevCluster::start(Options::default())
            .await
            .expect("devcluster starts");
        let client = dev.client();
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let map = maps
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "orders"}})).unwrap(),
            )
            .await
            .expect("a ConfigMap");
        let regarding = map.object_ref(&());
        let recorder = Recorder::new(client.clone(), "windlass", "test");
        let events: Api<Event> = Api::namespaced(client.clone(), "default");
        for note in [
            "moved from -0 to -1",
            "moved from -1 to -0",
            "moved from -0 to -1",
        ] {
            recorder
                .publish(&regarding, true, "FailedOver", "Reconcile", note)
                .await
                .expect("published");
        }
        // Another reason with the same note, and a Normal one: events of their own.
        recorder
            .publish(
                &regarding,
                true,
                "Other",
                "Reconcile",
                "moved from -0 to -1",
            )
            .await
            .expect("published");
        recorder
            .publish(
                &regarding,
                false,
                "FailedOver",
                "Reconcile",
                "moved from -0 to -1",
            )
            .await
            .expect("published");
        assert_eq!(
            series_of(&events, "orders").await,
            [
                ("moved from -0 to -1".to_string(), 2),
                ("moved from -1 to -0".to_string(), 1),
                ("moved from -0 to -1".to_string(), 1),
                ("moved from -0 to -1".to_string(), 1),
            ]
        );
        let listed = events
            .list(&Default::default())
            .await
            .expect("events")
            .items;
        let first = listed
            .iter()
            .find(|e| e.series.is_some())
            .expect("the series");
        assert_eq!(first.type_.as_deref(), Some("Warning"));
        assert_eq!(first.reason.as_deref(), Some("FailedOver"));
        assert_eq!(first.reporting_controller.as_deref(), Some("windlass"));
        assert_eq!(first.reporting_instance.as_deref(), Some("test"));
        assert_eq!(first.action.as_deref(), Some("Reconcile"));
        assert!(
            first.series.as_ref().unwrap().last_observed_time.0
                >= first.event_time.as_ref().unwrap().0
        );

        // The series' event expired: the next equal event starts a new one.
        for e in &listed {
            events
                .delete(&e.metadata.name.clone().unwrap(), &DeleteParams::default())
                .await
                .expect("deleted");
        }
        recorder
            .publish(
                &regarding,
                true,
                "FailedOver",
                "Reconcile",
                "moved from -1 to -0",
            )
            .await
            .expect("published again");
        assert_eq!(
            series_of(&events, "orders").await,
            [("moved from -1 to -0".to_string(), 1)]
        );
    }
}
