//! The package index client.
//!
//! **Which index**: [`resolve_index_url`]: `--index-url`, else `CAP_PYPI_URL`, else
//! `PIP_INDEX_URL`, else the `index-url` of pip's configuration (`PIP_CONFIG_FILE`,
//! `$XDG_CONFIG_HOME/pip/pip.conf` or `~/.config/pip/pip.conf`, `~/.pip/pip.conf`,
//! `/etc/pip.conf`; `[install]` before `[global]`), else [`DEFAULT_INDEX_URL`].
//!
//! **Inspecting** ([`Index::inspect`]): the JSON API at the index's origin
//! (`https://pypi.org/simple/` → `https://pypi.org/pypi/<name>[/<version>]/json`) is tried
//! first, for its summary, project URLs and vulnerabilities; a 404 there (or an index whose
//! URL does not end in `/simple/`) means the index has no JSON API, and the simple API is
//! used: `<index_url><normalized-name>/` asked for PEP 691 JSON
//! (`application/vnd.pypi.simple.v1+json`) or PEP 503 HTML, both understood (relative links
//! resolved against the page, `#sha256=` fragments, `data-yanked`, `data-requires-python`
//! unescaped; PEP 691's `yanked` as a bool or a reason). Both answers become a list of
//! [`IndexFile`]s, and the same rules pick the wheel **before anything is downloaded**: files
//! of the release that are wheels, not yanked, whose `Requires-Python` admits the
//! interpreter, with a sha256 and a tag the sandbox's interpreter accepts ([`super::tags`]);
//! the most preferred tag wins. Without a version the release is the highest one that is not
//! a pre-release, not yanked and has such a wheel.
//!
//! **Downloading** ([`Index::fetch_wheel`]) goes through `capability-acquire`'s fetcher (one
//! deadline per request, same-origin redirects, destinations checked after DNS resolution,
//! private addresses only when [`PypiConfig::allow_private`]; pages up to 32 MiB, wheels up
//! to 64 MiB) into `<dir>/<sha256>/<filename>`: written to a temporary file, hashed, renamed
//! only when the digest is the index's (else nothing is kept). A file already there is
//! re-hashed before it is reused.
//!
//! **Reading a wheel** ([`read_metadata`], [`console_scripts`]): `*.dist-info/METADATA` and
//! `entry_points.txt` from the zip, each entry read up to 1 MiB.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use capability_acquire::fetch::{FetchConfig, Fetched, Fetcher};
use capability_core::json::sha256_hex;
use capability_exec::integrity::{IntegrityError, digest_file};
use serde_json::Value;

use super::pep::{SpecifierSet, Version, normalize_name};
use super::tags::{Interpreter, TagRanks, WheelName};
use super::{DEFAULT_INDEX_URL, Inspection, PypiConfig, PypiError, PypiErrorKind, WheelRef};

/// The largest index page or JSON document.
pub const MAX_DOCUMENT_BYTES: usize = 32 << 20;
/// The largest wheel.
pub const MAX_WHEEL_BYTES: usize = 64 << 20;
/// The largest `METADATA` or `entry_points.txt` read from a wheel.
pub const MAX_METADATA_BYTES: u64 = 1 << 20;
/// The `Accept` of simple API requests: PEP 691 JSON, else PEP 503 HTML.
pub const SIMPLE_ACCEPT: &str = "application/vnd.pypi.simple.v1+json, text/html;q=0.1";

fn err(kind: PypiErrorKind, message: impl Into<String>) -> PypiError {
    PypiError::new(kind, message)
}

impl PypiConfig {
    /// A configuration with the defaults: no private names, 30 s per request.
    pub fn new(index_url: impl Into<String>, cache_dir: impl Into<PathBuf>) -> PypiConfig {
        PypiConfig {
            index_url: index_url.into(),
            allow_private: false,
            timeout: Duration::from_secs(30),
            cache_dir: cache_dir.into(),
        }
    }
}

/// The index to use: `explicit` (`--index-url`), else `CAP_PYPI_URL`, else `PIP_INDEX_URL`,
/// else pip's configured `index-url`, else [`DEFAULT_INDEX_URL`].
pub fn resolve_index_url(explicit: Option<&str>) -> String {
    let non_empty = |s: String| {
        let t = s.trim().to_string();
        (!t.is_empty()).then_some(t)
    };
    if let Some(url) = explicit.map(str::to_string).and_then(non_empty) {
        return url;
    }
    for var in ["CAP_PYPI_URL", "PIP_INDEX_URL"] {
        if let Some(url) = std::env::var(var).ok().and_then(non_empty) {
            return url;
        }
    }
    for file in pip_config_files() {
        if let Ok(text) = std::fs::read_to_string(&file)
            && let Some(url) = pip_config_index_url(&text)
        {
            return url;
        }
    }
    DEFAULT_INDEX_URL.to_string()
}

/// pip's configuration files, in the order they are consulted here.
fn pip_config_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    if let Some(f) = std::env::var_os("PIP_CONFIG_FILE")
        && !f.is_empty()
        && f != "/dev/null"
    {
        files.push(PathBuf::from(f));
    }
    let home = std::env::var_os("HOME").map(PathBuf::from);
    match std::env::var_os("XDG_CONFIG_HOME").filter(|x| !x.is_empty()) {
        Some(xdg) => files.push(PathBuf::from(xdg).join("pip/pip.conf")),
        None => {
            if let Some(h) = &home {
                files.push(h.join(".config/pip/pip.conf"));
            }
        }
    }
    if let Some(h) = &home {
        files.push(h.join(".pip/pip.conf"));
    }
    files.push(PathBuf::from("/etc/pip.conf"));
    files
}

