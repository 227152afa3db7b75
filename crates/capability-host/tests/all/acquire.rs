//! `Host::acquire`: a capability that is in an index but not installed is installed,
//! assessed and registered in the host that acquires it, so the same host runs it (the
//! path `cap exec <indexed id>` takes, opening one host); a package the trust policy
//! refuses leaves nothing behind.

use capability_host::trust::TrustPolicy;
use capability_host::{HostError, InstallOptions, Outcome, Request};
use capability_test_support::registry::{Registry, index, index_package, store_entries};
use serde_json::json;

/// A registry serving the fixture package (`fixture/add`) and an index naming it.
fn published() -> (Registry, InstallOptions) {
    let registry = Registry::start();
    let integrity = registry.add("@fixture/capabilities", "1.0.0");
    let url = registry.server().json(
        "/index.json",
        &index(
            vec![index_package(
                "@fixture/capabilities",
                "1.0.0",
                Some(&integrity),
            )],
            &[],
        ),
    );
    let options = InstallOptions {
        indexes: vec![url],
        registry: Some(registry.url()),
        ..InstallOptions::default()
    };
    (registry, options)
}

#[test]
fn an_indexed_capability_is_acquired_into_the_host_that_runs_it() {
    let dir = tempfile::tempdir().unwrap();
    let (_registry, options) = published();
    let host = crate::host_with(dir.path(), None);
    assert!(host.resolve("fixture/add").is_err(), "not installed yet");

    let trust = TrustPolicy {
        require_package: true,
        require_package_integrity: true,
        ..TrustPolicy::default()
    };
    let acquired = host
        .acquire("fixture/add", &options, &trust)
        .unwrap()
        .expect("an index is configured");
    assert_eq!(acquired.installation.capability_id(), "fixture/add");
    assert!(acquired.trust.accepted, "{:?}", acquired.trust);
    assert_eq!(
        store_entries(&dir.path().join("home")).len(),
        2,
        "package + record"
    );

    // The same host, not a second one, resolves and runs it behind the sandbox.
    assert_eq!(host.resolve("fixture/add").unwrap(), "fixture/add");
    let outcome = host.invoke(&Request::new("fixture/add", json!({"a": 2, "b": 3})));
    let Outcome::Completed(done) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(done.receipt.output, Some(json!({"result": 5})));
    let receipt = serde_json::to_value(&done.receipt).unwrap();
    assert_eq!(
        receipt["provenance"]["packageName"],
        json!("@fixture/capabilities"),
        "{receipt}"
    );

    // Acquiring what is installed again changes nothing.
    host.acquire("fixture/add", &options, &trust).unwrap();
    assert_eq!(store_entries(&dir.path().join("home")).len(), 2);
}

#[test]
fn a_package_the_trust_policy_refuses_leaves_nothing_and_is_not_registered() {
    let dir = tempfile::tempdir().unwrap();
    let (_registry, options) = published();
    let host = crate::host_with(dir.path(), None);
    let trust = TrustPolicy {
        allowed_packages: vec!["@other/*".into()],
        ..TrustPolicy::default()
    };
    let err = host
        .acquire("fixture/add", &options, &trust)
        .expect_err("refused by trust");
    let HostError::Trust(refused) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(refused.capability(), "fixture/add");
    assert!(err.to_string().contains("nothing was kept"), "{err}");
    assert!(
        store_entries(&dir.path().join("home")).is_empty(),
        "refused package left in the store: {:?}",
        store_entries(&dir.path().join("home"))
    );
    assert!(host.resolve("fixture/add").is_err());
}

#[test]
fn without_an_index_there_is_nothing_to_acquire() {
    let dir = tempfile::tempdir().unwrap();
    let host = crate::host_with(dir.path(), None);
    let got = host
        .acquire(
            "fixture/add",
            &InstallOptions::default(),
            &TrustPolicy::default(),
        )
        .unwrap();
    assert!(got.is_none());
}

