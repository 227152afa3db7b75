//! One execution of a forged Python function or console script in the process sandbox.
//!
//! The reference builds a Docker image and `pip install`s the wheel; here nothing is installed
//! and no engine is needed. Each run, in order:
//!
//! 1. **Approval.** [`RunOptions::approved`] must be true ("PyPI first execution requires
//!    explicit approval"): the binding's authority is incomplete, so a person (or the
//!    registry's approval gate) decides.
//! 2. **Digests.** `capability.python.json` names every wheel of the bound closure with its
//!    sha256. Each wheel in the forge directory is read once into memory and hashed; any
//!    mismatch is a [`PypiErrorKind::Digest`] refusal and nothing runs. The same bytes that
//!    were hashed are the bytes unpacked, so a wheel swapped on disk after the check cannot
//!    slip in.
//! 3. **A private package root.** A fresh directory in the temp dir (its outer directory
//!    `0700`) receives every wheel unpacked under `_wheels/<n>/` and the embedded runner
//!    (`runner.py`) as `_capability_pypi_runner.py`. Zip entries are checked first: no absolute
//!    paths, no `..` or `.` components, no backslashes or NUL, no symlinks, no duplicates, at
//!    most [`MAX_ENTRIES`] entries and [`MAX_UNPACKED_BYTES`] unpacked (sizes are enforced
//!    while reading, not trusted from headers). Everything is then made read-only (`0444`
//!    files, `0555` directories) and the whole root is removed after the run.
//! 4. **The sandbox.** The runner runs as a Python module in `capability-sandbox`'s process
//!    sandbox with no grants at all: an empty network namespace and no sockets, no new
//!    processes, no environment, no host paths besides the system directories and the
//!    read-only package root; the timeout of [`RunOptions::timeout`] (30 s by default, also
//!    the CPU limit) and 512 MiB of memory.
//! 5. **The call.** The runner appends the unpacked wheels to `sys.path`, imports `module` and
//!    calls `fn(*args, **kwargs)`; a console script gets `sys.argv = [script, *map(str, args)]`
//!    and is called without arguments, its `SystemExit` caught as the exit code. The guest's
//!    `sys.stdout` is captured (and its fd 1 points at stderr while it runs) so it cannot
//!    corrupt the sandbox protocol. A result that is not JSON-serializable is a failure that
//!    says so.
//!
//! # Observed effects
//!
//! Before importing the wheel the runner installs a Python audit hook (`sys.addaudithook`)
//! and wraps `os.environ`, `open`, `os.open`, the socket constructor and `connect`,
//! `subprocess.Popen`, `os.system`, `os.fork`, `os.exec*` and `os.posix_spawn*`, so the
//! receipt lists what the guest **attempted**: [`ObservedEffect`] `{kind, target, allowed,
//! observer: "python-audit-hook", scratch?}` with kinds `file.read`, `file.write` (opens
//! outside its own unpacked tree and the interpreter's prefix; `/tmp`, the sandbox's private
//! scratch, is marked `scratch: true`), `network.connect` (connects and refused socket
//! creation), `process.spawn` and `environment.read`. `allowed` is false when the attempt
//! raised (the sandbox refused it, or it failed otherwise). They are reported for failed calls
//! too. Honest limits: the hook lives inside the guest's own interpreter, so a native
//! extension (or code that tampers with the interpreter) can act without being observed;
//! the sandbox enforces the boundary regardless, and observed effects never make the
//! authority complete. A run the sandbox kills (timeout, memory) reports none: the record
//! dies with the guest. The sandbox's `/etc/passwd` is synthetic, but reading it is still an
//! observed `file.read`.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use capability_core::json::sha256_hex;
use capability_sandbox::{
    Grants, Invocation, Limits, ModuleSpec, ProcessLimits, ProcessSandbox, SandboxError,
};
use serde_json::{Map, Value, json};

use super::forge::{BoundWheel, MANIFEST_FILE, PythonBinding};
use super::mine::CandidateKind;
use super::{BINDER_VERSION, PypiError, PypiErrorKind, SUBSTRATE};