/// The `index-url` (or `index_url`) of a pip.conf: `[install]` wins over `[global]`.
pub fn pip_config_index_url(text: &str) -> Option<String> {
    let mut section = String::new();
    let mut found: BTreeMap<String, String> = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.trim().to_ascii_lowercase();
            continue;
        }
        let Some((key, value)) = line.split_once(['=', ':']) else {
            continue;
        };
        let key = key.trim().to_ascii_lowercase().replace('_', "-");
        let value = value.trim();
        if key == "index-url"
            && !value.is_empty()
            && matches!(section.as_str(), "global" | "install")
        {
            found.insert(section.clone(), value.to_string());
        }
    }
    found.remove("install").or_else(|| found.remove("global"))
}

/// One file of a project as the index lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexFile {
    pub filename: String,
    /// Absolute, without fragment.
    pub url: String,
    /// Lowercase hex, when the index gave one.
    pub sha256: Option<String>,
    pub requires_python: Option<String>,
    /// `Some(reason)` (possibly empty) when the file is yanked.
    pub yanked: Option<String>,
    pub size: Option<u64>,
}

impl IndexFile {
    /// The version this file is of, read from its filename (`None` for a name that belongs
    /// to another project or that does not parse).
    pub fn version_of(&self, normalized_project: &str) -> Option<Version> {
        if self.filename.ends_with(".whl") {
            let w = WheelName::parse(&self.filename).ok()?;
            return (w.normalized_name() == normalized_project)
                .then(|| w.parsed_version().ok())
                .flatten();
        }
        let stem = [".tar.gz", ".zip", ".tar.bz2", ".tgz", ".tar.xz", ".tar"]
            .iter()
            .find_map(|ext| self.filename.strip_suffix(ext))?;
        // `{name}-{version}`: the name may contain dashes; split where the prefix is the
        // project.
        stem.match_indices('-').find_map(|(i, _)| {
            (normalize_name(&stem[..i]) == normalized_project)
                .then(|| Version::parse(&stem[i + 1..]).ok())
                .flatten()
        })
    }

    fn is_wheel(&self) -> bool {
        self.filename.ends_with(".whl")
    }
}

/// What a project page lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectFiles {
    /// The name as the page spells it (the normalized name for an HTML page).
    pub name: String,
    /// The page's URL.
    pub url: String,
    pub files: Vec<IndexFile>,
}

impl ProjectFiles {
    /// The files grouped by release, highest first (files whose version cannot be read are
    /// left out).
    pub fn releases(&self) -> Vec<(Version, Vec<IndexFile>)> {
        let normalized = normalize_name(&self.name);
        let mut map: BTreeMap<Version, Vec<IndexFile>> = BTreeMap::new();
        for f in &self.files {
            if let Some(v) = f.version_of(&normalized) {
                map.entry(v).or_default().push(f.clone());
            }
        }
        map.into_iter().rev().collect()
    }
}

/// Facts the JSON API adds to the files.
#[derive(Clone, Debug, Default)]
struct ReleaseInfo {
    name: Option<String>,
    summary: Option<String>,
    requires_python: Option<String>,
    project_urls: BTreeMap<String, String>,
    vulnerabilities: Vec<Value>,
    yanked: Option<String>,
}