/// Rewrites the installed module of `fixture/add` to multiply (same size, same mode).
fn multiply_instead(store: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt as _;
    let module = store.join("add.mjs");
    let text = std::fs::read_to_string(&module).unwrap();
    std::fs::set_permissions(&module, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(
        &module,
        text.replace("input.a + input.b", "input.a * input.b"),
    )
    .unwrap();
    std::fs::set_permissions(&module, std::fs::Permissions::from_mode(0o444)).unwrap();
}

#[test]
fn an_installed_package_changed_after_install_does_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let (_registry, options) = published();
    let host = crate::host_with(dir.path(), None);
    let acquired = host
        .acquire("fixture/add", &options, &TrustPolicy::default())
        .unwrap()
        .expect("an index is configured");
    let request = Request::new("fixture/add", json!({"a": 2, "b": 3}));
    let Outcome::Completed(done) = host.invoke(&request) else {
        panic!("the installed package runs")
    };
    assert_eq!(done.receipt.output, Some(json!({"result": 5})));
    multiply_instead(&acquired.installation.store);
    // The host that installed it, and a host opened now, refuse to run it: no receipt says
    // the tarball's bytes produced a result.
    for (which, host) in [
        ("same host", host),
        ("new host", crate::host_with(dir.path(), None)),
    ] {
        let outcome = host.invoke(&request);
        let Outcome::Failed(e) = &outcome else {
            panic!("{which}: {outcome:?}")
        };
        assert!(
            e.message.contains("`add.mjs` was changed after install"),
            "{which}: {e:?}"
        );
        assert_eq!(e.receipt_id, None, "{which}: refused before it ran");
    }
}

#[test]
fn installed_packages_do_not_run_from_a_store_that_is_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let (_registry, options) = published();
    let host = crate::host_with(dir.path(), None);
    host.acquire("fixture/add", &options, &TrustPolicy::default())
        .unwrap()
        .expect("an index is configured");
    let request = Request::new("fixture/add", json!({"a": 2, "b": 3}));
    assert!(matches!(host.invoke(&request), Outcome::Completed(_)));
    // The same bytes, moved to a world-writable directory `<home>/packages` links to.
    let packages = dir.path().join("home/packages");
    let shared = dir.path().join("shared");
    std::fs::rename(&packages, &shared).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::os::unix::fs::symlink(&shared, &packages).unwrap();
    for (which, host) in [
        ("same host", host),
        ("new host", crate::host_with(dir.path(), None)),
    ] {
        let outcome = host.invoke(&request);
        let Outcome::Failed(e) = &outcome else {
            panic!("{which}: {outcome:?}")
        };
        assert!(e.message.contains("symbolic link"), "{which}: {e:?}");
        assert_eq!(e.receipt_id, None, "{which}: refused before it ran");
    }
}

/// A pre-started spare is not a way round the check: a package that changed after install
/// (here, a file beside the module, which the spare's stamp does not cover) is refused on a
/// host that keeps spares too.
#[test]
fn a_pooled_run_of_a_changed_package_is_refused_too() {
    let dir = tempfile::tempdir().unwrap();
    let (_registry, options) = published();
    let host = capability_host::Host::open(capability_host::HostConfig {
        home: Some(dir.path().join("home")),
        sandbox_pool: 1,
        ..capability_host::HostConfig::default()
    })
    .unwrap();
    let acquired = host
        .acquire("fixture/add", &options, &TrustPolicy::default())
        .unwrap()
        .expect("an index is configured");
    let request = Request::new("fixture/add", json!({"a": 2, "b": 3}));
    assert!(matches!(host.invoke(&request), Outcome::Completed(_)));
    // A spare for it is started (the run above left one too); give it time to be up, so
    // that the next run would take it.
    assert!(host.prewarm_pool() > 0);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let extra = acquired.installation.store.join("planted.mjs");
    use std::os::unix::fs::PermissionsExt as _;
    let dir_mode = std::fs::metadata(&acquired.installation.store)
        .unwrap()
        .permissions();
    std::fs::set_permissions(
        &acquired.installation.store,
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(&extra, "export default 1;\n").unwrap();
    std::fs::set_permissions(&acquired.installation.store, dir_mode).unwrap();
    let outcome = host.invoke(&request);
    let Outcome::Failed(e) = &outcome else {
        panic!("{outcome:?}")
    };
    assert!(e.message.contains("planted.mjs"), "{e:?}");
    assert_eq!(e.receipt_id, None);
}
