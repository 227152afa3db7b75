//! Installing from an index and a registry on loopback: an artifact refused for its
//! integrity (declared by the packument or by the index) or for its contents (`..`, an
//! absolute path, a symlink out of the package, a device file, a bomb) leaves nothing in the
//! store; a good one is unpacked there.

use capability_acquire::unpack::Limits;
use capability_acquire::{InstallOptions, install};
use capability_exec::home::Home;
use capability_test_support::registry::{
    Extra, Registry, index, index_package, sri, store_entries, tarball,
};
use serde_json::json;

/// (name, bytes, packument integrity, index integrity, expected message)
type Case = (
    &'static str,
    Vec<u8>,
    Option<String>,
    Option<String>,
    &'static str,
);

fn options(index: &str, registry: &Registry) -> InstallOptions {
    InstallOptions {
        indexes: vec![index.to_string()],
        registry: Some(registry.url()),
        limits: Limits {
            max_unpacked_bytes: 1 << 20,
            ..Limits::default()
        },
        ..InstallOptions::default()
    }
}

#[test]
fn refused_artifacts_leave_nothing_in_the_store() {
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let home = Home::open(&dir.path().join("home")).unwrap();
    let good = tarball("good", "1.0.0", Extra::None);
    let cases: Vec<Case> = vec![
        (
            "packument-mismatch",
            good.clone(),
            Some(sri(b"other bytes")),
            None,
            "the packument declares",
        ),
        (
            "index-mismatch",
            good.clone(),
            None,
            Some(sri(b"other bytes")),
            "the index declares",
        ),
        (
            "dotdot",
            tarball("dotdot", "1.0.0", Extra::RawPath("package/../evil.js")),
            None,
            None,
            "contains `..`",
        ),
        (
            "absolute",
            tarball("absolute", "1.0.0", Extra::RawPath("/tmp/evil.js")),
            None,
            None,
            "absolute path",
        ),
        (
            "symlink",
            tarball(
                "symlink",
                "1.0.0",
                Extra::Symlink("package/passwd", "/etc/passwd"),
            ),
            None,
            None,
            "outside the package",
        ),
        (
            "device",
            tarball("device", "1.0.0", Extra::Device),
            None,
            None,
            "device file",
        ),
        (
            "bomb",
            tarball("bomb", "1.0.0", Extra::Zeros(8 << 20)),
            None,
            None,
            "expands past the limit",
        ),
        ("good", good, None, None, ""),
    ];
    let mut packages = Vec::new();
    for (name, bytes, declared, indexed, _) in &cases {
        let declared = declared.clone().unwrap_or_else(|| sri(bytes));
        registry.publish(name, "1.0.0", bytes, &declared);
        let mut record = index_package(name, "1.0.0", indexed.as_deref());
        // Each refused package is indexed under an id of its own; the good one exports
        // `fixture/add`, as its package.json says.
        if *name != "good" {
            record["capabilities"][0]["manifest"]["id"] = json!(format!("fixture/{name}"));
        }
        packages.push(record);
    }
    let url = registry.server().json("/index.json", &index(packages, &[]));
    let options = options(&url, &registry);
    for (name, bytes, _, _, expected) in &cases {
        assert!(bytes.len() < 1 << 20, "{name} is small on the wire");
        let id = match *name {
            "good" => "fixture/add".to_string(),
            _ => format!("fixture/{name}"),
        };
        let r = install(&home, &id, &options);
        if *name == "good" {
            assert!(r.is_ok(), "{:?}", r.err());
            // The unpacked tarball and its install record.
            let mut entries = store_entries(home.root());
            entries.sort();
            let hex = r.unwrap().record.store;
            assert_eq!(entries, [hex.clone(), format!("{hex}.json")]);
            continue;
        }
        let e = r.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains(expected), "{name}: {e}");
        assert!(
            store_entries(home.root()).is_empty(),
            "{name}: {:?}",
            store_entries(home.root())
        );
    }
}