/// A package index: the JSON API when it has one, else its simple API.
#[derive(Debug)]
pub struct Index {
    config: PypiConfig,
    index_url: url::Url,
    json_api: Option<String>,
    fetcher: Fetcher,
    interpreter: Option<Interpreter>,
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Index {
    /// A client of `config.index_url` (the sandbox's interpreter is probed when a wheel is
    /// first chosen).
    pub fn new(config: &PypiConfig) -> Result<Index, PypiError> {
        let mut text = config.index_url.trim().to_string();
        if !text.ends_with('/') {
            text.push('/');
        }
        let index_url = url::Url::parse(&text).map_err(|e| {
            err(
                PypiErrorKind::Invalid,
                format!("the index URL `{}` is not a URL: {e}", config.index_url),
            )
        })?;
        if !matches!(index_url.scheme(), "http" | "https") {
            return Err(err(
                PypiErrorKind::Invalid,
                format!(
                    "the index URL `{}` is neither http nor https",
                    config.index_url
                ),
            ));
        }
        let json_api = index_url
            .as_str()
            .strip_suffix("/simple/")
            .map(|base| format!("{base}/pypi/"));
        let fetcher = Fetcher::new(FetchConfig {
            timeout: config.timeout,
            max_document_bytes: MAX_DOCUMENT_BYTES,
            max_tarball_bytes: MAX_WHEEL_BYTES,
            allow_private: config.allow_private,
            ..FetchConfig::default()
        })
        .map_err(|e| {
            err(
                PypiErrorKind::Index,
                format!("cannot make the HTTP client: {e}"),
            )
        })?;
        Ok(Index {
            config: config.clone(),
            index_url,
            json_api,
            fetcher,
            interpreter: None,
        })
    }

    /// The same index choosing wheels for `interpreter` instead of the probed one.
    pub fn with_interpreter(mut self, interpreter: Interpreter) -> Index {
        self.interpreter = Some(interpreter);
        self
    }

    /// The simple API root (with a trailing slash).
    pub fn index_url(&self) -> &str {
        self.index_url.as_str()
    }

    /// The configuration it was made with.
    pub fn config(&self) -> &PypiConfig {
        &self.config
    }

    /// The interpreter wheels are chosen for.
    pub fn interpreter(&self) -> Result<Interpreter, PypiError> {
        match &self.interpreter {
            Some(i) => Ok(i.clone()),
            None => Interpreter::probe(),
        }
    }

    fn get(&self, url: &str, accept: Option<&str>) -> Result<Fetched, PypiError> {
        let headers = accept
            .map(|a| vec![("Accept".to_string(), a.to_string())])
            .unwrap_or_default();
        self.fetcher
            .document_with_headers(url, headers)
            .map_err(|e| err(PypiErrorKind::Index, format!("cannot fetch {url}: {e}")))
    }

    /// A release and its best wheel for the sandbox's interpreter; the highest usable
    /// release when `version` is `None`.
    pub fn inspect(&self, name: &str, version: Option<&str>) -> Result<Inspection, PypiError> {
        if !super::pep::is_valid_name(name) {
            return Err(err(
                PypiErrorKind::Invalid,
                format!("`{name}` is not a valid project name"),
            ));
        }
        let wanted = version.map(Version::parse).transpose()?;
        if let Some(found) = self.inspect_json(name, version, wanted.as_ref())? {
            return Ok(found);
        }
        let project = self.project_files(name)?;
        let info = ReleaseInfo {
            name: Some(project.name.clone()),
            ..ReleaseInfo::default()
        };
        self.choose_release(&project, wanted.as_ref(), &info)
    }

    /// The JSON API's answer, or `None` when the index has none (404, or not JSON).
    fn inspect_json(
        &self,
        name: &str,
        version: Option<&str>,
        wanted: Option<&Version>,
    ) -> Result<Option<Inspection>, PypiError> {
        let Some(base) = &self.json_api else {
            return Ok(None);
        };
        let url = match version {
            Some(v) => format!("{base}{name}/{v}/json"),
            None => format!("{base}{name}/json"),
        };
        let fetched = self.get(&url, Some("application/json"))?;
        if fetched.status == 404 {
            return Ok(None);
        }
        if fetched.status != 200 {
            return Err(err(
                PypiErrorKind::Index,
                format!("the index answered HTTP {} for {url}", fetched.status),
            ));
        }
        let Ok(doc) = serde_json::from_slice::<Value>(&fetched.body) else {
            return Ok(None);
        };
        let Some(info) = doc.get("info").filter(|i| i.is_object()) else {
            return Ok(None);
        };
        let base_url = fetched.url.clone();
        let release_info = release_info_of(&doc);
        let project_name = info
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or(name)
            .to_string();
        let files_of = |list: Option<&Value>| -> Vec<IndexFile> {
            list.and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|f| json_api_file(f, &base_url))
                        .collect()
                })
                .unwrap_or_default()
        };
        if wanted.is_some() {
            let project = ProjectFiles {
                name: project_name,
                url,
                files: files_of(doc.get("urls")),
            };
            return self
                .choose_release(&project, wanted, &release_info)
                .map(Some);
        }
        // The latest: every release's files when the document lists them, else the simple
        // API's list.
        let releases = doc.get("releases").and_then(Value::as_object);
        let project = match releases {
            Some(r) if !r.is_empty() => ProjectFiles {
                name: project_name,
                url,
                files: r.values().flat_map(|l| files_of(Some(l))).collect(),
            },
            _ => self.project_files(name)?,
        };
        let mut found = self.choose_release(&project, None, &ReleaseInfo::default())?;
        let latest = info.get("version").and_then(Value::as_str);
        let same = latest
            .and_then(|l| Version::parse(l).ok())
            .is_some_and(|l| Version::parse(&found.version).is_ok_and(|f| f == l));
        let extra = if same {
            Some(release_info)
        } else {
            // The summary and vulnerabilities of the chosen release (best effort).
            let url = format!("{base}{name}/{}/json", found.version);
            self.get(&url, Some("application/json"))
                .ok()
                .filter(|f| f.status == 200)
                .and_then(|f| serde_json::from_slice::<Value>(&f.body).ok())
                .map(|d| release_info_of(&d))
        };
        if let Some(extra) = extra {
            found.summary = extra.summary;
            found.project_urls = extra.project_urls;
            found.vulnerabilities = extra.vulnerabilities;
            if found.requires_python.is_none() {
                found.requires_python = extra.requires_python;
            }
            if let Some(n) = extra.name {
                found.name = n;
            }
        }
        Ok(Some(found))
    }

    /// Every file of a project as the simple API lists it (PEP 691 JSON or PEP 503 HTML).
    /// Kind NotFound when the index has no such project.
    pub fn project_files(&self, name: &str) -> Result<ProjectFiles, PypiError> {
        let normalized = normalize_name(name);
        let url = self
            .index_url
            .join(&format!("{normalized}/"))
            .map_err(|e| err(PypiErrorKind::Invalid, format!("bad project URL: {e}")))?;
        let fetched = self.get(url.as_str(), Some(SIMPLE_ACCEPT))?;
        if fetched.status == 404 {
            return Err(err(
                PypiErrorKind::NotFound,
                format!("no project named `{name}` on {}", self.index_url),
            ));
        }
        if fetched.status != 200 {
            return Err(err(
                PypiErrorKind::Index,
                format!("the index answered HTTP {} for {url}", fetched.status),
            ));
        }
        parse_simple_page(&fetched.body, &fetched.url, &normalized)
    }

    /// The release `wanted` (or the best one) of `project` and its wheel.
    fn choose_release(
        &self,
        project: &ProjectFiles,
        wanted: Option<&Version>,
        info: &ReleaseInfo,
    ) -> Result<Inspection, PypiError> {
        let interpreter = self.interpreter()?;
        let ranks = interpreter.tag_ranks();
        let releases = project.releases();
        let display = info.name.clone().unwrap_or_else(|| project.name.clone());
        if let Some(v) = wanted {
            if let Some(reason) = &info.yanked {
                // The JSON API says so of the release itself.
                let reason = if reason.is_empty() {
                    String::new()
                } else {
                    format!(" ({reason})")
                };
                return Err(err(
                    PypiErrorKind::Yanked,
                    format!("{display} {v} is yanked{reason}: choose another release"),
                ));
            }
            let Some((version, files)) = releases.iter().find(|(rv, _)| rv == v) else {
                let mut known: Vec<String> = releases
                    .iter()
                    .take(10)
                    .map(|(v, _)| v.to_string())
                    .collect();
                if known.is_empty() {
                    known.push("none".into());
                }
                return Err(err(
                    PypiErrorKind::NotFound,
                    format!(
                        "{display} has no release {v} on {} (latest releases: {})",
                        self.index_url,
                        known.join(", ")
                    ),
                ));
            };
            if files.iter().all(|f| f.yanked.is_some()) {
                let reason = files
                    .iter()
                    .find_map(|f| f.yanked.clone())
                    .filter(|r| !r.is_empty())
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default();
                return Err(err(
                    PypiErrorKind::Yanked,
                    format!("{display} {version} is yanked{reason}: choose another release"),
                ));
            }
            let (wheel, tag, file) = choose_wheel(&display, version, files, &ranks, &interpreter)?;
            return Ok(inspection(&display, version, wheel, tag, &file, info));
        }
        let mut first_refusal: Option<PypiError> = None;
        for (version, files) in &releases {
            if version.is_prerelease() || files.iter().all(|f| f.yanked.is_some()) {
                continue;
            }
            match choose_wheel(&display, version, files, &ranks, &interpreter) {
                Ok((wheel, tag, file)) => {
                    return Ok(inspection(&display, version, wheel, tag, &file, info));
                }
                Err(e) => {
                    first_refusal.get_or_insert(e);
                }
            }
        }
        Err(match first_refusal {
            Some(e) => err(
                PypiErrorKind::NoWheel,
                format!(
                    "no release of {display} has a wheel this binder can use; the latest: {}",
                    e.message
                ),
            ),
            None => err(
                PypiErrorKind::NotFound,
                format!(
                    "{display} has no release on {} that is final and not yanked",
                    self.index_url
                ),
            ),
        })
    }

    /// The release `version` of `name` from a list of its files (the resolver's way, with
    /// no further request): kinds Yanked, NoWheel as [`Index::inspect`].
    pub fn inspection_from_files(
        &self,
        project: &ProjectFiles,
        version: &Version,
    ) -> Result<Inspection, PypiError> {
        let info = ReleaseInfo {
            name: Some(project.name.clone()),
            ..ReleaseInfo::default()
        };
        self.choose_release(project, Some(version), &info)
    }

    /// The wheel in `<dir>/<sha256>/<filename>`: reused when it is there and re-hashes to
    /// the index's digest, else downloaded, checked and renamed into place (kind Digest, and
    /// nothing kept, when the bytes are not the index's).
    pub fn fetch_wheel(&self, wheel: &WheelRef, dir: &Path) -> Result<PathBuf, PypiError> {
        check_digest_text(&wheel.sha256)?;
        if wheel.filename.is_empty()
            || wheel.filename.contains(['/', '\\'])
            || wheel.filename.starts_with('.')
            || !wheel.filename.ends_with(".whl")
        {
            return Err(err(
                PypiErrorKind::Invalid,
                format!("`{}` is not a wheel filename", wheel.filename),
            ));
        }
        let sha = wheel.sha256.to_ascii_lowercase();
        let slot = dir.join(&sha);
        let path = slot.join(&wheel.filename);
        if path.is_file() {
            if verify_wheel(&path, &sha).is_ok() {
                return Ok(path);
            }
            std::fs::remove_file(&path).map_err(|e| io_error(&path, e))?;
        }
        let fetched = self.fetcher.tarball(&wheel.url).map_err(|e| {
            err(
                PypiErrorKind::Index,
                format!("cannot download {}: {e}", wheel.url),
            )
        })?;
        if fetched.status != 200 {
            return Err(err(
                PypiErrorKind::Index,
                format!(
                    "the index answered HTTP {} for {}",
                    fetched.status, wheel.url
                ),
            ));
        }
        let actual = sha256_hex(&fetched.body);
        if actual != sha {
            return Err(err(
                PypiErrorKind::Digest,
                format!(
                    "{} from {} has sha256 {actual}, but the index recorded {sha}: nothing was kept",
                    wheel.filename, wheel.url
                ),
            ));
        }
        std::fs::create_dir_all(&slot).map_err(|e| io_error(&slot, e))?;
        let temp = slot.join(format!(
            ".{}.{}.{}.part",
            wheel.filename,
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let written = (|| {
            let mut f = std::fs::File::create(&temp)?;
            f.write_all(&fetched.body)?;
            f.sync_all()?;
            std::fs::rename(&temp, &path)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(io_error(&path, e));
        }
        Ok(path)
    }
}

fn io_error(path: &Path, e: std::io::Error) -> PypiError {
    err(PypiErrorKind::Io, format!("{}: {e}", path.display()))
}

fn check_digest_text(sha256_hex: &str) -> Result<(), PypiError> {
    if sha256_hex.len() != 64 || !sha256_hex.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(err(
            PypiErrorKind::Invalid,
            format!("`{sha256_hex}` is not a sha256 digest (64 hex digits)"),
        ));
    }
    Ok(())
}

/// Streams the file through sha256: kind Digest when it is not `sha256_hex`.
pub fn verify_wheel(path: &Path, sha256_hex: &str) -> Result<(), PypiError> {
    check_digest_text(sha256_hex)?;
    let actual = digest_file(path, None, u64::MAX, 0)
        .map_err(|e| match e {
            IntegrityError::Io { source, .. } => io_error(path, source),
            other => err(PypiErrorKind::Io, format!("{}: {other}", path.display())),
        })?
        .sha256_hex();
    let expected = sha256_hex.to_ascii_lowercase();
    if actual != expected {
        return Err(err(
            PypiErrorKind::Digest,
            format!(
                "{} has sha256 {actual}, expected {expected}",
                path.display()
            ),
        ));
    }
    Ok(())
}

/// The best wheel of one release's files.
fn choose_wheel(
    name: &str,
    version: &Version,
    files: &[IndexFile],
    ranks: &TagRanks,
    interpreter: &Interpreter,
) -> Result<(WheelRef, String, IndexFile), PypiError> {
    let live: Vec<&IndexFile> = files.iter().filter(|f| f.yanked.is_none()).collect();
    let wheels: Vec<&IndexFile> = live.iter().copied().filter(|f| f.is_wheel()).collect();
    if wheels.is_empty() {
        let others: Vec<&str> = live.iter().map(|f| f.filename.as_str()).collect();
        return Err(err(
            PypiErrorKind::NoWheel,
            format!(
                "{name} {version} has no wheel (only {}): only wheels are bound; sdists are never built",
                if others.is_empty() {
                    "yanked files".to_string()
                } else {
                    others.join(", ")
                }
            ),
        ));
    }
    let python = Version::parse(&interpreter.full_version).ok();
    let mut best: Option<(usize, String, &IndexFile)> = None;
    let mut seen = Vec::new();
    let mut without_digest = Vec::new();
    let mut wrong_python = Vec::new();
    for f in &wheels {
        let Ok(parsed) = WheelName::parse(&f.filename) else {
            continue;
        };
        seen.push(parsed.tag_string());
        let Some((rank, tag)) = ranks.best(&parsed) else {
            continue;
        };
        if let (Some(rp), Some(py)) = (&f.requires_python, &python)
            && let Ok(set) = SpecifierSet::parse(rp)
            && !set.contains_with(py, true)
        {
            wrong_python.push(format!("{} (Requires-Python {rp})", f.filename));
            continue;
        }
        if f.sha256.is_none() {
            without_digest.push(f.filename.clone());
            continue;
        }
        let better = match &best {
            None => true,
            Some((r, _, b)) => rank < *r || (rank == *r && f.filename < b.filename),
        };
        if better {
            best = Some((rank, tag.to_string(), f));
        }
    }
    if let Some((_, tag, f)) = best {
        let wheel = WheelRef {
            filename: f.filename.clone(),
            url: f.url.clone(),
            sha256: f.sha256.clone().unwrap_or_default(),
            size: f.size,
        };
        return Ok((wheel, tag, f.clone()));
    }
    let why = if !without_digest.is_empty() {
        format!(
            "its compatible wheels have no sha256 in the index ({}), so they cannot be bound",
            without_digest.join(", ")
        )
    } else if !wrong_python.is_empty() {
        format!(
            "its compatible wheels do not support Python {}: {}",
            interpreter.full_version,
            wrong_python.join(", ")
        )
    } else {
        seen.sort();
        seen.dedup();
        format!(
            "no wheel matches the sandbox's interpreter ({}); tags seen: {}",
            interpreter.describe(),
            seen.join(", ")
        )
    };
    Err(err(
        PypiErrorKind::NoWheel,
        format!("{name} {version} has no usable wheel: {why}"),
    ))
}

fn inspection(
    name: &str,
    version: &Version,
    wheel: WheelRef,
    tag: String,
    file: &IndexFile,
    info: &ReleaseInfo,
) -> Inspection {
    Inspection {
        name: name.to_string(),
        version: version.to_string(),
        summary: info.summary.clone(),
        requires_python: file
            .requires_python
            .clone()
            .or_else(|| info.requires_python.clone()),
        project_urls: info.project_urls.clone(),
        wheel,
        vulnerabilities: info.vulnerabilities.clone(),
        tag,
    }
}

fn non_empty_str(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

fn release_info_of(doc: &Value) -> ReleaseInfo {
    let info = doc.get("info").cloned().unwrap_or(Value::Null);
    let project_urls = info
        .get("project_urls")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default();
    let yanked = match info.get("yanked") {
        Some(Value::Bool(true)) => {
            Some(non_empty_str(info.get("yanked_reason")).unwrap_or_default())
        }
        _ => None,
    };
    ReleaseInfo {
        name: non_empty_str(info.get("name")),
        summary: non_empty_str(info.get("summary")),
        requires_python: non_empty_str(info.get("requires_python")),
        project_urls,
        vulnerabilities: doc
            .get("vulnerabilities")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        yanked,
    }
}

/// A file of the JSON API (`urls`/`releases` entries).
fn json_api_file(f: &Value, base: &url::Url) -> Option<IndexFile> {
    let filename = f.get("filename")?.as_str()?.to_string();
    let url = base.join(f.get("url")?.as_str()?).ok()?;
    let sha256 = f
        .get("digests")
        .and_then(|d| d.get("sha256"))
        .and_then(Value::as_str)
        .map(str::to_ascii_lowercase);
    let yanked = match f.get("yanked") {
        Some(Value::Bool(true)) => Some(non_empty_str(f.get("yanked_reason")).unwrap_or_default()),
        _ => None,
    };
    Some(IndexFile {
        filename,
        url: strip_fragment(url),
        sha256,
        requires_python: non_empty_str(f.get("requires_python")),
        yanked,
        size: f.get("size").and_then(Value::as_u64),
    })
}

fn strip_fragment(mut url: url::Url) -> String {
    url.set_fragment(None);
    url.to_string()
}

/// A simple API page: PEP 691 JSON when it is JSON, else PEP 503 HTML.
pub fn parse_simple_page(
    body: &[u8],
    page_url: &url::Url,
    normalized: &str,
) -> Result<ProjectFiles, PypiError> {
    let text = String::from_utf8_lossy(body);
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') {
        let doc: Value = serde_json::from_str(trimmed).map_err(|e| {
            err(
                PypiErrorKind::Index,
                format!("{page_url} is not a valid PEP 691 page: {e}"),
            )
        })?;
        return parse_pep691(&doc, page_url, normalized);
    }
    Ok(ProjectFiles {
        name: normalized.to_string(),
        url: page_url.to_string(),
        files: parse_pep503(&text, page_url),
    })
}

fn parse_pep691(
    doc: &Value,
    page_url: &url::Url,
    normalized: &str,
) -> Result<ProjectFiles, PypiError> {
    let files = doc.get("files").and_then(Value::as_array).ok_or_else(|| {
        err(
            PypiErrorKind::Index,
            format!("{page_url} is a PEP 691 page without `files`"),
        )
    })?;
    let mut out = Vec::new();
    for f in files {
        let (Some(filename), Some(href)) = (
            f.get("filename").and_then(Value::as_str),
            f.get("url").and_then(Value::as_str),
        ) else {
            continue;
        };
        let Ok(url) = page_url.join(href) else {
            continue;
        };
        let sha256 = f
            .get("hashes")
            .and_then(|h| h.get("sha256"))
            .and_then(Value::as_str)
            .map(str::to_ascii_lowercase)
            .or_else(|| fragment_sha256(&url));
        let yanked = match f.get("yanked") {
            Some(Value::Bool(true)) => Some(String::new()),
            Some(Value::String(reason)) => Some(reason.clone()),
            _ => None,
        };
        out.push(IndexFile {
            filename: filename.to_string(),
            url: strip_fragment(url),
            sha256,
            requires_python: non_empty_str(f.get("requires-python")),
            yanked,
            size: f.get("size").and_then(Value::as_u64),
        });
    }
    Ok(ProjectFiles {
        name: non_empty_str(doc.get("name")).unwrap_or_else(|| normalized.to_string()),
        url: page_url.to_string(),
        files: out,
    })
}

fn fragment_sha256(url: &url::Url) -> Option<String> {
    let hex = url.fragment()?.strip_prefix("sha256=")?;
    (hex.len() == 64 && hex.bytes().all(|c| c.is_ascii_hexdigit()))
        .then(|| hex.to_ascii_lowercase())
}

/// The anchors of a PEP 503 page.
fn parse_pep503(html: &str, page_url: &url::Url) -> Vec<IndexFile> {
    let lower = html.to_ascii_lowercase();
    // A `<base href>` changes what relative links are relative to.
    let mut base = page_url.clone();
    if let Some(start) = lower.find("<base ") {
        let end = lower[start..].find('>').map_or(lower.len(), |e| start + e);
        let attrs = parse_attributes(&html[start + 6..end]);
        if let Some(href) = attrs.get("href")
            && let Ok(b) = page_url.join(href)
        {
            base = b;
        }
    }
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some(found) = lower[pos..].find("<a") {
        let start = pos + found;
        let after = lower.as_bytes().get(start + 2).copied();
        if !after.is_some_and(|c| c.is_ascii_whitespace()) {
            pos = start + 2;
            continue;
        }
        let Some(tag_end) = find_tag_end(&html[start..]).map(|e| start + e) else {
            break;
        };
        let attrs = parse_attributes(&html[start + 2..tag_end]);
        let close = lower[tag_end..]
            .find("</a")
            .map_or(html.len(), |c| tag_end + c);
        let text = unescape(html[tag_end + 1..close].trim());
        pos = close.max(tag_end + 1);
        let Some(href) = attrs.get("href") else {
            continue;
        };
        let Ok(url) = base.join(href) else {
            continue;
        };
        let filename = if text.is_empty() {
            url.path_segments()
                .and_then(|mut s| s.next_back())
                .unwrap_or("")
                .to_string()
        } else {
            text
        };
        if filename.is_empty() {
            continue;
        }
        out.push(IndexFile {
            filename,
            sha256: fragment_sha256(&url),
            url: strip_fragment(url),
            requires_python: attrs
                .get("data-requires-python")
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty()),
            yanked: attrs.get("data-yanked").cloned(),
            size: None,
        });
    }
    out
}

