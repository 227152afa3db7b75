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