/// The refusal of a run without approval.
pub const APPROVAL_REQUIRED: &str = "PyPI first execution requires explicit approval";
/// The wall clock (and CPU) limit of a run unless [`RunOptions::timeout`] says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The memory of the whole sandbox.
pub const MEMORY_LIMIT: u64 = 512 << 20;
/// The most entries one wheel may have.
pub const MAX_ENTRIES: usize = 50_000;
/// The most bytes all wheels of a run may unpack to.
pub const MAX_UNPACKED_BYTES: u64 = 1 << 30;
/// The largest wheel file a run reads.
pub const MAX_WHEEL_BYTES: u64 = 256 << 20;
/// The `isolation` label of the receipt.
pub const ISOLATION: &str = "process-sandbox";
/// The file name of the embedded runner in the package root.
const RUNNER_FILE: &str = "_capability_pypi_runner.py";
const RUNNER_SOURCE: &str = include_str!("runner.py");
/// The most of the guest's stderr a failed receipt keeps (its end).
const STDERR_KEEP: usize = 16 * 1024;

/// How one run is allowed to go.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Explicit approval: without it nothing runs.
    pub approved: bool,
    /// Wall clock and CPU time of the sandbox.
    pub timeout: Duration,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            approved: false,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunStatus {
    Succeeded,
    Failed,
}

impl RunStatus {
    /// `succeeded` or `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
        }
    }
}

/// Something the guest was seen to attempt (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedEffect {
    /// `file.read`, `file.write`, `network.connect`, `process.spawn` or `environment.read`.
    pub kind: String,
    /// The path, `host:port`, command line or variable name.
    pub target: String,
    /// False when the attempt raised (refused by the sandbox, or failed otherwise).
    pub allowed: bool,
    /// True for paths in the sandbox's private `/tmp`.
    pub scratch: bool,
    /// Always `python-audit-hook`.
    pub observer: String,
}

impl ObservedEffect {
    /// `{kind, target, allowed, observer, scratch?}`.
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "kind": self.kind,
            "target": self.target,
            "allowed": self.allowed,
            "observer": self.observer,
        });
        if self.scratch {
            v["scratch"] = json!(true);
        }
        v
    }

    fn from_json(v: &Value) -> Option<ObservedEffect> {
        Some(ObservedEffect {
            kind: v.get("kind")?.as_str()?.to_string(),
            target: v.get("target")?.as_str()?.to_string(),
            allowed: v.get("allowed")?.as_bool()?,
            scratch: v.get("scratch").and_then(Value::as_bool).unwrap_or(false),
            observer: v
                .get("observer")
                .and_then(Value::as_str)
                .unwrap_or("python-audit-hook")
                .to_string(),
        })
    }
}

/// One execution: the `PythonExecutionReceipt` (see [`PythonExecution::to_json`]).
#[derive(Clone, Debug, PartialEq)]
pub struct PythonExecution {
    pub package: String,
    pub version: String,
    /// The root wheel's filename.
    pub wheel: String,
    pub artifact_sha256: String,
    /// The other wheels of the bound closure, each re-hashed before the run.
    pub dependencies: Vec<BoundWheel>,
    pub module: String,
    pub symbol: String,
    pub kind: CandidateKind,
    /// The boundary report of the sandbox run (`SandboxReport` as JSON), `null` if the run
    /// never entered it.
    pub sandbox: Value,
    pub started_at: String,
    pub finished_at: String,
    pub status: RunStatus,
    /// The function's return value (succeeded runs), or `{exitCode, stdout}` of a console
    /// script.
    pub result: Option<Value>,
    /// Why the run failed: the guest's exception, a non-zero exit, or the sandbox's reason.
    pub error: Option<String>,
    /// The exception type, or the sandbox's error kind (`timeout`, `memory_limit`, ...).
    pub error_kind: Option<String>,
    /// The guest's traceback and the end of its stderr (failed runs).
    pub stderr: Option<String>,
    /// What the function printed (captured, at most 64 KiB).
    pub stdout: String,
    pub observed_effects: Vec<ObservedEffect>,
    /// True when the guest attempted more than the runner records.
    pub observed_effects_truncated: bool,
}

impl PythonExecution {
    /// The `{"result": …}` output of a succeeded run.
    pub fn output(&self) -> Option<Value> {
        match (self.status, &self.result) {
            (RunStatus::Succeeded, Some(result)) => Some(json!({"result": result})),
            _ => None,
        }
    }