/// The index of the `>` that closes the tag starting at 0 (quotes respected).
fn find_tag_end(s: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    for (i, c) in s.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '>') => return Some(i),
            _ => {}
        }
    }
    None
}

/// `name="value"`, `name='value'`, `name=value` and bare `name` (value ""), unescaped;
/// names lowercased.
fn parse_attributes(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && (b[i].is_ascii_whitespace() || b[i] == b'/') {
            i += 1;
        }
        let start = i;
        while i < b.len() && !b[i].is_ascii_whitespace() && b[i] != b'=' && b[i] != b'/' {
            i += 1;
        }
        if start == i {
            i += 1;
            continue;
        }
        let name = s[start..i].to_ascii_lowercase();
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i < b.len() && b[i] == b'=' {
            i += 1;
            while i < b.len() && b[i].is_ascii_whitespace() {
                i += 1;
            }
            let value = if i < b.len() && (b[i] == b'"' || b[i] == b'\'') {
                let q = b[i];
                let vs = i + 1;
                let ve = b[vs..]
                    .iter()
                    .position(|&c| c == q)
                    .map_or(b.len(), |p| vs + p);
                i = (ve + 1).min(b.len());
                &s[vs..ve]
            } else {
                let vs = i;
                while i < b.len() && !b[i].is_ascii_whitespace() {
                    i += 1;
                }
                &s[vs..i]
            };
            out.insert(name, unescape(value));
        } else {
            out.insert(name, String::new());
        }
    }
    out
}

