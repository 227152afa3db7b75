//! The forge: one candidate of a verified wheel turned into a capability directory.
//!
//! [`forge`] inspects the release on the index, downloads and verifies its wheel, mines it
//! ([`super::mine`]), resolves the exact dependency closure ([`super::resolve`]) and hands
//! everything to [`forge_wheel`], which works on local files only:
//!
//! * picks the candidate: the first (best scored) one matching the optional module and symbol
//!   filters; with no filter, the first candidate. Filters that match nothing are an error
//!   naming the candidates (the reference silently falls back to the first candidate; binding
//!   a function the caller did not name is not something this forge does);
//! * copies every wheel of the closure into the directory, re-checking each copy's sha256;
//! * writes [`MANIFEST_FILE`] (`capability.json`, the capability manifest, validated with
//!   `capability_core::validate_manifest`) and [`BINDING_FILE`] (`capability.python.json`,
//!   [`PythonBinding`]: what [`super::run`] needs and checks before every run).
//!
//! The directory must not exist or be empty (a forge never overwrites files it did not
//! write); the default directory under the cache (`<cache>/forged/<slugs>`) is replaced when
//! it holds an earlier forge.
//!
//! The capability id is `forged/python/<slug(package)>/<slug(symbol)>` with the reference's
//! PyPI slug ([`pypi_slug`]: lowercase, runs of anything but `[a-z0-9]` become `-`, trimmed,
//! at most 72 characters, `python-ability` when empty). capability-core has no slug helper
//! with these rules (§5.13 keeps each slug distinct), so it lives here.

use std::path::{Path, PathBuf};

use capability_core::effects::EXTERNAL_OPAQUE_EFFECTS;
use serde_json::{Map, Value, json};

use super::mine::{CandidateKind, MiningReport, PythonCandidate, mine_bytes, read_wheel};
use super::run::{is_plain_file_name, read_json, read_with_sha256, write_file};
use super::{BINDER_VERSION, Index, Inspection, PypiError, PypiErrorKind, SUBSTRATE, WheelRef};

/// The capability manifest a forge writes.
pub const MANIFEST_FILE: &str = "capability.json";
/// The Python binding a forge writes (see [`PythonBinding`]).
pub const BINDING_FILE: &str = "capability.python.json";
/// `pythonBindingVersion` of [`BINDING_FILE`].
pub const PYTHON_BINDING_VERSION: &str = "1";
/// The effects every forged Python capability declares.
pub const FORGED_EFFECTS: [&str; 2] = ["process.spawn", EXTERNAL_OPAQUE_EFFECTS];
/// The largest wheel a forge copies.
pub const MAX_FORGED_WHEEL_BYTES: u64 = 256 << 20;

/// What [`forge`] binds.
#[derive(Clone, Debug, Default)]
pub struct ForgeOptions {
    /// The project name.
    pub package: String,
    /// The release; the latest one the index offers when absent.
    pub version: Option<String>,
    /// Ranks the candidates (see [`super::mine`]).
    pub query: Option<String>,
    /// Only candidates of this module.
    pub module: Option<String>,
    /// Only candidates with this symbol.
    pub symbol: Option<String>,
    /// Where to write; `<cache_dir>/forged/<package>-<version>-<module>-<symbol>` when absent.
    pub directory: Option<PathBuf>,
}

/// How [`forge_wheel`] picks the candidate.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    pub query: Option<String>,
    pub module: Option<String>,
    pub symbol: Option<String>,
}

/// A verified local wheel of the dependency closure.
#[derive(Clone, Debug)]
pub struct LocalWheel {
    pub inspection: Inspection,
    pub path: PathBuf,
    /// The projects whose requirements brought it in.
    pub required_by: Vec<String>,
}

/// One wheel of a bound closure as [`BINDING_FILE`] records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoundWheel {
    pub package: String,
    pub version: String,
    /// The filename, in the forge directory.
    pub wheel: String,
    /// Lowercase hex.
    pub sha256: String,
    pub required_by: Vec<String>,
}

impl BoundWheel {
    /// `{package, version, wheel, sha256, requiredBy}`.
    pub fn to_json(&self) -> Value {
        json!({
            "package": self.package,
            "version": self.version,
            "wheel": self.wheel,
            "sha256": self.sha256,
            "requiredBy": self.required_by,
        })
    }