    /// The `PythonExecutionReceipt`: `{substrate: "pypi", binderVersion, package, version,
    /// wheel, artifactSha256, artifactVerified: true, dependencies: [{package, version, wheel,
    /// sha256}], module, symbol, kind, isolation: "process-sandbox", network: "none",
    /// dependencyPolicy: "bound-closure"|"no-deps", sandbox, startedAt, finishedAt, status,
    /// result? | error?, errorKind?, stderr?, stdout?, observedEffects,
    /// observedEffectsTruncated?}`.
    pub fn to_json(&self) -> Value {
        let mut v = Map::new();
        v.insert("substrate".into(), json!(SUBSTRATE));
        v.insert("binderVersion".into(), json!(BINDER_VERSION));
        v.insert("package".into(), json!(self.package));
        v.insert("version".into(), json!(self.version));
        v.insert("wheel".into(), json!(self.wheel));
        v.insert("artifactSha256".into(), json!(self.artifact_sha256));
        v.insert("artifactVerified".into(), json!(true));
        v.insert(
            "dependencies".into(),
            Value::Array(
                self.dependencies
                    .iter()
                    .map(|d| {
                        json!({"package": d.package, "version": d.version, "wheel": d.wheel,
                               "sha256": d.sha256})
                    })
                    .collect(),
            ),
        );
        v.insert("module".into(), json!(self.module));
        v.insert("symbol".into(), json!(self.symbol));
        v.insert("kind".into(), json!(self.kind.as_str()));
        v.insert("isolation".into(), json!(ISOLATION));
        v.insert("network".into(), json!("none"));
        v.insert(
            "dependencyPolicy".into(),
            json!(if self.dependencies.is_empty() {
                "no-deps"
            } else {
                "bound-closure"
            }),
        );
        v.insert("sandbox".into(), self.sandbox.clone());
        v.insert("startedAt".into(), json!(self.started_at));
        v.insert("finishedAt".into(), json!(self.finished_at));
        v.insert("status".into(), json!(self.status.as_str()));
        if let Some(result) = &self.result {
            v.insert("result".into(), result.clone());
        }
        if let Some(error) = &self.error {
            v.insert("error".into(), json!(error));
        }
        if let Some(kind) = &self.error_kind {
            v.insert("errorKind".into(), json!(kind));
        }
        if let Some(stderr) = &self.stderr {
            v.insert("stderr".into(), json!(stderr));
        }
        if !self.stdout.is_empty() {
            v.insert("stdout".into(), json!(self.stdout));
        }
        v.insert(
            "observedEffects".into(),
            Value::Array(
                self.observed_effects
                    .iter()
                    .map(ObservedEffect::to_json)
                    .collect(),
            ),
        );
        if self.observed_effects_truncated {
            v.insert("observedEffectsTruncated".into(), json!(true));
        }
        Value::Object(v)
    }
}

/// The arguments of a call: an array (`args`), `{args?, kwargs?}`, or `null` (no arguments).
pub fn call_arguments(input: &Value) -> Result<(Vec<Value>, Map<String, Value>), PypiError> {
    let invalid = |m: &str| PypiError::new(PypiErrorKind::Invalid, m);
    match input {
        Value::Null => Ok((Vec::new(), Map::new())),
        Value::Array(args) => Ok((args.clone(), Map::new())),
        Value::Object(o) => {
            if let Some(key) = o.keys().find(|k| *k != "args" && *k != "kwargs") {
                return Err(invalid(&format!(
                    "input has an unknown field {key:?}: expected an array of arguments or {{args, kwargs}}"
                )));
            }
            let args = match o.get("args") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(a)) => a.clone(),
                Some(_) => return Err(invalid("input.args must be an array")),
            };
            let kwargs = match o.get("kwargs") {
                None | Some(Value::Null) => Map::new(),
                Some(Value::Object(k)) => k.clone(),
                Some(_) => return Err(invalid("input.kwargs must be an object")),
            };
            Ok((args, kwargs))
        }
        _ => Err(invalid(
            "input must be an array of arguments or an object {args, kwargs}",
        )),
    }
}

/// Runs the forged function of `directory` once with `input` (an array of arguments or
/// `{args, kwargs}`). `Err` only when the run was refused before anything ran (no approval,
/// an unreadable forge, a wheel whose digest changed, an unsafe archive, a sandbox that could
/// not start); a function that raised, a non-zero exit and a limit are `Ok` with status
/// failed.
pub fn execute(
    directory: &Path,
    input: &Value,
    options: &RunOptions,
) -> Result<PythonExecution, PypiError> {
    if !options.approved {
        return Err(PypiError::new(PypiErrorKind::Sandbox, APPROVAL_REQUIRED));
    }
    let binding = PythonBinding::load(directory)?;
    execute_binding(directory, &binding, input, options.timeout)
}