/// HTML character references: the named ones an index writes, and numeric ones.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let Some(semi) = rest[..rest.len().min(12)].find(';') else {
            out.push('&');
            rest = &rest[1..];
            continue;
        };
        let entity = &rest[1..semi];
        let decoded = match entity {
            "lt" => Some('<'),
            "gt" => Some('>'),
            "amp" => Some('&'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            "nbsp" => Some('\u{a0}'),
            e if e.starts_with("#x") || e.starts_with("#X") => u32::from_str_radix(&e[2..], 16)
                .ok()
                .and_then(char::from_u32),
            e if e.starts_with('#') => e[1..].parse().ok().and_then(char::from_u32),
            _ => None,
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &rest[semi + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// What a wheel's `METADATA` says about it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WheelMetadata {
    pub name: String,
    pub version: String,
    pub summary: Option<String>,
    pub requires_python: Option<String>,
    /// The `Requires-Dist` lines, as written.
    pub requires_dist: Vec<String>,
    pub provides_extra: Vec<String>,
}

type Archive = zip::ZipArchive<std::fs::File>;

fn open_wheel(path: &Path) -> Result<Archive, PypiError> {
    let file = std::fs::File::open(path).map_err(|e| io_error(path, e))?;
    zip::ZipArchive::new(file).map_err(|e| {
        err(
            PypiErrorKind::Invalid,
            format!("{} is not a valid wheel (zip): {e}", path.display()),
        )
    })
}

/// The wheel's `.dist-info` directory: the one its filename names, else the only one.
fn dist_info_dir(archive: &Archive, path: &Path) -> Result<String, PypiError> {
    let mut dirs: Vec<String> = archive
        .file_names_raw()
        .filter_map(|raw| std::str::from_utf8(raw).ok())
        .filter_map(|n| {
            let (dir, rest) = n.split_once('/')?;
            (dir.ends_with(".dist-info") && rest == "METADATA").then(|| dir.to_string())
        })
        .collect();
    dirs.sort();
    dirs.dedup();
    let from_name = path
        .file_name()
        .and_then(|f| f.to_str())
        .and_then(|f| WheelName::parse(f).ok());
    if let Some(w) = from_name
        && let Some(d) = dirs.iter().find(|d| {
            d.strip_suffix(".dist-info")
                .and_then(|s| s.rsplit_once('-'))
                .is_some_and(|(n, v)| {
                    normalize_name(n) == w.normalized_name()
                        && Version::parse(v).ok() == w.parsed_version().ok()
                })
        })
    {
        return Ok(d.clone());
    }
    match dirs.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(err(
            PypiErrorKind::Invalid,
            format!("{} has no .dist-info/METADATA", path.display()),
        )),
        _ => Err(err(
            PypiErrorKind::Invalid,
            format!(
                "{} has several .dist-info directories ({}) and none is its filename's",
                path.display(),
                dirs.join(", ")
            ),
        )),
    }
}

/// One entry of the wheel as text, refused above [`MAX_METADATA_BYTES`]; `None` when absent.
fn read_entry(archive: &mut Archive, name: &str, path: &Path) -> Result<Option<String>, PypiError> {
    let entry = match archive.by_name(name) {
        Ok(e) => e,
        Err(zip::result::ZipError::FileNotFound) => return Ok(None),
        Err(e) => {
            return Err(err(
                PypiErrorKind::Invalid,
                format!("{}: cannot read {name}: {e}", path.display()),
            ));
        }
    };
    if entry.size() > MAX_METADATA_BYTES {
        return Err(err(
            PypiErrorKind::Invalid,
            format!(
                "{}: {name} claims {} bytes (more than {MAX_METADATA_BYTES})",
                path.display(),
                entry.size()
            ),
        ));
    }
    let mut bytes = Vec::new();
    entry
        .take(MAX_METADATA_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| {
            err(
                PypiErrorKind::Invalid,
                format!("{}: cannot read {name}: {e}", path.display()),
            )
        })?;
    if bytes.len() as u64 > MAX_METADATA_BYTES {
        return Err(err(
            PypiErrorKind::Invalid,
            format!(
                "{}: {name} is larger than {MAX_METADATA_BYTES} bytes",
                path.display()
            ),
        ));
    }
    String::from_utf8(bytes).map(Some).map_err(|_| {
        err(
            PypiErrorKind::Invalid,
            format!("{}: {name} is not UTF-8", path.display()),
        )
    })
}

/// `Name`, `Version`, `Summary`, `Requires-Python`, `Requires-Dist` and `Provides-Extra` of
/// the wheel's `*.dist-info/METADATA` (the headers; the body is not read).
pub fn read_metadata(wheel_path: &Path) -> Result<WheelMetadata, PypiError> {
    let mut archive = open_wheel(wheel_path)?;
    let dir = dist_info_dir(&archive, wheel_path)?;
    let text =
        read_entry(&mut archive, &format!("{dir}/METADATA"), wheel_path)?.ok_or_else(|| {
            err(
                PypiErrorKind::Invalid,
                format!("{} has no {dir}/METADATA", wheel_path.display()),
            )
        })?;
    let mut meta = WheelMetadata::default();
    let mut headers: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            break;
        }
        if line.starts_with([' ', '\t']) {
            if let Some((_, v)) = headers.last_mut() {
                v.push(' ');
                v.push_str(line.trim());
            }
            continue;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    for (k, v) in headers {
        match k.as_str() {
            "name" => meta.name = v,
            "version" => meta.version = v,
            "summary" if !v.is_empty() => meta.summary = Some(v),
            "requires-python" if !v.is_empty() => meta.requires_python = Some(v),
            "requires-dist" if !v.is_empty() => meta.requires_dist.push(v),
            "provides-extra" if !v.is_empty() => meta.provides_extra.push(v),
            _ => {}
        }
    }
    if meta.name.is_empty() || meta.version.is_empty() {
        return Err(err(
            PypiErrorKind::Invalid,
            format!(
                "{}: {dir}/METADATA has no Name or Version",
                wheel_path.display()
            ),
        ));
    }
    Ok(meta)
}

/// The `[console_scripts]` of the wheel's `entry_points.txt`: `(name, module, attribute)`
/// (`tool = pkg.cli:main [extra]` → `("tool", "pkg.cli", Some("main"))`); empty when the
/// wheel has none.
pub fn console_scripts(
    wheel_path: &Path,
) -> Result<Vec<(String, String, Option<String>)>, PypiError> {
    let mut archive = open_wheel(wheel_path)?;
    let dir = dist_info_dir(&archive, wheel_path)?;
    let Some(text) = read_entry(&mut archive, &format!("{dir}/entry_points.txt"), wheel_path)?
    else {
        return Ok(Vec::new());
    };
    Ok(parse_console_scripts(&text))
}

/// The `[console_scripts]` section of an `entry_points.txt`.
pub fn parse_console_scripts(text: &str) -> Vec<(String, String, Option<String>)> {
    let mut out = Vec::new();
    let mut in_section = false;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            in_section = section.trim() == "console_scripts";
            continue;
        }
        if !in_section {
            continue;
        }
        let Some((name, target)) = line.split_once('=') else {
            continue;
        };
        // Drop `[extras]` after the object reference.
        let target = target.split('[').next().unwrap_or("").trim();
        let (module, attr) = match target.split_once(':') {
            Some((m, a)) => (
                m.trim(),
                Some(a.trim().to_string()).filter(|a| !a.is_empty()),
            ),
            None => (target, None),
        };
        let name = name.trim();
        if name.is_empty() || module.is_empty() {
            continue;
        }
        out.push((name.to_string(), module.to_string(), attr));
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn page() -> url::Url {
        url::Url::parse("https://example.org/simple/demo/").unwrap()
    }

    #[test]
    fn html_pages_parse() {
        let html = r#"<!DOCTYPE html><html><body>
          <a href="../../files/demo-1.0-py3-none-any.whl#sha256=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" data-requires-python="&gt;=3.8">demo-1.0-py3-none-any.whl</a><br/>
          <A HREF='https://cdn.example/demo-1.1.tar.gz' data-yanked="broken &amp; bad">demo-1.1.tar.gz</A>
          <a href="demo-0.9-py3-none-any.whl" data-yanked>demo-0.9-py3-none-any.whl</a>
          <abbr>not a link</abbr>
        </body></html>"#;
        let p = parse_simple_page(html.as_bytes(), &page(), "demo").unwrap();
        assert_eq!(p.files.len(), 3);
        let f = &p.files[0];
        assert_eq!(f.url, "https://example.org/files/demo-1.0-py3-none-any.whl");
        assert_eq!(f.sha256.as_deref(), Some(&*"a".repeat(64)));
        assert_eq!(f.requires_python.as_deref(), Some(">=3.8"));
        assert_eq!(f.yanked, None);
        assert_eq!(p.files[1].yanked.as_deref(), Some("broken & bad"));
        assert_eq!(p.files[1].sha256, None);
        assert_eq!(p.files[2].yanked.as_deref(), Some(""));
        assert_eq!(
            p.files[2].url,
            "https://example.org/simple/demo/demo-0.9-py3-none-any.whl"
        );
        let releases = p.releases();
        let versions: Vec<String> = releases.iter().map(|(v, _)| v.to_string()).collect();
        assert_eq!(versions, vec!["1.1", "1.0", "0.9"]);
    }

    #[test]
    fn json_pages_parse() {
        let doc = serde_json::json!({
            "meta": {"api-version": "1.1"}, "name": "demo",
            "files": [
                {"filename": "demo-1.0-py3-none-any.whl", "url": "/f/demo-1.0-py3-none-any.whl",
                 "hashes": {"sha256": "B".repeat(64)}, "requires-python": ">=3.7", "size": 10},
                {"filename": "demo-1.1-py3-none-any.whl", "url": "demo-1.1-py3-none-any.whl",
                 "hashes": {}, "yanked": "security"},
                {"filename": "demo-1.2-py3-none-any.whl", "url": "x.whl", "hashes": {}, "yanked": true}
            ]
        });
        let p = parse_simple_page(doc.to_string().as_bytes(), &page(), "demo").unwrap();
        assert_eq!(
            p.files[0].url,
            "https://example.org/f/demo-1.0-py3-none-any.whl"
        );
        assert_eq!(p.files[0].sha256.as_deref(), Some(&*"b".repeat(64)));
        assert_eq!(p.files[0].size, Some(10));
        assert_eq!(p.files[1].yanked.as_deref(), Some("security"));
        assert_eq!(p.files[2].yanked.as_deref(), Some(""));
        assert!(parse_simple_page(b"{\"meta\": {}}", &page(), "demo").is_err());
    }

    #[test]
    fn sdist_versions_split_at_the_project() {
        let f = |name: &str| IndexFile {
            filename: name.into(),
            url: String::new(),
            sha256: None,
            requires_python: None,
            yanked: None,
            size: None,
        };
        assert_eq!(
            f("my-pkg-1.0.tar.gz")
                .version_of("my-pkg")
                .map(|v| v.to_string()),
            Some("1.0".into())
        );
        assert_eq!(
            f("My_Pkg-2.0rc1.zip")
                .version_of("my-pkg")
                .map(|v| v.to_string()),
            Some("2.0rc1".into())
        );
        assert_eq!(f("other-1.0.tar.gz").version_of("my-pkg"), None);
        assert_eq!(
            f("my_pkg-1.0-py3-none-any.whl")
                .version_of("my-pkg")
                .map(|v| v.to_string()),
            Some("1.0".into())
        );
        assert_eq!(f("my-pkg-1.0.exe").version_of("my-pkg"), None);
    }

    #[test]
    fn pip_configuration_is_read() {
        assert_eq!(
            pip_config_index_url(
                "[global]\nindex-url = https://a/simple/\n[install]\nindex_url=https://b/simple/\n"
            ),
            Some("https://b/simple/".into())
        );
        assert_eq!(
            pip_config_index_url("# c\n[global]\ntimeout = 3\nindex-url: https://a/simple/\n"),
            Some("https://a/simple/".into())
        );
        assert_eq!(pip_config_index_url("[freeze]\nindex-url = x\n"), None);
        assert_eq!(
            resolve_index_url(Some(" https://x/simple/ ")),
            "https://x/simple/"
        );
    }

    #[test]
    fn entry_points_parse() {
        let text = "[gui_scripts]\ng = a:b\n\n[console_scripts]\ntool = pkg.cli:main [color]\nplain=pkg.run\n bad\n";
        assert_eq!(
            parse_console_scripts(text),
            vec![
                ("tool".into(), "pkg.cli".into(), Some("main".into())),
                ("plain".into(), "pkg.run".into(), None),
            ]
        );
    }

    #[test]
    fn entities_unescape() {
        assert_eq!(
            unescape("&lt;3&#44;&#x3E;=2 &amp;&unknown; &"),
            "<3,>=2 &&unknown; &"
        );
    }
}
