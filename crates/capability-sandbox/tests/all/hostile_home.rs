//! The capability home (host.key, the database) is never visible to a guest, wherever it lies:
//! inside the package, inside a granted directory, reached through `$CAP_HOME`,
//! `$XDG_DATA_HOME` or `$HOME`. A read-only mount over it is masked, a writable one is
//! refused, a grant inside it is refused; whole home directories and `/` are never mounted.
//!
//! The tests change the process environment, so they hold one lock and run one at a time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::common::{
    ALL, Lang, Outcome, Package, chmod, guest_error, limits, ok_output, world_readable_tempdir,
};
use capability_sandbox::{
    Grants, Invocation, ModuleSpec, ProcessSandbox, SandboxConfig, SandboxError, protect_host_path,
    run_module,
};
use serde_json::json;

const KEY: &str = "HOST-KEY-signing-material-3e1d7c";

static ENV: Mutex<()> = Mutex::new(());

/// Sets (or, with `None`, removes) the home-related variables for the duration of a test.
struct Env {
    saved: Vec<(&'static str, Option<std::ffi::OsString>)>,
}

impl Env {
    fn set(vars: &[(&'static str, Option<&Path>)]) -> Env {
        let mut saved = Vec::new();
        for (k, v) in vars {
            saved.push((*k, std::env::var_os(k)));
            // SAFETY: every test of this binary holds the ENV lock while it runs; nothing else
            // in the process reads the environment concurrently.
            unsafe {
                match v {
                    Some(v) => std::env::set_var(k, v),
                    None => std::env::remove_var(k),
                }
            }
        }
        Env { saved }
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        for (k, v) in self.saved.drain(..) {
            // SAFETY: as in `Env::set`, under the ENV lock.
            unsafe {
                match v {
                    Some(v) => std::env::set_var(k, v),
                    None => std::env::remove_var(k),
                }
            }
        }
    }
}

/// A capability home with a signing key and a database, world-readable so that only the
/// sandbox (not host permissions) keeps the guest out.
fn make_home(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("host.key"), KEY).unwrap();
    std::fs::write(dir.join("capability.db"), format!("SQLite {KEY}")).unwrap();
    let mut p = dir.to_path_buf();
    while p.pop() && p != Path::new("/") && p != std::env::temp_dir() {
        chmod(&p, 0o755);
    }
    chmod(dir, 0o755);
    chmod(&dir.join("host.key"), 0o644);
    chmod(&dir.join("capability.db"), 0o644);
    dir.to_path_buf()
}

/// The guest tried to read `path` and was refused, without the key in any output.
fn assert_unreadable(out: &Outcome, lang: Lang, path: &Path) {
    let (code, message) = guest_error(out);
    assert!(
        matches!(code.as_str(), "ENOENT" | "EACCES"),
        "{lang:?} {}: {code} {message}",
        path.display()
    );
    assert!(
        !format!("{:?}", out.result).contains(KEY),
        "{lang:?} saw the key"
    );
    assert!(!out.stderr.contains(KEY), "{lang:?} saw the key");
}

fn refused(result: Result<Outcome, SandboxError>, needle: &Path) -> String {
    match result {
        Err(SandboxError::Invalid { detail }) => {
            assert!(
                detail.contains(&needle.display().to_string()),
                "the refusal must name {}: {detail}",
                needle.display()
            );
            detail
        }
        Err(other) => panic!("expected an invalid-request refusal, got {other}"),
        Ok(out) => panic!(
            "the run was not refused: {:?}\nstderr: {}",
            out.result, out.stderr
        ),
    }
}

#[test]
fn a_capability_home_inside_the_package_is_masked() {
    let _lock = ENV.lock().unwrap_or_else(|e| e.into_inner());
    for lang in ALL {
        let pkg = Package::new(lang);
        std::fs::write(pkg.dir.path().join("data.txt"), "package data").unwrap();
        let home = make_home(&pkg.dir.path().join(".capability"));
        let _env = Env::set(&[("CAP_HOME", Some(&home))]);
        for file in ["host.key", "capability.db"] {
            let inside = Path::new("/package/.capability").join(file);
            let out = pkg.run(
                json!({"action": "read", "path": inside}),
                &Grants::none(),
                &limits(),
            );
            assert_unreadable(&out, lang, &inside);
            assert!(
                out.boundary
                    .notes
                    .iter()
                    .any(|n| n.contains("masked") && n.contains("capability home")),
                "{lang:?}: {:?}",
                out.boundary.notes
            );
        }
        // The rest of the package is still there.
        let out = pkg.run(
            json!({"action": "read", "path": "/package/data.txt"}),
            &Grants::none(),
            &limits(),
        );
        assert_eq!(ok_output(&out)["content"], "package data", "{lang:?}");
    }
}

#[test]
fn a_home_found_through_xdg_or_home_inside_a_read_grant_is_masked() {
    let _lock = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let dir = world_readable_tempdir();
    std::fs::write(dir.path().join("notes.txt"), "granted notes").unwrap();
    chmod(&dir.path().join("notes.txt"), 0o644);
    // $XDG_DATA_HOME/capability.
    let xdg = dir.path().join("xdg");
    let xdg_home = make_home(&xdg.join("capability"));
    // $HOME/.local/share/capability.
    let user = dir.path().join("user");
    let user_home = make_home(&user.join(".local/share/capability"));
    // (environment, resulting home, granted directory)
    type Case<'a> = (Vec<(&'static str, Option<&'a Path>)>, PathBuf, PathBuf);
    let cases: Vec<Case> = vec![
        (
            vec![("CAP_HOME", None), ("XDG_DATA_HOME", Some(&xdg))],
            xdg_home.clone(),
            dir.path().to_path_buf(),
        ),
        (
            vec![
                ("CAP_HOME", None),
                ("XDG_DATA_HOME", None),
                ("HOME", Some(&user)),
            ],
            user_home.clone(),
            user.join(".local"),
        ),
    ];
    for (vars, home, grant) in cases {
        let _env = Env::set(&vars);
        for lang in ALL {
            let pkg = Package::new(lang);
            let grants = Grants::none().read(&grant);
            let key = home.join("host.key");
            let out = pkg.run(json!({"action": "read", "path": key}), &grants, &limits());
            assert_unreadable(&out, lang, &key);
            if grant == dir.path() {
                let out = pkg.run(
                    json!({"action": "read", "path": dir.path().join("notes.txt")}),
                    &grants,
                    &limits(),
                );
                assert_eq!(ok_output(&out)["content"], "granted notes", "{lang:?}");
            }
        }
    }
}

#[test]
fn a_writable_grant_containing_the_home_is_refused() {
    let _lock = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let dir = world_readable_tempdir();
    let home = make_home(&dir.path().join("state/capability"));
    let _env = Env::set(&[("CAP_HOME", Some(&home))]);
    for lang in ALL {
        let pkg = Package::new(lang);
        // Writing next to the home would let the guest plant a host.key the host then trusts.
        let planted = dir.path().join("state/capability-planted");
        let result = run_module(
            &pkg.spec,
            &Invocation::execute(json!({"action": "write", "path": planted, "data": KEY})),
            &Grants::none().write(dir.path()),
            &limits(),
        );
        let detail = refused(result, &home);
        assert!(detail.contains("writable"), "{detail}");
        assert!(!planted.exists());
    }
    assert_eq!(std::fs::read_to_string(home.join("host.key")).unwrap(), KEY);
}

#[test]
fn grants_and_packages_inside_the_home_are_refused() {
    let _lock = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let dir = world_readable_tempdir();
    let home = make_home(&dir.path().join("capability"));
    let _env = Env::set(&[("CAP_HOME", Some(&home))]);
    for lang in ALL {
        let pkg = Package::new(lang);
        for grant in [home.clone(), home.join("host.key")] {
            let result = run_module(
                &pkg.spec,
                &Invocation::execute(json!({"action": "read", "path": grant})),
                &Grants::none().read(&grant),
                &limits(),
            );
            refused(result, &home);
        }
        // A package installed inside the home is refused as well.
        let inner = home.join("packages").join(format!("{lang:?}"));
        std::fs::create_dir_all(&inner).unwrap();
        let module = pkg.spec.module.trim_start_matches("./").to_string();
        std::fs::copy(pkg.dir.path().join(&module), inner.join(&module)).unwrap();
        let spec = ModuleSpec {
            package_root: inner.clone(),
            ..pkg.spec.clone()
        };
        let result = run_module(
            &spec,
            &Invocation::execute(json!({"action": "read", "path": "/package/../host.key"})),
            &Grants::none(),
            &limits(),
        );
        refused(result, &home);
    }
}

#[test]
fn whole_home_directories_and_the_root_are_never_mounted() {
    let _lock = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let fake_home = world_readable_tempdir();
    let fake_home = fake_home.path().canonicalize().unwrap();
    std::fs::write(fake_home.join(".bash_history"), KEY).unwrap();
    let _env = Env::set(&[("HOME", Some(&fake_home)), ("CAP_HOME", None)]);
    for lang in ALL {
        let pkg = Package::new(lang);
        let parent = fake_home.parent().unwrap().to_path_buf();
        for grant in [
            PathBuf::from("/"),
            PathBuf::from("/root"),
            PathBuf::from("/home"),
            fake_home.clone(),
            parent,
        ] {
            for grants in [Grants::none().read(&grant), Grants::none().write(&grant)] {
                let result = run_module(
                    &pkg.spec,
                    &Invocation::execute(
                        json!({"action": "read", "path": fake_home.join(".bash_history")}),
                    ),
                    &grants,
                    &limits(),
                );
                match result {
                    Err(SandboxError::Invalid { detail }) => {
                        assert!(detail.contains(&grant.display().to_string()), "{detail}")
                    }
                    Err(other) => panic!("{lang:?} {}: {other}", grant.display()),
                    Ok(out) => panic!(
                        "{lang:?}: granting {} was not refused: {:?}",
                        grant.display(),
                        out.result
                    ),
                }
            }
        }
        // A package root that is the user's home is refused too.
        let module = pkg.spec.module.trim_start_matches("./").to_string();
        std::fs::copy(pkg.dir.path().join(&module), fake_home.join(&module)).unwrap();
        let spec = ModuleSpec {
            package_root: fake_home.clone(),
            ..pkg.spec.clone()
        };
        let result = run_module(
            &spec,
            &Invocation::execute(json!({"action": "read", "path": "/package/.bash_history"})),
            &Grants::none(),
            &limits(),
        );
        refused(result, &fake_home);
    }
}

#[test]
fn paths_the_host_protects_are_masked_like_the_home() {
    let _lock = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let dir = world_readable_tempdir();
    let configured = make_home(&dir.path().join("configured"));
    let registered = make_home(&dir.path().join("registered"));
    protect_host_path(&registered);
    let sandbox = ProcessSandbox::new(SandboxConfig {
        protected: vec![configured.clone()],
        ..SandboxConfig::default()
    });
    for lang in ALL {
        let pkg = Package::new(lang);
        for protected in [&configured, &registered] {
            let key = protected.join("host.key");
            let out = sandbox
                .run(
                    &pkg.spec,
                    &Invocation::execute(json!({"action": "read", "path": key})),
                    &Grants::none().read(dir.path()),
                    &limits(),
                )
                .unwrap();
            assert_unreadable(&out, lang, &key);
            assert!(
                out.boundary
                    .notes
                    .iter()
                    .any(|n| n.contains(&protected.display().to_string())),
                "{:?}",
                out.boundary.notes
            );
        }
    }
}
