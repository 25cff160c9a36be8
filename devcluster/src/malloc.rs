//! glibc's allocator, tuned for a process that serves the devcluster.
//!
//! # Why
//! The devcluster keeps every object as a `serde_json::Value` tree and makes and drops such
//! trees for every request, watch event and simulated controller step, on several threads.
//! glibc keeps only 7 freed chunks of each size per thread (its tcache); past that, frees go
//! to the shared bins, and the next larger request consolidates and sorts them. In a hot swap
//! at 10,000 parents, `perf` found **57%** of the devcluster's process in glibc's allocator
//! (`_int_malloc` alone 31%, self), and the API server recorded the swap's last write 60 s
//! after it began, against 45 s for converge's last create. With 2,048 chunks per size in the
//! benchmark's process alone (the host's untouched) the swap took 46 s against 47 s
//! (docs/PERFORMANCE.md).
//!
//! The cache's size is a glibc tunable, read from `GLIBC_TUNABLES` when the process starts;
//! `mallopt` cannot set it. So [`tune`] executes the process again with the tunable added, once
//! (the same binary, arguments and pid).
//! Elsewhere (musl, the image's static binary; other systems) it does nothing.

use std::ffi::OsString;
use std::process::Command;

/// The environment variable glibc reads its tunables from.
pub const TUNABLES: &str = "GLIBC_TUNABLES";

/// The tunable [`tune`] adds: freed chunks kept per size class and thread.
pub const TCACHE: &str = "glibc.malloc.tcache_count=2048";

/// Set on the process [`tune`] executes: the `GLIBC_TUNABLES` it was started with (empty for
/// none), so that its children get theirs back ([`untuned`]) and it is not executed again.
const STARTED_WITH: &str = "WINDLASS_DEVCLUSTER_TUNABLES_BEFORE";

/// The value of `GLIBC_TUNABLES` with [`TCACHE`] added to `before`, or `None` when `before`
/// sets the tcache's size itself (the user's choice is kept).
fn with_tcache(before: &str) -> Option<String> {
    if before
        .split(':')
        .any(|t| t.starts_with("glibc.malloc.tcache_count="))
    {
        return None;
    }
    Some(if before.is_empty() {
        TCACHE.to_string()
    } else {
        format!("{before}:{TCACHE}")
    })
}

/// Executes this process again with [`TCACHE`] in `GLIBC_TUNABLES`, unless it is not linked with
/// glibc, was executed by `tune` already, or the user set the tcache's size (or set tunables
/// that are not UTF-8: left alone). Call it first in `main`, before threads and logging.
/// Returns only when nothing was executed, or when executing failed: the process then goes on
/// with glibc's defaults, and with SIGPIPE at its default action (std restores it before
/// executing and not after a failure), so a write to a closed pipe ends it.
///
/// glibc 2.26 to 2.29 take at most 127 and ignore a larger count: there the process is
/// executed again for nothing. Under valgrind, executing leaves the tool unless it traces
/// children (`--trace-children=yes`); setting `glibc.malloc.tcache_count` yourself avoids it.
pub fn tune() {
    if !cfg!(all(target_os = "linux", target_env = "gnu"))
        || std::env::var_os(STARTED_WITH).is_some()
    {
        return;
    }
    let before = match std::env::var_os(TUNABLES).map(OsString::into_string) {
        None => String::new(),
        Some(Ok(before)) => before,
        Some(Err(_)) => return,
    };
    let Some(tunables) = with_tcache(&before) else {
        return;
    };
    let mut args = std::env::args_os();
    let argv0 = args.next().unwrap_or_default();
    // The binary by its path, so that the process keeps its name in `ps` and `top`; the link
    // to the running image if the file is gone (rebuilt meanwhile).
    let exe = std::env::current_exe()
        .ok()
        .filter(|p| p.is_file())
        .unwrap_or_else(|| "/proc/self/exe".into());
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .env(TUNABLES, tunables)
        .env(STARTED_WITH, &before);
    exec(cmd, argv0);
}

#[cfg(unix)]
fn exec(mut cmd: Command, argv0: OsString) {
    use std::os::unix::process::CommandExt as _;
    // `exec` returns only on failure; then the process goes on (see `tune`).
    let _ = cmd.arg0(argv0).exec();
}

#[cfg(not(unix))]
fn exec(_: Command, _: OsString) {}

/// Gives `cmd` (a child of a process [`tune`] executed) the `GLIBC_TUNABLES` the process was
/// started with: a host or controller it starts runs as it would anywhere else. A program that
/// calls `tune` calls this on the programs it starts that should not be tuned.
pub fn untuned(cmd: &mut Command) {
    let Some(before) = std::env::var_os(STARTED_WITH) else {
        return;
    };
    if before.is_empty() {
        cmd.env_remove(TUNABLES);
    } else {
        cmd.env(TUNABLES, before);
    }
    cmd.env_remove(STARTED_WITH);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tcache_is_added_to_the_users_tunables_unless_they_size_it() {
        assert_eq!(with_tcache("").as_deref(), Some(TCACHE));
        assert_eq!(
            with_tcache("glibc.malloc.arena_max=2").as_deref(),
            Some("glibc.malloc.arena_max=2:glibc.malloc.tcache_count=2048")
        );
        assert_eq!(with_tcache("glibc.malloc.tcache_count=7"), None);
        assert_eq!(
            with_tcache("glibc.malloc.arena_max=2:glibc.malloc.tcache_count=0"),
            None
        );
        // Another tunable whose name only starts alike is not the tcache's count.
        assert!(with_tcache("glibc.malloc.tcache_max=64").is_some());
    }
}
