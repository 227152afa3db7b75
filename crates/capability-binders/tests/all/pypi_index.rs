//! The index client and the resolver against a real index (pypiserver on loopback), and
//! against pages of the tests' own (yanked releases, PEP 691 JSON, the JSON API, a digest
//! that lies), all on 127.0.0.1.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::time::Duration;

use capability_binders::pypi::index::{
    Index, console_scripts, read_metadata, resolve_index_url, verify_wheel,
};
use capability_binders::pypi::resolve::resolve;
use capability_binders::pypi::tags::Interpreter;
use capability_binders::pypi::{PypiConfig, PypiErrorKind};
use capability_test_support::http::Server;
use serde_json::json;

use capability_test_support::pypi::{PypiServer, WheelSpec, build_wheel, sha256_file, sha256_hex};

fn config(index_url: &str, cache: &Path) -> PypiConfig {
    PypiConfig {
        index_url: index_url.to_string(),
        allow_private: true,
        timeout: Duration::from_secs(20),
        cache_dir: cache.to_path_buf(),
    }
}

/// The interpreter, or `None` (said) when there is no python3 to probe.
fn interpreter() -> Option<Interpreter> {
    match Interpreter::probe() {
        Ok(i) => Some(i),
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}

/// A platform tag the probed interpreter accepts (`cp311-cp311-manylinux_2_17_x86_64`).
fn platform_tag(i: &Interpreter) -> String {
    let cp = format!("cp3{}", i.version.1);
    let tags = i.supported_tags();
    let wanted = format!("manylinux_2_17_{}", i.machine);
    tags.iter()
        .find(|t| t.python == cp && t.abi == format!("{cp}{}", i.abiflags) && t.platform == wanted)
        .or_else(|| tags.iter().find(|t| t.platform != "any"))
        .map(ToString::to_string)
        .unwrap_or_else(|| "py3-none-any".into())
}

#[test]
fn inspects_latest_and_exact_releases() {
    let dir = tempfile::tempdir().unwrap();
    let Some(server) = PypiServer::start(&dir.path().join("packages")) else {
        return;
    };
    if interpreter().is_none() {
        return;
    }
    server.add_wheel(&WheelSpec::new("Demo.Pkg", "1.0"));
    let v11 = server.add_wheel(&WheelSpec::new("Demo.Pkg", "1.1").tag("py2.py3-none-any"));
    server.add_wheel(&WheelSpec::new("Demo.Pkg", "2.0b1"));
    let index = Index::new(&config(&server.url, &dir.path().join("cache"))).unwrap();

    let latest = index.inspect("demo-pkg", None).unwrap();
    assert_eq!(latest.version, "1.1", "the pre-release 2.0b1 is skipped");
    assert_eq!(latest.tag, "py3-none-any");
    assert_eq!(latest.wheel.filename, "Demo_Pkg-1.1-py2.py3-none-any.whl");
    assert_eq!(latest.wheel.sha256, sha256_file(&v11));
    assert!(
        latest
            .wheel
            .url
            .starts_with(&format!("http://{}/", server.addr))
    );

    let exact = index.inspect("DEMO_pkg", Some("1.0")).unwrap();
    assert_eq!(exact.version, "1.0");
    assert_eq!(exact.wheel.filename, "Demo_Pkg-1.0-py3-none-any.whl");
    let pre = index.inspect("demo-pkg", Some("2.0b1")).unwrap();
    assert_eq!(
        pre.version, "2.0b1",
        "an exact pre-release can be asked for"
    );

    let e = index.inspect("demo-pkg", Some("3.0")).unwrap_err();
    assert_eq!(e.kind, PypiErrorKind::NotFound, "{e}");
    assert!(
        e.message.contains("3.0") && e.message.contains("1.1"),
        "{e}"
    );
    let e = index.inspect("no-such-project", None).unwrap_err();
    assert_eq!(e.kind, PypiErrorKind::NotFound, "{e}");
    let e = index.inspect("bad name!", None).unwrap_err();
    assert_eq!(e.kind, PypiErrorKind::Invalid, "{e}");
}

#[test]
fn platform_wheels_are_chosen_by_the_interpreters_tags() {
    let dir = tempfile::tempdir().unwrap();
    let Some(server) = PypiServer::start(&dir.path().join("packages")) else {
        return;
    };
    let Some(interp) = interpreter() else {
        return;
    };
    let tag = platform_tag(&interp);
    server.add_wheel(&WheelSpec::new("fast", "1.0"));
    let native = server.add_wheel(&WheelSpec::new("fast", "1.0").tag(&tag));
    server.add_wheel(&WheelSpec::new("fast", "1.0").tag("cp311-cp311-win_amd64"));
    server.add_wheel(&WheelSpec::new("native-only", "1.0").tag(&tag));
    server.add_wheel(&WheelSpec::new("winonly", "1.0").tag("cp311-cp311-win_amd64"));
    server.add_wheel(&WheelSpec::new("winonly", "1.0").tag("cp311-cp311-macosx_11_0_arm64"));
    let index = Index::new(&config(&server.url, &dir.path().join("cache"))).unwrap();

    let fast = index.inspect("fast", None).unwrap();
    assert_eq!(
        fast.tag, tag,
        "the platform wheel is preferred to the universal one"
    );
    assert_eq!(fast.wheel.sha256, sha256_file(&native));
    let only = index.inspect("native-only", Some("1.0")).unwrap();
    assert_eq!(only.tag, tag);

    let e = index.inspect("winonly", Some("1.0")).unwrap_err();
    assert_eq!(e.kind, PypiErrorKind::NoWheel, "{e}");
    assert!(e.message.contains("winonly 1.0"), "{e}");
    assert!(
        e.message.contains("cp311-cp311-win_amd64"),
        "the tags seen: {e}"
    );
    assert!(e.message.contains("cp311-cp311-macosx_11_0_arm64"), "{e}");
    let e = index.inspect("winonly", None).unwrap_err();
    assert_eq!(e.kind, PypiErrorKind::NoWheel, "{e}");
}

#[test]
fn sdist_only_releases_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let Some(server) = PypiServer::start(&dir.path().join("packages")) else {
        return;
    };
    if interpreter().is_none() {
        return;
    }
    server.add_sdist("src-only", "2.5");
    server.add_wheel(&WheelSpec::new("mixed", "1.0"));
    server.add_sdist("mixed", "1.1");
    let index = Index::new(&config(&server.url, &dir.path().join("cache"))).unwrap();

    for version in [Some("2.5"), None] {
        let e = index.inspect("src-only", version).unwrap_err();
        assert_eq!(e.kind, PypiErrorKind::NoWheel, "{e}");
        assert!(e.message.contains("src-only 2.5"), "{e}");
        assert!(e.message.contains("only wheels are bound"), "{e}");
    }
    // The latest release with a wheel, not the latest release.
    assert_eq!(index.inspect("mixed", None).unwrap().version, "1.0");
    assert_eq!(
        index.inspect("mixed", Some("1.1")).unwrap_err().kind,
        PypiErrorKind::NoWheel
    );
}