    fn from_json(v: &Value) -> Option<BoundWheel> {
        Some(BoundWheel {
            package: v.get("package")?.as_str()?.to_string(),
            version: v.get("version")?.as_str()?.to_string(),
            wheel: v.get("wheel")?.as_str()?.to_string(),
            sha256: v.get("sha256")?.as_str()?.to_ascii_lowercase(),
            required_by: v
                .get("requiredBy")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
        })
    }
}

/// `capability.python.json`: what a forged directory binds.
///
/// `{pythonBindingVersion: "1", substrate: "pypi", binderVersion, capabilityId, package,
/// version, wheel, sha256, tag, module, symbol, kind, script?, candidate, dependencies:
/// [{package, version, wheel, sha256, requiredBy}], inspection, forgedAt}`.
#[derive(Clone, Debug, PartialEq)]
pub struct PythonBinding {
    pub capability_id: String,
    pub package: String,
    pub version: String,
    /// The root wheel's filename, in the forge directory.
    pub wheel: String,
    /// The root wheel's sha256 (lowercase hex).
    pub sha256: String,
    pub tag: String,
    pub module: String,
    pub symbol: String,
    pub kind: CandidateKind,
    /// The console script's name (argv[0]).
    pub script: Option<String>,
    pub candidate: PythonCandidate,
    pub dependencies: Vec<BoundWheel>,
    /// The release as the index described it ([`Inspection::to_json`]).
    pub inspection: Value,
    pub forged_at: String,
}

impl PythonBinding {
    /// The JSON of [`BINDING_FILE`].
    pub fn to_json(&self) -> Value {
        let mut v = Map::new();
        v.insert("pythonBindingVersion".into(), json!(PYTHON_BINDING_VERSION));
        v.insert("substrate".into(), json!(SUBSTRATE));
        v.insert("binderVersion".into(), json!(BINDER_VERSION));
        v.insert("capabilityId".into(), json!(self.capability_id));
        v.insert("package".into(), json!(self.package));
        v.insert("version".into(), json!(self.version));
        v.insert("wheel".into(), json!(self.wheel));
        v.insert("sha256".into(), json!(self.sha256));
        v.insert("tag".into(), json!(self.tag));
        v.insert("module".into(), json!(self.module));
        v.insert("symbol".into(), json!(self.symbol));
        v.insert("kind".into(), json!(self.kind.as_str()));
        if let Some(script) = &self.script {
            v.insert("script".into(), json!(script));
        }
        v.insert("candidate".into(), self.candidate.to_json());
        v.insert(
            "dependencies".into(),
            Value::Array(self.dependencies.iter().map(BoundWheel::to_json).collect()),
        );
        v.insert("inspection".into(), self.inspection.clone());
        v.insert("forgedAt".into(), json!(self.forged_at));
        Value::Object(v)
    }

    /// Parses [`BINDING_FILE`]'s JSON, checking that every wheel is a plain file name with a
    /// sha256.
    pub fn from_json(v: &Value) -> Result<PythonBinding, PypiError> {
        let invalid = |what: &str| {
            PypiError::new(
                PypiErrorKind::Invalid,
                format!("{BINDING_FILE} is invalid: {what}"),
            )
        };
        let s = |key: &str| {
            v.get(key)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| invalid(&format!("{key} must be a string")))
        };
        if v.get("pythonBindingVersion").and_then(Value::as_str) != Some(PYTHON_BINDING_VERSION) {
            return Err(invalid("pythonBindingVersion must be \"1\""));
        }
        if v.get("substrate").and_then(Value::as_str) != Some(SUBSTRATE) {
            return Err(invalid("substrate must be \"pypi\""));
        }
        let kind = CandidateKind::parse(&s("kind")?)
            .ok_or_else(|| invalid("kind must be function or console-script"))?;
        let candidate = v
            .get("candidate")
            .and_then(PythonCandidate::from_json)
            .ok_or_else(|| invalid("candidate is missing or malformed"))?;
        let mut dependencies = Vec::new();
        for d in v
            .get("dependencies")
            .and_then(Value::as_array)
            .ok_or_else(|| invalid("dependencies must be an array"))?
        {
            dependencies.push(
                BoundWheel::from_json(d).ok_or_else(|| invalid("a dependency is malformed"))?,
            );
        }
        let binding = PythonBinding {
            capability_id: s("capabilityId")?,
            package: s("package")?,
            version: s("version")?,
            wheel: s("wheel")?,
            sha256: s("sha256")?.to_ascii_lowercase(),
            tag: s("tag")?,
            module: s("module")?,
            symbol: s("symbol")?,
            kind,
            script: v.get("script").and_then(Value::as_str).map(str::to_string),
            candidate,
            dependencies,
            inspection: v.get("inspection").cloned().unwrap_or(Value::Null),
            forged_at: s("forgedAt")?,
        };
        for (wheel, sha256) in binding.wheels() {
            if !is_plain_file_name(wheel) {
                return Err(invalid(&format!("{wheel:?} is not a plain file name")));
            }
            if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(invalid(&format!("{wheel} has no sha256")));
            }
        }
        if binding.module.is_empty() || binding.symbol.is_empty() {
            return Err(invalid("module and symbol must not be empty"));
        }
        Ok(binding)
    }

    /// Reads `<directory>/capability.python.json`.
    pub fn load(directory: &Path) -> Result<PythonBinding, PypiError> {
        PythonBinding::from_json(&read_json(&directory.join(BINDING_FILE))?)
    }

    /// `(filename, sha256)` of every wheel: the root first, then the dependencies.
    pub fn wheels(&self) -> impl Iterator<Item = (&str, &str)> {
        std::iter::once((self.wheel.as_str(), self.sha256.as_str())).chain(
            self.dependencies
                .iter()
                .map(|d| (d.wheel.as_str(), d.sha256.as_str())),
        )
    }

    /// `<package>@<version>#sha256:<hex>`.
    pub fn immutable_artifact(&self) -> String {
        format!("{}@{}#sha256:{}", self.package, self.version, self.sha256)
    }
}

