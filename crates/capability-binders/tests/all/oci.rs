//! `capability/oci-command` against a real registry on loopback (Debian's `docker-registry`,
//! the CNCF distribution registry) and against small registries of the tests' own (a token
//! service, lying digests); running needs podman (+ runc, and `CONTAINERS_CONF` pointing at
//! `.ci/containers.conf` on VMs like the CI one).
//!
//! Without `docker-registry` on PATH the registry tests pass after saying so, unless
//! `CAPABILITY_TEST_REQUIRE_REGISTRY=1`; without a working podman the engine tests do, unless
//! `CAPABILITY_TEST_REQUIRE_OCI=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use capability_binders::oci::{
    self, APPROVAL_REQUIRED, BINDER_ID, OciBinder, OciErrorKind, OciOptions, Platform,
    RegistryCredentials, RunOptions, SUBSTRATE,
};
use capability_core::binder::{
    BinderStatus, CancelToken, ExecuteOptions, MetabolicBinder, MetabolicBinderRegistry,
};
use capability_openapi::http::{HttpClient, HttpConfig, Outgoing, Resolver, origin_of};
use capability_sandbox::{ENGINE_PROBE_TIMEOUT, OciEngine, probe_cli};
use capability_test_support::oci::{DockerRegistry, push_guest, run_ok};
use serde_json::json;
use sha2::Digest as _;

fn sha(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

// ---------------------------------------------------------------------------------------------
// A real registry on loopback
// ---------------------------------------------------------------------------------------------

/// `docker-registry serve` on a free loopback port, its storage in a temporary directory;
/// killed when dropped.
struct Registry {
    _server: DockerRegistry,
    /// `127.0.0.1:<port>`.
    addr: String,
    http: HttpClient,
}

impl Registry {
    fn start() -> Option<Registry> {
        let server = DockerRegistry::start()?;
        let http = HttpClient::new(
            HttpConfig {
                max_redirects: 0,
                retries: 0,
                ..HttpConfig::default()
            },
            Resolver::System,
        )
        .unwrap();
        Some(Registry {
            addr: server.addr.clone(),
            _server: server,
            http,
        })
    }

    fn send(
        &self,
        method: &str,
        path_or_url: &str,
        headers: &[(&str, &str)],
        body: Option<(&str, Vec<u8>)>,
    ) -> Result<(u16, Option<String>, Vec<u8>), String> {
        let url = if path_or_url.starts_with("http") {
            url::Url::parse(path_or_url).unwrap()
        } else {
            url::Url::parse(&format!("http://{}{path_or_url}", self.addr)).unwrap()
        };
        let origin = origin_of(&url).unwrap();
        let request = Outgoing {
            method: method.into(),
            url,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: body.map(|(ct, b)| (ct.to_string(), b)),
        };
        self.http
            .send(request, &[origin], None, &|| false)
            .map(|r| (r.status, r.location, r.body))
            .map_err(|e| e.to_string())
    }

    /// Uploads a blob (POST then PUT); its digest.
    fn blob(&self, repo: &str, bytes: &[u8]) -> String {
        let digest = sha(bytes);
        let (status, location, _) = self
            .send("POST", &format!("/v2/{repo}/blobs/uploads/"), &[], None)
            .unwrap();
        assert_eq!(status, 202);
        let location = location.unwrap();
        let sep = if location.contains('?') { '&' } else { '?' };
        let put = format!("{location}{sep}digest={digest}");
        let (status, _, body) = self
            .send(
                "PUT",
                &put,
                &[],
                Some(("application/octet-stream", bytes.to_vec())),
            )
            .unwrap();
        assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
        digest
    }

    /// Puts a manifest (or index) under `reference`; its digest.
    fn manifest(&self, repo: &str, reference: &str, media_type: &str, bytes: &[u8]) -> String {
        let (status, _, body) = self
            .send(
                "PUT",
                &format!("/v2/{repo}/manifests/{reference}"),
                &[],
                Some((media_type, bytes.to_vec())),
            )
            .unwrap();
        assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
        sha(bytes)
    }

    /// Pushes an image whose config says `os/arch` under `tag`: `(manifest digest, config
    /// digest, manifest size)`.
    fn image(&self, repo: &str, tag: &str, arch: &str, marker: &str) -> (String, String, usize) {
        let config = serde_json::to_vec(&json!({
            "architecture": arch, "os": "linux",
            "config": {
                "Entrypoint": ["/guest"], "Cmd": ["--default"],
                "Env": ["PATH=/bin", "API_TOKEN=do-not-copy-me"],
                "Labels": {"marker": marker}
            },
            "rootfs": {"type": "layers", "diff_ids": []}
        }))
        .unwrap();
        let config_digest = self.blob(repo, &config);
        let layer = format!("layer of {marker}").into_bytes();
        let layer_digest = self.blob(repo, &layer);
        let manifest = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config.len()},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer_digest, "size": layer.len()}]
        }))
        .unwrap();
        let digest = self.manifest(
            repo,
            tag,
            "application/vnd.oci.image.manifest.v1+json",
            &manifest,
        );
        (digest, config_digest, manifest.len())
    }

    fn options(&self) -> OciOptions {
        OciOptions {
            insecure_registries: vec![self.addr.clone()],
            ..OciOptions::default()
        }
    }
}