#[test]
fn wheels_are_fetched_verified_and_reused() {
    let dir = tempfile::tempdir().unwrap();
    let Some(server) = PypiServer::start(&dir.path().join("packages")) else {
        return;
    };
    if interpreter().is_none() {
        return;
    }
    let built = server.add_wheel(
        &WheelSpec::new("tool", "0.3")
            .file("tool/__init__.py", "def main():\n    return 1\n")
            .script("tool-run", "tool:main")
            .script("tool-mod", "tool")
            .requires("dep (>=1)"),
    );
    let cache = dir.path().join("cache");
    let index = Index::new(&config(&server.url, &cache)).unwrap();
    let found = index.inspect("tool", None).unwrap();
    let path = index.fetch_wheel(&found.wheel, &cache).unwrap();
    assert_eq!(
        path,
        cache
            .join(&found.wheel.sha256)
            .join("tool-0.3-py3-none-any.whl")
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        std::fs::read(&built).unwrap()
    );
    verify_wheel(&path, &found.wheel.sha256).unwrap();
    let e = verify_wheel(&path, &"0".repeat(64)).unwrap_err();
    assert_eq!(e.kind, PypiErrorKind::Digest, "{e}");

    // A tampered copy in the cache is replaced, not reused.
    std::fs::write(&path, b"tampered").unwrap();
    let again = index.fetch_wheel(&found.wheel, &cache).unwrap();
    assert_eq!(again, path);
    verify_wheel(&again, &found.wheel.sha256).unwrap();
    // An intact copy is reused without the server.
    drop(server);
    assert_eq!(index.fetch_wheel(&found.wheel, &cache).unwrap(), path);

    let meta = read_metadata(&path).unwrap();
    assert_eq!((meta.name.as_str(), meta.version.as_str()), ("tool", "0.3"));
    assert_eq!(meta.requires_dist, vec!["dep (>=1)"]);
    assert_eq!(
        console_scripts(&path).unwrap(),
        vec![
            (
                "tool-run".to_string(),
                "tool".to_string(),
                Some("main".to_string())
            ),
            ("tool-mod".to_string(), "tool".to_string(), None),
        ]
    );
}