/// The reference's `PythonForge`, plus the closure it bound.
#[derive(Clone, Debug, PartialEq)]
pub struct PythonForge {
    pub artifact: Inspection,
    pub candidate: PythonCandidate,
    pub directory: PathBuf,
    /// The root wheel in the directory.
    pub wheel_path: PathBuf,
    pub capability_id: String,
    pub manifest: Value,
    /// What `capability.python.json` holds.
    pub binding: PythonBinding,
}

impl PythonForge {
    /// `{substrate: "pypi", artifact, candidate, directory, wheelPath, capabilityId, manifest,
    /// authority: {complete: false, effects}, dependencies, files: {manifest, binding}}`.
    pub fn to_json(&self) -> Value {
        json!({
            "substrate": SUBSTRATE,
            "artifact": self.artifact.to_json(),
            "candidate": self.candidate.to_json(),
            "directory": self.directory.to_string_lossy(),
            "wheelPath": self.wheel_path.to_string_lossy(),
            "capabilityId": self.capability_id,
            "manifest": self.manifest,
            "authority": {"complete": false, "effects": FORGED_EFFECTS},
            "dependencies": self.binding.dependencies.iter().map(BoundWheel::to_json).collect::<Vec<_>>(),
            "files": {"manifest": MANIFEST_FILE, "binding": BINDING_FILE},
        })
    }
}

/// The reference's PyPI slug: lowercase, runs of anything but `[a-z0-9]` → `-`, trimmed, then
/// cut to 72 characters (as in the reference, a cut can leave a trailing `-`),
/// `python-ability` when nothing is left.
pub fn pypi_slug(value: &str) -> String {
    let mut out = String::new();
    let mut dash = false;
    for c in value.to_lowercase().chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            if dash && !out.is_empty() {
                out.push('-');
            }
            dash = false;
            out.push(c);
        } else {
            dash = true;
        }
    }
    out.truncate(72);
    if out.is_empty() {
        "python-ability".into()
    } else {
        out
    }
}

/// `forged/python/<slug(package)>/<slug(symbol)>`.
pub fn capability_id(package: &str, symbol: &str) -> String {
    format!("forged/python/{}/{}", pypi_slug(package), pypi_slug(symbol))
}