fn host_arch() -> String {
    Platform::host().architecture
}

/// Another architecture than the host's.
fn other_arch() -> &'static str {
    if host_arch() == "arm64" {
        "amd64"
    } else {
        "arm64"
    }
}

#[test]
fn inspect_resolves_a_tag_to_its_manifest_digest_without_an_engine() {
    let Some(reg) = Registry::start() else { return };
    let (digest, config, _) = reg.image("team/app", "1.0", &host_arch(), "one");
    let reference = format!("{}/team/app:1.0", reg.addr);
    let inspection = oci::inspect(&reference, &reg.options()).unwrap();
    assert_eq!(inspection.manifest_digest, digest);
    assert_eq!(
        inspection.immutable_reference,
        format!("{}/team/app@{digest}", reg.addr)
    );
    assert_eq!(inspection.id, config);
    assert_eq!(inspection.index_digest, None);
    let j = inspection.to_json();
    assert_eq!(j["reference"], reference);
    assert_eq!(j["repoDigests"], json!([inspection.immutable_reference]));
    assert_eq!(j["architecture"], host_arch());
    assert_eq!(j["os"], "linux");
    assert_eq!(j["entrypoint"], json!(["/guest"]));
    assert_eq!(j["cmd"], json!(["--default"]));
    assert_eq!(j["platform"], format!("linux/{}", host_arch()));
    assert_eq!(j["mediaType"], "application/vnd.oci.image.manifest.v1+json");
    // Environment names only: a value never leaves the config.
    assert_eq!(j["envNames"], json!(["PATH", "API_TOKEN"]));
    assert!(!j.to_string().contains("do-not-copy-me"));

    // By digest: the same image, the bytes checked against the digest named.
    let by_digest =
        oci::inspect(&format!("{}/team/app@{digest}", reg.addr), &reg.options()).unwrap();
    assert_eq!(by_digest.manifest_digest, digest);
    assert_eq!(by_digest.id, config);
}

#[test]
fn missing_tags_and_digests_are_not_found() {
    let Some(reg) = Registry::start() else { return };
    reg.image("team/app", "1.0", &host_arch(), "one");
    let options = reg.options();
    let e = oci::inspect(&format!("{}/team/app:2.0", reg.addr), &options).unwrap_err();
    assert_eq!(e.kind, OciErrorKind::NotFound, "{e}");
    assert!(e.message.contains("team/app:2.0 not found"), "{e}");
    assert!(e.message.contains("MANIFEST_UNKNOWN"), "{e}");
    let e = oci::inspect(&format!("{}/team/nothing:1", reg.addr), &options).unwrap_err();
    assert_eq!(e.kind, OciErrorKind::NotFound, "{e}");
    let absent = sha(b"no such manifest");
    let e = oci::inspect(&format!("{}/team/app@{absent}", reg.addr), &options).unwrap_err();
    assert_eq!(e.kind, OciErrorKind::NotFound, "{e}");
    assert!(e.message.contains(&absent), "{e}");
}