/// A page of the test's own: `/simple/<name>/` and the wheels under `/files/`.
fn own_index() -> Server {
    Server::start()
}

#[test]
fn yanked_releases_on_an_html_page() {
    let Some(_) = interpreter() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = own_index();
    let w10 = build_wheel(dir.path(), &WheelSpec::new("yanky", "1.0"));
    let w09 = build_wheel(dir.path(), &WheelSpec::new("yanky", "0.9"));
    for w in [&w10, &w09] {
        let name = w.file_name().unwrap().to_str().unwrap();
        server.put(&format!("/files/{name}"), 200, std::fs::read(w).unwrap());
    }
    let page = format!(
        "<!DOCTYPE html><html><body>\n\
         <a href=\"../../files/yanky-1.0-py3-none-any.whl#sha256={}\" data-yanked=\"broken &amp; unsafe\" data-requires-python=\"&gt;=3.0\">yanky-1.0-py3-none-any.whl</a>\n\
         <a href=\"../../files/yanky-0.9-py3-none-any.whl#sha256={}\" data-requires-python=\"&gt;=3.0\">yanky-0.9-py3-none-any.whl</a>\n\
         </body></html>",
        sha256_file(&w10),
        sha256_file(&w09)
    );
    server.put("/simple/yanky/", 200, page);
    let cache = dir.path().join("cache");
    let index = Index::new(&config(&format!("{}/simple/", server.base), &cache)).unwrap();

    let latest = index.inspect("yanky", None).unwrap();
    assert_eq!(latest.version, "0.9", "the yanked 1.0 is skipped");
    assert_eq!(latest.requires_python.as_deref(), Some(">=3.0"));
    assert_eq!(
        latest.wheel.url,
        format!("{}/files/yanky-0.9-py3-none-any.whl", server.base)
    );
    let e = index.inspect("yanky", Some("1.0")).unwrap_err();
    assert_eq!(e.kind, PypiErrorKind::Yanked, "{e}");
    assert!(
        e.message.contains("yanked") && e.message.contains("broken & unsafe"),
        "{e}"
    );
    let path = index.fetch_wheel(&latest.wheel, &cache).unwrap();
    verify_wheel(&path, &latest.wheel.sha256).unwrap();
}

#[test]
fn pep691_json_pages() {
    let Some(_) = interpreter() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = own_index();
    let w1 = build_wheel(dir.path(), &WheelSpec::new("jsonic", "1.0"));
    let w2 = build_wheel(dir.path(), &WheelSpec::new("jsonic", "1.1"));
    server.put(
        "/files/jsonic-1.0-py3-none-any.whl",
        200,
        std::fs::read(&w1).unwrap(),
    );
    server.json(
        "/simple/jsonic/",
        &json!({
            "meta": {"api-version": "1.1"},
            "name": "jsonic",
            "files": [
                {"filename": "jsonic-1.0-py3-none-any.whl",
                 "url": "../../files/jsonic-1.0-py3-none-any.whl",
                 "hashes": {"sha256": sha256_file(&w1)}, "requires-python": ">=3", "size": 1},
                {"filename": "jsonic-1.1-py3-none-any.whl",
                 "url": "/files/jsonic-1.1-py3-none-any.whl",
                 "hashes": {"sha256": sha256_file(&w2)}, "yanked": "oops"},
                {"filename": "jsonic-1.2-py3-none-any.whl",
                 "url": "/files/jsonic-1.2-py3-none-any.whl", "hashes": {}},
                {"filename": "jsonic-1.3-py3-none-any.whl",
                 "url": "/files/jsonic-1.3-py3-none-any.whl", "hashes": {}, "yanked": true}
            ]
        }),
    );
    let cache = dir.path().join("cache");
    let index = Index::new(&config(&format!("{}/simple", server.base), &cache)).unwrap();

    let latest = index.inspect("Jsonic", None).unwrap();
    assert_eq!(
        latest.version, "1.0",
        "1.3 and 1.1 are yanked, 1.2 has no sha256"
    );
    assert_eq!(latest.wheel.size, Some(1));
    let e = index.inspect("jsonic", Some("1.1")).unwrap_err();
    assert_eq!(e.kind, PypiErrorKind::Yanked, "{e}");
    assert!(e.message.contains("oops"), "{e}");
    let e = index.inspect("jsonic", Some("1.2")).unwrap_err();
    assert_eq!(e.kind, PypiErrorKind::NoWheel, "{e}");
    assert!(e.message.contains("sha256"), "{e}");
    // The page says size 1; the fetcher checks the digest, not the size.
    let path = index.fetch_wheel(&latest.wheel, &cache).unwrap();
    assert_eq!(sha256_file(&path), sha256_file(&w1));
}

