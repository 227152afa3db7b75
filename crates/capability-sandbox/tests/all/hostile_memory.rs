//! Memory: the memory limit holds for the whole sandbox, not just for each process's private
//! heap. Shared anonymous mappings, SysV shared memory, memfds (mapped or only written), /tmp
//! pages and child processes are all counted: the guest is stopped (or refused) near the
//! limit, never 8x past it, the receipt names the mechanism that enforced the limit, and the
//! host still answers afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use crate::common::{Lang, Outcome, Package, assert_host_alive, limits};
use capability_sandbox::{
    Grants, Invocation, Limits, ProcessLimits, ProcessSandbox, SandboxConfig, SandboxError,
};
use serde_json::{Value, json};

/// 64 MiB of memory (node itself needs more than that to start: 128 MiB for it).
fn limit(lang: Lang) -> u64 {
    if lang == Lang::Js {
        128 << 20
    } else {
        64 << 20
    }
}

/// Files and /tmp large enough that only the memory limit can stop 512 MiB.
fn memory_limits(lang: Lang) -> Limits<ProcessLimits> {
    let mut limits = limits();
    limits.memory_bytes = limit(lang);
    limits.boundary.max_file_size = 2 << 30;
    limits.tmp_bytes = 1 << 30;
    limits
}

/// The attempt to touch 512 MiB was stopped by the memory limit (the guest was killed or its
/// allocation refused with ENOMEM), or refused outright with one of `refusals`.
fn assert_stopped(out: &Outcome, lang: Lang, probe: &Value, refusals: &[&str]) {
    match &out.result {
        Err(SandboxError::MemoryLimit { limit: l, .. }) => assert_eq!(*l, limit(lang)),
        Err(SandboxError::Guest(g)) if refusals.contains(&g.code.as_deref().unwrap_or("")) => {}
        Ok(v) => panic!("{lang:?} {probe}: not stopped, the guest reports {v}"),
        Err(e) => panic!(
            "{lang:?} {probe}: expected the memory limit, got {e} ({e:?})\nstderr: {}",
            out.stderr
        ),
    }
    let applied = out.boundary.limit("memoryBytes").unwrap();
    assert_eq!(applied.value, limit(lang));
}

/// Whether this host offers the sandbox a memory cgroup: a writable cgroup v1 `memory` group
/// of this process, or a writable cgroup v2 group delegating `memory` (and `pids`).
fn host_has_memory_cgroup() -> bool {
    let writable = |p: &Path| {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: access(2) on a NUL-terminated path.
        unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
    };
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mount_of = |fstype: &str, option: Option<&str>| {
        mountinfo.lines().find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let mut r = right.split_whitespace();
            let ty = r.next()?;
            let opts = r.nth(1)?;
            (ty == fstype && option.is_none_or(|o| opts.split(',').any(|x| x == o)))
                .then(|| PathBuf::from(left.split_whitespace().nth(4).unwrap()))
        })
    };
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next(), parts.next());
        let (Some(controllers), Some(path)) = (controllers, path) else {
            continue;
        };
        let rel = path.trim_start_matches('/');
        if controllers.split(',').any(|c| c == "memory")
            && let Some(m) = mount_of("cgroup", Some("memory"))
            && writable(&m.join(rel))
        {
            return true;
        }
        if controllers.is_empty()
            && let Some(m) = mount_of("cgroup2", None)
        {
            let dir = m.join(rel);
            let sub =
                std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
            let has = |c: &str| sub.split_whitespace().any(|x| x == c);
            if has("memory") && has("pids") && writable(&dir) {
                return true;
            }
        }
    }
    false
}

/// With a memory cgroup, the report names it and claims enforcement.
fn assert_cgroup_mechanism(out: &Outcome) -> bool {
    let applied = out.boundary.limit("memoryBytes").unwrap();
    if !host_has_memory_cgroup() {
        return false;
    }
    assert!(
        applied.mechanism.starts_with("cgroup-v1-memory")
            || applied.mechanism.starts_with("cgroup-v2-memory.max"),
        "the host has a memory cgroup but the report names {applied:?}"
    );
    assert!(applied.enforced, "{applied:?}");
    true
}

fn run(lang: Lang, probe: Value, grants: &Grants) -> Outcome {
    let pkg = Package::new(lang);
    pkg.run(probe, grants, &memory_limits(lang))
}

#[test]
fn shared_anonymous_memory_counts_against_the_limit() {
    for (lang, probe) in [
        (Lang::Native, json!({"action": "shm-anon", "mib": 512})),
        (Lang::Py, json!({"action": "pymmap", "mib": 512})),
    ] {
        let out = run(lang, probe.clone(), &Grants::none());
        assert_stopped(&out, lang, &probe, &[]);
        let applied = out.boundary.limit("memoryBytes").unwrap();
        assert!(applied.enforced, "{applied:?}");
        assert!(!applied.mechanism.is_empty() && applied.mechanism != "rlimit");
        assert_host_alive(lang);
    }
}

#[test]
fn sysv_shared_memory_counts_against_the_limit() {
    for lang in [Lang::Native, Lang::Py] {
        let probe = json!({"action": "sysv", "mib": 512});
        let out = run(lang, probe.clone(), &Grants::none());
        assert_stopped(&out, lang, &probe, &["ENOSPC", "EINVAL", "ENOMEM"]);
        assert_host_alive(lang);
    }
}

#[test]
fn memfd_memory_counts_against_the_limit() {
    for (lang, probe) in [
        (Lang::Native, json!({"action": "memfd", "mib": 512})),
        (Lang::Native, json!({"action": "memfd-write", "mib": 512})),
        (Lang::Py, json!({"action": "memfd", "mib": 512})),
    ] {
        let out = run(lang, probe.clone(), &Grants::none());
        // Without a memory cgroup, memfd_create itself is refused.
        assert_stopped(&out, lang, &probe, &["EPERM"]);
        assert_host_alive(lang);
    }
}

