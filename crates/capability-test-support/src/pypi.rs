//! What the PyPI tests share: wheels built in Rust ([`build_wheel`] from a [`WheelSpec`]),
//! sdists of any bytes ([`build_sdist`]), digests ([`sha256_file`]) and a real package index
//! on loopback ([`PypiServer`]: pypiserver 2.4.2, pinned in `tools/pypi/requirements.lock`).
//!
//! Without pypiserver (`tools/pypi/.venv/bin/pypi-server`) [`PypiServer::start`] says so and
//! returns `None` (the test passes), unless `CAPABILITY_TEST_REQUIRE_PYPI=1`, where it panics.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::http::free_port;
use crate::process::Running;
use base64::Engine as _;
use sha2::Digest as _;

/// Set (by CI) where pypiserver is installed: a missing pypiserver then fails the tests
/// instead of skipping them.
pub const REQUIRE_PYPI_ENV: &str = "CAPABILITY_TEST_REQUIRE_PYPI";

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// What a test wheel holds.
#[derive(Clone, Debug)]
pub struct WheelSpec {
    /// The distribution name as written in `METADATA` (`my-pkg`, `My.Pkg`).
    pub name: String,
    pub version: String,
    /// The compressed tag triple of the filename (`py3-none-any`,
    /// `cp311-cp311-manylinux_2_17_x86_64`).
    pub tag: String,
    /// `(path inside the wheel, content)`: the importable files (`mypkg/__init__.py`).
    pub files: Vec<(String, String)>,
    /// `(script name, "module:func")`, written to `entry_points.txt`.
    pub console_scripts: Vec<(String, String)>,
    /// `Requires-Dist` lines (`requests (>=2)`, `foo; python_version < "3"`).
    pub requires_dist: Vec<String>,
    pub requires_python: Option<String>,
}

impl Default for WheelSpec {
    fn default() -> Self {
        WheelSpec {
            name: "example".into(),
            version: "1.0".into(),
            tag: "py3-none-any".into(),
            files: Vec::new(),
            console_scripts: Vec::new(),
            requires_dist: Vec::new(),
            requires_python: None,
        }
    }
}

impl WheelSpec {
    /// A `py3-none-any` wheel of `name` `version`, with nothing in it yet.
    pub fn new(name: &str, version: &str) -> WheelSpec {
        WheelSpec {
            name: name.into(),
            version: version.into(),
            ..WheelSpec::default()
        }
    }

    /// The same wheel with another tag triple.
    pub fn tag(mut self, tag: &str) -> WheelSpec {
        self.tag = tag.into();
        self
    }

    /// The same wheel with one more file.
    pub fn file(mut self, path: &str, content: &str) -> WheelSpec {
        self.files.push((path.into(), content.into()));
        self
    }

    /// The same wheel with one more `Requires-Dist`.
    pub fn requires(mut self, requirement: &str) -> WheelSpec {
        self.requires_dist.push(requirement.into());
        self
    }

    /// The same wheel with one more console script (`module:func`).
    pub fn script(mut self, name: &str, target: &str) -> WheelSpec {
        self.console_scripts.push((name.into(), target.into()));
        self
    }

    /// The name as wheel filenames and `.dist-info` directories spell it (runs of `-_.`
    /// become `_`).
    pub fn escaped_name(&self) -> String {
        escape(&self.name)
    }

    /// `{name}-{version}-{tag}.whl`.
    pub fn filename(&self) -> String {
        format!("{}-{}-{}.whl", self.escaped_name(), self.version, self.tag)
    }
}

fn escape(name: &str) -> String {
    let mut out = String::new();
    let mut sep = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !sep {
                out.push('_');
            }
            sep = true;
        } else {
            out.push(c);
            sep = false;
        }
    }
    out
}

/// `sha256=<urlsafe base64 without padding>` of RECORD.
fn record_digest(bytes: &[u8]) -> String {
    let digest = sha2::Sha256::digest(bytes);
    format!(
        "sha256={}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest)
    )
}