#[test]
fn the_json_api_is_used_when_the_index_has_one() {
    let Some(_) = interpreter() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = own_index();
    let w = build_wheel(dir.path(), &WheelSpec::new("apitest", "2.0"));
    let wurl = server.put(
        "/files/apitest-2.0-py3-none-any.whl",
        200,
        std::fs::read(&w).unwrap(),
    );
    let file = json!({
        "filename": "apitest-2.0-py3-none-any.whl", "url": wurl, "packagetype": "bdist_wheel",
        "digests": {"sha256": sha256_file(&w)}, "size": std::fs::metadata(&w).unwrap().len(),
        "requires_python": ">=3.8", "yanked": false
    });
    let doc = json!({
        "info": {"name": "ApiTest", "version": "2.0", "summary": "An API test",
                 "project_urls": {"Source": "https://example.org/src"}, "yanked": false},
        "urls": [file],
        "releases": {"2.0": [file], "1.0": []},
        "vulnerabilities": [{"id": "PYSEC-0000-1"}]
    });
    server.json("/pypi/apitest/json", &doc);
    server.json("/pypi/apitest/2.0/json", &doc);
    let mut yanked = doc.clone();
    yanked["info"]["version"] = json!("1.5");
    yanked["info"]["yanked"] = json!(true);
    yanked["info"]["yanked_reason"] = json!("bad metadata");
    server.json("/pypi/apitest/1.5/json", &yanked);
    let index = Index::new(&config(
        &format!("{}/simple/", server.base),
        &dir.path().join("cache"),
    ))
    .unwrap();

    for version in [None, Some("2.0")] {
        let found = index.inspect("apitest", version).unwrap();
        assert_eq!(found.name, "ApiTest");
        assert_eq!(found.version, "2.0");
        assert_eq!(found.summary.as_deref(), Some("An API test"));
        assert_eq!(found.project_urls["Source"], "https://example.org/src");
        assert_eq!(found.vulnerabilities, vec![json!({"id": "PYSEC-0000-1"})]);
        assert_eq!(found.requires_python.as_deref(), Some(">=3.8"));
        assert_eq!(
            found.wheel.size,
            std::fs::metadata(&w).ok().map(|m| m.len())
        );
    }
    let e = index.inspect("apitest", Some("1.5")).unwrap_err();
    assert_eq!(e.kind, PypiErrorKind::Yanked, "{e}");
    assert!(e.message.contains("bad metadata"), "{e}");
}

