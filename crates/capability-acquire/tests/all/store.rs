//! The store is not trusted after install: an installed package runs only from the home's
//! own private store and only as it was installed. Every executor resolves a package module
//! through `capability_exec::resolve_module_path` before it reads or runs anything, so a
//! refusal there is a refusal of every run (plan, execute, verify, rollback) by every
//! boundary; these tests resolve the module of an installed capability as an executor does,
//! both with the capabilities loaded before the store was changed (a running host) and with
//! ones loaded after (a new process).

use std::path::{Path, PathBuf};

use capability_acquire::{Installed, install};
use capability_exec::CapabilityView as _;
use capability_exec::home::Home;
use capability_runtime::capability::Capability;
use capability_runtime::source::CapabilitySource as _;
use capability_test_support::registry::{Extra, tarball};

use crate::install::serving;
use crate::unpack::{Entry, tarball_with};

/// The installed capability `fixture/add` of `home`, as a host loading the store now gets it.
fn loaded(home: &Home) -> Capability {
    Installed::from_home(home)
        .capabilities()
        .unwrap()
        .into_iter()
        .find(|c| c.id() == "fixture/add")
        .expect("fixture/add is installed")
}

/// Resolves the capability's module as every executor does before a run.
fn resolve(capability: &Capability) -> Result<PathBuf, String> {
    let source = capability.module_source().expect("a module");
    capability_exec::resolve_module_path(&source.package_root, &source.module)
        .map(|p| p.file)
        .map_err(|e| e.to_string())
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A home with the fixture package (and `extra` entries) installed: the home, its package
/// directory, and the capability as loaded right after the install.
fn installed(
    dir: &Path,
    options: &capability_acquire::InstallOptions,
) -> (Home, PathBuf, Capability) {
    let home = Home::open(&dir.join("home")).unwrap();
    let installation = install(&home, "fixture/add", options).unwrap();
    let capability = loaded(&home);
    assert!(resolve(&capability).is_ok(), "{:?}", resolve(&capability));
    (home, installation.store, capability)
}

type Alteration = (&'static str, &'static str, fn(&Path, &Path));

/// Changes to an installed package (its directory, a scratch directory beside the home),
/// and the entry each refusal must name.
fn alterations() -> Vec<Alteration> {
    vec![
        ("module bytes changed, same size", "add.mjs", |pkg, _| {
            let m = pkg.join("add.mjs");
            let text = std::fs::read_to_string(&m).unwrap();
            set_mode(&m, 0o644);
            std::fs::write(&m, text.replace("input.a + input.b", "input.a * input.b")).unwrap();
            set_mode(&m, 0o444);
        }),
        ("module appended to", "add.mjs", |pkg, _| {
            let m = pkg.join("add.mjs");
            set_mode(&m, 0o644);
            let mut f = std::fs::OpenOptions::new().append(true).open(&m).unwrap();
            std::io::Write::write_all(&mut f, b"\nprocess.exit(1);\n").unwrap();
            set_mode(&m, 0o444);
        }),
        ("package.json changed", "package.json", |pkg, _| {
            let p = pkg.join("package.json");
            let text = std::fs::read_to_string(&p).unwrap();
            set_mode(&p, 0o644);
            std::fs::write(&p, text.replace("\"effects\": []", "\"effects\":[]  ")).unwrap();
            set_mode(&p, 0o444);
        }),
        ("a file added", "evil.mjs", |pkg, _| {
            std::fs::write(pkg.join("evil.mjs"), b"export default {};\n").unwrap();
            set_mode(&pkg.join("evil.mjs"), 0o444);
        }),
        ("a directory added", "node_modules", |pkg, _| {
            std::fs::create_dir_all(pkg.join("node_modules/x")).unwrap();
            std::fs::write(pkg.join("node_modules/x/index.js"), b"1").unwrap();
        }),
        (
            "the module swapped for a link to the same bytes",
            "add.mjs",
            |pkg, scratch| {
                let copy = scratch.join("add.mjs");
                std::fs::copy(pkg.join("add.mjs"), &copy).unwrap();
                std::fs::remove_file(pkg.join("add.mjs")).unwrap();
                std::os::unix::fs::symlink(&copy, pkg.join("add.mjs")).unwrap();
            },
        ),
        ("a link retargeted", "lib/add.mjs", |pkg, _| {
            std::fs::remove_file(pkg.join("lib/add.mjs")).unwrap();
            std::os::unix::fs::symlink("../package.json", pkg.join("lib/add.mjs")).unwrap();
        }),
        ("the module made world-writable", "add.mjs", |pkg, _| {
            set_mode(&pkg.join("add.mjs"), 0o666);
        }),
        ("the module made executable", "add.mjs", |pkg, _| {
            set_mode(&pkg.join("add.mjs"), 0o555);
        }),
        ("a file removed", "lib/util.mjs", |pkg, _| {
            std::fs::remove_file(pkg.join("lib/util.mjs")).unwrap();
        }),
    ]
}

#[test]
fn a_package_altered_after_install_does_not_run() {
    let bytes = tarball_with(
        "@fixture/capabilities",
        &[
            Entry::File("lib/util.mjs", b"export const x = 1;\n"),
            Entry::Link("lib/add.mjs", "../add.mjs"),
        ],
    );
    let (_registry, options) = serving("@fixture/capabilities", &bytes);
    for (case, entry, alter) in alterations() {
        let dir = tempfile::tempdir().unwrap();
        let (home, package, before) = installed(dir.path(), &options);
        alter(&package, dir.path());
        // The host that loaded the package before, and one that loads it now.
        for (when, capability) in [("loaded before", before), ("loaded after", loaded(&home))] {
            let e = resolve(&capability).unwrap_err();
            assert!(e.contains(&format!("`{entry}`")), "{case} ({when}): {e}");
            assert!(e.contains("installed package"), "{case} ({when}): {e}");
            assert!(
                e.contains("nothing of the package is run"),
                "{case} ({when}): {e}"
            );
        }
    }
}

#[test]
fn a_rewritten_file_list_does_not_vouch_for_altered_files_in_a_running_host() {
    let bytes = tarball("@fixture/capabilities", "1.0.0", Extra::None);
    let (_registry, options) = serving("@fixture/capabilities", &bytes);
    let dir = tempfile::tempdir().unwrap();
    let (home, package, before) = installed(dir.path(), &options);
    let hex = package.file_name().unwrap().to_str().unwrap().to_string();
    // The module changed, and the record's list rewritten to match it.
    let m = package.join("add.mjs");
    let text = std::fs::read_to_string(&m).unwrap();
    set_mode(&m, 0o644);
    let altered = text.replace("input.a + input.b", "input.a * input.b");
    std::fs::write(&m, &altered).unwrap();
    set_mode(&m, 0o444);
    let path = home.package_record(&hex);
    let mut record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    use sha2::Digest as _;
    record["files"]["entries"]["add.mjs"]["sha256"] =
        serde_json::json!(hex::encode(sha2::Sha256::digest(altered.as_bytes())));
    std::fs::write(&path, serde_json::to_vec(&record).unwrap()).unwrap();
    // What this process loaded at install is what is checked.
    let e = resolve(&before).unwrap_err();
    assert!(e.contains("`add.mjs` was changed after install"), "{e}");
    // A record with no list at all (an older record, or one stripped of it) never runs.
    record.as_object_mut().unwrap().remove("files");
    std::fs::write(&path, serde_json::to_vec(&record).unwrap()).unwrap();
    let e = resolve(&loaded(&home)).unwrap_err();
    assert!(e.contains("lists no files"), "{e}");
    assert!(e.contains("install it again"), "{e}");
}

#[test]
fn installed_packages_run_only_from_the_homes_own_private_store() {
    let bytes = tarball("@fixture/capabilities", "1.0.0", Extra::None);
    let (_registry, options) = serving("@fixture/capabilities", &bytes);
    type Change = (&'static str, &'static str, fn(&Home, &Path, &Path) -> bool);
    let changes: Vec<Change> = vec![
        (
            // The same bytes, moved to a world-writable directory the store now links to.
            "the store replaced by a link",
            "symbolic link",
            |home, _, scratch| {
                let moved = scratch.join("shared");
                std::fs::rename(home.packages(), &moved).unwrap();
                set_mode(&moved, 0o777);
                std::os::unix::fs::symlink(&moved, home.packages()).unwrap();
                true
            },
        ),
        (
            "the store made world-writable",
            "writable by its group or by others",
            |home, _, _| {
                set_mode(&home.packages(), 0o777);
                true
            },
        ),
        (
            "the store made group-writable",
            "writable by its group or by others",
            |home, _, _| {
                set_mode(&home.packages(), 0o770);
                true
            },
        ),
        (
            "the package made world-writable",
            "writable by its group or by others",
            |_, pkg, _| {
                set_mode(pkg, 0o777);
                true
            },
        ),
        (
            "the store given to another user",
            "owned by uid 65534",
            |home, _, _| std::os::unix::fs::lchown(home.packages(), Some(65534), None).is_ok(),
        ),
        (
            "the package given to another user",
            "owned by uid 65534",
            |_, pkg, _| std::os::unix::fs::lchown(pkg, Some(65534), None).is_ok(),
        ),
    ];
    for (case, reason, change) in changes {
        let dir = tempfile::tempdir().unwrap();
        let (home, package, before) = installed(dir.path(), &options);
        if !change(&home, &package, dir.path()) {
            eprintln!("not root: {case} is left out");
            continue;
        }
        for (when, capability) in [("loaded before", before), ("loaded after", loaded(&home))] {
            let e = resolve(&capability).unwrap_err();
            assert!(e.contains(reason), "{case} ({when}): {e}");
            assert!(
                e.contains("package store is refused") || e.contains("installed package"),
                "{case} ({when}): {e}"
            );
        }
    }
}

#[test]
fn the_check_hashes_the_package_per_run_and_a_deep_change_is_still_found() {
    // 200 files of 8 KiB in nested directories: 1.6 MiB checked before each run.
    let names: Vec<String> = (0..200)
        .map(|i| format!("dist/d{}/f{i}.js", i % 10))
        .collect();
    let body = vec![b'x'; 8 << 10];
    let entries: Vec<Entry<'_>> = names.iter().map(|n| Entry::File(n, &body)).collect();
    let bytes = tarball_with("@fixture/capabilities", &entries);
    let (_registry, mut options) = serving("@fixture/capabilities", &bytes);
    options.limits.max_unpacked_bytes = 16 << 20;
    let dir = tempfile::tempdir().unwrap();
    let (_home, package, capability) = installed(dir.path(), &options);
    let runs = 20u32;
    let started = std::time::Instant::now();
    for _ in 0..runs {
        resolve(&capability).unwrap();
    }
    eprintln!(
        "checking an installed package of 202 files (1.6 MiB) before a run: {:?} per run \
         (debug build)",
        started.elapsed() / runs
    );
    let small = tarball("@fixture/capabilities", "1.0.0", Extra::None);
    let (_r, small_options) = serving("@fixture/capabilities", &small);
    let small_dir = tempfile::tempdir().unwrap();
    let (_h, _p, fixture) = installed(small_dir.path(), &small_options);
    let started = std::time::Instant::now();
    for _ in 0..runs {
        resolve(&fixture).unwrap();
    }
    eprintln!(
        "checking the fixture package (2 files) before a run: {:?} per run (debug build)",
        started.elapsed() / runs
    );
    // One byte of one file deep in the tree, same size.
    let deep = package.join("dist/d7/f197.js");
    set_mode(&deep, 0o644);
    let mut changed = body.clone();
    changed[4000] = b'y';
    std::fs::write(&deep, &changed).unwrap();
    set_mode(&deep, 0o444);
    let e = resolve(&capability).unwrap_err();
    assert!(
        e.contains("`dist/d7/f197.js` was changed after install"),
        "{e}"
    );
}