/// The manifest of a forged candidate (see the module docs).
pub fn forged_manifest(inspection: &Inspection, candidate: &PythonCandidate) -> Value {
    let id = capability_id(&inspection.name, &candidate.symbol);
    let shown = candidate.script.as_deref().unwrap_or(&candidate.symbol);
    let what = match candidate.kind {
        CandidateKind::Function => {
            format!("the function {}:{}", candidate.module, candidate.symbol)
        }
        CandidateKind::ConsoleScript => format!(
            "the console script {shown} ({}:{})",
            candidate.module, candidate.symbol
        ),
    };
    json!({
        "specVersion": "0.1",
        "id": id,
        "version": "1.0.0",
        "name": format!("{shown} ({}) — forged", inspection.name),
        "description": format!(
            "Capability Forge binding for {what} from the PyPI wheel {}, pinned to {}@{} sha256:{}.",
            inspection.wheel.filename, inspection.name, inspection.version, inspection.wheel.sha256
        ),
        "input": {
            "type": "object",
            "properties": {
                "args": {"type": "array", "description": "Positional arguments (a console script's argv)."},
                "kwargs": {"type": "object", "description": "Keyword arguments (functions only)."},
            },
            "required": ["args"],
        },
        "output": {
            "type": "object",
            "properties": {"result": {"description": "The JSON value the call returned."}},
            "required": ["result"],
        },
        "effects": FORGED_EFFECTS,
        "behavior": {"deterministic": false, "idempotent": false, "reversible": false},
        "tags": ["forged", "python", "pypi", "artifact-bound"],
        "metadata": {
            "forged": true,
            "substrate": SUBSTRATE,
            "binderVersion": BINDER_VERSION,
            "package": inspection.name,
            "packageVersion": inspection.version,
            "wheel": inspection.wheel.filename,
            "artifactSha256": inspection.wheel.sha256,
            "module": candidate.module,
            "symbol": candidate.symbol,
            "authorityComplete": false,
        },
    })
}

/// The candidate `selection` picks from a report (see the module docs).
pub fn select_candidate(
    report: &MiningReport,
    selection: &Selection,
) -> Result<PythonCandidate, PypiError> {
    let module = selection.module.as_deref().filter(|m| !m.is_empty());
    let symbol = selection.symbol.as_deref().filter(|s| !s.is_empty());
    if let Some(found) = report.candidates.iter().find(|c| {
        // A console script is also found by its script name (`--symbol calc`).
        let named = |s: &str| c.symbol == s || c.script.as_deref() == Some(s);
        module.is_none_or(|m| c.module == m) && symbol.is_none_or(named)
    }) {
        return Ok(found.clone());
    }
    let listed: Vec<String> = report
        .candidates
        .iter()
        .take(20)
        .map(|c| format!("{}:{}", c.module, c.symbol))
        .collect();
    let release = format!("{} {}", report.artifact.name, report.artifact.version);
    Err(PypiError::new(
        PypiErrorKind::NotFound,
        if report.candidates.is_empty() {
            format!("{release} has no console script and no public top-level function to bind")
        } else {
            format!(
                "no candidate of {release} matches module {} and symbol {}; candidates: {}",
                module.unwrap_or("(any)"),
                symbol.unwrap_or("(any)"),
                listed.join(", ")
            )
        },
    ))
}

/// Forges `options.package` from the index: inspect, download (verified), resolve the
/// dependency closure, then mine and write as [`forge_wheel`] does.
pub fn forge(index: &Index, options: &ForgeOptions) -> Result<PythonForge, PypiError> {
    let inspection = index.inspect(&options.package, options.version.as_deref())?;
    let wheel = super::mine::fetch(index, &inspection)?;
    let cache_dir = index.config().cache_dir.clone();
    let resolved = super::resolve::resolve(index, &inspection, &wheel, &cache_dir)?;
    let dependencies: Vec<LocalWheel> = resolved
        .into_iter()
        .map(|r| LocalWheel {
            inspection: r.inspection,
            path: r.path,
            required_by: vec![r.required_by],
        })
        .collect();
    let selection = Selection {
        query: options.query.clone(),
        module: options.module.clone(),
        symbol: options.symbol.clone(),
    };
    let (root, candidate) = mine_and_select(&wheel, &inspection, &selection)?;
    let directory = match &options.directory {
        Some(dir) => dir.clone(),
        None => {
            let dir = cache_dir.join("forged").join(format!(
                "{}-{}-{}-{}",
                pypi_slug(&inspection.name),
                pypi_slug(&inspection.version),
                pypi_slug(&candidate.module),
                pypi_slug(&candidate.symbol)
            ));
            if dir.join(BINDING_FILE).is_file() {
                std::fs::remove_dir_all(&dir).map_err(|e| {
                    PypiError::new(
                        PypiErrorKind::Io,
                        format!("cannot replace the earlier forge {}: {e}", dir.display()),
                    )
                })?;
            }
            dir
        }
    };
    write_forge(&root, &inspection, &dependencies, candidate, &directory)
}