/// [`execute`] once approved, with `binding` already loaded from `directory` (the binder
/// has read it to check the binding it runs).
pub(crate) fn execute_binding(
    directory: &Path,
    binding: &PythonBinding,
    input: &Value,
    timeout: Duration,
) -> Result<PythonExecution, PypiError> {
    let manifest = read_json(&directory.join(MANIFEST_FILE))?;
    let (args, kwargs) = call_arguments(input)?;
    if binding.kind == CandidateKind::ConsoleScript && !kwargs.is_empty() {
        return Err(PypiError::new(
            PypiErrorKind::Invalid,
            "a console script takes positional arguments only (its argv); kwargs are not accepted",
        ));
    }
    // Every wheel is read and hashed before anything is unpacked; the hashed bytes are the
    // ones unpacked.
    let mut wheels = Vec::new();
    for (filename, sha256) in binding.wheels() {
        let bytes = read_verified(directory, filename, sha256)?;
        wheels.push((filename.to_string(), bytes));
    }
    let root = ScratchRoot::new("run")?;
    let mut paths = Vec::new();
    let mut budget = MAX_UNPACKED_BYTES;
    for (n, (filename, bytes)) in wheels.iter().enumerate() {
        let rel = format!("_wheels/{n}");
        let dest = root.package.join(&rel);
        let extras = unpack_wheel(bytes, &dest, &mut budget)
            .map_err(|e| PypiError::new(e.kind, format!("{filename}: {}", e.message)))?;
        paths.push(rel.clone());
        for extra in extras {
            paths.push(format!("{rel}/{extra}"));
        }
    }
    write_file(&root.package.join(RUNNER_FILE), RUNNER_SOURCE.as_bytes())?;
    root.seal()?;

    let request = json!({
        "module": binding.module,
        "symbol": binding.symbol,
        "kind": binding.kind.as_str(),
        "script": binding.script,
        "args": args,
        "kwargs": kwargs,
        "paths": paths,
    });
    let started_at = capability_core::js::now_iso();
    let ran = sandbox_run(&root.package, RUNNER_FILE, manifest, request, timeout)?;
    let finished_at = capability_core::js::now_iso();
    drop(root);

    let mut exec = PythonExecution {
        package: binding.package.clone(),
        version: binding.version.clone(),
        wheel: binding.wheel.clone(),
        artifact_sha256: binding.sha256.clone(),
        dependencies: binding.dependencies.clone(),
        module: binding.module.clone(),
        symbol: binding.symbol.clone(),
        kind: binding.kind,
        sandbox: ran.sandbox,
        started_at,
        finished_at,
        status: RunStatus::Failed,
        result: None,
        error: None,
        error_kind: None,
        stderr: None,
        stdout: String::new(),
        observed_effects: Vec::new(),
        observed_effects_truncated: false,
    };
    match ran.result {
        Ok(answer) => apply_answer(&mut exec, &answer, &ran.stderr),
        Err(e) => {
            exec.error = Some(format!("the sandbox ended the run: {e}"));
            exec.error_kind = Some(e.kind().to_string());
            exec.stderr = non_empty(tail(&ran.stderr, STDERR_KEEP));
        }
    }
    Ok(exec)
}