/// A registry serving `bytes` as the package `name@1.0.0` (exporting `fixture/add`), and
/// options installing from an index naming it.
pub fn serving(name: &str, bytes: &[u8]) -> (Registry, InstallOptions) {
    let registry = Registry::start();
    registry.publish(name, "1.0.0", bytes, &sri(bytes));
    let url = registry.server().json(
        "/index.json",
        &index(vec![index_package(name, "1.0.0", Some(&sri(bytes)))], &[]),
    );
    let options = options(&url, &registry);
    (registry, options)
}

/// Everything under `dir`, as `relative path (mode)`.
fn listing(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        out.push(entry.path().display().to_string());
        if entry.file_type().unwrap().is_dir() {
            out.extend(listing(&entry.path()));
        }
    }
    out
}

#[test]
fn a_link_chain_out_of_the_package_leaves_nothing_in_the_store() {
    for (case, entries) in crate::unpack::escaping_chains() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::open(&dir.path().join("home")).unwrap();
        let (_registry, options) =
            serving("chain", &crate::unpack::tarball_with("chain", &entries));
        let e = install(&home, "fixture/add", &options)
            .unwrap_err()
            .to_string();
        assert!(e.contains("outside the package"), "{case}: {e}");
        assert!(
            store_entries(home.root()).is_empty(),
            "{case}: {:?}",
            store_entries(home.root())
        );
    }
}

/// Makes `path` owned by another user (`nobody`); false when this process may not (it is
/// not root), and the case is then left out.
fn give_away(path: &std::path::Path) -> bool {
    std::os::unix::fs::lchown(path, Some(65534), Some(65534)).is_ok()
}

fn set_mode(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn the_store_must_be_the_homes_own_private_directory() {
    let bytes = tarball("@fixture/capabilities", "1.0.0", Extra::None);
    let (_registry, options) = serving("@fixture/capabilities", &bytes);
    // `<home>/packages` a link to a world-writable directory elsewhere.
    let dir = tempfile::tempdir().unwrap();
    let home = Home::open(&dir.path().join("home")).unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    set_mode(&shared, 0o777);
    std::os::unix::fs::symlink(&shared, home.packages()).unwrap();
    let e = install(&home, "fixture/add", &options)
        .unwrap_err()
        .to_string();
    assert!(e.contains("symbolic link"), "{e}");
    assert!(e.contains(&home.packages().display().to_string()), "{e}");
    assert!(listing(&shared).is_empty(), "{:?}", listing(&shared));
    // A link to a private directory of this user is refused too: the store is the home's own.
    set_mode(&shared, 0o700);
    let e = install(&home, "fixture/add", &options)
        .unwrap_err()
        .to_string();
    assert!(e.contains("symbolic link"), "{e}");
    assert!(listing(&shared).is_empty(), "{:?}", listing(&shared));

    // A real directory writable by others, or by its group.
    for mode in [0o777, 0o770, 0o757] {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::open(&dir.path().join("home")).unwrap();
        std::fs::create_dir(home.packages()).unwrap();
        set_mode(&home.packages(), mode);
        let e = install(&home, "fixture/add", &options)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("writable by its group or by others"),
            "{mode:o}: {e}"
        );
        assert!(listing(&home.packages()).is_empty(), "{mode:o}");
    }

    // Another user's directory.
    let dir = tempfile::tempdir().unwrap();
    let home = Home::open(&dir.path().join("home")).unwrap();
    std::fs::create_dir(home.packages()).unwrap();
    if give_away(&home.packages()) {
        let e = install(&home, "fixture/add", &options)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is owned by uid 65534"), "{e}");
        assert!(listing(&home.packages()).is_empty());
    } else {
        eprintln!("not root: the case of a store owned by another user is left out");
    }

    // A new store is created private, and the install goes through.
    let dir = tempfile::tempdir().unwrap();
    let home = Home::open(&dir.path().join("home")).unwrap();
    install(&home, "fixture/add", &options).unwrap();
    let mode = |p: &std::path::Path| {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    };
    assert_eq!(mode(&home.packages()), 0o700);
}