/// Forges a local wheel whose bytes have the sha256 `inspection` names, with its dependency
/// closure (each verified against its own inspection), into `directory`.
pub fn forge_wheel(
    wheel: &Path,
    inspection: &Inspection,
    dependencies: &[LocalWheel],
    selection: &Selection,
    directory: &Path,
) -> Result<PythonForge, PypiError> {
    let (root, candidate) = mine_and_select(wheel, inspection, selection)?;
    write_forge(&root, inspection, dependencies, candidate, directory)
}

/// The root wheel's bytes, read and checked once, and the candidate `selection` picks from
/// their mining; the same bytes are the ones the forge writes.
fn mine_and_select(
    wheel: &Path,
    inspection: &Inspection,
    selection: &Selection,
) -> Result<(Vec<u8>, PythonCandidate), PypiError> {
    let bytes = read_wheel(wheel, inspection, MAX_FORGED_WHEEL_BYTES)?;
    let report = mine_bytes(&bytes, inspection, selection.query.as_deref())?;
    let candidate = select_candidate(&report, selection)?;
    Ok((bytes, candidate))
}

/// Writes the forge of `candidate` into `directory`: the root wheel's `root` bytes (already
/// checked against `inspection`), its verified dependencies, the manifest and the binding.
fn write_forge(
    root: &[u8],
    inspection: &Inspection,
    dependencies: &[LocalWheel],
    candidate: PythonCandidate,
    directory: &Path,
) -> Result<PythonForge, PypiError> {
    let io = |what: &str, path: &Path, e: std::io::Error| {
        PypiError::new(
            PypiErrorKind::Io,
            format!("cannot {what} {}: {e}", path.display()),
        )
    };
    match std::fs::read_dir(directory) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(PypiError::new(
                    PypiErrorKind::Invalid,
                    format!(
                        "{} is not empty: a forge writes into a new or empty directory",
                        directory.display()
                    ),
                ));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(directory).map_err(|e| io("create", directory, e))?;
        }
        Err(e) => return Err(io("read", directory, e)),
    }
    let root_name = wheel_filename(&inspection.wheel)?.to_string();
    write_file(&directory.join(&root_name), root)?;
    let mut bound = Vec::new();
    for dep in dependencies {
        let name = copy_verified(&dep.path, &dep.inspection.wheel, directory)?;
        if name == root_name || bound.iter().any(|b: &BoundWheel| b.wheel == name) {
            return Err(PypiError::new(
                PypiErrorKind::Dependency,
                format!("the closure names the wheel {name} twice"),
            ));
        }
        bound.push(BoundWheel {
            package: dep.inspection.name.clone(),
            version: dep.inspection.version.clone(),
            wheel: name,
            sha256: dep.inspection.wheel.sha256.to_ascii_lowercase(),
            required_by: dep.required_by.clone(),
        });
    }
    let manifest = forged_manifest(inspection, &candidate);
    let issues = capability_core::validate_manifest(&manifest);
    if !issues.is_empty() {
        return Err(PypiError::new(
            PypiErrorKind::Invalid,
            format!("the forged manifest is invalid: {}", issues.join("; ")),
        ));
    }
    let capability_id = capability_id(&inspection.name, &candidate.symbol);
    let binding = PythonBinding {
        capability_id: capability_id.clone(),
        package: inspection.name.clone(),
        version: inspection.version.clone(),
        wheel: root_name.clone(),
        sha256: inspection.wheel.sha256.to_ascii_lowercase(),
        tag: inspection.tag.clone(),
        module: candidate.module.clone(),
        symbol: candidate.symbol.clone(),
        kind: candidate.kind,
        script: candidate.script.clone(),
        candidate: candidate.clone(),
        dependencies: bound,
        inspection: inspection.to_json(),
        forged_at: capability_core::js::now_iso(),
    };
    write_json(&directory.join(MANIFEST_FILE), &manifest)?;
    write_json(&directory.join(BINDING_FILE), &binding.to_json())?;
    Ok(PythonForge {
        artifact: inspection.clone(),
        candidate,
        directory: directory.to_path_buf(),
        wheel_path: directory.join(&root_name),
        capability_id,
        manifest,
        binding,
    })
}

fn write_json(path: &Path, value: &Value) -> Result<(), PypiError> {
    let mut text = serde_json::to_string_pretty(value).map_err(|e| {
        PypiError::new(
            PypiErrorKind::Invalid,
            format!("cannot serialize {}: {e}", path.display()),
        )
    })?;
    text.push('\n');
    write_file(path, text.as_bytes())
}