#[test]
fn an_index_yields_the_manifest_for_the_platform() {
    let Some(reg) = Registry::start() else { return };
    let (here, here_config, here_size) = reg.image("multi/app", "here", &host_arch(), "here");
    let (there, there_config, there_size) = reg.image("multi/app", "there", other_arch(), "there");
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": there, "size": there_size,
             "platform": {"os": "linux", "architecture": other_arch()}},
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": here, "size": here_size,
             "platform": {"os": "linux", "architecture": host_arch()}}
        ]
    }))
    .unwrap();
    let index_digest = reg.manifest(
        "multi/app",
        "latest",
        "application/vnd.oci.image.index.v1+json",
        &index,
    );
    // No tag: latest.
    let reference = format!("{}/multi/app", reg.addr);
    let i = oci::inspect(&reference, &reg.options()).unwrap();
    assert_eq!(i.manifest_digest, here);
    assert_eq!(i.id, here_config);
    assert_eq!(i.index_digest.as_deref(), Some(index_digest.as_str()));
    assert_eq!(i.to_json()["indexDigest"], index_digest);
    // Another platform, asked for.
    let mut options = reg.options();
    options.platform = Platform::parse(&format!("linux/{}", other_arch())).unwrap();
    let i = oci::inspect(&reference, &options).unwrap();
    assert_eq!(i.manifest_digest, there);
    assert_eq!(i.id, there_config);
    // A platform the index does not offer.
    options.platform = Platform::parse("linux/s390x").unwrap();
    let e = oci::inspect(&reference, &options).unwrap_err();
    assert_eq!(e.kind, OciErrorKind::Platform, "{e}");
    assert!(e.message.contains("has no image for linux/s390x"), "{e}");
    assert!(e.message.contains(&format!("linux/{}", host_arch())), "{e}");
    // A single image for another architecture is refused, clearly.
    let e = oci::inspect(&format!("{}/multi/app:there", reg.addr), &reg.options()).unwrap_err();
    assert_eq!(e.kind, OciErrorKind::Platform, "{e}");
    assert!(
        e.message.contains(&format!(
            "is an image for linux/{}, not linux/{}",
            other_arch(),
            host_arch()
        )),
        "{e}"
    );
}

#[test]
fn plain_http_only_for_a_loopback_registry_named_insecure() {
    let Some(reg) = Registry::start() else { return };
    reg.image("team/app", "1.0", &host_arch(), "one");
    // Not named insecure: https:// to a plain HTTP registry fails.
    let e = oci::inspect(
        &format!("{}/team/app:1.0", reg.addr),
        &OciOptions::default(),
    )
    .unwrap_err();
    assert_eq!(e.kind, OciErrorKind::Registry, "{e}");
    // Named insecure but not on loopback: refused before any request.
    let options = OciOptions {
        insecure_registries: vec!["registry.example.test:5000".into()],
        ..OciOptions::default()
    };
    let e = oci::inspect("registry.example.test:5000/team/app:1.0", &options).unwrap_err();
    assert_eq!(e.kind, OciErrorKind::Invalid, "{e}");
    assert!(e.message.contains("not on loopback"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// Registries of the tests' own: a token service, a lying registry
// ---------------------------------------------------------------------------------------------

/// One answer of a fake registry.
#[derive(Clone)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// The requests a fake registry saw: `(request line, headers lowercased)`.
type Seen = Arc<Mutex<Vec<(String, HashMap<String, String>)>>>;

/// A loopback HTTP/1.1 server answering each request with `route(path, headers)`.
fn fake_registry(
    route: impl Fn(&str, &HashMap<String, String>) -> Answer + Send + Sync + 'static,
) -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen: Seen = Arc::default();
    let log = Arc::clone(&seen);
    let route = Arc::new(route);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let route = Arc::clone(&route);
            let log = Arc::clone(&log);
            std::thread::spawn(move || serve(stream, &*route, &log));
        }
    });
    (addr, seen)
}

fn serve(
    stream: TcpStream,
    route: &(dyn Fn(&str, &HashMap<String, String>) -> Answer + Send + Sync),
    log: &Seen,
) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut headers = HashMap::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
        let length: usize = headers
            .get("content-length")
            .and_then(|l| l.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        let _ = reader.read_exact(&mut body);
        let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
        log.lock()
            .unwrap()
            .push((line.trim_end().to_string(), headers.clone()));
        let answer = route(&path, &headers);
        let mut head = format!(
            "HTTP/1.1 {} X\r\nContent-Length: {}\r\n",
            answer.status,
            answer.body.len()
        );
        for (k, v) in &answer.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        if writer.write_all(head.as_bytes()).is_err() || writer.write_all(&answer.body).is_err() {
            return;
        }
    }
}

fn answer(status: u16, headers: &[(&str, &str)], body: impl Into<Vec<u8>>) -> Answer {
    Answer {
        status,
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        body: body.into(),
    }
}

