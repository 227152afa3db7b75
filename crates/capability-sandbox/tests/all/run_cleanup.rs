//! Nothing of a run outlives it: a run's scratch directory (the mount point of its new root)
//! and its per-run cgroups are gone before its result is returned, sessions included; a
//! process that exits right after its run (`std::process::exit`, as a one-shot `cap run` does
//! when `main` returns) leaves nothing behind, even with a session still open; and a sandbox
//! that starts removes what runs of dead processes left, never a live process's.
//!
//! Runs that must be told apart from the other tests of this binary (which share its pid, and
//! so its per-run names) happen in a child process: this test binary again, filtered to
//! [`child_process_helper`], which does what `HELPER_ENV` says and reports on stdout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use capability_core::authorization::EffectPolicy;
use capability_runtime::capability::{Capability, ModuleSource};
use capability_runtime::{CapabilityRuntime, ExecuteOptions};
use capability_sandbox::{
    ExecutorChoice, Grants, Invocation, ModuleExecutor, ProcessSandbox, SandboxConfig, Session,
};
use serde_json::{Value, json};

use crate::common::{Lang, Package, limits, ok_output};

/// What the helper process does: `loop` (sequential runs, then a report of what is left,
/// from inside), `exit` (one run through the runtime, then `std::process::exit`), `exit-open`
/// (a session left open, then `std::process::exit`).
const HELPER_ENV: &str = "CAPABILITY_SANDBOX_CLEANUP_HELPER";
/// The helper's scratch directory (`SandboxConfig::scratch_dir`).
const SCRATCH_ENV: &str = "CAPABILITY_SANDBOX_CLEANUP_SCRATCH";

const SCRATCH_PREFIX: &str = ".capability-sandbox-";
const CGROUP_PREFIX: &str = "capability-sandbox-";

/// A python module with plan, execute and verify hooks (a run through the runtime is one
/// session: plan, execute and verify answered by one sandboxed process).
const PY_HOOKS: &str = r#"
MANIFEST = __MANIFEST__
def plan(input, ctx):
    return {"data": {"n": input["n"]}}
def execute(input, ctx):
    return {"n": input["n"]}
def verify(input, output, ctx):
    return {"ok": True}
"#;

/// Why this machine cannot run these tests, if it cannot.
fn unsupported() -> Option<String> {
    if let Err(e) = ProcessSandbox::check_children() {
        return Some(format!("no user/mount/pid namespaces here: {e}"));
    }
    if let Err(e) = ProcessSandbox::global().python() {
        return Some(format!("no python3 for the session runs: {e}"));
    }
    if Command::new("gcc").arg("--version").output().is_err() {
        return Some("no gcc for the native module".into());
    }
    None
}

macro_rules! skip_unless_supported {
    () => {
        if let Some(why) = unsupported() {
            eprintln!("skipping: {why}");
            return;
        }
    };
}

/// This process's cgroup directories: the cgroup v2 one and one per v1 hierarchy (where the
/// sandbox makes its per-run cgroups with the default configuration).
fn own_cgroup_dirs() -> Vec<(String, PathBuf)> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let membership = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut dirs = Vec::new();
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let fields: Vec<&str> = left.split(' ').collect();
        let rfields: Vec<&str> = right.split(' ').collect();
        let (Some(root), Some(mount), Some(fstype), Some(opts)) = (
            fields.get(3),
            fields.get(4),
            rfields.first(),
            rfields.get(2),
        ) else {
            continue;
        };
        if *root != "/" {
            continue;
        }
        let key = match *fstype {
            "cgroup2" => "v2".to_string(),
            "cgroup" => match ["pids", "memory"]
                .into_iter()
                .find(|c| opts.split(',').any(|o| o == *c))
            {
                Some(c) => c.to_string(),
                None => continue,
            },
            _ => continue,
        };
        for m in membership.lines() {
            let mut parts = m.splitn(3, ':');
            let (Some(_), Some(controllers), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let matches = if key == "v2" {
                controllers.is_empty()
            } else {
                controllers.split(',').any(|c| c == key)
            };
            if matches {
                let dir = Path::new(mount).join(path.trim_start_matches('/'));
                if !dirs.iter().any(|(_, d)| d == &dir) {
                    dirs.push((key.clone(), dir));
                }
            }
        }
    }
    dirs
}