#[test]
fn an_install_records_every_file_and_keeps_them_read_only() {
    use sha2::Digest as _;
    let bytes = crate::unpack::tarball_with(
        "@fixture/capabilities",
        &[
            crate::unpack::Entry::File("lib/util.mjs", b"export const x = 1;\n"),
            crate::unpack::Entry::Link("lib/add.mjs", "../add.mjs"),
        ],
    );
    let (_registry, options) = serving("@fixture/capabilities", &bytes);
    let dir = tempfile::tempdir().unwrap();
    let home = Home::open(&dir.path().join("home")).unwrap();
    let installation = install(&home, "fixture/add", &options).unwrap();
    let hex = &installation.record.store;
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(home.package_record(hex)).unwrap()).unwrap();
    let entries = &record["files"]["entries"];
    let keys: Vec<&String> = entries.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "add.mjs",
            "lib",
            "lib/add.mjs",
            "lib/util.mjs",
            "package.json"
        ],
        "{record}"
    );
    let module = std::fs::read(installation.store.join("add.mjs")).unwrap();
    assert_eq!(
        entries["add.mjs"],
        json!({"type": "file", "sha256": hex::encode(sha2::Sha256::digest(&module)),
               "size": module.len(), "executable": false})
    );
    assert_eq!(
        entries["lib/add.mjs"],
        json!({"type": "symlink", "target": "../add.mjs"})
    );
    assert_eq!(entries["lib"], json!({"type": "dir"}));
    // Files 0444, directories 0755, the store 0700.
    let mode = |p: &std::path::Path| {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    };
    for file in ["add.mjs", "package.json", "lib/util.mjs"] {
        assert_eq!(mode(&installation.store.join(file)), 0o444, "{file}");
    }
    for d in [installation.store.clone(), installation.store.join("lib")] {
        assert_eq!(mode(&d), 0o755, "{}", d.display());
    }
    assert_eq!(mode(&home.packages()), 0o700);
    // A receipt of its capability cites the list's digest beside the tarball's integrity.
    use capability_runtime::source::CapabilitySource as _;
    let caps = capability_acquire::Installed::from_home(&home)
        .capabilities()
        .unwrap();
    let provenance = caps[0].provenance().unwrap();
    let digest = provenance["packageFiles"].as_str().unwrap_or_default();
    assert_eq!(
        digest,
        format!(
            "sha256-{}",
            capability_core::json::canonical_hash(&record["files"])
        ),
        "{provenance}"
    );
    assert_eq!(provenance["packageIntegrity"], json!(sri(&bytes)));
}

#[test]
fn a_package_altered_in_the_store_is_put_back_by_installing_it_again() {
    let bytes = tarball("@fixture/capabilities", "1.0.0", Extra::None);
    let (_registry, options) = serving("@fixture/capabilities", &bytes);
    let dir = tempfile::tempdir().unwrap();
    let home = Home::open(&dir.path().join("home")).unwrap();
    let first = install(&home, "fixture/add", &options).unwrap();
    let module = first.store.join("add.mjs");
    let original = std::fs::read(&module).unwrap();
    type Alter<'a> = Box<dyn Fn() + 'a>;
    let alterations: Vec<(&str, Alter<'_>)> = vec![
        (
            "module rewritten",
            Box::new(|| {
                set_mode(&module, 0o644);
                let text = String::from_utf8(original.clone()).unwrap();
                std::fs::write(
                    &module,
                    text.replace("input.a + input.b", "input.a * input.b"),
                )
                .unwrap();
            }),
        ),
        (
            "file added",
            Box::new(|| std::fs::write(first.store.join("evil.mjs"), b"x").unwrap()),
        ),
        (
            "module replaced by a link",
            Box::new(|| {
                let outside = dir.path().join("outside.mjs");
                std::fs::write(&outside, &original).unwrap();
                std::fs::remove_file(&module).unwrap();
                std::os::unix::fs::symlink(&outside, &module).unwrap();
            }),
        ),
    ];
    for (case, alter) in alterations {
        alter();
        let again = install(&home, "fixture/add", &options).unwrap();
        assert_eq!(again.store, first.store);
        assert_eq!(std::fs::read(&module).unwrap(), original, "{case}");
        assert!(
            !std::fs::symlink_metadata(&module).unwrap().is_symlink(),
            "{case}"
        );
        assert!(!first.store.join("evil.mjs").exists(), "{case}");
        let mut entries = store_entries(home.root());
        entries.sort();
        assert_eq!(entries.len(), 2, "{case}: {entries:?}");
    }
}