/// Fills an execution from the runner's answer.
fn apply_answer(exec: &mut PythonExecution, answer: &Value, stderr: &str) {
    exec.stdout = answer
        .get("stdout")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    exec.observed_effects = answer
        .get("observedEffects")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(ObservedEffect::from_json).collect())
        .unwrap_or_default();
    exec.observed_effects_truncated = answer
        .get("observedEffectsTruncated")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if answer.get("ok") != Some(&Value::Bool(true)) {
        let error = answer.get("error");
        exec.error = Some(
            error
                .and_then(|e| e.get("message"))
                .and_then(Value::as_str)
                .unwrap_or("the call failed without a message")
                .to_string(),
        );
        exec.error_kind = error
            .and_then(|e| e.get("type"))
            .and_then(Value::as_str)
            .map(str::to_string);
        let traceback = error
            .and_then(|e| e.get("traceback"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut text = tail(stderr, STDERR_KEEP).to_string();
        if !traceback.is_empty() {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(traceback);
        }
        exec.stderr = non_empty(&text);
        return;
    }
    match exec.kind {
        CandidateKind::Function => {
            exec.result = Some(answer.get("result").cloned().unwrap_or(Value::Null));
            exec.status = RunStatus::Succeeded;
        }
        CandidateKind::ConsoleScript => {
            let code = answer.get("exitCode").and_then(Value::as_i64).unwrap_or(1);
            exec.result = Some(json!({"exitCode": code, "stdout": exec.stdout}));
            if code == 0 {
                exec.status = RunStatus::Succeeded;
            } else {
                exec.error = Some(format!("the console script exited with code {code}"));
                exec.error_kind = Some("SystemExit".into());
                exec.stderr = non_empty(tail(stderr, STDERR_KEEP));
            }
        }
    }
}

fn non_empty(s: &str) -> Option<String> {
    (!s.trim().is_empty()).then(|| s.to_string())
}

/// The last `max` bytes of `s` (at a character boundary).
fn tail(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// A wheel's bytes from `directory`, checked against `sha256` (a [`PypiErrorKind::Digest`]
/// refusal otherwise). `filename` must be a plain file name.
pub(crate) fn read_verified(
    directory: &Path,
    filename: &str,
    sha256: &str,
) -> Result<Vec<u8>, PypiError> {
    if !is_plain_file_name(filename) {
        return Err(PypiError::new(
            PypiErrorKind::Invalid,
            format!("the forge names a wheel {filename:?} that is not a plain file name"),
        ));
    }
    let path = directory.join(filename);
    read_with_sha256(&path, MAX_WHEEL_BYTES, sha256, |actual| {
        format!(
            "{} has sha256 {actual}, but the forge bound sha256 {sha256}: the wheel changed after forging; nothing ran",
            path.display()
        )
    })
}

/// A regular file's bytes (at most `max`) once they hash to `sha256` (any case); otherwise a
/// [`PypiErrorKind::Digest`] refusal whose message `mismatch` makes from the actual digest.
pub(crate) fn read_with_sha256(
    path: &Path,
    max: u64,
    sha256: &str,
    mismatch: impl FnOnce(&str) -> String,
) -> Result<Vec<u8>, PypiError> {
    let bytes = read_limited(path, max)?;
    let actual = sha256_hex(&bytes);
    if !actual.eq_ignore_ascii_case(sha256) {
        return Err(PypiError::new(PypiErrorKind::Digest, mismatch(&actual)));
    }
    Ok(bytes)
}

/// Whether `name` is one path component without separators, `..` or NUL.
pub(crate) fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0'])
}

/// A regular file's bytes, at most `max` of them.
pub(crate) fn read_limited(path: &Path, max: u64) -> Result<Vec<u8>, PypiError> {
    let io = |e: std::io::Error| {
        PypiError::new(
            PypiErrorKind::Io,
            format!("cannot read {}: {e}", path.display()),
        )
    };
    let meta = std::fs::symlink_metadata(path).map_err(io)?;
    if !meta.file_type().is_file() {
        return Err(PypiError::new(
            PypiErrorKind::Invalid,
            format!("{} is not a regular file", path.display()),
        ));
    }
    if meta.len() > max {
        return Err(PypiError::new(
            PypiErrorKind::Invalid,
            format!(
                "{} has {} bytes, more than the {max} accepted",
                path.display(),
                meta.len()
            ),
        ));
    }
    let file = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > max {
        return Err(PypiError::new(
            PypiErrorKind::Invalid,
            format!("{} grew beyond {max} bytes while read", path.display()),
        ));
    }
    Ok(bytes)
}

pub(crate) fn read_json(path: &Path) -> Result<Value, PypiError> {
    let bytes = read_limited(path, 16 << 20)?;
    serde_json::from_slice(&bytes).map_err(|e| {
        PypiError::new(
            PypiErrorKind::Invalid,
            format!("{} is not valid JSON: {e}", path.display()),
        )
    })
}

pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> Result<(), PypiError> {
    std::fs::write(path, bytes).map_err(|e| {
        PypiError::new(
            PypiErrorKind::Io,
            format!("cannot write {}: {e}", path.display()),
        )
    })
}

/// Unpacks a wheel's bytes into `dest` (created), checking every entry, and returns the
/// `<name>.data/{purelib,platlib}` directories it holds (relative to `dest`). `budget` is the
/// unpacked bytes still allowed; it is decreased.
pub(crate) fn unpack_wheel(
    bytes: &[u8],
    dest: &Path,
    budget: &mut u64,
) -> Result<Vec<String>, PypiError> {
    let invalid = |m: String| PypiError::new(PypiErrorKind::Invalid, m);
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| invalid(format!("not a readable zip archive: {e}")))?;
    if archive.len() > MAX_ENTRIES {
        return Err(invalid(format!(
            "{} entries, more than the {MAX_ENTRIES} accepted",
            archive.len()
        )));
    }
    create_dir(dest)?;
    let mut extras = Vec::new();
    for i in 0..archive.len() {
        let mut entry = archive
            .by_index(i)
            .map_err(|e| invalid(format!("entry {i} cannot be read: {e}")))?;
        let name = entry
            .name()
            .map_err(|e| invalid(format!("entry {i} has an unreadable name: {e}")))?
            .into_owned();
        let components = safe_components(&name)
            .map_err(|why| invalid(format!("entry {name:?} is refused: {why}")))?;
        if entry.is_symlink() || entry.unix_mode().is_some_and(|m| m & 0o170000 == 0o120000) {
            return Err(invalid(format!("entry {name:?} is a symlink")));
        }
        let mut target = dest.to_path_buf();
        for c in &components {
            target.push(c);
        }
        if entry.is_dir() {
            create_dir(&target)?;
            continue;
        }
        if components.len() >= 3
            && components[0].ends_with(".data")
            && matches!(components[1].as_str(), "purelib" | "platlib")
        {
            let extra = format!("{}/{}", components[0], components[1]);
            if !extras.contains(&extra) {
                extras.push(extra);
            }
        }
        if let Some(parent) = target.parent() {
            create_dir(parent)?;
        }
        if entry.size() > *budget {
            return Err(invalid(format!(
                "entry {name:?} unpacks to {} bytes, beyond the {MAX_UNPACKED_BYTES} bytes a run may unpack",
                entry.size()
            )));
        }
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&target)
            .map_err(|e| {
                invalid(format!(
                    "entry {name:?} cannot be written (a duplicate entry?): {e}"
                ))
            })?;
        let mut writer = std::io::BufWriter::new(file);
        let written = std::io::copy(&mut (&mut entry).take(*budget + 1), &mut writer)
            .map_err(|e| invalid(format!("entry {name:?} cannot be unpacked: {e}")))?;
        if written > *budget {
            return Err(invalid(format!(
                "the wheels unpack to more than the {MAX_UNPACKED_BYTES} bytes a run may unpack"
            )));
        }
        *budget -= written;
        std::io::Write::flush(&mut writer).map_err(|e| {
            PypiError::new(
                PypiErrorKind::Io,
                format!("cannot write {}: {e}", target.display()),
            )
        })?;
    }
    Ok(extras)
}

