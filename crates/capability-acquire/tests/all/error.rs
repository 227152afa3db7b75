//! The errors keep their wording, and their accessors name what failed: each error made by
//! the public operation that fails that way (against a registry on 127.0.0.1).

use capability_acquire::federation::fetch_index;
use capability_acquire::unpack::{Limits, unpack};
use capability_acquire::{AcquireError, FetchConfig, Fetcher, InstallOptions, install};
use capability_exec::home::Home;
use capability_test_support::registry::{
    Extra, Registry, index, index_package, package_json, tarball,
};
use serde_json::json;

#[test]
fn messages_keep_their_wording_and_accessors_name_what_failed() {
    let registry = Registry::start();
    let server = registry.server();

    // An index answered with HTTP 500.
    let url = server.put("/failing/index.json", 500, "{}");
    let fetcher = Fetcher::new(FetchConfig::default()).unwrap();
    let e = fetch_index(&fetcher, &url).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("Failed to fetch capability index: HTTP 500 ({url})")
    );
    let AcquireError::Fetch(fetch) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(
        (fetch.url(), fetch.status()),
        (Some(url.as_str()), Some(500))
    );

    // A tarball with a device file.
    let dir = tempfile::tempdir().unwrap();
    let e = unpack(
        &tarball("t", "1.0.0", Extra::Device),
        &dir.path().join("pkg"),
        Limits::default(),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "refused archive: the entry \"null\" is a device file"
    );
    let AcquireError::Unpack(unpack) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(unpack.entry(), Some("null"));

    // Installs refused for the registry's packument or for the package.
    let home = Home::open(&dir.path().join("home")).unwrap();
    // `@a/b@1.0.0`: its version document has an integrity and no tarball.
    let mut doc = package_json("@a/b", "1.0.0");
    doc["dist"] = json!({"integrity": "sha512-AAAA"});
    server.json(
        "/registry/@a%2Fb",
        &json!({"name": "@a/b", "dist-tags": {"latest": "1.0.0"}, "versions": {"1.0.0": doc}}),
    );
    // `b@1.0.0` from git.
    let mut from_git = index_package("b", "1.0.0", None);
    from_git["source"] = json!("git");
    from_git["capabilities"][0]["manifest"]["id"] = json!("fixture/git");
    // `c@1.0.0`, indexed as exporting `fixture/other`, which it does not.
    registry.add("c", "1.0.0");
    let mut other = index_package("c", "1.0.0", None);
    other["capabilities"][0]["manifest"]["id"] = json!("fixture/other");
    let mut no_tarball = index_package("@a/b", "1.0.0", None);
    no_tarball["capabilities"][0]["manifest"]["id"] = json!("fixture/no-tarball");
    let index_url = server.json(
        "/index.json",
        &index(vec![no_tarball, from_git, other], &[]),
    );
    let options = InstallOptions {
        indexes: vec![index_url],
        registry: Some(registry.url()),
        ..InstallOptions::default()
    };

    let e = install(&home, "fixture/no-tarball", &options).unwrap_err();
    assert_eq!(e.to_string(), "@a/b@1.0.0 has no dist.tarball");
    let AcquireError::Registry(registry_error) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(
        (registry_error.package(), registry_error.version()),
        ("@a/b", Some("1.0.0"))
    );

    let e = install(&home, "fixture/git", &options).unwrap_err();
    assert_eq!(
        e.to_string(),
        "b@1.0.0 comes from \"git\": only npm packages are installed"
    );
    let AcquireError::Package(package) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(package.package(), "b@1.0.0");

    let e = install(&home, "fixture/other", &options).unwrap_err();
    assert_eq!(
        e.to_string(),
        "c@1.0.0: the package does not export fixture/other with a manifest"
    );
}
