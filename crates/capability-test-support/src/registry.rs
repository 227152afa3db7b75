//! An npm registry on loopback for acquisition tests, and what it serves.
//!
//! * [`Registry`]: a fake registry on 127.0.0.1 (a [`Server`] route table) serving the
//!   packuments and tarballs a test adds: [`Registry::start`], then [`Registry::add`] (the
//!   fixture package renamed, with its true integrity) or [`Registry::publish`] (any bytes,
//!   declaring any integrity); [`Registry::url`] is what `--registry` (or the host's registry
//!   setting) takes. Its [`Registry::server`] also serves capability indexes
//!   ([`index`], [`index_package`]) and any other document.
//! * Crafted tarballs: [`tarball`] of the fixture package ([`fixture_dir`]) with one extra
//!   entry ([`Extra`]: a raw path, a symlink, a device, a bomb of zeros); [`sri`] of bytes.
//! * verdaccio 6.8.0, a real registry without uplinks, installed into `tools/registry` by
//!   `.ci/run`: [`start_verdaccio`], [`publish_fixture`] with npm, [`inject_dist`] to edit what
//!   it serves. Without it a test says so and passes ([`verdaccio_present`]), unless
//!   `CAPABILITY_TEST_REQUIRE_VERDACCIO=1` (set by CI), where it fails.
//!
//! ```no_run
//! use capability_test_support::registry::{Registry, index, index_package};
//! let registry = Registry::start();
//! let integrity = registry.add("@fixture/capabilities", "1.0.0");
//! let index_url = registry.server().json(
//!     "/index.json",
//!     &index(vec![index_package("@fixture/capabilities", "1.0.0", Some(&integrity))], &[]),
//! );
//! // install `fixture/add` from `index_url` with `registry.url()` as the registry.
//! ```

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use base64::Engine as _;
use sha2::Digest as _;

use serde_json::{Value, json};

pub use crate::http::Server;
use crate::http::free_port;
use crate::process::Running;