/// The wheel's filename, once it is a plain `.whl` file name.
fn wheel_filename(wheel: &WheelRef) -> Result<&str, PypiError> {
    if !is_plain_file_name(&wheel.filename) || !wheel.filename.ends_with(".whl") {
        return Err(PypiError::new(
            PypiErrorKind::Invalid,
            format!("{:?} is not a wheel filename", wheel.filename),
        ));
    }
    Ok(&wheel.filename)
}

/// Copies `source` into `directory` under the index's filename once its bytes have the
/// sha256 `wheel` names; the filename.
fn copy_verified(source: &Path, wheel: &WheelRef, directory: &Path) -> Result<String, PypiError> {
    let name = wheel_filename(wheel)?;
    let bytes = read_with_sha256(source, MAX_FORGED_WHEEL_BYTES, &wheel.sha256, |actual| {
        format!(
            "{} has sha256 {actual}, but the index names sha256 {} for {name}",
            source.display(),
            wheel.sha256,
        )
    })?;
    write_file(&directory.join(name), &bytes)?;
    Ok(name.to_string())
}

/// Reads an existing forge directory back ([`BINDING_FILE`] and [`MANIFEST_FILE`]), with
/// every wheel re-hashed.
pub fn load_forge(directory: &Path) -> Result<PythonForge, PypiError> {
    let binding = PythonBinding::load(directory)?;
    let manifest = read_json(&directory.join(MANIFEST_FILE))?;
    let issues = capability_core::validate_manifest(&manifest);
    if !issues.is_empty() {
        return Err(PypiError::new(
            PypiErrorKind::Invalid,
            format!("{MANIFEST_FILE} is invalid: {}", issues.join("; ")),
        ));
    }
    if manifest.get("id").and_then(Value::as_str) != Some(binding.capability_id.as_str()) {
        return Err(PypiError::new(
            PypiErrorKind::Invalid,
            format!("{MANIFEST_FILE} and {BINDING_FILE} name different capabilities"),
        ));
    }
    for (wheel, sha256) in binding.wheels() {
        super::run::read_verified(directory, wheel, sha256)?;
    }
    let artifact = inspection_from_json(&binding.inspection, &binding.tag).ok_or_else(|| {
        PypiError::new(
            PypiErrorKind::Invalid,
            format!("{BINDING_FILE} has no valid inspection"),
        )
    })?;
    if artifact.wheel.sha256.to_ascii_lowercase() != binding.sha256
        || artifact.name != binding.package
        || artifact.version != binding.version
    {
        return Err(PypiError::new(
            PypiErrorKind::Invalid,
            format!("{BINDING_FILE}: the inspection names another artifact than the binding"),
        ));
    }
    Ok(PythonForge {
        wheel_path: directory.join(&binding.wheel),
        capability_id: binding.capability_id.clone(),
        candidate: binding.candidate.clone(),
        artifact,
        directory: directory.to_path_buf(),
        manifest,
        binding,
    })
}

/// The [`Inspection`] of [`Inspection::to_json`] (the tag is not part of it).
pub fn inspection_from_json(v: &Value, tag: &str) -> Option<Inspection> {
    let s = |key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
    let w = v.get("wheel")?;
    let ws = |key: &str| w.get(key).and_then(Value::as_str).map(str::to_string);
    Some(Inspection {
        name: s("name")?,
        version: s("version")?,
        summary: s("summary"),
        requires_python: s("requiresPython"),
        project_urls: v
            .get("projectUrls")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, x)| x.as_str().map(|x| (k.clone(), x.to_string())))
                    .collect()
            })
            .unwrap_or_default(),
        wheel: WheelRef {
            filename: ws("filename")?,
            url: ws("url").unwrap_or_default(),
            sha256: ws("sha256")?,
            size: w.get("size").and_then(Value::as_u64),
        },
        vulnerabilities: v
            .get("vulnerabilities")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        tag: tag.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_follow_the_pypi_rules() {
        assert_eq!(pypi_slug("My_Package.Name"), "my-package-name");
        assert_eq!(pypi_slug("__main__"), "main");
        assert_eq!(pypi_slug("--"), "python-ability");
        assert_eq!(pypi_slug(&"a".repeat(100)).len(), 72);
        assert_eq!(
            pypi_slug(&format!("{}-b", "a".repeat(71))),
            format!("{}-", "a".repeat(71))
        );
        assert_eq!(capability_id("Calc", "add"), "forged/python/calc/add");
    }
}
