//! Shared helpers for the hostile test suite: packages holding the hostile capability in each
//! language, and a few host-side probes.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use capability_sandbox::{
    Grants, Invocation, Limits, ModuleSpec, ProcessLimits, RunOutcome, SandboxError, SandboxReport,
    run_module,
};
use capability_test_support::process::processes_with;
use serde_json::{Value, json};

/// What a run in the process sandbox returns.
pub type Outcome = RunOutcome<SandboxError, SandboxReport>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    Js,
    Py,
    Native,
}

pub const ALL: [Lang; 3] = [Lang::Js, Lang::Py, Lang::Native];

pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

const EFFECTS: [&str; 6] = [
    "filesystem.read",
    "filesystem.write",
    "network.connect",
    "process.spawn",
    "environment.read",
    "secrets.read",
];

pub fn manifest(lang: Lang) -> Value {
    let (id, name) = match lang {
        Lang::Js => ("hostile/js", "Hostile JS"),
        Lang::Py => ("hostile/py", "Hostile Python"),
        Lang::Native => ("hostile/native", "Hostile native"),
    };
    json!({
        "specVersion": "0.1",
        "id": id,
        "version": "1.0.0",
        "name": name,
        "description": "Tries to break out of its sandbox.",
        "effects": EFFECTS,
    })
}

/// The hostile C program, compiled once per test binary with the machine's gcc.
pub fn native_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir =
            std::env::temp_dir().join(format!("capability-sandbox-tests-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("hostile");
        let status = Command::new("gcc")
            .args(["-O1", "-Wall", "-o"])
            .arg(&out)
            .arg(fixtures().join("hostile/hostile.c"))
            .status()
            .expect("gcc is required for the native hostile tests");
        assert!(status.success(), "compiling hostile.c failed");
        out
    })
}

/// A fresh package directory holding the hostile capability for `lang`.
pub struct Package {
    pub dir: tempfile::TempDir,
    pub spec: ModuleSpec,
}

impl Package {
    pub fn new(lang: Lang) -> Package {
        Package::named(lang, "hostile")
    }

    /// `stem` names the module file (the native one is exactly `stem`).
    pub fn named(lang: Lang, stem: &str) -> Package {
        let dir = tempfile::tempdir().unwrap();
        let file = match lang {
            Lang::Js => {
                let f = format!("{stem}.mjs");
                std::fs::copy(fixtures().join("hostile/hostile.mjs"), dir.path().join(&f)).unwrap();
                f
            }
            Lang::Py => {
                let f = format!("{stem}.py");
                std::fs::copy(fixtures().join("hostile/hostile.py"), dir.path().join(&f)).unwrap();
                f
            }
            Lang::Native => {
                std::fs::copy(native_binary(), dir.path().join(stem)).unwrap();
                stem.to_string()
            }
        };
        let spec = ModuleSpec {
            package_root: dir.path().to_path_buf(),
            install_root: None,
            module: format!("./{file}"),
            integrity: None,
            manifest: manifest(lang),
        };
        Package { dir, spec }
    }

    pub fn run(&self, input: Value, grants: &Grants, limits: &Limits<ProcessLimits>) -> Outcome {
        run_module(&self.spec, &Invocation::execute(input), grants, limits)
            .unwrap_or_else(|e| panic!("run refused before entering the boundary: {e}"))
    }
}

/// Limits for tests: generous wall time for a loaded 2-core machine.
pub fn limits() -> Limits<ProcessLimits> {
    Limits {
        timeout: Duration::from_secs(30),
        memory_bytes: 1 << 30,
        boundary: ProcessLimits {
            cpu_time: Duration::from_secs(20),
            ..ProcessLimits::default()
        },
        ..Limits::default()
    }
}

/// The guest error of a failed run, or a panic describing what happened instead.
pub fn guest_error(out: &Outcome) -> (String, String) {
    match &out.result {
        Err(SandboxError::Guest(g)) => (g.code.clone().unwrap_or_default(), g.message.clone()),
        other => panic!(
            "expected a guest error, got {other:?}\nstderr: {}",
            out.stderr
        ),
    }
}

pub fn ok_output(out: &Outcome) -> &Value {
    match &out.result {
        Ok(v) => v,
        Err(e) => panic!("expected success, got {e} ({e:?})\nstderr: {}", out.stderr),
    }
}

/// The machine still answers: a quick follow-up run in the same language succeeds.
pub fn assert_host_alive(lang: Lang) {
    let pkg = Package::new(lang);
    let out = pkg.run(json!({"action": "ok"}), &Grants::none(), &limits());
    assert_eq!(
        ok_output(&out),
        &json!({"ok": true}),
        "{lang:?} follow-up run"
    );
}

/// Waits up to `within` for no process to match `needle`.
pub fn assert_no_stray_processes(needle: &str, within: Duration) {
    let deadline = std::time::Instant::now() + within;
    loop {
        let left = processes_with(needle);
        if left.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "stray processes matching {needle:?}: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sets the permission bits of `path`.
pub fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

/// A temporary directory that the sandbox's user (`nobody` on a root host) may read.
pub fn world_readable_tempdir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    chmod(d.path(), 0o755);
    d
}