/// The components of a zip entry name, or why it is refused.
fn safe_components(name: &str) -> Result<Vec<String>, &'static str> {
    if name.is_empty() {
        return Err("an empty name");
    }
    if name.contains('\0') {
        return Err("a NUL byte in the name");
    }
    if name.contains('\\') {
        return Err("a backslash in the name");
    }
    if name.starts_with('/') {
        return Err("an absolute path");
    }
    let trimmed = name.strip_suffix('/').unwrap_or(name);
    let mut out = Vec::new();
    for part in trimmed.split('/') {
        match part {
            "" => return Err("an empty path component"),
            "." => return Err("a `.` component"),
            ".." => return Err("a `..` component"),
            _ => out.push(part.to_string()),
        }
    }
    if out
        .first()
        .is_some_and(|c| c.len() >= 2 && c.as_bytes()[1] == b':')
    {
        return Err("a drive letter");
    }
    Ok(out)
}

fn create_dir(path: &Path) -> Result<(), PypiError> {
    std::fs::create_dir_all(path).map_err(|e| {
        PypiError::new(
            PypiErrorKind::Io,
            format!("cannot create {}: {e}", path.display()),
        )
    })
}

/// A private temporary directory (`0700`) holding the package root the sandbox mounts; the
/// whole tree is removed when it is dropped.
pub(crate) struct ScratchRoot {
    outer: PathBuf,
    /// The package root (`<outer>/package`).
    pub(crate) package: PathBuf,
}