/// Writes the wheel `spec` describes into `dir` (created if needed) and returns its path:
/// the files, then `.dist-info/{METADATA, WHEEL, entry_points.txt, RECORD}` (RECORD with
/// every other entry's digest and size), deflated.
pub fn build_wheel(dir: &Path, spec: &WheelSpec) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let dist_info = format!("{}-{}.dist-info", spec.escaped_name(), spec.version);
    let mut entries: Vec<(String, Vec<u8>)> = spec
        .files
        .iter()
        .map(|(p, c)| (p.clone(), c.as_bytes().to_vec()))
        .collect();

    let mut metadata = format!(
        "Metadata-Version: 2.1\nName: {}\nVersion: {}\nSummary: {} for the binder's tests\n",
        spec.name, spec.version, spec.name
    );
    if let Some(rp) = &spec.requires_python {
        metadata.push_str(&format!("Requires-Python: {rp}\n"));
    }
    for r in &spec.requires_dist {
        metadata.push_str(&format!("Requires-Dist: {r}\n"));
    }
    entries.push((format!("{dist_info}/METADATA"), metadata.into_bytes()));

    let root_is_purelib = spec.tag.ends_with("-none-any");
    let mut wheel = format!(
        "Wheel-Version: 1.0\nGenerator: capability-binders-tests\nRoot-Is-Purelib: {root_is_purelib}\n"
    );
    let mut parts = spec.tag.splitn(3, '-');
    let (py, abi, plat) = (
        parts.next().unwrap_or("py3"),
        parts.next().unwrap_or("none"),
        parts.next().unwrap_or("any"),
    );
    for p in py.split('.') {
        for a in abi.split('.') {
            for pl in plat.split('.') {
                wheel.push_str(&format!("Tag: {p}-{a}-{pl}\n"));
            }
        }
    }
    entries.push((format!("{dist_info}/WHEEL"), wheel.into_bytes()));

    if !spec.console_scripts.is_empty() {
        let mut ep = String::from("[console_scripts]\n");
        for (name, target) in &spec.console_scripts {
            ep.push_str(&format!("{name} = {target}\n"));
        }
        entries.push((format!("{dist_info}/entry_points.txt"), ep.into_bytes()));
    }

    let mut record = String::new();
    for (path, bytes) in &entries {
        record.push_str(&format!(
            "{path},{},{}\n",
            record_digest(bytes),
            bytes.len()
        ));
    }
    record.push_str(&format!("{dist_info}/RECORD,,\n"));
    entries.push((format!("{dist_info}/RECORD"), record.into_bytes()));

    let path = dir.join(spec.filename());
    let file = std::fs::File::create(&path).unwrap();
    let mut zip = zip::ZipWriter::new(file);
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .unix_permissions(0o644);
    for (name, bytes) in &entries {
        zip.start_file(name.as_str(), options).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap();
    path
}

/// Writes `{name}-{version}.tar.gz` (any bytes: an index only lists it) into `dir`.
pub fn build_sdist(dir: &Path, name: &str, version: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(format!("{}-{version}.tar.gz", escape(name)));
    std::fs::write(&path, b"not really a tarball: sdists are never downloaded").unwrap();
    path
}

/// Lowercase hex sha256 of bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

/// Lowercase hex sha256 of a file's bytes.
pub fn sha256_file(path: &Path) -> String {
    sha256_hex(&std::fs::read(path).unwrap())
}

/// The pypiserver executable in the project-local venv.
pub fn pypi_server_bin() -> PathBuf {
    repo().join("tools/pypi/.venv/bin/pypi-server")
}

/// Whether pypiserver is installed; panics when `CAPABILITY_TEST_REQUIRE_PYPI=1`.
pub fn pypi_server_present() -> bool {
    let bin = pypi_server_bin();
    if bin.exists() {
        return true;
    }
    assert!(
        std::env::var(REQUIRE_PYPI_ENV).as_deref() != Ok("1"),
        "{REQUIRE_PYPI_ENV}=1 but pypiserver is not installed at {} (see tools/pypi/README.md)",
        bin.display()
    );
    eprintln!(
        "skipped: pypiserver is not installed at {} (python3 -m venv tools/pypi/.venv && \
         tools/pypi/.venv/bin/pip install --require-hashes -r tools/pypi/requirements.lock)",
        bin.display()
    );
    false
}

/// pypiserver on 127.0.0.1 serving a directory (no authentication, no fallback to pypi.org),
/// killed when dropped. Files copied into [`PypiServer::packages`] later are served too (the
/// `simple-dir` backend lists the directory on every request).
pub struct PypiServer {
    /// The simple API root: `http://127.0.0.1:<port>/simple/`.
    pub url: String,
    /// `127.0.0.1:<port>`.
    pub addr: String,
    packages: PathBuf,
    _child: Running,
}

impl PypiServer {
    /// Starts pypiserver over `packages_dir` (created if needed) and waits until it answers;
    /// `None` (after saying why) when it is not installed.
    pub fn start(packages_dir: &Path) -> Option<PypiServer> {
        if !pypi_server_present() {
            return None;
        }
        std::fs::create_dir_all(packages_dir).unwrap();
        let port = free_port();
        let child = Command::new(pypi_server_bin())
            .args(["run", "-i", "127.0.0.1", "-p", &port.to_string()])
            .args(["-a", ".", "-P", ".", "--disable-fallback"])
            .args(["--backend", "simple-dir", "--log-stream", "none"])
            .arg(packages_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut child = Running(child);
        let addr = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.0.try_wait().unwrap() {
                panic!("pypiserver exited before it answered: {status}");
            }
            if std::net::TcpStream::connect(&addr).is_ok() {
                let (status, _, _) = crate::http::http(&addr, "GET", "/health", &[], "");
                if status == 200 {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "pypiserver did not answer on {addr} within 30 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(PypiServer {
            url: format!("http://{addr}/simple/"),
            addr,
            packages: packages_dir.to_path_buf(),
            _child: child,
        })
    }

    /// The directory it serves.
    pub fn packages(&self) -> &Path {
        &self.packages
    }

    /// Builds the wheel into the served directory; its path.
    pub fn add_wheel(&self, spec: &WheelSpec) -> PathBuf {
        build_wheel(&self.packages, spec)
    }

    /// Puts an sdist (any bytes) into the served directory; its path.
    pub fn add_sdist(&self, name: &str, version: &str) -> PathBuf {
        build_sdist(&self.packages, name, version)
    }
}