/// The entries of a capability home's package store (`<home>/packages`).
pub fn store_entries(home: &Path) -> Vec<String> {
    std::fs::read_dir(home.join("packages"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// A fake npm registry on 127.0.0.1: packuments at `<url><name>`, tarballs beside them.
pub struct Registry {
    server: Server,
}

impl Registry {
    /// Listens on a free loopback port, serving nothing yet.
    pub fn start() -> Registry {
        Registry {
            server: Server::start(),
        }
    }

    /// The registry's URL (`http://127.0.0.1:<port>/registry/`).
    pub fn url(&self) -> String {
        format!("{}/registry/", self.server.base)
    }

    /// The server under the registry, to serve indexes and other documents beside it.
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// Serves `bytes` as the tarball of `name@version`, its packument declaring `declared`.
    pub fn publish(&self, name: &str, version: &str, bytes: &[u8], declared: &str) {
        publish_fake(&self.server, name, version, bytes, declared);
    }

    /// Serves the fixture package renamed to `name@version`; its integrity.
    pub fn add(&self, name: &str, version: &str) -> String {
        let bytes = tarball(name, version, Extra::None);
        let integrity = sri(&bytes);
        self.publish(name, version, &bytes, &integrity);
        integrity
    }
}

/// The SRI (`sha512-<base64>`) of `bytes`, as npm writes `dist.integrity`.
pub fn sri(bytes: &[u8]) -> String {
    format!(
        "sha512-{}",
        base64::engine::general_purpose::STANDARD.encode(sha2::Sha512::digest(bytes))
    )
}

/// The fixture package: `@fixture/capabilities@1.0.0`, exporting `fixture/add` (a node
/// module, `add.mjs`).
pub fn fixture_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/add-package"))
}

/// The fixture's `package.json`.
pub fn fixture() -> PathBuf {
    fixture_dir().join("package.json")
}

/// The fixture package.json renamed to `name@version`.
pub fn package_json(name: &str, version: &str) -> Value {
    let mut doc: Value = serde_json::from_slice(&std::fs::read(fixture()).unwrap()).unwrap();
    doc["name"] = json!(name);
    doc["version"] = json!(version);
    doc
}

/// The one entry a crafted tarball has besides the fixture's.
pub enum Extra {
    None,
    /// A raw entry name written into the header as is (`../x`, `/abs`).
    RawPath(&'static str),
    Symlink(&'static str, &'static str),
    Device,
    Zeros(usize),
    /// A directory entry (`package/` is the top directory itself).
    Dir(&'static str),
}

/// An npm-style tarball (`package/...`) of the fixture, with one extra entry.
pub fn tarball(name: &str, version: &str, extra: Extra) -> Vec<u8> {
    tarball_of(&package_json(name, version), extra)
}

/// An npm-style tarball of the fixture's module with this package.json and one extra entry.
pub fn tarball_of(package: &Value, extra: Extra) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut b = tar::Builder::new(gz);
    let mut add = |path: &str, data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_path(path).unwrap();
        h.set_cksum();
        b.append(&h, data).unwrap();
    };
    let pj = serde_json::to_vec_pretty(package).unwrap();
    add("package/package.json", &pj);
    add(
        "package/add.mjs",
        &std::fs::read(fixture_dir().join("add.mjs")).unwrap(),
    );
    match extra {
        Extra::None => {}
        Extra::RawPath(p) => {
            let mut h = tar::Header::new_old();
            h.set_size(1);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            let bytes = p.as_bytes();
            h.as_old_mut().name[..bytes.len()].copy_from_slice(bytes);
            h.set_cksum();
            b.append(&h, &b"x"[..]).unwrap();
        }
        Extra::Symlink(at, to) => {
            let mut h = tar::Header::new_gnu();
            h.set_size(0);
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_path(at).unwrap();
            h.set_link_name(to).unwrap();
            h.set_cksum();
            b.append(&h, std::io::empty()).unwrap();
        }
        Extra::Device => {
            let mut h = tar::Header::new_gnu();
            h.set_size(0);
            h.set_entry_type(tar::EntryType::Char);
            h.set_path("package/null").unwrap();
            h.set_device_major(1).unwrap();
            h.set_device_minor(3).unwrap();
            h.set_cksum();
            b.append(&h, std::io::empty()).unwrap();
        }
        Extra::Dir(path) => {
            let mut h = tar::Header::new_gnu();
            h.set_size(0);
            h.set_mode(0o755);
            h.set_entry_type(tar::EntryType::Directory);
            h.set_path(path).unwrap();
            h.set_cksum();
            b.append(&h, std::io::empty()).unwrap();
        }
        Extra::Zeros(n) => {
            let mut h = tar::Header::new_gnu();
            h.set_size(n as u64);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            h.set_path("package/zeros.bin").unwrap();
            h.set_cksum();
            b.append(&h, std::io::repeat(0).take(n as u64)).unwrap();
        }
    }
    let mut gz = b.into_inner().unwrap();
    gz.flush().unwrap();
    gz.finish().unwrap()
}

/// The index package record of the fixture renamed to `name@version`.
pub fn index_package(name: &str, version: &str, integrity: Option<&str>) -> Value {
    let pj = package_json(name, version);
    let mut record = json!({
        "name": name, "version": version, "source": "npm",
        "capabilities": [{
            "manifest": pj["capability"]["exports"]["fixture/add"]["manifest"],
            "module": "./add.mjs",
        }],
    });
    if let Some(i) = integrity {
        record["integrity"] = json!(i);
    }
    record
}

/// A capability index of `packages`, federating `federates`.
pub fn index(packages: Vec<Value>, federates: &[String]) -> Value {
    let mut doc = json!({"indexVersion": "0.1", "generatedAt": "2026-01-01T00:00:00.000Z", "packages": packages});
    if !federates.is_empty() {
        doc["federates"] = json!(federates);
    }
    doc
}

/// Serves `bytes` as `name@version` on the fake registry, declaring `declared`.
pub fn publish_fake(server: &Server, name: &str, version: &str, bytes: &[u8], declared: &str) {
    let tarball = server.put(
        &format!("/tarballs/{name}-{version}.tgz"),
        200,
        bytes.to_vec(),
    );
    let mut doc = package_json(name, version);
    doc["dist"] = json!({"integrity": declared, "tarball": tarball});
    // A scoped name's packument is asked for as `@scope%2Fname`, as npm sends it.
    server.json(
        &format!("/registry/{}", name.replace('/', "%2F")),
        &json!({"name": name, "dist-tags": {"latest": version}, "versions": {version: doc}}),
    );
}

/// `tools/registry` of the repository.
pub fn registry_tools() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/registry"))
}

/// Whether verdaccio is installed; fails when CI requires it.
pub fn verdaccio_present() -> bool {
    let present = registry_tools()
        .join("node_modules/.bin/verdaccio")
        .exists();
    if !present {
        assert!(
            std::env::var("CAPABILITY_TEST_REQUIRE_VERDACCIO").as_deref() != Ok("1"),
            "verdaccio is not installed in tools/registry (see .ci/run)"
        );
        eprintln!("skipped: verdaccio is not installed in tools/registry (see .ci/run)");
    }
    present
}

/// A verdaccio on a free loopback port with a user (its token in `npmrc`), killed when
/// dropped.
pub struct Verdaccio {
    _child: Running,
    /// `http://127.0.0.1:<port>/`.
    pub url: String,
    /// An npm user config with the registry and the user's token.
    pub npmrc: PathBuf,
    /// Its configuration and storage.
    pub dir: tempfile::TempDir,
}

/// Starts verdaccio (a registry without uplinks) and adds its user.
pub fn start_verdaccio() -> Verdaccio {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = std::fs::read_to_string(registry_tools().join("config.yaml"))
        .unwrap()
        .replace(
            "@STORAGE@",
            &dir.path().join("storage").display().to_string(),
        )
        .replace("@LISTEN@", &format!("127.0.0.1:{port}"));
    std::fs::write(dir.path().join("config.yaml"), config).unwrap();
    let child = Command::new(registry_tools().join("node_modules/.bin/verdaccio"))
        .arg("--config")
        .arg(dir.path().join("config.yaml"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/");
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "verdaccio did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // A user and its token (npm publish needs one even with a permissive config).
    let out = Command::new("curl")
        .args([
            "-s",
            "-X",
            "PUT",
            "-H",
            "content-type: application/json",
            "-d",
        ])
        .arg(r#"{"name":"tester","password":"tester-pass-123"}"#)
        .arg(format!("{url}-/user/org.couchdb.user:tester"))
        .output()
        .unwrap();
    let token: Value = serde_json::from_slice(&out.stdout).unwrap();
    let npmrc = dir.path().join("npmrc");
    std::fs::write(
        &npmrc,
        format!(
            "registry={url}\n//127.0.0.1:{port}/:_authToken={}\n",
            token["token"].as_str().unwrap()
        ),
    )
    .unwrap();
    Verdaccio {
        _child: Running(child),
        url,
        npmrc,
        dir,
    }
}

/// Runs `npm args` in `cwd` against `v`; it must succeed.
pub fn npm(v: &Verdaccio, cwd: &Path, args: &[&str]) -> Output {
    let out = Command::new("npm")
        .args(args)
        .arg("--userconfig")
        .arg(&v.npmrc)
        .arg("--registry")
        .arg(&v.url)
        .current_dir(cwd)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "npm {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Publishes the fixture package (`@fixture/capabilities@1.0.0`) to verdaccio with npm and
/// returns its `dist.integrity`.
pub fn publish_fixture(v: &Verdaccio) -> String {
    let pkg = tempfile::tempdir().unwrap();
    for f in ["package.json", "add.mjs"] {
        std::fs::copy(fixture_dir().join(f), pkg.path().join(f)).unwrap();
    }
    npm(v, pkg.path(), &["publish"]);
    let view = npm(
        v,
        pkg.path(),
        &["view", "@fixture/capabilities@1.0.0", "dist.integrity"],
    );
    let integrity = String::from_utf8_lossy(&view.stdout).trim().to_string();
    assert!(integrity.starts_with("sha512-"), "{integrity}");
    integrity
}

/// Writes (or removes, `None`) `dist.<key>` of `@fixture/capabilities@1.0.0` in verdaccio's
/// storage (verdaccio serves the stored packument as it is).
pub fn inject_dist(v: &Verdaccio, key: &str, value: Option<Value>) {
    let path = v
        .dir
        .path()
        .join("storage/@fixture/capabilities/package.json");
    let mut doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let dist = doc["versions"]["1.0.0"]["dist"].as_object_mut().unwrap();
    match value {
        Some(v) => dist.insert(key.to_string(), v),
        None => dist.remove(key),
    };
    std::fs::write(&path, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
}
