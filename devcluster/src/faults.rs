//! Fault injection: per-verb error rates (500, 429 with `Retry-After`, 409), a mix of codes on
//! every verb, requests that time out (answered 504 after a delay, as kube-apiserver answers a
//! request past its timeout), added latency, watch streams cut every N seconds, and restarts that drop every connection and watch while
//! the store (and so resourceVersion continuity) survives.
//!
//! Set at run time through [`Faults`] (from `DevCluster::faults()`) or over HTTP:
//! `PUT /devcluster/faults` with a [`FaultConfig`] as JSON, `POST /devcluster/restart`.
//!
//! [`Faults::hold`] holds the next request that matches in flight, for a test to act at that
//! moment (kill its client mid-apply, say), until the test lets it go.

use crate::error::ApiError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::{oneshot, watch};

/// An injected error: the HTTP code and the fraction of requests that get it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorRate {
    /// 500, 429 or 409 (any code is answered as a `Status` with the matching reason).
    pub code: u16,
    /// 0.0 ..= 1.0.
    pub rate: f64,
    /// `Retry-After` seconds for 429s (default 1).
    #[serde(default)]
    pub retry_after_secs: Option<u64>,
}

/// Every fault, as set now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultConfig {
    /// By verb: `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, or `*` for all.
    #[serde(default)]
    pub errors: BTreeMap<String, ErrorRate>,
    /// Added to every API request (default 0).
    #[serde(default)]
    pub latency_ms: u64,
    /// Watch streams end after this many seconds (default: never, beyond `timeoutSeconds`).
    #[serde(default)]
    pub watch_cut_secs: Option<u64>,
    /// On every verb, after `errors` (a request gets at most one fault): each code with its own
    /// rate; the rates add up (e.g. 500, 409 and 429 at 10% together).
    #[serde(default)]
    pub mix: Vec<ErrorRate>,
    /// A fraction of requests that time out: held for `after_ms`, then answered 504.
    #[serde(default)]
    pub timeouts: Option<Timeouts>,
}

/// Requests that run past the server's timeout.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Timeouts {
    /// 0.0 ..= 1.0.
    pub rate: f64,
    /// How long the request is held before the 504.
    pub after_ms: u64,
}

/// A request as [`Faults::hold`] matches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestInfo {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: String,
    /// The API group, empty for the core group.
    pub group: String,
    /// The resource's plural, e.g. `statefulsets`.
    pub resource: String,
    /// `status`, `scale`…
    pub subresource: Option<String>,
    /// Empty for none.
    pub namespace: String,
    /// Empty for none.
    pub name: String,
}

type Matcher = Box<dyn Fn(&RequestInfo) -> bool + Send + Sync>;

/// A request held in flight by [`Faults::hold`]; dropping it lets the request go on.
#[derive(Debug)]
pub struct Held {
    /// The request.
    pub request: RequestInfo,
    _release: oneshot::Sender<()>,
}

/// How long a held request waits at most when its holder neither drops it nor goes away.
const HOLD_LIMIT: Duration = Duration::from_secs(60);

