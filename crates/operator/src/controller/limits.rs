//! Per-parent rate limits: how often a parent is reconciled, and how many plugin events it
//! gets. Token buckets keyed by the parent's uid.
//!
//! # Why
//! A plugin decides when it is run again (`requeue-after`) and, through the children it writes,
//! what triggers the next run: one that asks for `0` or keeps creating and pruning an object
//! would otherwise reconcile its parent as fast as the API server answers. Events likewise:
//! client-go's recorder drops an object's events beyond a burst (its spam filter); the host
//! does the same for what plugins report.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

/// Token buckets, one per key: `burst` tokens, one more every `every`.
#[derive(Debug)]
pub struct Buckets {
    burst: u32,
    every: Duration,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

/// How many keys are kept before full buckets are forgotten.
const FORGET_ABOVE: usize = 10_000;

impl Buckets {
    /// Buckets of `burst` tokens refilled at one per `every`.
    pub fn new(burst: u32, every: Duration) -> Self {
        Buckets {
            burst: burst.max(1),
            every: every.max(Duration::from_micros(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes a token for `key`: `Ok` when there was one, else how long until there is.
    ///
    /// # Errors
    /// The wait until the next token.
    pub fn take(&self, key: &str, now: Instant) -> Result<(), Duration> {
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() > FORGET_ABOVE {
            let (burst, every) = (f64::from(self.burst), self.every);
            buckets.retain(|_, (tokens, at)| {
                *tokens + now.saturating_duration_since(*at).as_secs_f64() / every.as_secs_f64()
                    < burst
            });
        }
        let (tokens, at) = buckets
            .entry(key.to_string())
            .or_insert((f64::from(self.burst), now));
        let refilled = now.saturating_duration_since(*at).as_secs_f64() / self.every.as_secs_f64();
        *tokens = (*tokens + refilled).min(f64::from(self.burst));
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(self.every.mul_f64(1.0 - *tokens))
        }
    }

    /// Forgets a parent's buckets (it was deleted): the key that is its uid, and every key
    /// `<uid>/<more>` (an event bucket per plugin).
    pub fn forget_parent(&self, uid: &str) {
        let prefix = format!("{uid}/");
        self.buckets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|key, _| key != uid && !key.starts_with(&prefix));
    }

    /// How many keys are kept.
    pub fn len(&self) -> usize {
        self.buckets.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether no key is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_goes_through_then_one_token_per_period() {
        let b = Buckets::new(3, Duration::from_secs(1));
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(b.take("p", t0).is_ok());
        }
        let wait = b.take("p", t0).unwrap_err();
        assert!(
            wait > Duration::from_millis(900) && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        assert!(b.take("p", t0 + Duration::from_millis(1_100)).is_ok());
        assert!(b.take("p", t0 + Duration::from_millis(1_200)).is_err());
        // Keys are independent.
        assert!(b.take("q", t0).is_ok());
    }

    #[test]
    fn forgetting_a_parent_forgets_its_uid_and_every_key_under_it() {
        let b = Buckets::new(3, Duration::from_secs(1));
        let t0 = Instant::now();
        for key in ["u1", "u1/storage", "u1/backup", "u10/storage", "u2"] {
            b.take(key, t0).unwrap();
        }
        b.forget_parent("u1");
        assert_eq!(b.len(), 2, "u10/storage and u2 stay");
        b.forget_parent("u10");
        b.forget_parent("u2");
        assert!(b.is_empty());
    }

    #[test]
    fn a_flood_of_requests_is_held_to_the_rate() {
        let b = Buckets::new(10, Duration::from_millis(500));
        let t0 = Instant::now();
        // 20 attempts a second for 10 seconds.
        let admitted = (0..200)
            .filter(|i| b.take("p", t0 + Duration::from_millis(50 * i)).is_ok())
            .count();
        // The burst plus two a second.
        assert!((29..=31).contains(&admitted), "{admitted}");
    }
}