/// A config and a manifest for the host's platform: `(manifest bytes, config bytes)`.
fn documents() -> (Vec<u8>, Vec<u8>) {
    let config = serde_json::to_vec(&json!({
        "architecture": host_arch(), "os": "linux", "config": {"Cmd": ["/hello"]}
    }))
    .unwrap();
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": sha(&config), "size": config.len()},
        "layers": []
    }))
    .unwrap();
    (manifest, config)
}

#[test]
fn a_bearer_challenge_is_answered_with_a_token_from_its_realm() {
    let (manifest, config) = documents();
    let (manifest_digest, config_digest) = (sha(&manifest), sha(&config));
    let realm_addr = Arc::new(OnceLock::<String>::new());
    let realm = Arc::clone(&realm_addr);
    let (m, c, md) = (manifest.clone(), config.clone(), manifest_digest.clone());
    let (addr, seen) = fake_registry(move |path, headers| {
        let authorized = headers.get("authorization").map(String::as_str) == Some("Bearer T0KEN");
        if path.starts_with("/token?") {
            // Credentials, when configured, come as Basic to the token service only.
            return answer(
                200,
                &[("Content-Type", "application/json")],
                r#"{"token":"T0KEN"}"#,
            );
        }
        if !authorized {
            let challenge = format!(
                r#"Bearer realm="http://{}/token",service="fake.registry",scope="repository:team/app:pull""#,
                realm.get().unwrap()
            );
            return answer(
                401,
                &[("WWW-Authenticate", &challenge)],
                r#"{"errors":[{"code":"UNAUTHORIZED"}]}"#,
            );
        }
        match path {
            "/v2/team/app/manifests/1" => answer(
                200,
                &[
                    (
                        "Content-Type",
                        "application/vnd.docker.distribution.manifest.v2+json",
                    ),
                    ("Docker-Content-Digest", &md),
                ],
                m.clone(),
            ),
            // The config is served elsewhere on the same origin: a redirect, followed.
            p if p.starts_with("/v2/team/app/blobs/") => {
                answer(307, &[("Location", "/storage/config")], "")
            }
            "/storage/config" => answer(200, &[], c.clone()),
            _ => answer(404, &[], ""),
        }
    });
    realm_addr.set(addr.clone()).unwrap();
    let options = OciOptions {
        insecure_registries: vec![addr.clone()],
        credentials: Some(RegistryCredentials {
            username: "reader".into(),
            password: "s3cret".into(),
        }),
        ..OciOptions::default()
    };
    let i = oci::inspect(&format!("{addr}/team/app:1"), &options).unwrap();
    assert_eq!(i.manifest_digest, manifest_digest);
    assert_eq!(i.id, config_digest);
    assert_eq!(
        i.media_type,
        "application/vnd.docker.distribution.manifest.v2+json"
    );
    let seen = seen.lock().unwrap().clone();
    let lines: Vec<&str> = seen.iter().map(|(l, _)| l.as_str()).collect();
    // 401, token, manifest again with the token, blob (token kept), redirect target.
    assert!(
        lines[0].starts_with("GET /v2/team/app/manifests/1 "),
        "{lines:?}"
    );
    assert!(!seen[0].1.contains_key("authorization"));
    assert!(
        seen[0].1["accept"].contains("application/vnd.oci.image.index.v1+json")
            && seen[0].1["accept"].contains("application/vnd.docker.distribution.manifest.v2+json"),
        "{:?}",
        seen[0].1
    );
    let token = seen.iter().find(|(l, _)| l.contains("/token?")).unwrap();
    assert!(token.0.contains("service=fake.registry"), "{}", token.0);
    assert!(
        token.0.contains("scope=repository%3Ateam%2Fapp%3Apull"),
        "{}",
        token.0
    );
    assert_eq!(token.1["authorization"], "Basic cmVhZGVyOnMzY3JldA==");
    let blob = seen
        .iter()
        .find(|(l, _)| l.contains(&format!("/blobs/{config_digest}")))
        .unwrap();
    assert_eq!(blob.1["authorization"], "Bearer T0KEN");
    assert!(
        lines.iter().any(|l| l.starts_with("GET /storage/config ")),
        "{lines:?}"
    );
    // The credentials went to the token service only.
    let basic = seen
        .iter()
        .filter(|(_, h)| {
            h.get("authorization")
                .is_some_and(|a| a.starts_with("Basic"))
        })
        .count();
    assert_eq!(basic, 1);
}