/// The per-run cgroup directories of `pid`'s runs that exist now.
fn cgroups_of(pid: u32) -> Vec<PathBuf> {
    let prefix = format!("{CGROUP_PREFIX}{pid}-");
    own_cgroup_dirs()
        .into_iter()
        .flat_map(|(_, dir)| entries_with(&dir, &prefix))
        .collect()
}

fn entries_with(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Mounts of this process whose mount point lies under `dir`.
fn mounts_under(dir: &Path) -> Vec<String> {
    let dir = dir.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split(' ').nth(4).is_some_and(|m| m.starts_with(&dir)))
        .map(String::from)
        .collect()
}

/// A runtime whose module executor runs `PY_HOOKS` in `sandbox`.
fn python_runtime(dir: &Path, sandbox: &'static ProcessSandbox) -> CapabilityRuntime {
    let manifest = json!({"specVersion": "0.1", "id": "cleanup/py", "version": "1.0.0",
        "name": "Cleanup", "description": "Leaves nothing behind.", "effects": []});
    let text = serde_json::to_string(&manifest)
        .unwrap()
        .replace("true", "True")
        .replace("false", "False");
    std::fs::write(
        dir.join("hooks.py"),
        PY_HOOKS.replace("__MANIFEST__", &text),
    )
    .unwrap();
    let executor = ModuleExecutor::new(ExecutorChoice::Process)
        .with_process_sandbox(sandbox)
        .with_limits(limits());
    let runtime = CapabilityRuntime::builder()
        .policy(EffectPolicy::permissive())
        .executor(Arc::new(executor))
        .build();
    let source = ModuleSource {
        package_root: dir.to_path_buf(),
        module: "./hooks.py".into(),
        integrity: None,
    };
    runtime
        .register(Capability::module(&manifest, source).unwrap())
        .unwrap();
    runtime
}

fn invoke(runtime: &CapabilityRuntime, n: u64) {
    let receipt = runtime
        .invoke("cleanup/py", json!({"n": n}), &ExecuteOptions::approved())
        .unwrap_or_else(|e| panic!("run {n} through the runtime: {e:?}"));
    assert_eq!(receipt.output, Some(json!({"n": n})));
}

fn leaked_sandbox(scratch: &Path) -> &'static ProcessSandbox {
    Box::leak(Box::new(ProcessSandbox::new(SandboxConfig {
        scratch_dir: Some(scratch.to_path_buf()),
        ..SandboxConfig::default()
    })))
}

/// Not a test of its own: the body of the helper process (does nothing unless `HELPER_ENV`
/// is set, i.e. unless a test below started this binary for it).
#[test]
fn child_process_helper() {
    let Ok(mode) = std::env::var(HELPER_ENV) else {
        return;
    };
    let scratch = PathBuf::from(std::env::var(SCRATCH_ENV).expect("the scratch directory"));
    let sandbox = leaked_sandbox(&scratch);
    let code = tempfile::tempdir().unwrap();
    let runtime = python_runtime(code.path(), sandbox);
    let native = Package::new(Lang::Native);
    let python = Package::new(Lang::Py);
    let run_native = || {
        let out = sandbox
            .run(
                &native.spec,
                &Invocation::execute(json!({"action": "ok"})),
                &Grants::none(),
                &limits(),
            )
            .unwrap();
        ok_output(&out);
        out.boundary.cgroup.clone()
    };
    match mode.as_str() {
        "loop" => {
            let label = run_native();
            for n in 0..4 {
                invoke(&runtime, n);
                run_native();
                let (mut session, first) = Session::start(
                    sandbox,
                    &python.spec,
                    &Invocation::execute(json!({"action": "ok"})),
                    &Grants::none(),
                    &limits(),
                )
                .unwrap();
                ok_output(&first);
                session.close();
            }
            // Right after the last run returned: nothing of any run may be left.
            let me = std::process::id();
            let report = json!({
                "cgroup": label,
                "starts": sandbox.starts(),
                "scratch": entries_with(&scratch, SCRATCH_PREFIX)
                    .iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
                "cgroups": cgroups_of(me)
                    .iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
                "mounts": mounts_under(&scratch),
            });
            println!("CLEANUP-REPORT {report}");
        }
        "exit" => {
            let label = run_native();
            println!("CLEANUP-REPORT {}", json!({"cgroup": label}));
            invoke(&runtime, 1);
        }
        "exit-open" => {
            let label = run_native();
            println!("CLEANUP-REPORT {}", json!({"cgroup": label}));
            let (session, first) = Session::start(
                sandbox,
                &python.spec,
                &Invocation::execute(json!({"action": "ok"})),
                &Grants::none(),
                &limits(),
            )
            .unwrap();
            ok_output(&first);
            // The session's sandbox is still running when the process exits.
            std::mem::forget(session);
        }
        other => panic!("unknown helper mode {other}"),
    }
    // As a one-shot CLI does: the process ends as soon as the run returned.
    std::process::exit(0);
}