#[test]
fn tmp_pages_count_against_the_limit_when_a_cgroup_can_count_them() {
    for lang in [Lang::Js, Lang::Py, Lang::Native] {
        let probe = json!({"action": "filltmp-mib", "mib": 512});
        let out = run(lang, probe.clone(), &Grants::none());
        if !assert_cgroup_mechanism(&out) {
            // Without a memory cgroup /tmp is RAM limited by tmpSize alone (see ISOLATION.md).
            eprintln!("no memory cgroup on this host: /tmp is limited by tmpSize only");
            return;
        }
        assert_stopped(&out, lang, &probe, &[]);
        assert_host_alive(lang);
    }
}

#[test]
fn child_processes_share_one_memory_limit() {
    let grants = Grants::none().effect("process.spawn");
    for lang in [Lang::Js, Lang::Py, Lang::Native] {
        // Four children of 48 MiB each: every one fits the limit, together they do not.
        let probe = json!({"action": "children", "n": 4, "mib": 48});
        let out = run(lang, probe.clone(), &grants);
        if !assert_cgroup_mechanism(&out) {
            // Without a memory cgroup RLIMIT_AS holds each process only: the report must not
            // claim the limit holds for the whole sandbox.
            let applied = out.boundary.limit("memoryBytes").unwrap();
            assert!(!applied.enforced, "{applied:?}");
            return;
        }
        assert_stopped(&out, lang, &probe, &[]);
        assert_host_alive(lang);
    }
}

#[test]
fn without_a_memory_cgroup_shared_memory_is_still_bounded() {
    let sandbox = ProcessSandbox::new(SandboxConfig {
        disable_cgroup: true,
        ..SandboxConfig::default()
    });
    for (lang, probe, refusals) in [
        (
            Lang::Native,
            json!({"action": "shm-anon", "mib": 512}),
            &[][..],
        ),
        (
            Lang::Native,
            json!({"action": "sysv", "mib": 512}),
            &["EPERM"][..],
        ),
        (
            Lang::Native,
            json!({"action": "memfd", "mib": 512}),
            &["EPERM"][..],
        ),
        (
            Lang::Native,
            json!({"action": "memfd-write", "mib": 512}),
            &["EPERM"][..],
        ),
        (Lang::Py, json!({"action": "pymmap", "mib": 512}), &[][..]),
        (
            Lang::Py,
            json!({"action": "memfd", "mib": 512}),
            &["EPERM"][..],
        ),
        (
            Lang::Py,
            json!({"action": "sysv", "mib": 512}),
            &["EPERM"][..],
        ),
    ] {
        let pkg = Package::new(lang);
        let out = sandbox
            .run(
                &pkg.spec,
                &Invocation::execute(probe.clone()),
                &Grants::none(),
                &memory_limits(lang),
            )
            .unwrap();
        assert_stopped(&out, lang, &probe, refusals);
        let applied = out.boundary.limit("memoryBytes").unwrap();
        assert!(applied.mechanism.contains("rlimit-as"), "{applied:?}");
        assert!(applied.enforced, "{applied:?}");
        assert_eq!(out.boundary.cgroup, "unavailable");
    }
    // Node reserves far more address space than it uses: RLIMIT_AS cannot hold it to the
    // limit, and the receipt says so instead of claiming the limit.
    let pkg = Package::new(Lang::Js);
    let out = sandbox
        .run(
            &pkg.spec,
            &Invocation::execute(json!({"action": "ok"})),
            &Grants::none(),
            &memory_limits(Lang::Js),
        )
        .unwrap();
    let applied = out.boundary.limit("memoryBytes").unwrap();
    assert!(!applied.enforced, "{applied:?}");
    assert!(applied.note.as_deref().unwrap_or("").contains("node"));
}

#[test]
fn without_a_memory_cgroup_the_receipt_never_claims_what_only_holds_per_process() {
    let sandbox = ProcessSandbox::new(SandboxConfig {
        disable_cgroup: true,
        ..SandboxConfig::default()
    });
    let spawn = Grants::none().effect("process.spawn");
    for lang in [Lang::Js, Lang::Py, Lang::Native] {
        let pkg = Package::new(lang);
        for grants in [Grants::none(), spawn.clone()] {
            let out = sandbox
                .run(
                    &pkg.spec,
                    &Invocation::execute(json!({"action": "ok"})),
                    &grants,
                    &memory_limits(lang),
                )
                .unwrap();
            assert_eq!(out.boundary.cgroup, "unavailable");
            let applied = out.boundary.limit("memoryBytes").unwrap();
            // Named by what held it, never by a cgroup that was not there.
            assert!(!applied.mechanism.contains("cgroup"), "{applied:?}");
            assert!(applied.mechanism.contains("rlimit"), "{applied:?}");
            // Held for the whole sandbox only by one process of a runner that fits RLIMIT_AS:
            // with process.spawn every child has its own, and node's RLIMIT_AS is above it.
            let whole = lang != Lang::Js && !grants.has("process.spawn");
            assert_eq!(applied.enforced, whole, "{lang:?} {applied:?}");
            if !whole {
                assert!(applied.note.as_deref().is_some_and(|n| !n.is_empty()));
            }
            // The process limit is named by its mechanism the same way.
            let pids = out.boundary.limit("maxPids").unwrap();
            assert!(!pids.mechanism.contains("cgroup"), "{pids:?}");
        }
    }
}
