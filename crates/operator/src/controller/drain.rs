//! The reconciles running now, so that a host asked to stop lets them finish: it starts no new
//! one (a reconcile waiting at the gate returns without running) and waits, up to
//! `Settings::drain`, for those already past it, then stops the controllers. A reconcile cut
//! off halfway — the drain ran out, or the lease was lost, where nothing waits because another
//! instance may lead — has written part of what it meant to; the next leader's reconcile puts
//! the rest. Its span says `cancelled`, and it is counted so (see `parent::Ending`).

use std::time::Duration;

use tokio::sync::watch;

/// How many reconciles run, and whether the host is draining.
#[derive(Debug, Default)]
pub struct Drain {
    state: watch::Sender<State>,
}

#[derive(Debug, Default, Clone, Copy)]
struct State {
    draining: bool,
    running: usize,
}

/// One reconcile counted as running until this is dropped.
#[derive(Debug)]
pub struct Running<'a>(&'a Drain);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.state.send_modify(|s| s.running -= 1);
    }
}

impl Drain {
    /// Counts a reconcile about to run, or `None` once the host drains: it must not start.
    pub fn enter(&self) -> Option<Running<'_>> {
        let mut entered = false;
        self.state.send_if_modified(|s| {
            entered = !s.draining;
            s.running += usize::from(entered);
            entered
        });
        // Not `then_some`: a `Running` made eagerly and dropped would count one off.
        entered.then(|| Running(self))
    }

    /// Starts no more reconciles and waits until those running have finished, at most `within`.
    /// Returns how many still ran when it gave up (0: all finished).
    pub async fn drain(&self, within: Duration) -> usize {
        self.state.send_modify(|s| s.draining = true);
        self.none_running(within).await
    }

    /// Waits until no reconcile runs, at most `within`, without stopping new ones from
    /// starting. Returns how many still ran when it gave up (0: none).
    pub async fn none_running(&self, within: Duration) -> usize {
        let mut state = self.state.subscribe();
        let finished = tokio::time::timeout(within, state.wait_for(|s| s.running == 0)).await;
        if finished.is_ok() {
            0
        } else {
            self.state.borrow().running
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_drain_waits_for_the_running_and_lets_none_start() {
        let drain = std::sync::Arc::new(Drain::default());
        let first = drain.enter().expect("not draining yet");
        let second = drain.enter().expect("not draining yet");
        let waiting = {
            let drain = drain.clone();
            tokio::spawn(async move { drain.drain(Duration::from_secs(10)).await })
        };
        tokio::task::yield_now().await;
        assert!(
            drain.enter().is_none(),
            "a reconcile started while draining"
        );
        drop(first);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "the drain ended with one running");
        drop(second);
        assert_eq!(waiting.await.unwrap(), 0);
    }

    #[tokio::test]
    async fn a_drain_gives_up_after_its_time_and_says_how_many_ran() {
        let drain = Drain::default();
        let _stuck = drain.enter().expect("not draining yet");
        let started = std::time::Instant::now();
        assert_eq!(drain.drain(Duration::from_millis(200)).await, 1);
        assert!(started.elapsed() >= Duration::from_millis(200));
    }
}