/// Runs this test binary as the helper in `mode`; its pid and report.
fn helper(mode: &str, scratch: &Path) -> (u32, Value) {
    let exe = std::env::current_exe().unwrap();
    let child = Command::new(exe)
        .args([
            "--exact",
            "run_cleanup::child_process_helper",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_ENV, mode)
        .env(SCRATCH_ENV, scratch)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "helper {mode} failed: {}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let report = stdout
        .lines()
        .find_map(|l| l.split_once("CLEANUP-REPORT ").map(|(_, r)| r))
        .unwrap_or_else(|| panic!("helper {mode} reported nothing: {stdout}"));
    (pid, serde_json::from_str(report).unwrap())
}

#[test]
fn sequential_runs_leave_no_scratch_directory_and_no_cgroup() {
    skip_unless_supported!();
    let scratch = tempfile::tempdir().unwrap();
    let (pid, report) = helper("loop", scratch.path());
    assert_eq!(report["starts"], 13, "{report}");
    assert_eq!(
        report["scratch"],
        json!([]),
        "scratch directories left right after the runs returned: {report}"
    );
    assert_eq!(
        report["cgroups"],
        json!([]),
        "per-run cgroups left right after the runs returned: {report}"
    );
    assert_eq!(report["mounts"], json!([]), "{report}");
    if report["cgroup"] == "unavailable" {
        eprintln!("no cgroup on this host: only scratch directories were checked");
    }
    // Nor afterwards.
    assert_eq!(
        entries_with(scratch.path(), SCRATCH_PREFIX),
        Vec::<PathBuf>::new()
    );
    assert_eq!(cgroups_of(pid), Vec::<PathBuf>::new());
}

#[test]
fn a_process_that_exits_right_after_its_run_leaves_nothing_behind() {
    skip_unless_supported!();
    for mode in ["exit", "exit-open"] {
        let scratch = tempfile::tempdir().unwrap();
        let (pid, report) = helper(mode, scratch.path());
        assert_eq!(
            entries_with(scratch.path(), SCRATCH_PREFIX),
            Vec::<PathBuf>::new(),
            "{mode}: the scratch directory outlived the process"
        );
        assert_eq!(
            cgroups_of(pid),
            Vec::<PathBuf>::new(),
            "{mode}: per-run cgroups outlived the process"
        );
        if report["cgroup"] == "unavailable" {
            eprintln!("{mode}: no cgroup on this host: only scratch directories were checked");
        }
    }
}

/// A pid that no process has now: a child that has exited and been reaped.
fn dead_pid() -> u32 {
    loop {
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        if !Path::new("/proc").join(pid.to_string()).exists() {
            return pid;
        }
    }
}

struct Sleeper(std::process::Child);

impl Sleeper {
    fn new() -> Sleeper {
        Sleeper(Command::new("sleep").arg("120").spawn().unwrap())
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_start_removes_what_dead_processes_left_and_keeps_live_ones() {
    skip_unless_supported!();
    let native = Package::new(Lang::Native);
    let run = |sandbox: &ProcessSandbox| {
        let out = sandbox
            .run(
                &native.spec,
                &Invocation::execute(json!({"action": "ok"})),
                &Grants::none(),
                &limits(),
            )
            .unwrap();
        ok_output(&out);
        out.boundary.cgroup.clone()
    };
    // Which cgroup directories a sandbox of this process uses.
    let probe_scratch = tempfile::tempdir().unwrap();
    let label = run(&ProcessSandbox::new(SandboxConfig {
        scratch_dir: Some(probe_scratch.path().to_path_buf()),
        ..SandboxConfig::default()
    }));
    let wanted: &[&str] = match label.as_str() {
        "v2" => &["v2"],
        "v1-pids+memory" => &["pids", "memory"],
        "v1-pids" => &["pids"],
        "v1-memory" => &["memory"],
        _ => &[],
    };
    let cgroup_dirs: Vec<PathBuf> = own_cgroup_dirs()
        .into_iter()
        .filter(|(k, _)| wanted.contains(&k.as_str()))
        .map(|(_, d)| d)
        .collect();
    if cgroup_dirs.is_empty() {
        eprintln!(
            "no per-run cgroups on this host ({label}): only scratch directories are checked"
        );
    }

    let dead = dead_pid();
    let live = Sleeper::new();
    let me = std::process::id();
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let mkdir = |p: PathBuf| {
        std::fs::create_dir(&p).unwrap();
        p
    };
    let dead_scratch = [
        mkdir(s.join(format!("{SCRATCH_PREFIX}{dead}-0"))),
        mkdir(s.join(format!("{SCRATCH_PREFIX}{dead}-17"))),
    ];
    let kept_scratch = [
        // A live process's run, and one named for this very process.
        mkdir(s.join(format!("{SCRATCH_PREFIX}{}-0", live.pid()))),
        mkdir(s.join(format!("{SCRATCH_PREFIX}{me}-999999"))),
        // Not a run's name.
        mkdir(s.join(format!("{SCRATCH_PREFIX}{dead}-x"))),
        mkdir(s.join(format!("{SCRATCH_PREFIX}{dead}"))),
        mkdir(s.join(format!("{SCRATCH_PREFIX}-{dead}-1"))),
    ];
    // A dead process's name on something that is not an empty directory is never removed,
    // and what a symlink points to is never touched.
    let full = mkdir(s.join(format!("{SCRATCH_PREFIX}{dead}-2")));
    std::fs::write(full.join("data"), b"keep me").unwrap();
    let target = tempfile::tempdir().unwrap();
    let link = s.join(format!("{SCRATCH_PREFIX}{dead}-3"));
    std::os::unix::fs::symlink(target.path(), &link).unwrap();
    let file = s.join(format!("{SCRATCH_PREFIX}{dead}-4"));
    std::fs::write(&file, b"").unwrap();

    let mut dead_cgroups = Vec::new();
    let mut kept_cgroups = Vec::new();
    let stray = Sleeper::new();
    for dir in &cgroup_dirs {
        dead_cgroups.push(mkdir(dir.join(format!("{CGROUP_PREFIX}{dead}-0"))));
        kept_cgroups.push(mkdir(dir.join(format!("{CGROUP_PREFIX}{}-0", live.pid()))));
    }
    // A crashed host's guest that is still in its run's cgroup.
    if let Some(first) = dead_cgroups.first() {
        std::fs::write(first.join("cgroup.procs"), stray.pid().to_string()).unwrap();
    }

    // A new sandbox starts: it cleans up before its first run.
    let sandbox = ProcessSandbox::new(SandboxConfig {
        scratch_dir: Some(s.to_path_buf()),
        ..SandboxConfig::default()
    });
    run(&sandbox);

    for p in dead_scratch.iter().chain(&dead_cgroups) {
        assert!(!p.exists(), "{} (of dead pid {dead}) was left", p.display());
    }
    for p in kept_scratch.iter().chain(&kept_cgroups) {
        assert!(p.exists(), "{} was removed", p.display());
    }
    assert_eq!(std::fs::read(full.join("data")).unwrap(), b"keep me");
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    assert!(target.path().is_dir());
    assert!(file.is_file());
    if !dead_cgroups.is_empty() {
        let mut stray = stray;
        let deadline = Instant::now() + Duration::from_secs(5);
        let status = loop {
            if let Some(status) = stray.0.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "the stray process in the dead run's cgroup was left running"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(!status.success(), "{status}");
    }
    // The live process's cgroups are this test's to remove.
    for p in &kept_cgroups {
        std::fs::remove_dir(p).unwrap();
    }
}