impl ScratchRoot {
    pub(crate) fn new(purpose: &str) -> Result<ScratchRoot, PypiError> {
        use std::os::unix::fs::DirBuilderExt as _;
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let outer = std::env::temp_dir().join(format!(
            "capability-pypi-{purpose}-{}-{}-{nanos:x}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&outer)
            .map_err(|e| {
                PypiError::new(
                    PypiErrorKind::Io,
                    format!("cannot create {}: {e}", outer.display()),
                )
            })?;
        let root = ScratchRoot {
            package: outer.join("package"),
            outer,
        };
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create(&root.package)
            .map_err(|e| {
                PypiError::new(
                    PypiErrorKind::Io,
                    format!("cannot create {}: {e}", root.package.display()),
                )
            })?;
        Ok(root)
    }

    /// Makes the package root read-only for everyone (files `0444`, directories `0555`) and
    /// readable by the sandbox's user.
    pub(crate) fn seal(&self) -> Result<(), PypiError> {
        set_modes(&self.package, 0o444, 0o555).map_err(|e| {
            PypiError::new(
                PypiErrorKind::Io,
                format!("cannot make {} read-only: {e}", self.package.display()),
            )
        })
    }
}

impl Drop for ScratchRoot {
    fn drop(&mut self) {
        let _ = set_modes(&self.package, 0o644, 0o755);
        let _ = std::fs::remove_dir_all(&self.outer);
    }
}

/// Sets the mode of every file and directory under `root` (directories after their content).
fn set_modes(root: &Path, file_mode: u32, dir_mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let meta = std::fs::symlink_metadata(root)?;
    if meta.is_dir() {
        // Make it traversable first, so its entries can be changed.
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755))?;
        for entry in std::fs::read_dir(root)? {
            set_modes(&entry?.path(), file_mode, dir_mode)?;
        }
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(dir_mode))
    } else if meta.is_file() {
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(file_mode))
    } else {
        Ok(())
    }
}

/// What a sandboxed run of an embedded script gave back.
pub(crate) struct SandboxRun {
    pub(crate) result: Result<Value, SandboxError>,
    /// The `SandboxReport` as JSON.
    pub(crate) sandbox: Value,
    pub(crate) stderr: String,
}

/// Runs the embedded script `module_file` of `package` (already sealed) once in the process
/// sandbox with no grants, `timeout` of wall clock and CPU and [`MEMORY_LIMIT`].
pub(crate) fn sandbox_run(
    package: &Path,
    module_file: &str,
    manifest: Value,
    input: Value,
    timeout: Duration,
) -> Result<SandboxRun, PypiError> {
    let source = read_limited(&package.join(module_file), 1 << 20)?;
    let spec = ModuleSpec {
        package_root: package.to_path_buf(),
        install_root: None,
        module: format!("./{module_file}"),
        integrity: Some(sha256_hex(&source)),
        manifest,
    };
    let defaults = Limits::<ProcessLimits>::default();
    let limits = Limits {
        timeout,
        memory_bytes: MEMORY_LIMIT,
        boundary: ProcessLimits {
            cpu_time: timeout,
            ..defaults.boundary.clone()
        },
        ..defaults
    };
    let outcome = ProcessSandbox::global()
        .run(&spec, &Invocation::execute(input), &Grants::none(), &limits)
        .map_err(|e| {
            PypiError::new(
                PypiErrorKind::Sandbox,
                format!("the process sandbox refused to run {module_file}: {e}"),
            )
        })?;
    Ok(SandboxRun {
        sandbox: serde_json::to_value(&outcome.boundary).unwrap_or(Value::Null),
        result: outcome.result,
        stderr: outcome.stderr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names_are_checked() {
        assert!(safe_components("pkg/mod.py").is_ok());
        assert!(safe_components("pkg/").is_ok());
        for bad in [
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a/./b",
            "a//b",
            "a\\b",
            "C:/x",
            "",
        ] {
            assert!(safe_components(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn arguments_are_an_array_or_args_and_kwargs() {
        assert_eq!(
            call_arguments(&json!([1, 2])).map(|a| a.0),
            Ok(vec![json!(1), json!(2)])
        );
        let (args, kwargs) =
            call_arguments(&json!({"args": [1], "kwargs": {"b": 2}})).unwrap_or_default();
        assert_eq!(args, vec![json!(1)]);
        assert_eq!(kwargs.get("b"), Some(&json!(2)));
        assert!(call_arguments(&json!({"x": 1})).is_err());
        assert!(call_arguments(&json!("text")).is_err());
    }
}
