//! `cap install`, `cap find --index`, `cap exec` of an installed package, `cap install
//! --locked`, `cap probe`, `cap npm-inspect` and `cap world`, against servers on 127.0.0.1: the test's own
//! axum server (indexes, discovery documents, and a fake registry serving crafted tarballs)
//! and verdaccio 6.8.0 (a real npm registry without uplinks, installed into tools/registry by
//! `.ci/run`). Without verdaccio its test says so and passes, unless
//! `CAPABILITY_TEST_REQUIRE_VERDACCIO=1` (set by CI), where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{self, cap, stdout_json};
use base64::Engine as _;
use capability_test_support::http::Server;
use capability_test_support::registry::{
    Extra, Verdaccio, index, index_package, inject_dist, package_json, publish_fake,
    publish_fixture, sri, start_verdaccio, store_entries, tarball, tarball_of, verdaccio_present,
};
use capability_test_support::tls;
use serde_json::{Value, json};

/// (name, bytes, packument integrity, index integrity, expected message)
type Case = (
    &'static str,
    Vec<u8>,
    Option<String>,
    Option<String>,
    &'static str,
);

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// `cap install` of a refused artifact exits 1 saying why, and leaves nothing in the store
/// and no lock (every kind of refusal is tested in capability-acquire).
#[test]
fn cap_install_of_a_refused_artifact_fails_and_writes_no_lock() {
    let server = Server::start();
    let home = tempfile::tempdir().unwrap();
    let registry = format!("{}/registry/", server.base);
    let good = tarball("good", "1.0.0", Extra::None);
    let cases: Vec<Case> = vec![
        // (name, bytes, packument integrity, index integrity, expected message)
        (
            "packument-mismatch",
            good,
            Some(sri(b"other bytes")),
            None,
            "the packument declares",
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
    ];
    let mut packages = Vec::new();
    for (name, bytes, declared, indexed, _) in &cases {
        let declared = declared.clone().unwrap_or_else(|| sri(bytes));
        publish_fake(&server, name, "1.0.0", bytes, &declared);
        let mut record = index_package(name, "1.0.0", indexed.as_deref());
        record["capabilities"][0]["manifest"]["id"] = json!(format!("fixture/{name}"));
        packages.push(record);
    }
    let url = server.json("/index.json", &index(packages, &[]));
    for (name, bytes, _, _, expected) in &cases {
        assert!(bytes.len() < 1 << 20, "{name} is small on the wire");
        let out = cap(
            home.path(),
            &[
                "install",
                &format!("fixture/{name}"),
                "--index",
                &url,
                "--registry",
                &registry,
                "--lock",
                &home.path().join("l.json").display().to_string(),
                "--max-unpacked-bytes",
                "1048576",
            ],
        );
        assert_eq!(out.status.code(), Some(1), "{name}: {}", stderr(&out));
        assert!(stderr(&out).contains(expected), "{name}: {}", stderr(&out));
        assert!(
            store_entries(home.path()).is_empty(),
            "{name}: {:?}",
            store_entries(home.path())
        );
        assert!(!home.path().join("l.json").exists());
    }
}

#[test]
fn index_servers_give_bounded_results_or_clear_errors() {
    let server = Server::start();
    let home = tempfile::tempdir().unwrap();
    let find = |url: &str, extra: &[&str]| {
        let mut args = vec!["find", "fixture", "--index", url, "--limit", "50"];
        args.extend_from_slice(extra);
        cap(home.path(), &args)
    };
    let ids = |out: &Output| -> Vec<String> {
        stdout_json(out)
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["id"].as_str().unwrap().to_string())
            .collect()
    };
    let pkg = |n: &str| {
        let mut p = index_package(n, "1.0.0", None);
        p["capabilities"][0]["manifest"]["id"] = json!(format!("fixture/{n}"));
        p
    };
    // A cycle: a -> b -> a.
    let b_url = format!("{}/b.json", server.base);
    let a_url = server.json(
        "/a.json",
        &index(vec![pkg("in-a")], std::slice::from_ref(&b_url)),
    );
    server.json(
        "/b.json",
        &index(vec![pkg("in-b")], std::slice::from_ref(&a_url)),
    );
    let out = find(&a_url, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut got = ids(&out);
    got.sort();
    assert_eq!(got, ["fixture/in-a", "fixture/in-b"]);

    // A chain of 7: only depths 0..=4 are loaded.
    for i in 0..7 {
        let next = vec![format!("{}/chain{}.json", server.base, i + 1)];
        server.json(
            &format!("/chain{i}.json"),
            &index(vec![pkg(&format!("chain{i}"))], &next),
        );
    }
    let out = find(&format!("{}/chain0.json", server.base), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let got = ids(&out);
    assert!(got.contains(&"fixture/chain4".to_string()), "{got:?}");
    assert!(!got.contains(&"fixture/chain5".to_string()), "{got:?}");
    // The count bound is an error, as the reference.
    let out = find(
        &format!("{}/chain0.json", server.base),
        &["--max-indexes", "3"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("Capability federation exceeded 3 indexes"),
        "{}",
        stderr(&out)
    );

    let bad = server.put("/bad.json", 200, "{not json");
    let out = find(&bad, &[]);
    assert!(
        stderr(&out).contains("Invalid capability index"),
        "{}",
        stderr(&out)
    );
    let invalid = server.json("/invalid.json", &json!({"indexVersion": "9"}));
    let out = find(&invalid, &[]);
    assert!(
        stderr(&out).contains("Invalid capability index: "),
        "{}",
        stderr(&out)
    );
    let e500 = server.put("/500.json", 500, "oops");
    let out = find(&e500, &[]);
    assert!(
        stderr(&out).contains("Failed to fetch capability index: HTTP 500"),
        "{}",
        stderr(&out)
    );
    // 500 indexes: refused at the count bound, or all loaded when the bound allows them.
    let many: Vec<String> = (1..500)
        .map(|i| {
            server.json(
                &format!("/many{i}.json"),
                &index(vec![pkg(&format!("many{i}"))], &[]),
            )
        })
        .collect();
    let wide = server.json("/wide.json", &index(vec![pkg("wide")], &many));
    let out = find(&wide, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("Capability federation exceeded 64 indexes"),
        "{}",
        stderr(&out)
    );
    let out = cap(
        home.path(),
        &[
            "find",
            "fixture",
            "--index",
            &wide,
            "--max-indexes",
            "500",
            "--limit",
            "1000",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(ids(&out).len(), 500);
    // A document past the size limit (8 MiB) is refused, not read whole.
    let mut huge = serde_json::to_vec(&index(vec![pkg("huge")], &[])).unwrap();
    huge.pop();
    huge.extend(format!(r#","padding":"{}"}}"#, "x".repeat(9 << 20)).bytes());
    let huge = server.put("/huge.json", 200, huge);
    let out = find(&huge, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("exceeds the limit of 8388608 bytes"),
        "{}",
        stderr(&out)
    );
    // A redirect loop ends at the redirect bound.
    let loop2 = format!("{}/loop2.json", server.base);
    let loop1 = server.put("/loop1.json", 302, loop2.clone());
    server.put("/loop2.json", 307, loop1.clone());
    let out = find(&loop1, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("more than 5 redirects"),
        "{}",
        stderr(&out)
    );

    let started = Instant::now();
    let out = find(
        &format!("{}/hang", server.base),
        &["--http-timeout-ms", "700"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("timed out"), "{}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn probe_finds_the_site_document_and_its_indexes() {
    let server = Server::start();
    let home = tempfile::tempdir().unwrap();
    let idx = server.json("/idx.json", &index(vec![], &[]));
    // The first URL is not JSON, so the second is used.
    server.put("/.well-known/capabilities", 200, "<html>");
    server.json(
        "/.well-known/capabilities.json",
        &json!({"capabilityDiscoveryVersion": "0.1", "indexes": [idx]}),
    );
    let out = cap(
        home.path(),
        &["probe", &format!("{}/some/page?q=1", server.base)],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = stdout_json(&out);
    assert_eq!(report["origin"], json!(server.base));
    assert!(
        report["discoveryUrl"]
            .as_str()
            .unwrap()
            .ends_with("/.well-known/capabilities.json")
    );
    assert_eq!(
        report["indexes"][0]["document"]["indexVersion"],
        json!("0.1")
    );
    // An invalid document fails with the reference's message.
    server.json(
        "/.well-known/capabilities",
        &json!({"capabilityDiscoveryVersion": "0.1", "indexes": []}),
    );
    let out = cap(home.path(), &["probe", &server.base]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("Invalid capability discovery document at"),
        "{}",
        stderr(&out)
    );
    // Nothing there.
    let empty = Server::start();
    let out = cap(home.path(), &["probe", &empty.base]);
    assert!(
        stderr(&out).contains("No Capability discovery document found. Tried: "),
        "{}",
        stderr(&out)
    );
}

#[test]
fn published_capability_is_found_installed_run_and_reinstalled_from_the_lock() {
    if !verdaccio_present() {
        return;
    }
    let (v, integrity, server, url) = published_registry();
    let home = tempfile::tempdir().unwrap();
    let out = cap(home.path(), &["find", "arithmetic", "--index", &url]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout_json(&out)[0]["id"], json!("fixture/add"));

    // `cap world` finds it twice: as a capability of the index, and as software in the
    // registry's own search (`/-/v1/search`).
    let out = cap(
        home.path(),
        &[
            "world",
            "fixture capabilities",
            "--index",
            &url,
            "--registry",
            &v.url,
            "--no-github",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let world = stdout_json(&out);
    assert_eq!(world["errors"], json!([]), "{world:#}");
    assert_eq!(world["native"][0]["id"], "fixture/add", "{world:#}");
    assert_eq!(world["native"][0]["package"], "@fixture/capabilities@1.0.0");
    // verdaccio's search objects carry no top-level `version`, so (as the reference) the
    // locator has none either.
    assert_eq!(
        world["external"][0]["locator"], "npm:@fixture/capabilities",
        "{world:#}"
    );
    assert_eq!(
        world["external"][0]["signals"],
        json!(["npm-search", "query:fixture capabilities"])
    );

    let lock = home.path().join("capability.lock.json");
    let lock_arg = lock.display().to_string();
    let started = Instant::now();
    let out = cap(
        home.path(),
        &[
            "install",
            "fixture/add",
            "--index",
            &url,
            "--registry",
            &v.url,
            "--lock",
            &lock_arg,
        ],
    );
    eprintln!("cap install took {:?}", started.elapsed());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let installed = stdout_json(&out);
    assert_eq!(installed["installed"], json!("@fixture/capabilities@1.0.0"));
    assert_eq!(installed["integrity"], json!(integrity));
    let written: Value = serde_json::from_slice(&std::fs::read(&lock).unwrap()).unwrap();
    assert_eq!(written["lockVersion"], json!("1"));
    assert_eq!(written["package"]["integrity"], json!(integrity));
    assert_eq!(written["index"]["url"], json!(url));

    let out = cap(home.path(), &["exec", "fixture/add", r#"{"a":2,"b":40}"#]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{} {}",
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let doc = stdout_json(&out);
    assert_eq!(doc["receipt"]["output"]["result"], json!(42), "{text}");
    assert!(
        text.contains(&integrity),
        "provenance names the tarball integrity: {text}"
    );
    assert!(
        text.contains(&v.url) && text.contains(&url),
        "registry and index: {text}"
    );

    // A new home reproduces it from the lock alone (the index comes from the lock).
    let again = tempfile::tempdir().unwrap();
    let out = cap(
        again.path(),
        &[
            "install",
            "--locked",
            "--lock",
            &lock_arg,
            "--registry",
            &v.url,
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout_json(&out)["integrity"], json!(integrity));
    assert_eq!(
        store_entries(again.path()).len(),
        2,
        "the package and its record"
    );
    // A changed index no longer matches the lock.
    server.json(
        "/index.json",
        &index(
            vec![index_package("@fixture/capabilities", "1.0.0", None)],
            &[],
        ),
    );
    let third = tempfile::tempdir().unwrap();
    let out = cap(
        third.path(),
        &[
            "install",
            "--locked",
            "--lock",
            &lock_arg,
            "--registry",
            &v.url,
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("changed since the lock was written"),
        "{}",
        stderr(&out)
    );
    assert!(store_entries(third.path()).is_empty());

    // npm-inspect reads the same registry.
    let out = cap(
        home.path(),
        &["npm-inspect", "@fixture/capabilities", "--registry", &v.url],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = stdout_json(&out);
    assert_eq!(report["capabilityDeclared"], json!(true));
    assert_eq!(report["integrity"], json!(integrity));
}

/// A registry in front of verdaccio: paths under `/-/npm/v1/` (the keys, attestations)
/// answer from `docs` (404 when absent), everything else is forwarded to verdaccio with its
/// Host header, so the tarball URLs verdaccio writes point at the front.
struct RegistryFront {
    url: String,
    docs: Arc<Mutex<HashMap<String, Value>>>,
}

const KEYS_PATH: &str = "/-/npm/v1/keys";

impl RegistryFront {
    fn start(upstream: &str) -> RegistryFront {
        let docs: Arc<Mutex<HashMap<String, Value>>> = Arc::default();
        let shared = Arc::clone(&docs);
        let upstream = upstream.trim_end_matches('/').to_string();
        let addr = capability_test_support::http::on_loopback(move |listener| async move {
            let client =
                hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                    .build_http::<axum::body::Body>();
            let app =
                axum::Router::new().fallback(move |req: axum::http::Request<axum::body::Body>| {
                    let docs = Arc::clone(&shared);
                    let client = client.clone();
                    let upstream = upstream.clone();
                    async move {
                        use axum::response::IntoResponse as _;
                        let path = req.uri().path().to_string();
                        if path.starts_with("/-/npm/v1/") {
                            let doc = docs.lock().unwrap().get(&path).cloned();
                            return match doc {
                                Some(d) => (
                                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                                    serde_json::to_vec(&d).unwrap(),
                                )
                                    .into_response(),
                                None => axum::http::StatusCode::NOT_FOUND.into_response(),
                            };
                        }
                        let (mut parts, body) = req.into_parts();
                        let path = parts
                            .uri
                            .path_and_query()
                            .map(|p| p.as_str().to_string())
                            .unwrap_or_default();
                        parts.uri = format!("{upstream}{path}").parse().unwrap();
                        let forwarded = axum::http::Request::from_parts(parts, body);
                        match client.request(forwarded).await {
                            Ok(r) => r.map(axum::body::Body::new).into_response(),
                            Err(_) => axum::http::StatusCode::BAD_GATEWAY.into_response(),
                        }
                    }
                });
            axum::serve(listener, app).await.unwrap();
        });
        RegistryFront {
            url: format!("http://{addr}/"),
            docs,
        }
    }

    /// Serves `doc` at `path`, or stops serving it (`None`).
    fn serve(&self, path: &str, doc: Option<Value>) {
        let mut docs = self.docs.lock().unwrap();
        match doc {
            Some(d) => docs.insert(path.to_string(), d),
            None => docs.remove(path),
        };
    }

    fn publish_keys(&self, keys: &[&TestKey]) {
        let listed: Vec<Value> = keys.iter().map(|k| k.published()).collect();
        self.serve(KEYS_PATH, Some(json!({ "keys": listed })));
    }
}

/// A P-256 key made by the test from the system's randomness.
struct TestKey {
    keyid: String,
    key: p256::ecdsa::SigningKey,
}

impl TestKey {
    fn new(keyid: &str) -> TestKey {
        use std::io::Read as _;
        let mut seed = [0u8; 32];
        std::fs::File::open("/dev/urandom")
            .unwrap()
            .read_exact(&mut seed)
            .unwrap();
        TestKey {
            keyid: keyid.to_string(),
            key: p256::ecdsa::SigningKey::from_slice(&seed).unwrap(),
        }
    }

    /// The key as npm publishes it: base64 of the SPKI DER (the fixed P-256 prefix and the
    /// uncompressed point).
    fn published(&self) -> Value {
        let mut der = hex_decode("3059301306072a8648ce3d020106082a8648ce3d030107034200");
        der.extend_from_slice(self.key.verifying_key().to_encoded_point(false).as_bytes());
        json!({
            "keyid": self.keyid,
            "key": base64::engine::general_purpose::STANDARD.encode(&der),
            "keytype": "ecdsa-sha2-nistp256",
            "scheme": "ecdsa-sha2-nistp256",
            "expires": null,
        })
    }

    /// `{keyid, sig}` over `message`.
    fn sign(&self, message: &str) -> Value {
        use p256::ecdsa::signature::Signer as _;
        let sig: p256::ecdsa::Signature = self.key.sign(message.as_bytes());
        json!({
            "keyid": self.keyid,
            "sig": base64::engine::general_purpose::STANDARD.encode(sig.to_der().as_bytes()),
        })
    }
}

/// verdaccio with the fixture published, and an index (on its own server) naming it:
/// `(verdaccio, integrity, index server, index URL)`.
fn published_registry() -> (Verdaccio, String, Server, String) {
    let v = start_verdaccio();
    let integrity = publish_fixture(&v);
    let server = Server::start();
    let url = server.json(
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
    (v, integrity, server, url)
}

/// [`published_registry`] with a [`RegistryFront`] before verdaccio: `(verdaccio,
/// integrity, front, index server, index URL)`.
fn fronted_registry() -> (Verdaccio, String, RegistryFront, Server, String) {
    let (v, integrity, server, url) = published_registry();
    let front = RegistryFront::start(&v.url);
    (v, integrity, front, server, url)
}

fn inject_signatures(v: &Verdaccio, signatures: Option<Value>) {
    inject_dist(v, "signatures", signatures);
}

#[test]
fn registry_signatures_are_verified_required_and_their_keys_pinned() {
    if !verdaccio_present() {
        return;
    }
    let (v, integrity, proxy, _server, url) = fronted_registry();
    let message = format!("@fixture/capabilities@1.0.0:{integrity}");
    let trust = tempfile::tempdir().unwrap();
    let policy = trust.path().join("trust.json");
    std::fs::write(&policy, r#"{"requireRegistrySignature": true}"#).unwrap();
    let policy_arg = policy.display().to_string();
    let install = |home: &Path, extra: &[&str]| {
        let lock = home.join("capability.lock.json").display().to_string();
        let mut args = vec![
            "install",
            "fixture/add",
            "--index",
            &url,
            "--registry",
            &proxy.url,
            "--lock",
            &lock,
        ];
        args.extend_from_slice(extra);
        cap(home, &args)
    };
    let refused = |extra: &[&str], expected: &str| {
        let home = tempfile::tempdir().unwrap();
        let out = install(home.path(), extra);
        assert_eq!(out.status.code(), Some(1), "{expected}: {}", stderr(&out));
        assert!(stderr(&out).contains(expected), "{}", stderr(&out));
        assert!(
            store_entries(home.path()).is_empty(),
            "{expected}: {:?}",
            store_entries(home.path())
        );
        assert!(!home.path().join("capability.lock.json").exists());
        assert!(
            !home.path().join("registry-keys").exists(),
            "nothing pinned"
        );
    };

    // The registry publishes no keys: unsigned is accepted unless signatures are required,
    // by the flag or by a trust policy.
    refused(&["--require-signatures"], "publishes no signing keys");
    refused(
        &["--trust-policy", &policy_arg],
        "publishes no signing keys",
    );
    let home = tempfile::tempdir().unwrap();
    let out = install(home.path(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let record = installed_record(home.path());
    assert_eq!(record["registrySignatureVerified"], json!(false));

    let a = TestKey::new("SHA256:test-key-a");
    proxy.publish_keys(&[&a]);
    // Keys, but no signature.
    refused(&["--require-signatures"], "npm registry signature missing");
    // A signature over another message (another version).
    inject_signatures(
        &v,
        Some(json!([a.sign(&message.replace("@1.0.0:", "@1.0.1:"))])),
    );
    refused(&[], "does not verify");
    // A signature by a key the registry does not publish.
    let stranger = TestKey::new("SHA256:not-published");
    inject_signatures(&v, Some(json!([stranger.sign(&message)])));
    refused(&[], "unknown key");
    // A good signature and a bad one: the bad one is refused.
    inject_signatures(
        &v,
        Some(json!([
            a.sign(&message),
            a.sign("@fixture/capabilities@1.0.0:x")
        ])),
    );
    refused(&[], "does not verify");

    // A good signature: accepted, its key id in the record and the receipt's provenance.
    inject_signatures(&v, Some(json!([a.sign(&message)])));
    let home = tempfile::tempdir().unwrap();
    let out = install(home.path(), &["--require-signatures"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout_json(&out)["signatureKeyId"], json!(a.keyid));
    let record = installed_record(home.path());
    assert_eq!(record["signatureKeyId"], json!(a.keyid));
    assert_eq!(record["registrySignatureVerified"], json!(true));
    // The lock keeps the reference's format (no member the reference does not know).
    let lock: Value =
        serde_json::from_slice(&std::fs::read(home.path().join("capability.lock.json")).unwrap())
            .unwrap();
    let mut members: Vec<&String> = lock["package"].as_object().unwrap().keys().collect();
    members.sort();
    assert_eq!(members, ["integrity", "name", "version"]);
    let out = cap(home.path(), &["exec", "fixture/add", r#"{"a":2,"b":40}"#]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = stdout_json(&out);
    assert_eq!(doc["receipt"]["output"]["result"], json!(42));
    let provenance = &doc["receipt"]["provenance"];
    assert_eq!(provenance["signatureKeyId"], json!(a.keyid), "{doc}");
    assert_eq!(provenance["registrySignatureVerified"], json!(true));

    // Pinning: the registry's key set changes (another key signs); the home that pinned
    // the first set refuses it, and keeps nothing new.
    let pins: Vec<_> = std::fs::read_dir(home.path().join("registry-keys"))
        .unwrap()
        .collect();
    assert_eq!(pins.len(), 1);
    std::fs::remove_dir_all(home.path().join("packages")).unwrap();
    let b = TestKey::new("SHA256:test-key-b");
    proxy.publish_keys(&[&b]);
    inject_signatures(&v, Some(json!([b.sign(&message)])));
    let out = install(home.path(), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("changed since they were pinned"),
        "{}",
        stderr(&out)
    );
    assert!(store_entries(home.path()).is_empty());
    // A registry that stops publishing the pinned keys is refused too.
    proxy.serve(KEYS_PATH, None);
    let out = install(home.path(), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no longer publishes signing keys"),
        "{}",
        stderr(&out)
    );
    assert!(store_entries(home.path()).is_empty());
    // A home without the pin accepts the new key set.
    proxy.publish_keys(&[&b]);
    let fresh = tempfile::tempdir().unwrap();
    let out = install(fresh.path(), &["--require-signatures"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout_json(&out)["signatureKeyId"], json!(b.keyid));
}

fn hex_decode(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The one installed-package record of a home.
fn installed_record(home: &Path) -> Value {
    let records: Vec<PathBuf> = std::fs::read_dir(home.join("packages"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    assert_eq!(records.len(), 1, "{records:?}");
    serde_json::from_slice(&std::fs::read(&records[0]).unwrap()).unwrap()
}

#[test]
fn indexes_are_cached_read_offline_and_configured_in_the_home() {
    let server = Server::start();
    let home = tempfile::tempdir().unwrap();
    let pkg = |n: &str| {
        let mut p = index_package(n, "1.0.0", None);
        p["capabilities"][0]["manifest"]["id"] = json!(format!("fixture/{n}"));
        p
    };
    let url = server.json("/index.json", &index(vec![pkg("cached")], &[]));
    let find = |extra: &[&str]| {
        let mut args = vec!["find", "fixture"];
        args.extend_from_slice(extra);
        cap(home.path(), &args)
    };
    let ids = |out: &Output| -> Vec<String> {
        assert_eq!(out.status.code(), Some(0), "{}", stderr(out));
        stdout_json(out)
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["id"].as_str().unwrap().to_string())
            .collect()
    };
    // Offline before anything was cached: a clear error naming the URL.
    let out = find(&["--index", &url, "--offline"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("is not in the index cache") && stderr(&out).contains(&url),
        "{}",
        stderr(&out)
    );
    assert_eq!(server.hits(), 0, "offline fetches nothing");
    // Online: fetched once, and cached.
    assert_eq!(ids(&find(&["--index", &url])), ["fixture/cached"]);
    assert_eq!(server.hits(), 1);
    // Offline reads the cache and sends nothing.
    assert_eq!(
        ids(&find(&["--index", &url, "--offline"])),
        ["fixture/cached"]
    );
    assert_eq!(server.hits(), 1);
    // Online again: revalidated with If-None-Match, answered 304, the cached document used.
    assert_eq!(ids(&find(&["--index", &url])), ["fixture/cached"]);
    assert_eq!((server.hits(), server.not_modified()), (2, 1));
    // A changed document has another tag: fetched whole, and the cache follows it.
    server.json("/index.json", &index(vec![pkg("changed")], &[]));
    assert_eq!(ids(&find(&["--index", &url])), ["fixture/changed"]);
    assert_eq!((server.hits(), server.not_modified()), (3, 1));
    assert_eq!(
        ids(&find(&["--index", &url, "--offline"])),
        ["fixture/changed"]
    );
    server.json("/index.json", &index(vec![pkg("cached")], &[]));
    assert_eq!(ids(&find(&["--index", &url])), ["fixture/cached"]);
    assert_eq!((server.hits(), server.not_modified()), (4, 1));

    // The home's indexes.json names the indexes when no flag or variable does.
    let other = server.json("/other.json", &index(vec![pkg("configured")], &[]));
    std::fs::write(
        home.path().join("indexes.json"),
        serde_json::to_vec(&json!({"indexes": [url, other]})).unwrap(),
    )
    .unwrap();
    let mut got = ids(&find(&[]));
    got.sort();
    assert_eq!(got, ["fixture/cached", "fixture/configured"]);
    // A flag still wins over the file.
    assert_eq!(ids(&find(&["--index", &other])), ["fixture/configured"]);

    // With the server stopped, offline still works for both; online fails clearly.
    server.stop();
    let mut got = ids(&find(&["--offline"]));
    got.sort();
    assert_eq!(got, ["fixture/cached", "fixture/configured"]);
    let out = find(&["--index", &url]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("Failed to fetch capability index"),
        "{}",
        stderr(&out)
    );
    // A cached URL of another server is not there.
    let out = find(&["--index", "http://127.0.0.1:9/none.json", "--offline"]);
    assert!(
        stderr(&out).contains("is not in the index cache"),
        "{}",
        stderr(&out)
    );
    // A malformed home file is an error, not silently ignored.
    std::fs::write(home.path().join("indexes.json"), r#"{"indexes": "x"}"#).unwrap();
    let out = find(&[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("indexes.json"), "{}", stderr(&out));
}

#[test]
fn exec_acquires_an_indexed_capability_under_a_strict_trust_policy() {
    if !verdaccio_present() {
        return;
    }
    let (v, integrity, proxy, server, url) = fronted_registry();
    let home = tempfile::tempdir().unwrap();
    let exec = |extra: &[&str]| {
        let mut args = vec![
            "exec",
            "fixture/add",
            r#"{"a":2,"b":40}"#,
            "--index",
            &url,
            "--registry",
            &proxy.url,
        ];
        args.extend_from_slice(extra);
        cap(home.path(), &args)
    };
    let refused = |out: &Output, expected: &str| {
        assert_eq!(out.status.code(), Some(1), "{}", stderr(out));
        assert!(stderr(out).contains(expected), "{}", stderr(out));
        assert!(
            store_entries(home.path()).is_empty(),
            "{:?}",
            store_entries(home.path())
        );
    };
    // Not in any index: the host's own error.
    let out = cap(
        home.path(),
        &["exec", "fixture/none", "{}", "--index", &url],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("No capability matched")
            || stderr(&out).contains("No capability matched"),
        "{} {}",
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
    // The default is the strict npm trust policy: an unsigned package is refused before
    // anything is fetched into the store...
    refused(&exec(&[]), "npm registry signature missing");
    // ...and a signed one still lacks a verified provenance attestation: refused, and the
    // package it had to unpack to assess is removed again.
    let key = TestKey::new("SHA256:exec-key");
    proxy.publish_keys(&[&key]);
    inject_signatures(
        &v,
        Some(json!([
            key.sign(&format!("@fixture/capabilities@1.0.0:{integrity}"))
        ])),
    );
    refused(&exec(&[]), "verified provenance attestation required");

    // A strict policy without the attestation requirement: acquired, checked and run (70 is
    // what the fixture can score: it declares no module integrity and no attestation).
    let trust = home.path().join("trust.json");
    std::fs::write(
        &trust,
        r#"{"minScore": 70, "requirePackage": true, "requirePackageIntegrity": true,
            "requireRegistrySignature": true}"#,
    )
    .unwrap();
    let trust_arg = trust.display().to_string();
    let out = exec(&["--trust-policy", &trust_arg]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = stdout_json(&out);
    assert_eq!(doc["receipt"]["output"]["result"], json!(42), "{doc}");
    assert_eq!(doc["package"], json!("@fixture/capabilities@1.0.0"));
    assert_eq!(doc["trust"]["accepted"], json!(true));
    assert_eq!(
        doc["receipt"]["provenance"]["signatureKeyId"],
        json!(key.keyid)
    );
    assert_eq!(store_entries(home.path()).len(), 2, "package and record");
    // Now installed: run from the store, nothing acquired.
    let before = server.hits();
    let out = cap(
        home.path(),
        &[
            "exec",
            "fixture/add",
            r#"{"a":1,"b":1}"#,
            "--trust-policy",
            &trust_arg,
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = stdout_json(&out);
    assert_eq!(doc["receipt"]["output"]["result"], json!(2));
    assert!(doc.get("package").is_none(), "{doc}");
    assert_eq!(server.hits(), before);
}

#[test]
fn novelty_compares_a_manifest_with_the_indexes() {
    let server = Server::start();
    let home = tempfile::tempdir().unwrap();
    let url = server.json(
        "/index.json",
        &index(
            vec![index_package("@fixture/capabilities", "1.0.0", None)],
            &[],
        ),
    );
    let fixture = common::fixture().display().to_string();
    // The fixture against the indexes: itself (same id and version) is not compared.
    let out = cap(
        home.path(),
        &[
            "novelty",
            "fixture/add",
            "--package",
            &fixture,
            "--index",
            &url,
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = stdout_json(&out);
    assert_eq!(report["proposed"]["id"], json!("fixture/add"));
    assert_eq!(report["sources"], json!(["embedded:index", url]));
    let nearest: Vec<&str> = report["nearest"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    assert!(!nearest.contains(&"fixture/add"), "{report}");
    // A renamed copy is the fixture's functional twin.
    let pj = package_json("x", "1.0.0");
    let mut twin = pj["capability"]["exports"]["fixture/add"]["manifest"].clone();
    twin["id"] = json!("fixture/add-again");
    let path = home.path().join("twin.json");
    std::fs::write(&path, serde_json::to_vec(&twin).unwrap()).unwrap();
    let out = cap(
        home.path(),
        &["novelty", &path.display().to_string(), "--index", &url],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = stdout_json(&out);
    assert_eq!(report["nearest"][0]["id"], json!("fixture/add"), "{report}");
    assert_eq!(
        report["classification"],
        json!("functional-twin"),
        "{report}"
    );
    assert!(
        report["uniquenessScore"].as_i64().unwrap() <= 16,
        "{report}"
    );
    // An id the package does not export, and an invalid manifest file, are clear errors.
    let out = cap(
        home.path(),
        &[
            "novelty",
            "fixture/none",
            "--package",
            &fixture,
            "--index",
            &url,
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("does not export fixture/none"),
        "{}",
        stderr(&out)
    );
    std::fs::write(&path, r#"{"specVersion": "0.1"}"#).unwrap();
    let out = cap(home.path(), &["novelty", &path.display().to_string()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
}

#[test]
fn doctor_checks_the_configured_indexes_and_registry() {
    let server = Server::start();
    let home = tempfile::tempdir().unwrap();
    let good = server.json(
        "/index.json",
        &index(vec![index_package("p", "1.0.0", None)], &[]),
    );
    let broken = server.put("/broken.json", 500, "oops");
    server.json("/registry/-/ping", &json!({}));
    let registry = format!("{}/registry/", server.base);
    let out = cap(
        home.path(),
        &[
            "doctor",
            "--index",
            &good,
            "--index",
            &broken,
            "--registry",
            &registry,
        ],
    );
    let report = stdout_json(&out);
    let network = &report["network"];
    assert_eq!(network["indexes"][0]["ok"], json!(true), "{network}");
    assert_eq!(network["indexes"][0]["packages"], json!(1));
    assert_eq!(network["indexes"][1]["ok"], json!(false));
    assert!(
        network["indexes"][1]["error"]
            .as_str()
            .unwrap()
            .contains("HTTP 500"),
        "{network}"
    );
    assert_eq!(network["registry"]["ok"], json!(true), "{network}");
    assert_eq!(network["registry"]["signingKeys"], json!(null));
    assert_eq!(network["ok"], json!(false));
    assert_eq!(report["ok"], json!(false));
    assert_eq!(out.status.code(), Some(1));
    // A registry that does not answer.
    let out = cap(
        home.path(),
        &[
            "doctor",
            "--index",
            &good,
            "--registry",
            "http://127.0.0.1:9/",
        ],
    );
    let network = &stdout_json(&out)["network"];
    assert_eq!(network["indexes"][0]["ok"], json!(true));
    assert_eq!(network["registry"]["ok"], json!(false), "{network}");
    assert_eq!(network["ok"], json!(false));
    // Nothing configured: no network part.
    let out = cap(home.path(), &["doctor"]);
    assert!(stdout_json(&out).get("network").is_none());
}

/// `cap find` and `cap install` over `https://`: index, packument and tarball behind a TLS
/// terminator whose certificate a test CA issued; the CA is trusted through `SSL_CERT_FILE`
/// only.
#[test]
fn index_packument_and_tarball_are_fetched_over_https() {
    let server = Server::start();
    let plain: std::net::SocketAddr = server.base.trim_start_matches("http://").parse().unwrap();
    let ca = tls::TestCa::new("acquire test CA");
    let front = tls::front(ca.server(&["127.0.0.1"]), plain);
    let base = format!("https://{front}");
    let bytes = tarball("tls-pkg", "1.0.0", Extra::None);
    server.put("/tarballs/tls-pkg-1.0.0.tgz", 200, bytes.clone());
    let mut doc = package_json("tls-pkg", "1.0.0");
    doc["dist"] =
        json!({"integrity": sri(&bytes), "tarball": format!("{base}/tarballs/tls-pkg-1.0.0.tgz")});
    server.json(
        "/registry/tls-pkg",
        &json!({"name": "tls-pkg", "dist-tags": {"latest": "1.0.0"}, "versions": {"1.0.0": doc}}),
    );
    server.json(
        "/index.json",
        &index(vec![index_package("tls-pkg", "1.0.0", None)], &[]),
    );
    let home = tempfile::tempdir().unwrap();
    let ca_file = home.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let index_url = format!("{base}/index.json");
    let registry = format!("{base}/registry/");
    let run = |trust: bool, args: &[&str]| {
        common::cap_with_roots(home.path(), trust.then_some(ca_file.as_path()), args)
    };
    // The system roots do not know the test CA.
    let out = run(false, &["find", "fixture", "--index", &index_url]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("certificate not trusted: {front}")) && err.contains("UnknownIssuer"),
        "{err}"
    );
    let out = run(true, &["find", "fixture", "--index", &index_url]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let hits = stdout_json(&out);
    assert_eq!(hits[0]["id"], "fixture/add", "{hits}");
    // Install: the packument and the tarball come over TLS too.
    let lock = home.path().join("l.json").display().to_string();
    let args = [
        "install",
        "fixture/add",
        "--index",
        &index_url,
        "--registry",
        &registry,
        "--lock",
        &lock,
    ];
    let out = run(true, &args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout_json(&out)["integrity"], json!(sri(&bytes)));
    assert_eq!(
        store_entries(home.path()).len(),
        2,
        "the package and its record"
    );
    assert!(home.path().join("l.json").exists());
}

/// npm search answers as the registry's `/-/v1/search` gives them.
fn search_objects(packages: &[Value]) -> Value {
    json!({"objects": packages.iter().map(|p| json!({"package": p})).collect::<Vec<_>>()})
}

/// `cap` with a home and no index, registry or GitHub configured by the environment.
fn world_command(home: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cap"));
    c.env("CAP_HOME", home)
        .env_remove("CAPABILITY_INDEX")
        .env_remove("CAP_NPM_REGISTRY")
        .env_remove("CAP_GITHUB_API");
    c
}

#[test]
fn world_plans_searches_ranks_and_merges_as_the_reference() {
    let server = Server::start();
    let home = tempfile::tempdir().unwrap();
    // Every search answers, most with nothing (as the reference's §8.11 fixture).
    server.json("/-/v1/search", &search_objects(&[]));
    server.json("/gh/search/repositories", &json!({"items": []}));
    server.json(
        "/-/v1/search?text=camelcase&size=10",
        &search_objects(&[json!({
            "name": "camelcase", "version": "9.0.0",
            "description": "Convert a string to camel case", "keywords": ["camelcase"],
            "links": {"repository": "git+https://github.com/sindresorhus/camelcase.git"},
        })]),
    );
    server.json(
        "/-/v1/search?text=camel%20case&size=10",
        &search_objects(&[json!({
            "name": "jss-plugin-camel-case", "version": "10.10.0",
            "description": "Camel case style properties for JSS",
            "keywords": ["JSS", "plugin", "camel-case"],
        })]),
    );
    let world = |extra: &[&str], token: Option<&str>| {
        let mut c = world_command(home.path());
        c.args(["world", "convert separated text to camel case"])
            .args(["--registry", &format!("{}/", server.base)])
            .args(["--github-api", &format!("{}/gh", server.base)])
            .args(extra);
        match token {
            Some(t) => c.env("GITHUB_TOKEN", t),
            None => c.env_remove("GITHUB_TOKEN"),
        };
        c.output().unwrap()
    };
    let before = server.hits();
    let out = world(&[], None);
    assert!(out.status.success(), "{}", stderr(&out));
    // 8 npm searches and, without a token, one GitHub search.
    assert_eq!(server.hits() - before, 9);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    // The scores are the reference's numbers, printed as JavaScript prints them.
    assert!(text.contains("\"score\": 0.6732365714285713"), "{text}");
    assert!(text.contains("\"score\": 0.38594285714285725"), "{text}");
    let doc: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["query"], "convert separated text to camel case");
    assert_eq!(doc["errors"], json!([]));
    let external = doc["external"].as_array().unwrap();
    assert_eq!(external.len(), 2, "{doc:#}");
    assert_eq!(external[0]["locator"], "npm:camelcase@9.0.0");
    assert_eq!(
        external[0]["signals"],
        json!(["npm-search", "keyword:camelcase", "query:camelcase"])
    );
    assert_eq!(
        external[0]["repository"],
        "https://github.com/sindresorhus/camelcase"
    );
    assert_eq!(external[0]["adoption"][0]["method"], "manual-adapter");
    assert_eq!(external[1]["locator"], "npm:jss-plugin-camel-case@10.10.0");
    assert_eq!(
        external[1]["signals"],
        json!([
            "npm-search",
            "keyword:jss",
            "keyword:plugin",
            "keyword:camel-case",
            "query:camel case"
        ])
    );
    // The capability part comes from the embedded index.
    let native = doc["native"].as_array().unwrap();
    assert!(!native.is_empty());
    assert!(
        native
            .iter()
            .all(|n| n["kind"] == "capability" && n["package"].as_str().unwrap().contains('@'))
    );
    assert!(
        native.iter().any(|n| n["id"] == "text/normalize"),
        "{doc:#}"
    );

    // With a token GitHub gets the last three queries; --no-npm leaves npm out.
    let before = server.hits();
    let out = world(&["--no-npm"], Some("t0ken"));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(server.hits() - before, 3);
    assert_eq!(stdout_json(&out)["external"], json!([]));

    // A repository found by two queries is merged: one candidate, the best score plus the
    // repeat bonus, both queries in its signals.
    let repo = json!({"items": [{
        "full_name": "acme/camel-kit", "html_url": "https://github.com/acme/camel-kit",
        "description": "Camel case for every string", "topics": ["MCP", "openapi"],
        "stargazers_count": 1234, "archived": true, "language": "TypeScript",
        "license": {"spdx_id": "MIT"}, "homepage": "",
    }]});
    server.json("/gh/search/repositories?q=camelcase&per_page=10", &repo);
    server.json(
        "/gh/search/repositories?q=convert%20separated%20text%20camel%20case&per_page=10",
        &repo,
    );
    let out = world(&["--no-npm", "--limit", "5"], Some("t0ken"));
    assert!(out.status.success(), "{}", stderr(&out));
    let doc = stdout_json(&out);
    let external = doc["external"].as_array().unwrap();
    assert_eq!(external.len(), 1, "{doc:#}");
    let c = &external[0];
    assert_eq!(c["locator"], "github:acme/camel-kit");
    assert_eq!(c["popularity"], 1234);
    assert_eq!(c["license"], "MIT");
    assert!(c.get("homepage").is_none(), "an empty homepage is left out");
    let methods: Vec<&str> = c["adoption"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        ["openapi", "mcp", "repository-mine", "manual-adapter"]
    );
    assert_eq!(
        c["signals"],
        json!([
            "github-search",
            "stars:1234",
            "topic:mcp",
            "topic:openapi",
            "archived",
            "query:camelcase",
            "query:convert separated text camel case"
        ])
    );
    // The limit bounds each part.
    assert!(doc["native"].as_array().unwrap().len() <= 5);
}

#[test]
fn world_reports_each_failed_source_and_still_exits_zero() {
    let server = Server::start();
    let home = tempfile::tempdir().unwrap();
    server.put("/-/v1/search", 500, "{}");
    server.put("/gh/search/repositories", 200, "not json");
    let out = world_command(home.path())
        .args(["world", "render html to video"])
        .args(["--registry", &format!("{}/", server.base)])
        .args(["--github-api", &format!("{}/gh", server.base)])
        .args(["--index", &format!("{}/missing.json", server.base)])
        .env_remove("GITHUB_TOKEN")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let doc = stdout_json(&out);
    assert_eq!(doc["native"], json!([]));
    assert_eq!(doc["external"], json!([]));
    let errors = doc["errors"].as_array().unwrap();
    // The index, the 8 npm searches, the GitHub search.
    assert_eq!(errors.len(), 10, "{doc:#}");
    assert_eq!(errors[0]["source"], "capability");
    assert!(
        errors[0]["message"].as_str().unwrap().contains("HTTP 404"),
        "{doc:#}"
    );
    let first_npm = errors[1]["message"].as_str().unwrap();
    assert!(
        first_npm.starts_with("[render html video] HTTP 500 for ")
            && first_npm.contains("text=render%20html%20video&size=10"),
        "{first_npm}"
    );
    assert!(errors[1..9].iter().all(|e| e["source"] == "npm"));
    assert_eq!(errors[9]["source"], "github");
    assert!(
        errors[9]["message"]
            .as_str()
            .unwrap()
            .starts_with("[render html to video] ")
            && errors[9]["message"].as_str().unwrap().contains("not JSON"),
        "{doc:#}"
    );

    // A search that never answers is cut at its deadline, not waited for.
    let hang = Server::start();
    hang.put("/-/v1/search", 200, "{}");
    let started = Instant::now();
    let out = world_command(home.path())
        .args(["world", "camel"])
        .args(["--registry", &format!("{}/hang/", hang.base)])
        .args(["--search-timeout-ms", "300", "--no-github"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let doc = stdout_json(&out);
    assert_eq!(doc["errors"].as_array().unwrap().len(), 1, "{doc:#}");
    assert!(started.elapsed() < Duration::from_secs(60));
}

/// `cap args` with stderr on a 250-column pseudo-terminal (util-linux `script`) and stdout
/// in a file: what the terminal showed (stderr), stdout's bytes and the exit status. `TERM`
/// is set (a dumb or unset terminal gets no progress), `CAP_NO_PROGRESS` only when
/// `no_progress`.
fn cap_on_terminal(home: &Path, args: &[&str], no_progress: bool) -> (String, Vec<u8>, i32) {
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let stdout_file = home.join("terminal-stdout.json");
    // A wide terminal, so that no line is cut.
    let mut line = format!(
        "stty rows 50 cols 250; {}",
        quote(env!("CARGO_BIN_EXE_cap"))
    );
    for a in args {
        line.push(' ');
        line.push_str(&quote(a));
    }
    line.push_str(&format!(" > {}", quote(&stdout_file.display().to_string())));
    let mut command = Command::new("/usr/bin/script");
    command
        .args(["-qec", &line, "/dev/null"])
        .env("CAP_HOME", home)
        .env("TERM", "xterm")
        .env_remove("CAP_NO_PROGRESS");
    if no_progress {
        command.env("CAP_NO_PROGRESS", "1");
    }
    let out = command.output().unwrap();
    let stdout = std::fs::read(&stdout_file).unwrap();
    std::fs::remove_file(&stdout_file).unwrap();
    (
        String::from_utf8_lossy(&out.stdout).to_string(),
        stdout,
        out.status.code().unwrap_or(-1),
    )
}

/// Whether `text` holds anything of the progress line (its escape codes or its words).
fn shows_progress(text: &str) -> bool {
    text.contains('\u{1b}')
        || text.contains("loaded, level")
        || text.contains("downloading")
        || text.contains("fetching")
}

/// A federation of four loopback indexes (root -> a, b; a -> c), the fixture package in c:
/// the root's URL and size, and c's URL.
fn loopback_federation(server: &Server) -> (String, usize, String) {
    let at = |p: &str| format!("{}/fed/{p}.json", server.base);
    server.json(
        "/fed/c.json",
        &index(
            vec![index_package("@fixture/capabilities", "1.0.0", None)],
            &[],
        ),
    );
    server.json("/fed/b.json", &index(vec![], &[]));
    server.json("/fed/a.json", &index(vec![], &[at("c")]));
    let root = index(vec![], &[at("a"), at("b")]);
    let size = serde_json::to_vec(&root).unwrap().len();
    (server.json("/fed/root.json", &root), size, at("c"))
}

#[test]
fn a_crawl_shows_progress_on_a_terminal_only_and_clears_it() {
    let server = Server::start();
    let (root, root_size, leaf) = loopback_federation(&server);
    let args = ["find", "arithmetic", "--index", &root];

    // stderr a pipe: no progress, and the JSON of the matches.
    let home = tempfile::tempdir().unwrap();
    let piped = cap(home.path(), &args);
    assert_eq!(piped.status.code(), Some(0), "{}", stderr(&piped));
    assert!(!shows_progress(&stderr(&piped)), "{:?}", stderr(&piped));
    assert_eq!(stdout_json(&piped)[0]["id"], json!("fixture/add"));

    // stderr a terminal: each level, the index documents' bytes and the count of indexes
    // loaded, up to all four, then the line is cleared; stdout is byte for byte what the
    // piped run printed.
    let home = tempfile::tempdir().unwrap();
    let (shown, stdout, code) = cap_on_terminal(home.path(), &args, false);
    assert_eq!(code, 0, "{shown}");
    for drawn in [
        "indexes 0/1 loaded, level 0: fetching 1".to_string(),
        format!("indexes 0/1 loaded, level 0: fetching {root_size} B/{root_size} B {root}"),
        "indexes 1/3 loaded, level 1: fetching 2".to_string(),
        "indexes 3/4 loaded, level 2: fetching 1".to_string(),
        format!("indexes 4/4 loaded, level 2: {leaf}"),
    ] {
        assert!(shown.contains(&drawn), "{drawn} in {shown:?}");
    }
    assert!(
        shown.ends_with("\r\u{1b}[2K"),
        "cleared at the end: {shown:?}"
    );
    assert_eq!(
        String::from_utf8_lossy(&stdout),
        String::from_utf8_lossy(&piped.stdout),
        "stdout carries no progress"
    );

    // CAP_NO_PROGRESS=1 opts out on a terminal too.
    let home = tempfile::tempdir().unwrap();
    let (shown, stdout, code) = cap_on_terminal(home.path(), &args, true);
    assert_eq!(code, 0, "{shown}");
    assert!(!shows_progress(&shown), "{shown:?}");
    assert_eq!(stdout, piped.stdout);

    // A failing crawl: the line is cleared before the error is printed.
    let missing = format!("{}/fed/missing.json", server.base);
    let broken = server.json(
        "/fed/broken.json",
        &index(vec![], std::slice::from_ref(&missing)),
    );
    let home = tempfile::tempdir().unwrap();
    let (shown, stdout, code) = cap_on_terminal(
        home.path(),
        &["find", "arithmetic", "--index", &broken],
        false,
    );
    assert_eq!(code, 1, "{shown}");
    assert!(stdout.is_empty());
    assert!(
        shown.contains("indexes 1/2 loaded, level 1: fetching 1"),
        "{shown:?}"
    );
    let (drawn, after) = shown.rsplit_once("\r\u{1b}[2K").unwrap();
    assert!(shows_progress(drawn));
    assert!(
        after.starts_with("cap: Failed to fetch capability index: HTTP 404")
            && after.contains(&missing)
            && !shows_progress(after),
        "{after:?}"
    );
}

#[test]
fn an_install_from_verdaccio_shows_its_download_on_a_terminal_only() {
    if !verdaccio_present() {
        return;
    }
    let (v, integrity, _server, url) = published_registry();
    let install = |home: &Path, terminal: bool| {
        let lock = home.join("capability.lock.json").display().to_string();
        let args = [
            "install",
            "fixture/add",
            "--index",
            &url,
            "--registry",
            &v.url,
            "--lock",
            &lock,
        ];
        if terminal {
            let (shown, stdout, code) = cap_on_terminal(home, &args, false);
            assert_eq!(code, 0, "{shown}");
            (shown, stdout)
        } else {
            let out = cap(home, &args);
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
            (stderr(&out), out.stdout)
        }
    };
    // The installation's JSON without what names the home.
    let summary = |stdout: &[u8]| {
        let mut doc = capability_core::json::parse_record(stdout).unwrap();
        let store = doc["store"].as_str().unwrap().to_string();
        assert!(Path::new(&store).is_dir(), "{doc}");
        for key in ["store", "lock"] {
            doc.as_object_mut().unwrap().remove(key);
        }
        doc
    };

    let home = tempfile::tempdir().unwrap();
    let (err, piped) = install(home.path(), false);
    assert!(!shows_progress(&err), "{err:?}");
    let expected = summary(&piped);
    assert_eq!(expected["installed"], json!("@fixture/capabilities@1.0.0"));
    assert_eq!(expected["integrity"], json!(integrity));

    let home = tempfile::tempdir().unwrap();
    let (shown, stdout) = install(home.path(), true);
    assert_eq!(summary(&stdout), expected, "stdout carries no progress");
    // The crawl; after it the packument (no crawl counts any more) and the tarball's bar,
    // full, with the tarball's size.
    let record = installed_record(home.path());
    let tarball = record["tarball"].as_str().unwrap();
    let size = Command::new("curl")
        .args(["-s", tarball])
        .output()
        .unwrap()
        .stdout
        .len();
    for drawn in [
        format!("indexes 1/1 loaded, level 0: {url}"),
        format!(
            "downloading {size} B/{size} B [{}] {tarball}",
            "=".repeat(30)
        ),
    ] {
        assert!(shown.contains(&drawn), "{drawn} in {shown:?}");
    }
    // Each drawn line is a spinner and a text.
    let packument = format!(" {}@fixture%2Fcapabilities", v.url);
    let texts: Vec<&str> = shown
        .split("\r\u{1b}[2K")
        .filter_map(|l| l.trim_end().split_once(' ').map(|(_, text)| text))
        .collect();
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("fetching ") && t.ends_with(&packument)),
        "{texts:#?}"
    );
    assert!(
        shown.ends_with("\r\u{1b}[2K"),
        "cleared at the end: {shown:?}"
    );
}

/// `dist.attestations` as npm publishes it for a version built with provenance (or none).
fn inject_attestations(v: &Verdaccio, url: Option<&str>) {
    let attestations = url.map(
        |u| json!({"url": u, "provenance": {"predicateType": "https://slsa.dev/provenance/v1"}}),
    );
    inject_dist(v, "attestations", attestations);
}

#[test]
fn provenance_attestations_are_verified_and_satisfy_the_strict_trust_policy() {
    use capability_acquire::attestations::testing::{self, Build, Fixture};
    if !verdaccio_present() {
        return;
    }
    let (v, integrity, front, _server, url) = fronted_registry();
    // The test's own Sigstore root, log and registry key: the registry signs the version,
    // and the attestations are about the tarball verdaccio serves.
    let fixture = Fixture::new();
    front.serve(KEYS_PATH, Some(fixture.keys_document()));
    inject_signatures(
        &v,
        Some(json!([fixture.registry_signature(&format!(
            "@fixture/capabilities@1.0.0:{integrity}"
        ))])),
    );
    let sha512: String = base64::engine::general_purpose::STANDARD
        .decode(integrity.trim_start_matches("sha512-"))
        .unwrap()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let build = Build {
        sha512_hex: sha512.clone(),
        ..Build::new("@fixture/capabilities", "1.0.0", b"")
    };
    let path = "/-/npm/v1/attestations/@fixture/capabilities@1.0.0";
    let attestations = format!("{}{}", front.url.trim_end_matches('/'), path);
    inject_attestations(&v, Some(&attestations));
    let serve = |doc: Value| {
        front.serve(path, Some(doc));
    };
    serve(fixture.document(&build));
    let new_home = |with_root: bool| {
        let home = tempfile::tempdir().unwrap();
        if with_root {
            std::fs::write(
                home.path().join("sigstore-trusted-root.json"),
                serde_json::to_vec(&fixture.root_document()).unwrap(),
            )
            .unwrap();
        }
        home
    };
    let install = |home: &Path| {
        let lock = home.join("capability.lock.json").display().to_string();
        cap(
            home,
            &[
                "install",
                "fixture/add",
                "--index",
                &url,
                "--registry",
                &front.url,
                "--lock",
                &lock,
            ],
        )
    };
    let exec = |home: &Path| {
        cap(
            home,
            &[
                "exec",
                "fixture/add",
                r#"{"a":2,"b":40}"#,
                "--index",
                &url,
                "--registry",
                &front.url,
            ],
        )
    };
    let refused = |home: &Path, out: &Output, expected: &str| {
        assert_eq!(out.status.code(), Some(1), "{expected}: {}", stderr(out));
        assert!(stderr(out).contains(expected), "{}", stderr(out));
        assert!(
            store_entries(home).is_empty(),
            "{expected}: {:?}",
            store_entries(home)
        );
        assert!(!home.join("capability.lock.json").exists());
    };

    // Installed: the record says provenance was verified, by whom and from what source.
    let home = new_home(true);
    let out = install(home.path());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout_json(&out)["provenanceVerified"], json!(true));
    let record = installed_record(home.path());
    assert_eq!(record["provenanceVerified"], json!(true), "{record}");
    assert_eq!(record["registrySignatureVerified"], json!(true));
    assert_eq!(record["attestation"], json!(attestations));
    assert_eq!(record["repository"], json!(testing::REPOSITORY));
    assert_eq!(record["commit"], json!(testing::COMMIT));
    let summary = &record["provenanceAttestation"];
    assert_eq!(summary["builder"], json!(testing::BUILDER));
    assert_eq!(summary["signer"], json!(testing::WORKFLOW));
    assert_eq!(summary["publishKeyId"], json!(testing::REGISTRY_KEY_ID));
    // The lock keeps the reference's format.
    let lock: Value =
        serde_json::from_slice(&std::fs::read(home.path().join("capability.lock.json")).unwrap())
            .unwrap();
    let mut members: Vec<&String> = lock["package"].as_object().unwrap().keys().collect();
    members.sort();
    assert_eq!(members, ["integrity", "name", "version"]);

    // `cap exec` of the indexed id in a fresh home, under the default strict npm trust
    // policy (signature and provenance required): acquired, accepted and run.
    let fresh = new_home(true);
    let out = exec(fresh.path());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = stdout_json(&out);
    assert_eq!(doc["receipt"]["output"]["result"], json!(42), "{doc}");
    assert_eq!(doc["trust"]["accepted"], json!(true), "{doc}");
    assert!(
        doc["trust"]["reasons"]
            .as_array()
            .unwrap()
            .contains(&json!("provenance attestation verified")),
        "{doc}"
    );
    let provenance = &doc["receipt"]["provenance"];
    assert_eq!(provenance["provenanceVerified"], json!(true), "{doc}");
    assert_eq!(provenance["attestation"], json!(attestations));
    assert_eq!(provenance["repository"], json!(testing::REPOSITORY));
    assert_eq!(provenance["commit"], json!(testing::COMMIT));

    // The same attestations in a home that trusts only the embedded public-good root: the
    // test's Fulcio and Rekor are strangers there.
    let home = new_home(false);
    refused(
        home.path(),
        &install(home.path()),
        "not in the trusted root",
    );

    // The root named by CAP_SIGSTORE_TRUSTED_ROOT replaces the home's and the embedded one;
    // a root it names that cannot be read is an error, not a fall-back.
    let roots = tempfile::tempdir().unwrap();
    let root_file = roots.path().join("root.json");
    std::fs::write(
        &root_file,
        serde_json::to_vec(&fixture.root_document()).unwrap(),
    )
    .unwrap();
    let install_with_root = |home: &Path, root: &Path| {
        let lock = home.join("capability.lock.json").display().to_string();
        Command::new(env!("CARGO_BIN_EXE_cap"))
            .env("CAP_HOME", home)
            .env("CAP_SIGSTORE_TRUSTED_ROOT", root)
            .args([
                "install",
                "fixture/add",
                "--index",
                &url,
                "--registry",
                &front.url,
                "--lock",
                &lock,
            ])
            .output()
            .unwrap()
    };
    let home = new_home(false);
    let out = install_with_root(home.path(), &root_file);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        installed_record(home.path())["provenanceVerified"],
        json!(true)
    );
    let home = new_home(true);
    let missing = roots.path().join("missing.json");
    refused(
        home.path(),
        &install_with_root(home.path(), &missing),
        "missing.json",
    );

    // A tampered attestation: the provenance statement rewritten (another builder) with
    // its signature kept. Refused by install and by exec, nothing kept.
    let mut tampered = fixture.document(&build);
    let envelope = &mut tampered["attestations"][1]["bundle"]["dsseEnvelope"];
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut statement: Value =
        serde_json::from_slice(&b64.decode(envelope["payload"].as_str().unwrap()).unwrap())
            .unwrap();
    statement["predicate"]["runDetails"]["builder"]["id"] = json!("https://evil.test/builder");
    envelope["payload"] = json!(b64.encode(serde_json::to_vec(&statement).unwrap()));
    serve(tampered);
    let home = new_home(true);
    refused(home.path(), &install(home.path()), "logs another payload");
    let home = new_home(true);
    refused(home.path(), &exec(home.path()), "logs another payload");

    // Well signed, but about other bytes than the tarball the registry serves.
    serve(fixture.document(&Build::new("@fixture/capabilities", "1.0.0", b"other")));
    let home = new_home(true);
    refused(
        home.path(),
        &install(home.path()),
        "is not the downloaded tarball's",
    );
    // Declared but not served: refused, not skipped.
    front.serve(path, None);
    let home = new_home(true);
    refused(home.path(), &install(home.path()), "HTTP 404");
    // No attestations at all: installed without provenance, and refused by the strict policy.
    inject_attestations(&v, None);
    let home = new_home(true);
    let out = install(home.path());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        installed_record(home.path())["provenanceVerified"],
        json!(false)
    );
    let home = new_home(true);
    refused(
        home.path(),
        &exec(home.path()),
        "verified provenance attestation required",
    );
}

/// A package exporting three capabilities: installing a second one keeps the first in the
/// package's record (both run), and a third one refused by `cap exec`'s trust policy leaves
/// the record as it was.
#[test]
fn installing_another_capability_of_a_package_keeps_the_ones_installed() {
    let server = Server::start();
    let home = tempfile::tempdir().unwrap();
    let registry = format!("{}/registry/", server.base);
    let (name, version) = ("fixture-three", "1.0.0");
    let mut pj = package_json(name, version);
    let exports = pj["capability"]["exports"].as_object_mut().unwrap();
    let add = exports["fixture/add"].clone();
    let mut index_record = index_package(name, version, None);
    for id in ["fixture/add-again", "fixture/add-third"] {
        let mut export = add.clone();
        export["manifest"]["id"] = json!(id);
        exports.insert(id.to_string(), export.clone());
        index_record["capabilities"]
            .as_array_mut()
            .unwrap()
            .push(json!({"manifest": export["manifest"], "module": "./add.mjs"}));
    }
    let bytes = tarball_of(&pj, Extra::None);
    let tarball_url = server.put(
        &format!("/tarballs/three-{version}.tgz"),
        200,
        bytes.clone(),
    );
    let mut doc = pj.clone();
    doc["dist"] = json!({"integrity": sri(&bytes), "tarball": tarball_url});
    server.json(
        &format!("/registry/{name}"),
        &json!({"name": name, "dist-tags": {"latest": version}, "versions": {version: doc}}),
    );
    let url = server.json("/index.json", &index(vec![index_record], &[]));
    let lock = home.path().join("l.json").display().to_string();
    let install = |id: &str| {
        let out = cap(
            home.path(),
            &[
                "install",
                id,
                "--index",
                &url,
                "--registry",
                &registry,
                "--lock",
                &lock,
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{id}: {}", stderr(&out));
    };
    install("fixture/add");
    install("fixture/add-again");
    let record = installed_record(home.path());
    assert_eq!(
        record["capabilities"],
        json!(["fixture/add", "fixture/add-again"])
    );
    // The first one still runs (its export's module declares fixture/add).
    let out = cap(home.path(), &["exec", "fixture/add", r#"{"a":2,"b":40}"#]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout_json(&out)["receipt"]["output"],
        json!({"result": 42})
    );

    // The third, not installed, acquired by `cap exec` and refused by its trust policy after
    // the install rewrote the record: the record is put back as it was.
    let policy = home.path().join("trust.json");
    std::fs::write(&policy, r#"{"minScore": 100}"#).unwrap();
    let policy = policy.display().to_string();
    let exec_third = [
        "exec",
        "fixture/add-third",
        r#"{"a":1,"b":1}"#,
        "--index",
        &url,
        "--registry",
        &registry,
        "--trust-policy",
        &policy,
    ];
    let out = cap(home.path(), &exec_third);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("Capability trust check failed"),
        "{}",
        stderr(&out)
    );
    assert_eq!(installed_record(home.path()), record);
    // The first still runs.
    let out = cap(home.path(), &["exec", "fixture/add", r#"{"a":1,"b":1}"#]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}