#[test]
fn a_digest_that_lies_keeps_nothing() {
    let Some(_) = interpreter() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = own_index();
    let real = build_wheel(dir.path(), &WheelSpec::new("liar", "1.0"));
    server.put(
        "/files/liar-1.0-py3-none-any.whl",
        200,
        std::fs::read(&real).unwrap(),
    );
    let claimed = sha256_hex(b"some other bytes");
    server.put(
        "/simple/liar/",
        200,
        format!(
            "<a href=\"/files/liar-1.0-py3-none-any.whl#sha256={claimed}\">liar-1.0-py3-none-any.whl</a>"
        ),
    );
    let cache = dir.path().join("cache");
    let index = Index::new(&config(&format!("{}/simple/", server.base), &cache)).unwrap();
    let found = index.inspect("liar", None).unwrap();
    assert_eq!(found.wheel.sha256, claimed);
    let e = index.fetch_wheel(&found.wheel, &cache).unwrap_err();
    assert_eq!(e.kind, PypiErrorKind::Digest, "{e}");
    assert!(e.message.contains(&claimed), "{e}");
    assert!(e.message.contains(&sha256_file(&real)), "{e}");
    let kept: Vec<_> = walk(&cache);
    assert!(kept.is_empty(), "nothing is kept: {kept:?}");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn dependencies_resolve_to_exact_verified_wheels() {
    let dir = tempfile::tempdir().unwrap();
    let Some(server) = PypiServer::start(&dir.path().join("packages")) else {
        return;
    };
    if interpreter().is_none() {
        return;
    }
    server.add_wheel(
        &WheelSpec::new("app", "1.0")
            .requires("Lib_Core (>=1.0,<2)")
            .requires("winonly; sys_platform == 'win32'")
            .requires("extra-only; extra == 'fancy'")
            .requires("leaf"),
    );
    server.add_wheel(&WheelSpec::new("lib-core", "1.0").requires("leaf>=1"));
    server.add_wheel(&WheelSpec::new("lib-core", "1.5").requires("leaf>=1"));
    server.add_wheel(&WheelSpec::new("lib-core", "2.0"));
    server.add_wheel(&WheelSpec::new("lib-core", "1.9rc1"));
    server.add_wheel(&WheelSpec::new("leaf", "1.2").requires("app"));
    server.add_wheel(&WheelSpec::new("leaf", "0.5"));
    let cache = dir.path().join("cache");
    let index = Index::new(&config(&server.url, &cache)).unwrap();
    let root = index.inspect("app", None).unwrap();
    let root_wheel = index.fetch_wheel(&root.wheel, &cache).unwrap();

    let closure = resolve(&index, &root, &root_wheel, &cache).unwrap();
    let got: Vec<(String, String, String)> = closure
        .iter()
        .map(|r| {
            (
                r.inspection.name.clone(),
                r.inspection.version.clone(),
                r.required_by.clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("lib-core".into(), "1.5".into(), "app 1.0".into()),
            ("leaf".into(), "1.2".into(), "app 1.0".into()),
        ],
        "highest satisfying final releases; the win32 and extra requirements are skipped; the cycle back to app is fine"
    );
    for r in &closure {
        verify_wheel(&r.path, &r.inspection.wheel.sha256).unwrap();
        assert!(r.path.starts_with(&cache));
    }
}

#[test]
fn dependencies_that_cannot_be_bound_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let Some(server) = PypiServer::start(&dir.path().join("packages")) else {
        return;
    };
    if interpreter().is_none() {
        return;
    }
    server.add_wheel(&WheelSpec::new("needs-src", "1.0").requires("src-dep>=1"));
    server.add_sdist("src-dep", "1.3");
    server.add_wheel(&WheelSpec::new("needs-ghost", "1.0").requires("ghost"));
    server.add_wheel(&WheelSpec::new("needs-new", "1.0").requires("shared>=9"));
    server.add_wheel(&WheelSpec::new("shared", "1.0"));
    server.add_wheel(&WheelSpec::new("shared", "2.0"));
    server.add_wheel(
        &WheelSpec::new("torn", "1.0")
            .requires("shared")
            .requires("pins-old"),
    );
    server.add_wheel(&WheelSpec::new("pins-old", "1.0").requires("shared<2"));
    let cache = dir.path().join("cache");
    let index = Index::new(&config(&server.url, &cache)).unwrap();
    let run = |name: &str| {
        let root = index.inspect(name, None).unwrap();
        let wheel = index.fetch_wheel(&root.wheel, &cache).unwrap();
        resolve(&index, &root, &wheel, &cache).unwrap_err()
    };

    let e = run("needs-src");
    assert_eq!(e.kind, PypiErrorKind::Dependency, "{e}");
    assert!(e.message.contains("src-dep"), "{e}");
    assert!(e.message.contains("needs-src 1.0"), "who required it: {e}");
    assert!(e.message.contains("only wheels are bound"), "{e}");

    let e = run("needs-ghost");
    assert_eq!(e.kind, PypiErrorKind::Dependency, "{e}");
    assert!(
        e.message.contains("ghost") && e.message.contains("needs-ghost 1.0"),
        "{e}"
    );

    let e = run("needs-new");
    assert_eq!(e.kind, PypiErrorKind::Dependency, "{e}");
    assert!(
        e.message.contains("shared>=9") && e.message.contains("2.0"),
        "{e}"
    );

    let e = run("torn");
    assert_eq!(e.kind, PypiErrorKind::Dependency, "{e}");
    assert!(e.message.contains("conflict"), "{e}");
    assert!(
        e.message.contains("pins-old 1.0") && e.message.contains("shared<2"),
        "{e}"
    );
    assert!(
        e.message.contains("shared 2.0") && e.message.contains("torn 1.0"),
        "{e}"
    );
    assert!(
        walk(&cache)
            .iter()
            .all(|p| p.extension().is_some_and(|x| x == "whl"))
    );
}

#[test]
fn the_index_url_comes_from_the_flag_first() {
    assert_eq!(
        resolve_index_url(Some("http://127.0.0.1:1/simple/")),
        "http://127.0.0.1:1/simple/"
    );
}