/// The fault switchboard.
pub struct Faults {
    config: Mutex<FaultConfig>,
    restarts: watch::Sender<u64>,
    rng: AtomicU64,
    holds: Mutex<Vec<(Matcher, oneshot::Sender<Held>)>>,
    /// `holds.len()`, read without the lock on every request.
    holding: AtomicUsize,
    /// How many of each code were injected, since the start.
    injected: Mutex<BTreeMap<u16, u64>>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults")
            .field("config", &self.config())
            .field("holds", &self.holding.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Default for Faults {
    fn default() -> Self {
        let seed = jiff::Timestamp::now().as_nanosecond() as u64 | 1;
        Self {
            config: Mutex::new(FaultConfig::default()),
            restarts: watch::channel(0).0,
            rng: AtomicU64::new(seed),
            holds: Mutex::new(Vec::new()),
            holding: AtomicUsize::new(0),
            injected: Mutex::new(BTreeMap::new()),
        }
    }
}

impl Faults {
    /// The current configuration.
    pub fn config(&self) -> FaultConfig {
        self.config.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Replaces the whole configuration.
    pub fn set(&self, config: FaultConfig) {
        if let Ok(mut c) = self.config.lock() {
            *c = config;
        }
    }

    /// Makes a fraction `rate` of requests with `verb` (or `*`) fail with `code`.
    pub fn set_error_rate(&self, verb: &str, code: u16, rate: f64) {
        if let Ok(mut c) = self.config.lock() {
            c.errors.insert(
                verb.to_string(),
                ErrorRate {
                    code,
                    rate,
                    retry_after_secs: None,
                },
            );
        }
    }

    /// Adds latency to every API request.
    pub fn set_latency(&self, latency: Duration) {
        if let Ok(mut c) = self.config.lock() {
            c.latency_ms = latency.as_millis() as u64;
        }
    }

    /// Cuts every watch stream after `every` (None: never).
    pub fn set_watch_cut(&self, every: Option<Duration>) {
        if let Ok(mut c) = self.config.lock() {
            c.watch_cut_secs = every.map(|d| d.as_secs().max(1));
        }
    }

    /// How many answers of each code were injected since the start (a fault proxy's 410s for
    /// watches from expired history included).
    pub fn injected(&self) -> BTreeMap<u16, u64> {
        self.injected.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// Counts one injected answer with `code`.
    pub(crate) fn count(&self, code: u16) {
        if let Ok(mut m) = self.injected.lock() {
            *m.entry(code).or_default() += 1;
        }
    }

    /// Removes every fault.
    pub fn clear(&self) {
        self.set(FaultConfig::default());
    }

    /// Drops every open connection and watch; the store and its resourceVersions stay.
    pub fn restart(&self) {
        self.restarts.send_modify(|n| *n += 1);
    }

    /// A receiver that changes on each restart (connections and watches end on a change).
    pub fn restarts(&self) -> watch::Receiver<u64> {
        self.restarts.subscribe()
    }

    /// Holds the next request that `matches` (and gets no injected fault) in flight: the
    /// receiver gets it as [`Held`], and the request goes on once that is dropped (or after a
    /// minute). Dropping the receiver first withdraws the hold.
    pub fn hold(
        &self,
        matches: impl Fn(&RequestInfo) -> bool + Send + Sync + 'static,
    ) -> oneshot::Receiver<Held> {
        let (tx, rx) = oneshot::channel();
        if let Ok(mut holds) = self.holds.lock() {
            holds.push((Box::new(matches), tx));
            self.holding.store(holds.len(), Ordering::Relaxed);
        }
        rx
    }

    /// For the server, on each request: when a hold matches, hands the request to its holder
    /// and waits until it is let go.
    pub(crate) async fn held(&self, request: impl FnOnce() -> RequestInfo) {
        if self.holding.load(Ordering::Relaxed) == 0 {
            return;
        }
        let request = request();
        let release = {
            let Ok(mut holds) = self.holds.lock() else {
                return;
            };
            holds.retain(|(_, tx)| !tx.is_closed());
            let found = holds.iter().position(|(m, _)| m(&request));
            let taken = found.map(|i| holds.remove(i));
            self.holding.store(holds.len(), Ordering::Relaxed);
            let Some((_, tx)) = taken else {
                return;
            };
            let (release_tx, release_rx) = oneshot::channel();
            let held = Held {
                request,
                _release: release_tx,
            };
            if tx.send(held).is_err() {
                return;
            }
            release_rx
        };
        let _ = tokio::time::timeout(HOLD_LIMIT, release).await;
    }

    fn random(&self) -> f64 {
        // xorshift64*: uniform enough for fault rates, lock-free.
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng.store(x, Ordering::Relaxed);
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The injected latency and error, if any, for one request with `verb` (counted in
    /// [`Faults::injected`]).
    pub fn decide(&self, verb: &str) -> (Duration, Option<ApiError>) {
        let (latency, err) = self.draw(verb);
        if let Some(e) = &err {
            self.count(e.code);
        }
        (latency, err)
    }

    fn draw(&self, verb: &str) -> (Duration, Option<ApiError>) {
        let c = self.config();
        let latency = Duration::from_millis(c.latency_ms);
        if let Some(t) = c.timeouts
            && self.random() < t.rate
        {
            return (
                latency + Duration::from_millis(t.after_ms),
                Some(ApiError::timeout()),
            );
        }
        let rate = c.errors.get(verb).or_else(|| c.errors.get("*")).copied();
        let mixed = || {
            let mut draw = self.random();
            c.mix.iter().copied().find(|r| {
                draw -= r.rate;
                draw < 0.0
            })
        };
        let err = rate
            .filter(|r| self.random() < r.rate)
            .or_else(mixed)
            .map(|r| match r.code {
            429 => ApiError::too_many_requests(r.retry_after_secs.unwrap_or(1)),
            409 => ApiError::conflict("", "injected", "fault", "the object has been modified; please apply your changes to the latest version and try again"),
            code => {
                let mut e = ApiError::internal(format!("injected fault on {verb}"));
                e.code = code;
                e
            }
        });
        (latency, err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_rate_always_fails_and_a_zero_rate_never_does() {
        let f = Faults::default();
        f.set_error_rate("create", 429, 1.0);
        f.set_error_rate("get", 500, 0.0);
        let (_, e) = f.decide("create");
        let e = e.expect("injected");
        assert_eq!((e.code, e.retry_after), (429, Some(1)));
        assert!((0..100).all(|_| f.decide("get").1.is_none()));
        assert!(f.decide("list").1.is_none());
    }

    #[test]
    fn a_mix_of_codes_fails_each_at_its_rate_and_timeouts_answer_504_late() {
        let f = Faults::default();
        f.set(FaultConfig {
            mix: [(500, 0.1), (409, 0.1), (429, 0.1)]
                .into_iter()
                .map(|(code, rate)| ErrorRate {
                    code,
                    rate,
                    retry_after_secs: Some(2),
                })
                .collect(),
            timeouts: Some(Timeouts {
                rate: 0.05,
                after_ms: 250,
            }),
            ..FaultConfig::default()
        });
        let mut counts = BTreeMap::new();
        for _ in 0..10_000 {
            let (latency, e) = f.decide("patch");
            let code = e.as_ref().map_or(200, |e| e.code);
            if let Some(e) = &e
                && e.code == 429
            {
                assert_eq!(e.retry_after, Some(2));
            }
            if code == 504 {
                assert_eq!(latency, Duration::from_millis(250));
            }
            *counts.entry(code).or_insert(0) += 1;
        }
        // 5% time out; of the rest, 10% each of 500, 409 and 429.
        for (code, low, high) in [
            (504, 400, 600),
            (500, 800, 1100),
            (409, 800, 1100),
            (429, 800, 1100),
        ] {
            let n = counts.get(&code).copied().unwrap_or(0);
            assert!(
                (low..high).contains(&n),
                "{code}: {n} of 10000 ({counts:?})"
            );
        }
    }

    fn request(verb: &str, resource: &str) -> RequestInfo {
        RequestInfo {
            verb: verb.into(),
            group: "apps".into(),
            resource: resource.into(),
            subresource: None,
            namespace: "default".into(),
            name: "db".into(),
        }
    }

    #[tokio::test]
    async fn a_hold_takes_the_first_matching_request_and_keeps_it_until_dropped() {
        let f = std::sync::Arc::new(Faults::default());
        let mut rx = f.hold(|r| r.verb == "patch" && r.resource == "statefulsets");
        // Not matching: goes through at once.
        tokio::time::timeout(
            Duration::from_secs(1),
            f.held(|| request("get", "statefulsets")),
        )
        .await
        .expect("a request the hold does not match is not held");
        assert!(rx.try_recv().is_err());
        let server = f.clone();
        let patch =
            tokio::spawn(async move { server.held(|| request("patch", "statefulsets")).await });
        let held = rx.await.expect("the matching request is handed over");
        assert_eq!(held.request, request("patch", "statefulsets"));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!patch.is_finished(), "held until dropped");
        drop(held);
        tokio::time::timeout(Duration::from_secs(1), patch)
            .await
            .expect("let go once dropped")
            .unwrap();
        // Taken once: the next one goes through.
        tokio::time::timeout(
            Duration::from_secs(1),
            f.held(|| request("patch", "statefulsets")),
        )
        .await
        .expect("a hold takes one request");
    }

    #[tokio::test]
    async fn a_withdrawn_hold_holds_nothing() {
        let f = Faults::default();
        drop(f.hold(|_| true));
        tokio::time::timeout(
            Duration::from_secs(1),
            f.held(|| request("patch", "statefulsets")),
        )
        .await
        .expect("nobody waits for it");
    }

    #[test]
    fn half_rate_fails_roughly_half_the_time() {
        let f = Faults::default();
        f.set_error_rate("*", 500, 0.5);
        let failed = (0..2000).filter(|_| f.decide("patch").1.is_some()).count();
        assert!((700..1300).contains(&failed), "{failed}");
    }

    #[test]
    fn the_config_round_trips_as_json() {
        let json =
            r#"{"errors":{"create":{"code":500,"rate":0.25}},"latencyMs":5,"watchCutSecs":2}"#;
        let c: FaultConfig = serde_json::from_str(json).expect("parses");
        assert_eq!(c.errors["create"].rate, 0.25);
        assert_eq!(c.watch_cut_secs, Some(2));
    }
}