#[test]
fn blob_redirects_to_another_origin_are_followed_over_https_without_the_credentials() {
    let (manifest, config) = documents();
    let config_digest = sha(&config);
    // The "CDN": a plain server of its own behind TLS on loopback (a test CA).
    let c = config.clone();
    let (cdn_backend, cdn_seen) = fake_registry(move |path, _| match path {
        p if p.starts_with("/cdn/config?") => answer(200, &[], c.clone()),
        _ => answer(404, &[], ""),
    });
    let ca = capability_test_support::tls::TestCa::new("oci test CA");
    let cdn = capability_test_support::tls::front(
        ca.server(&["localhost"]),
        cdn_backend.parse().unwrap(),
    );
    let cdn_url = format!(
        "https://localhost:{}/cdn/config?signature=pre-signed",
        cdn.port()
    );
    let m = manifest.clone();
    let (addr, seen) = fake_registry(move |path, headers| {
        // Basic authentication, answered with the credentials.
        if headers.get("authorization").map(String::as_str) != Some("Basic cmVhZGVyOnMzY3JldA==") {
            return answer(401, &[("WWW-Authenticate", r#"Basic realm="fake""#)], "");
        }
        match path {
            "/v2/team/app/manifests/1" | "/v2/team/plain/manifests/1" => {
                answer(200, &[], m.clone())
            }
            // Leaving TLS for another origin is refused.
            p if p.starts_with("/v2/team/plain/blobs/") => answer(
                307,
                &[("Location", "http://localhost:9/x?signature=pre-signed")],
                "",
            ),
            p if p.starts_with("/v2/team/app/blobs/") => answer(307, &[("Location", &cdn_url)], ""),
            _ => answer(404, &[], ""),
        }
    });
    let options = OciOptions {
        insecure_registries: vec![addr.clone()],
        credentials: Some(RegistryCredentials {
            username: "reader".into(),
            password: "s3cret".into(),
        }),
        extra_roots_pem: Some(ca.pem()),
        ..OciOptions::default()
    };
    let i = oci::inspect(&format!("{addr}/team/app:1"), &options).unwrap();
    assert_eq!(i.id, config_digest);
    let cdn_seen = cdn_seen.lock().unwrap().clone();
    assert_eq!(cdn_seen.len(), 1, "{cdn_seen:?}");
    assert!(!cdn_seen[0].1.contains_key("authorization"), "{cdn_seen:?}");
    let registry_seen = seen.lock().unwrap().clone();
    assert!(
        registry_seen
            .iter()
            .any(|(l, h)| l.contains("/blobs/") && h.contains_key("authorization"))
    );
    let e = oci::inspect(&format!("{addr}/team/plain:1"), &options).unwrap_err();
    assert_eq!(e.kind, OciErrorKind::Registry, "{e}");
    assert!(e.message.contains("outside https://: refused"), "{e}");
    assert!(!e.message.contains("pre-signed"), "{e}");
    // Without credentials a Basic challenge is refused, saying so.
    let anonymous = OciOptions {
        credentials: None,
        ..options.clone()
    };
    let e = oci::inspect(&format!("{addr}/team/app:1"), &anonymous).unwrap_err();
    assert_eq!(e.kind, OciErrorKind::Registry, "{e}");
    assert!(e.message.contains("requires credentials"), "{e}");
}

#[test]
fn bytes_that_do_not_hash_to_their_digest_are_refused() {
    let (manifest, config) = documents();
    let real = sha(&manifest);
    let lie = sha(b"another manifest");
    let (m, c) = (manifest.clone(), config.clone());
    let (l, r) = (lie.clone(), real.clone());
    let (addr, _) = fake_registry(move |path, _| match path {
        // A registry announcing another digest than its bytes have.
        "/v2/team/app/manifests/lying" => answer(200, &[("Docker-Content-Digest", &l)], m.clone()),
        "/v2/team/app/manifests/1" => answer(200, &[], m.clone()),
        // Asked by one digest, it serves the bytes of another.
        p if p == format!("/v2/team/app/manifests/{l}") => answer(200, &[], m.clone()),
        p if p == format!("/v2/team/app/manifests/{r}") => answer(200, &[], m.clone()),
        // The config blob is corrupt.
        p if p.starts_with("/v2/team/app/blobs/") => {
            let mut bad = c.clone();
            bad[0] = b' ';
            answer(200, &[], bad)
        }
        _ => answer(404, &[], ""),
    });
    let options = OciOptions {
        insecure_registries: vec![addr.clone()],
        ..OciOptions::default()
    };
    let e = oci::inspect(&format!("{addr}/team/app:lying"), &options).unwrap_err();
    assert_eq!(e.kind, OciErrorKind::Digest, "{e}");
    assert!(
        e.message
            .contains(&format!("the registry says its digest is {lie}")),
        "{e}"
    );
    let e = oci::inspect(&format!("{addr}/team/app@{lie}"), &options).unwrap_err();
    assert_eq!(e.kind, OciErrorKind::Digest, "{e}");
    assert!(
        e.message
            .contains(&format!("expected {lie} but its bytes hash to {real}")),
        "{e}"
    );
    let e = oci::inspect(&format!("{addr}/team/app@{real}"), &options).unwrap_err();
    assert_eq!(e.kind, OciErrorKind::Digest, "{e}");
    assert!(e.message.contains("blob sha256:"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// Binder requests and inputs (no registry needed)
// ---------------------------------------------------------------------------------------------

#[test]
fn the_binder_is_explicit_and_executable_and_reads_inputs_as_strings() {
    let binder = OciBinder::default();
    assert_eq!(binder.id(), BINDER_ID);
    assert_eq!(binder.substrate(), SUBSTRATE);
    assert_eq!(binder.discovery().as_str(), "explicit");
    assert!(binder.executable());
    assert_eq!(
        oci::binder::input_args(&json!(["a", 1, 2.5, true, null, [1, 2], {"k": 1}])).unwrap(),
        ["a", "1", "2.5", "true", "null", "1,2", "[object Object]"]
    );
    assert_eq!(
        oci::binder::input_args(&json!({"args": ["x"]})).unwrap(),
        ["x"]
    );
    assert!(oci::binder::input_args(&json!({})).unwrap().is_empty());
    assert!(oci::binder::input_args(&json!("x")).is_err());
    assert!(oci::binder::input_args(&json!({"args": "x"})).is_err());
    assert!(binder.bind(&json!({})).is_err());
    assert!(
        binder
            .bind(&json!({"image": "a", "network": "yes"}))
            .is_err()
    );
    let e = oci::run("alpine:3", &[], &RunOptions::default()).unwrap_err();
    assert_eq!(e.kind, OciErrorKind::Approval);
    assert_eq!(e.message, APPROVAL_REQUIRED);
    assert_eq!(e.message, "OCI first execution requires explicit approval");
    let approved = RunOptions {
        approved: true,
        ..RunOptions::default()
    };
    let e = oci::run("alpine:3", &[], &approved).unwrap_err();
    assert_eq!(e.kind, OciErrorKind::Invalid);
    assert!(e.message.contains("by digest only"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// Images built, pushed and run with podman
// ---------------------------------------------------------------------------------------------

/// podman as the binder's engine, when it runs here (see `capability_test_support::oci`).
fn podman() -> Option<OciEngine> {
    capability_test_support::oci::podman()?;
    Some(probe_cli("podman", None, ENGINE_PROBE_TIMEOUT * 5).unwrap())
}

/// The registry and podman, or `None` when either is missing (after saying so).
fn engine_and_registry() -> Option<(Registry, OciEngine)> {
    let reg = Registry::start()?;
    let engine = podman()?;
    Some((reg, engine))
}

#[test]
fn podman_pushed_images_inspect_to_podmans_digest_and_run_by_digest() {
    let Some((reg, engine)) = engine_and_registry() else {
        return;
    };
    let pushed = push_guest(&engine.program, &reg.addr, "guest/echo", "v1", "first");
    let options = reg.options();
    let inspection = oci::inspect(&format!("{}/guest/echo:v1", reg.addr), &options).unwrap();
    assert_eq!(inspection.manifest_digest, pushed);
    assert_eq!(inspection.entrypoint, Some(vec!["/guest".to_string()]));
    assert_eq!(
        inspection.architecture.as_deref(),
        Some(host_arch().as_str())
    );

    let run_options = RunOptions {
        approved: true,
        insecure: true,
        engine: Some(engine.clone()),
        ..RunOptions::default()
    };
    let args = vec!["hello world".to_string(), "--flag=1".to_string()];
    let ran = oci::run(&inspection.immutable_reference, &args, &run_options).unwrap();
    assert!(ran.succeeded, "{ran:?}");
    assert_eq!(ran.exit_code, Some(0));
    // The image's own files, as user 65534, with the arguments as given.
    assert_eq!(
        ran.stdout,
        "marker=first uid=65534\narg[1]=hello world\narg[2]=--flag=1\n"
    );
    let receipt = ran.to_json();
    assert_eq!(receipt["substrate"], "oci");
    assert_eq!(receipt["status"], "succeeded");
    assert_eq!(
        receipt["immutableReference"],
        inspection.immutable_reference
    );
    assert_eq!(receipt["image"], inspection.immutable_reference);
    assert_eq!(receipt["args"], json!(args));
    assert_eq!(receipt["network"], "none");
    assert_eq!(receipt["engine"], "podman");
    assert!(receipt["startedAt"].as_str().unwrap().ends_with('Z'));
    assert!(receipt["finishedAt"].as_str().unwrap().ends_with('Z'));

    // A non-zero exit is a failed execution with its receipt, not an error.
    let failed = oci::run(
        &inspection.immutable_reference,
        &["fail".into()],
        &run_options,
    )
    .unwrap();
    assert!(!failed.succeeded);
    assert_eq!(failed.exit_code, Some(3));
    assert_eq!(failed.to_json()["status"], "failed");
    assert!(failed.stderr.contains("failing on purpose"), "{failed:?}");

    // Without approval nothing runs, with the reference's words.
    let e = oci::run(
        &inspection.immutable_reference,
        &[],
        &RunOptions {
            approved: false,
            ..run_options.clone()
        },
    )
    .unwrap_err();
    assert_eq!(e.kind, OciErrorKind::Approval);
    assert_eq!(e.message, "OCI first execution requires explicit approval");

    // A run past its timeout is stopped and its container removed.
    let started = Instant::now();
    let e = oci::run(
        &inspection.immutable_reference,
        &["sleep".into()],
        &RunOptions {
            timeout: Duration::from_secs(3),
            ..run_options.clone()
        },
    )
    .unwrap_err();
    assert_eq!(e.kind, OciErrorKind::Timeout, "{e}");
    assert!(started.elapsed() < Duration::from_secs(60));
    let name = e
        .message
        .split("container ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap()
        .to_string();
    let left = run_ok(Command::new(&engine.program).args([
        "ps",
        "-a",
        "--filter",
        &format!("name={name}"),
        "--format",
        "{{.Names}}",
    ]));
    assert!(left.is_empty(), "container {name} is still there: {left}");
}

#[test]
fn the_binder_binds_a_tag_runs_it_by_digest_and_refuses_a_moved_tag() {
    let Some((reg, engine)) = engine_and_registry() else {
        return;
    };
    let first = push_guest(&engine.program, &reg.addr, "guest/tool", "stable", "first");
    let binder = Arc::new(OciBinder::new(reg.options()).with_engine(engine.clone()));
    let mut registry = MetabolicBinderRegistry::new();
    registry.register(binder.clone()).unwrap();
    let locator = format!("{}/guest/tool:stable", reg.addr);
    let binding = registry
        .bind(BINDER_ID, &json!({"image": locator}))
        .unwrap();
    assert!(capability_core::validate_binding(&binding, Some((BINDER_ID, SUBSTRATE))).is_empty());
    let immutable = format!("{}/guest/tool@{first}", reg.addr);
    assert_eq!(binding["bindingVersion"], "1.0");
    assert_eq!(binding["binderId"], BINDER_ID);
    assert_eq!(binding["substrate"], "oci");
    assert_eq!(binding["locator"], locator);
    assert_eq!(binding["immutableArtifact"], immutable);
    assert_eq!(binding["authority"]["complete"], false);
    assert_eq!(
        binding["authority"]["effects"],
        json!(["process.spawn", "custom:external.opaque-effects"])
    );
    assert!(binding["authority"]["note"].is_string());
    let config = binding["inspection"]["id"].as_str().unwrap();
    assert_eq!(
        binding["evidence"],
        json!([format!("image:{config}"), format!("digest:{first}")])
    );
    assert_eq!(binding["inspection"]["immutableReference"], immutable);

    // Without approval the registry refuses (authority is incomplete).
    let e = registry
        .execute(BINDER_ID, &binding, &json!([]), &ExecuteOptions::default())
        .unwrap_err();
    assert!(e.0.contains("explicit approval"), "{e}");
    let approved = ExecuteOptions {
        approved: true,
        cancel: None,
    };
    let result = registry
        .execute(BINDER_ID, &binding, &json!({"args": ["a b", 7]}), &approved)
        .unwrap();
    assert_eq!(result.status, BinderStatus::Succeeded, "{}", result.receipt);
    assert_eq!(
        result.output,
        Some(json!({"stdout": "marker=first uid=65534\narg[1]=a b\narg[2]=7\n", "exitCode": 0}))
    );
    let receipt = &result.receipt;
    assert_eq!(receipt["receiptVersion"], "1.0");
    assert_eq!(receipt["immutableArtifact"], immutable);
    assert_eq!(receipt["isolation"], "oci-container-network-none");
    assert_eq!(receipt["upstreamReceipt"]["substrate"], "oci");
    assert_eq!(receipt["upstreamReceipt"]["immutableReference"], immutable);
    assert!(
        capability_core::published::validate_published(
            capability_core::published::PublishedSchema::MetabolicReceipt,
            receipt
        )
        .is_empty()
    );
    // A failing exit: status failed, with the receipt.
    let failed = registry
        .execute(BINDER_ID, &binding, &json!(["fail"]), &approved)
        .unwrap();
    assert_eq!(failed.status, BinderStatus::Failed);
    assert_eq!(failed.output.as_ref().unwrap()["exitCode"], 3);
    assert_eq!(failed.receipt["upstreamReceipt"]["exitCode"], 3);
    assert!(failed.receipt.get("error").is_none());

    // Conformance, through the public registry boundary.
    let report = capability_core::conformance::run_binder_conformance(
        binder.clone(),
        &json!({"image": locator}),
        &json!(["conformance"]),
    );
    assert!(report.ok, "{}", report.to_value());

    // The tag moves: the binding (approved for what it showed) no longer runs.
    let second = push_guest(&engine.program, &reg.addr, "guest/tool", "stable", "second");
    assert_ne!(first, second);
    let e = binder.check_locator(&binding).unwrap_err();
    assert_eq!(e.kind, OciErrorKind::Moved, "{e}");
    assert_eq!(
        e.message,
        format!("tag {locator} moved from {first} to {second} since it was bound; bind it again")
    );
    let moved = registry
        .execute(BINDER_ID, &binding, &json!([]), &approved)
        .unwrap();
    assert_eq!(moved.status, BinderStatus::Failed);
    assert!(moved.output.is_none());
    assert!(
        moved.receipt["error"]
            .as_str()
            .unwrap()
            .contains("moved from"),
        "{}",
        moved.receipt
    );
    // Bound by digest, it still runs what it pinned.
    let pinned = registry
        .execute(
            BINDER_ID,
            &json!({
                "bindingVersion": "1.0", "binderId": BINDER_ID, "substrate": "oci",
                "locator": immutable, "immutableArtifact": immutable,
                "createdAt": binding["createdAt"], "authority": binding["authority"],
                "evidence": binding["evidence"], "inspection": binding["inspection"]
            }),
            &json!([]),
            &approved,
        )
        .unwrap();
    assert_eq!(pinned.status, BinderStatus::Succeeded, "{}", pinned.receipt);
    assert!(
        pinned.output.unwrap()["stdout"]
            .as_str()
            .unwrap()
            .starts_with("marker=first")
    );
    // Bound again, the new image runs; with network the authority says so.
    let rebound = registry
        .bind(BINDER_ID, &json!({"image": locator, "network": true}))
        .unwrap();
    assert_eq!(
        rebound["immutableArtifact"],
        format!("{}/guest/tool@{second}", reg.addr)
    );
    assert_eq!(
        rebound["authority"]["effects"],
        json!([
            "process.spawn",
            "custom:external.opaque-effects",
            "network.connect"
        ])
    );
    let cancel = CancelToken::new();
    let result = binder.execute(&rebound, &json!([]), &cancel).unwrap();
    assert_eq!(
        result.isolation.as_deref(),
        Some("oci-container-network-bridge")
    );
    assert_eq!(
        result.status,
        BinderStatus::Succeeded,
        "{:?}",
        result.upstream_receipt
    );
    assert!(
        result.output.unwrap()["stdout"]
            .as_str()
            .unwrap()
            .starts_with("marker=second")
    );
}
