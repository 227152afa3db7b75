//! `capability/wasm-module`: a WASM module pinned by its sha256, from a file or an HTTP(S)
//! URL, bound with its declared exports and run on the WASM executor (`capability-wasm`)
//! with WASI preopens only as granted.
//!
//! ## Design
//!
//! A module is never bound by a mutable locator alone: the request names the source *and*
//! the SHA-256 the bytes must have. [`WasmBinder::bind`] then, in this order:
//!
//! 1. reads the bytes: a file under a size limit (refused from its size before it is read),
//!    or an `http(s)://` URL through the project's fetcher
//!    (`capability_acquire::fetch::Fetcher`, its tarball limit set to the module limit,
//!    private destinations only with `allowPrivate`);
//! 2. checks the SHA-256 **before anything parses the bytes**: a mismatch is refused with the
//!    expected and actual digests, and nothing is kept;
//! 3. reads the module's imports and exports (`wasmparser`, no validation) and refuses a
//!    module that does not speak the engine's ABI (`capability-wasi-p1/1`: a core module,
//!    not a component, exporting the function `_start` and the memory `memory`) or that
//!    imports anything but `wasi_snapshot_preview1` functions (each offending import named);
//! 4. has the engine compile and link it (an import the host does not provide, such
//!    as `sock_open`, is refused by name; a request `manifest` is compared with a manifest
//!    embedded in the module);
//! 5. keeps the verified bytes in the cache directory as `<cache>/<sha256>.wasm` (written to
//!    a temporary file and renamed: a reader never sees a partial module);
//! 6. returns a `MetabolicBinding` 1.0 whose authority is derived from what was requested:
//!    `filesystem.read` for read-only preopens, `filesystem.write` for writable ones, and
//!    always `custom:external.opaque-effects` with `complete: false`, because a module's
//!    behaviour is not proven by its exports.
//!
//! [`WasmBinder::execute`] loads the module from the cache by digest and verifies the bytes
//! again (a cached file changed on disk is refused), grants exactly the binding's preopens
//! (no environment, no network: WASI preview 1 has no socket creation anyway, and no process
//! API), and runs the `execute` op with the input under the binder's limits. A guest error
//! or a limit (fuel, timeout, memory, ...) is a `failed` execution carrying the engine's
//! boundary report, not an `Err`; `Err` means the run could not start (missing or changed
//! cache entry, inconsistent binding, engine refusal while loading).
//!
//! ## Request (`bind`)
//!
//! ```json
//! {
//!   "source": "/abs/or/relative/module.wasm | file:///... | https://host/module.wasm",
//!   "sha256": "<64 hex> (or sha256:<64 hex>)",
//!   "manifest": { "specVersion": "0.1", "id": "ns/name", ... },
//!   "preopens": [{ "path": "/absolute/host/dir", "write": false }],
//!   "allowPrivate": false
//! }
//! ```
//!
//! Unknown keys are refused (a misspelt `preopens` must not silently grant nothing or
//! something else). Preopen paths must be absolute, normalized, existing directories, not
//! `/tmp` (the guest's private scratch directory) and not listed twice; the guest sees each
//! one at its host path.
//!
//! ## Binding
//!
//! ```json
//! {
//!   "bindingVersion": "1.0", "binderId": "capability/wasm-module", "substrate": "wasm",
//!   "locator": "<source as given>", "immutableArtifact": "sha256:<hex>",
//!   "createdAt": "<ISO date>",
//!   "authority": { "complete": false,
//!                  "effects": ["filesystem.read"?, "filesystem.write"?,
//!                              "custom:external.opaque-effects"],
//!                  "note": "..." },
//!   "evidence": ["sha256:<hex>", "exports:_start,memory", "source:<locator>"],
//!   "module": { "sha256": "<hex>", "size": 123, "abi": "capability-wasi-p1/1",
//!               "exports": [{"name": "_start", "kind": "function"}, ...],
//!               "imports": [{"module": "wasi_snapshot_preview1", "name": "fd_read",
//!                            "kind": "function"}, ...],
//!               "embeddedManifest": true },
//!   "preopens": [{ "path": "/dir", "write": false }],
//!   "manifest": { ... }            // only when the request gave one
//! }
//! ```
//!
//! ## Execution
//!
//! `upstream_receipt`: `{substrate: "wasm", sha256, source, exports: [names], preopens,
//! boundary: <the run's WasmReport>, startedAt, finishedAt, status, error?: {kind, message,
//! code, guestCode?}}`; `metadata`: `{manifest: {id, origin: "binding"|"embedded"|"derived"},
//! durationMs, fuelConsumed}`; `isolation`: `"wasm"`.
//!
//! ## Manifest
//!
//! The engine compares an inert manifest with one embedded in the module. At execution the
//! binding's `manifest` is used when there is one; otherwise the module's embedded manifest
//! (the module's own word, nothing to compare); otherwise a derived manifest
//! (`wasm/<first 12 hex of the sha256>`, effects = the binding's authority effects without
//! the opaque marker).
//!
//! ## Cancellation
//!
//! The engine has no way to interrupt a run from outside (its wall-clock limit is enforced
//! inside the run by epoch interruption). The [`CancelToken`] is therefore checked before
//! the module is loaded and again just before the run starts; a run that has started ends
//! within the binder's limits (by default 10 s and a fuel budget).

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use capability_acquire::fetch::{FetchConfig, Fetcher};
use capability_core::binder::{
    BinderDiscovery, BinderError, BinderExecution, BinderStatus, CancelToken, MetabolicBinder,
};
use capability_core::effects::EXTERNAL_OPAQUE_EFFECTS;
use capability_core::json::sha256_hex;
use capability_wasm::effects::{FILESYSTEM_READ, FILESYSTEM_WRITE};
use capability_wasm::{
    ABI, EngineConfig, Grants, Invocation, Limits, TMP_GUEST_PATH, WasmEngine, WasmError,
    WasmLimits, WasmModule, WasmModuleSpec,
};
use serde_json::{Map, Value, json};

/// The binder id.
pub const WASM_BINDER_ID: &str = "capability/wasm-module";
/// The substrate.
pub const WASM_SUBSTRATE: &str = "wasm";
/// The isolation label of every execution.
pub const WASM_ISOLATION: &str = "wasm";
/// The only import module the engine satisfies (WASI preview 1).
pub const WASI_IMPORT_MODULE: &str = "wasi_snapshot_preview1";
/// The largest module accepted by default (the engine's default limit too).
pub const DEFAULT_MAX_MODULE_BYTES: usize = 64 << 20;

const DESCRIPTION: &str = "a WASM module pinned by its sha256, from a file or an HTTP(S) URL, \
     bound with its declared exports and run on the WASM executor with WASI preopens only as \
     granted";

const AUTHORITY_NOTE: &str = "A WASM module's behaviour is not proven by its exports: it runs \
     on the WASM executor (fuel, timeout, memory and stdout limits, no network, no processes, \
     no environment) with only the preopened directories listed in this binding.";

const REQUEST_KEYS: [&str; 5] = ["source", "sha256", "manifest", "preopens", "allowPrivate"];

fn err(message: impl Into<String>) -> BinderError {
    BinderError(message.into())
}

/// One directory opened to the guest, at its host path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preopen {
    /// Absolute, normalized host directory (the guest sees it at the same path).
    pub path: PathBuf,
    /// Read-write (`filesystem.write`) instead of read-only (`filesystem.read`).
    pub write: bool,
}

impl Preopen {
    fn to_value(&self) -> Value {
        json!({"path": self.path.display().to_string(), "write": self.write})
    }
}

/// One import or export of a module: `kind` is `function`, `memory`, `table`, `global` or
/// `tag`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleItem {
    /// The import module (empty for exports).
    pub module: String,
    /// The item's name (`fd_write`, `_start`, ...).
    pub name: String,
    /// `function`, `memory`, `table`, `global` or `tag`.
    pub kind: &'static str,
}

/// What a module declares: its imports and exports, read without validating the module.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModuleShape {
    /// Imports in declaration order (compact import groups flattened).
    pub imports: Vec<ModuleItem>,
    /// Exports in declaration order.
    pub exports: Vec<ModuleItem>,
}

impl ModuleShape {
    /// Export names in declaration order.
    pub fn export_names(&self) -> Vec<String> {
        self.exports.iter().map(|e| e.name.clone()).collect()
    }

    fn exports_value(&self) -> Value {
        Value::Array(
            self.exports
                .iter()
                .map(|e| json!({"name": e.name, "kind": e.kind}))
                .collect(),
        )
    }

    fn imports_value(&self) -> Value {
        Value::Array(
            self.imports
                .iter()
                .map(|i| json!({"module": i.module, "name": i.name, "kind": i.kind}))
                .collect(),
        )
    }
}

fn type_ref_kind(ty: &wasmparser::TypeRef) -> &'static str {
    match ty {
        wasmparser::TypeRef::Func(_) | wasmparser::TypeRef::FuncExact(_) => "function",
        wasmparser::TypeRef::Table(_) => "table",
        wasmparser::TypeRef::Memory(_) => "memory",
        wasmparser::TypeRef::Global(_) => "global",
        wasmparser::TypeRef::Tag(_) => "tag",
    }
}

fn external_kind(kind: wasmparser::ExternalKind) -> &'static str {
    match kind {
        wasmparser::ExternalKind::Func | wasmparser::ExternalKind::FuncExact => "function",
        wasmparser::ExternalKind::Table => "table",
        wasmparser::ExternalKind::Memory => "memory",
        wasmparser::ExternalKind::Global => "global",
        wasmparser::ExternalKind::Tag => "tag",
    }
}

/// Reads a module's imports and exports (the sections before the code; nothing is
/// validated here: the engine validates when it compiles). Components are refused.
pub fn inspect_module(bytes: &[u8]) -> Result<ModuleShape, BinderError> {
    let malformed = |e: wasmparser::BinaryReaderError| {
        err(format!("WASM module is malformed: {}", e.message()))
    };
    let mut shape = ModuleShape::default();
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        match payload.map_err(malformed)? {
            wasmparser::Payload::Version { encoding, .. }
                if encoding != wasmparser::Encoding::Module =>
            {
                return Err(err(
                    "WASM components are not supported: bind a WASI preview 1 command \
                     module (wasm32-wasip1)",
                ));
            }
            wasmparser::Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    let import = import.map_err(malformed)?;
                    shape.imports.push(ModuleItem {
                        module: import.module.to_string(),
                        name: import.name.to_string(),
                        kind: type_ref_kind(&import.ty),
                    });
                }
            }
            wasmparser::Payload::ExportSection(reader) => {
                for export in reader {
                    let export = export.map_err(malformed)?;
                    shape.exports.push(ModuleItem {
                        module: String::new(),
                        name: export.name.to_string(),
                        kind: external_kind(export.kind),
                    });
                }
            }
            // Imports and exports come before the code: nothing after it is needed.
            wasmparser::Payload::CodeSectionStart { .. } => break,
            _ => {}
        }
    }
    Ok(shape)
}

/// Refuses a module the engine cannot run: it must export the function `_start` and the
/// memory `memory`, and import only `wasi_snapshot_preview1` functions.
pub fn check_abi(shape: &ModuleShape) -> Result<(), BinderError> {
    let has = |name: &str, kind: &str| {
        shape
            .exports
            .iter()
            .any(|e| e.name == name && e.kind == kind)
    };
    let mut missing = Vec::new();
    if !has("_start", "function") {
        missing.push("the function _start");
    }
    if !has("memory", "memory") {
        missing.push("the memory memory");
    }
    if !missing.is_empty() {
        return Err(err(format!(
            "WASM module does not follow the {ABI} ABI: it does not export {} (a WASI \
             preview 1 command module exports _start and memory)",
            missing.join(" or ")
        )));
    }
    let unsupported: Vec<String> = shape
        .imports
        .iter()
        .filter(|i| i.module != WASI_IMPORT_MODULE || i.kind != "function")
        .map(|i| format!("{}::{} ({})", i.module, i.name, i.kind))
        .collect();
    if !unsupported.is_empty() {
        return Err(err(format!(
            "WASM module imports what the engine cannot provide (only {WASI_IMPORT_MODULE} \
             functions are): {}",
            unsupported.join(", ")
        )));
    }
    Ok(())
}

/// `<64 hex>` or `sha256:<64 hex>`, lowercased.
fn parse_sha256(value: &str) -> Option<String> {
    let hex = value.strip_prefix("sha256:").unwrap_or(value);
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| hex.to_ascii_lowercase())
}

/// Checks one preopen path: absolute, normalized, not the guest's `/tmp`.
fn check_preopen_path(path: &str) -> Result<PathBuf, BinderError> {
    let clean = path.starts_with('/')
        && (path == "/" || !path.ends_with('/'))
        && !path.contains('\0')
        && !path.contains("//")
        && !path.split('/').any(|s| s == "." || s == "..");
    if !clean {
        return Err(err(format!(
            "preopen path {path:?} must be absolute and normalized (no ., .. or trailing /)"
        )));
    }
    if path == TMP_GUEST_PATH {
        return Err(err(format!(
            "preopen path {path:?} is the guest's private scratch directory and cannot be \
             granted"
        )));
    }
    Ok(PathBuf::from(path))
}

/// Parses `preopens` (`[{"path", "write"?}]`): paths checked, no duplicates, each an
/// existing directory.
fn parse_preopens(value: Option<&Value>) -> Result<Vec<Preopen>, BinderError> {
    let items = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(err("preopens must be an array of {path, write?} objects")),
    };
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Value::Object(map) = item else {
            return Err(err(format!(
                "preopens[{i}] must be an object {{path, write?}}"
            )));
        };
        if let Some(key) = map.keys().find(|k| !matches!(k.as_str(), "path" | "write")) {
            return Err(err(format!(
                "preopens[{i}] has an unknown key {key:?} (allowed: path, write)"
            )));
        }
        let path = map
            .get("path")
            .and_then(Value::as_str)
            .filter(|p| !p.trim().is_empty())
            .ok_or_else(|| err(format!("preopens[{i}].path must be a non-empty string")))?;
        let write = match map.get("write") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(err(format!("preopens[{i}].write must be a boolean"))),
        };
        let path = check_preopen_path(path)?;
        if !seen.insert(path.clone()) {
            return Err(err(format!(
                "preopen path {:?} is listed twice",
                path.display().to_string()
            )));
        }
        if !path.is_dir() {
            return Err(err(format!(
                "preopen path {:?} is not an existing directory",
                path.display().to_string()
            )));
        }
        out.push(Preopen { path, write });
    }
    Ok(out)
}

/// The effects the preopens need, in a fixed order.
fn preopen_effects(preopens: &[Preopen]) -> Vec<&'static str> {
    let mut effects = Vec::new();
    if preopens.iter().any(|p| !p.write) {
        effects.push(FILESYSTEM_READ);
    }
    if preopens.iter().any(|p| p.write) {
        effects.push(FILESYSTEM_WRITE);
    }
    effects
}

/// Files written to the cache by this process, for unique temporary names.
static CACHE_WRITES: AtomicU64 = AtomicU64::new(0);

/// The `capability/wasm-module` binder. Shares one [`WasmEngine`] across its bindings (built
/// on first use unless given with [`WasmBinder::with_engine`]).
pub struct WasmBinder {
    cache_dir: PathBuf,
    engine: Mutex<Option<WasmEngine>>,
    limits: Limits<WasmLimits>,
    fetch: FetchConfig,
    max_module_bytes: usize,
}

impl std::fmt::Debug for WasmBinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmBinder")
            .field("cache_dir", &self.cache_dir)
            .field("limits", &self.limits)
            .field("max_module_bytes", &self.max_module_bytes)
            .finish()
    }
}

impl WasmBinder {
    /// A binder keeping verified modules in `cache_dir` (created when first needed), with
    /// the engine's default limits (`Limits::<WasmLimits>::default()`), the fetcher's default
    /// configuration and modules of at most [`DEFAULT_MAX_MODULE_BYTES`].
    pub fn new(cache_dir: PathBuf) -> WasmBinder {
        WasmBinder {
            cache_dir,
            engine: Mutex::new(None),
            limits: Limits::default(),
            fetch: FetchConfig::default(),
            max_module_bytes: DEFAULT_MAX_MODULE_BYTES,
        }
    }

    /// Runs on `engine` (say the process-wide one) instead of building its own.
    pub fn with_engine(self, engine: WasmEngine) -> WasmBinder {
        *self.engine.lock().unwrap_or_else(PoisonError::into_inner) = Some(engine);
        self
    }

    /// The limits of every run (timeout, memory, `/tmp` quota, stdout, fuel, ...).
    pub fn with_limits(mut self, limits: Limits<WasmLimits>) -> WasmBinder {
        self.limits = limits;
        self
    }

    /// The fetcher configuration for URL sources (`allow_private` is set per request and
    /// `max_tarball_bytes` is the module limit).
    pub fn with_fetch_config(mut self, fetch: FetchConfig) -> WasmBinder {
        self.fetch = fetch;
        self
    }

    /// The largest module accepted from a file or a URL.
    pub fn with_max_module_bytes(mut self, max: usize) -> WasmBinder {
        self.max_module_bytes = max;
        self
    }

    /// Where verified modules are kept.
    pub fn cache_dir(&self) -> &Path {
        &self.cache_dir
    }

    /// `<cache>/<sha256>.wasm`.
    pub fn cached_module_path(&self, sha256: &str) -> PathBuf {
        self.cache_dir.join(format!("{sha256}.wasm"))
    }

    fn engine(&self) -> Result<WasmEngine, BinderError> {
        let mut slot = self.engine.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(engine) = slot.as_ref() {
            return Ok(engine.clone());
        }
        let config = EngineConfig {
            max_module_bytes: self.max_module_bytes,
            ..EngineConfig::default()
        };
        let engine = WasmEngine::new(config)
            .map_err(|e| err(format!("cannot start the WASM engine: {e}")))?;
        *slot = Some(engine.clone());
        Ok(engine)
    }

    /// Reads the module bytes from a path or an `http(s)`/`file` URL.
    fn acquire(&self, source: &str, allow_private: bool) -> Result<Vec<u8>, BinderError> {
        match url::Url::parse(source) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => {
                let fetcher = Fetcher::new(FetchConfig {
                    allow_private,
                    max_tarball_bytes: self.max_module_bytes,
                    ..self.fetch.clone()
                })
                .map_err(|e| err(format!("cannot fetch WASM module {source}: {e}")))?;
                let fetched = fetcher
                    .tarball(source)
                    .map_err(|e| err(format!("cannot fetch WASM module {source}: {e}")))?;
                if !(200..300).contains(&fetched.status) {
                    return Err(err(format!(
                        "cannot fetch WASM module {source}: HTTP {}",
                        fetched.status
                    )));
                }
                Ok(fetched.body)
            }
            Ok(url) if url.scheme() == "file" => {
                let path = url
                    .to_file_path()
                    .map_err(|()| err(format!("{source} is not a local file URL")))?;
                self.read_file(source, &path)
            }
            Ok(url) if url.scheme().len() > 1 => Err(err(format!(
                "unsupported WASM module source {source}: use a file path or an http(s) URL \
                 (scheme {:?})",
                url.scheme()
            ))),
            _ => self.read_file(source, Path::new(source)),
        }
    }

    fn read_file(&self, source: &str, path: &Path) -> Result<Vec<u8>, BinderError> {
        capability_exec::read_module(path, self.max_module_bytes as u64).map_err(|e| match e {
            capability_exec::IntegrityError::TooLarge { size, limit, .. } => err(format!(
                "WASM module {source} is {size} bytes, above the {limit} byte limit"
            )),
            other => err(format!("cannot read WASM module {source}: {other}")),
        })
    }

    /// Writes the verified bytes to `<cache>/<sha256>.wasm` through a temporary file and a
    /// rename.
    fn keep(&self, sha256: &str, bytes: &[u8]) -> Result<PathBuf, BinderError> {
        let io = |what: &str, path: &Path, e: std::io::Error| {
            err(format!(
                "cannot {what} {:?} in the WASM module cache: {e}",
                path.display().to_string()
            ))
        };
        std::fs::create_dir_all(&self.cache_dir).map_err(|e| io("create", &self.cache_dir, e))?;
        let target = self.cached_module_path(sha256);
        let n = CACHE_WRITES.fetch_add(1, Ordering::Relaxed);
        let tmp = self
            .cache_dir
            .join(format!(".{sha256}.{}.{n}.tmp", std::process::id()));
        let written = (|| {
            let mut file = std::fs::File::create(&tmp)?;
            file.write_all(bytes)?;
            file.sync_all()?;
            std::fs::rename(&tmp, &target)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(io("write", &target, e));
        }
        Ok(target)
    }

    /// Reads `<cache>/<sha256>.wasm` and verifies its digest again.
    fn load_cached(&self, sha256: &str) -> Result<Vec<u8>, BinderError> {
        let path = self.cached_module_path(sha256);
        if !path.is_file() {
            return Err(err(format!(
                "WASM module sha256:{sha256} is not in the binder's cache ({}): bind it again",
                path.display()
            )));
        }
        let bytes =
            capability_exec::read_module(&path, self.max_module_bytes as u64).map_err(|e| {
                err(format!(
                    "cannot read cached WASM module {}: {e}",
                    path.display()
                ))
            })?;
        let actual = sha256_hex(&bytes);
        if actual != sha256 {
            return Err(err(format!(
                "cached WASM module {} changed on disk: expected sha256:{sha256}, found \
                 sha256:{actual}; refusing to run it (bind it again)",
                path.display()
            )));
        }
        Ok(bytes)
    }
}

/// The parsed bind request.
struct BindRequest {
    source: String,
    sha256: String,
    manifest: Option<Value>,
    preopens: Vec<Preopen>,
    allow_private: bool,
}

fn parse_request(request: &Value) -> Result<BindRequest, BinderError> {
    let Value::Object(map) = request else {
        return Err(err(
            "WASM bind request must be an object {source, sha256, manifest?, preopens?, \
             allowPrivate?}",
        ));
    };
    if let Some(key) = map.keys().find(|k| !REQUEST_KEYS.contains(&k.as_str())) {
        return Err(err(format!(
            "WASM bind request has an unknown key {key:?} (allowed: {})",
            REQUEST_KEYS.join(", ")
        )));
    }
    let source = map
        .get("source")
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| err("source is required: a file path or an http(s) URL of the module"))?
        .to_string();
    let sha256 = match map.get("sha256") {
        None | Some(Value::Null) => {
            return Err(err(
                "sha256 is required: a WASM module is never bound by a mutable locator alone",
            ));
        }
        Some(value) => value.as_str().and_then(parse_sha256).ok_or_else(|| {
            err("sha256 must be 64 hex digits (optionally prefixed with sha256:)")
        })?,
    };
    let manifest = match map.get("manifest") {
        None | Some(Value::Null) => None,
        Some(manifest) => {
            let issues = capability_core::validate_manifest(manifest);
            if !issues.is_empty() {
                return Err(err(format!("invalid manifest: {}", issues.join("; "))));
            }
            Some(manifest.clone())
        }
    };
    let preopens = parse_preopens(map.get("preopens"))?;
    let allow_private = match map.get("allowPrivate") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(err("allowPrivate must be a boolean")),
    };
    Ok(BindRequest {
        source,
        sha256,
        manifest,
        preopens,
        allow_private,
    })
}

/// What `execute` needs from a binding.
struct BoundModule {
    sha256: String,
    source: String,
    preopens: Vec<Preopen>,
    manifest: Option<Value>,
    effects: Vec<String>,
    exports: Vec<String>,
}

fn parse_binding(binding: &Value) -> Result<BoundModule, BinderError> {
    let sha256 = binding
        .get("immutableArtifact")
        .and_then(Value::as_str)
        .and_then(|a| a.strip_prefix("sha256:"))
        .and_then(parse_sha256)
        .ok_or_else(|| err("WASM binding immutableArtifact must be sha256:<64 hex>"))?;
    if let Some(module_sha) = binding.pointer("/module/sha256")
        && module_sha.as_str() != Some(sha256.as_str())
    {
        return Err(err(
            "WASM binding is inconsistent: module.sha256 differs from immutableArtifact",
        ));
    }
    let source = binding
        .get("locator")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let preopens = parse_preopens(binding.get("preopens"))?;
    let effects: Vec<String> = binding
        .pointer("/authority/effects")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    for needed in preopen_effects(&preopens) {
        if !effects.iter().any(|e| e == needed) {
            return Err(err(format!(
                "WASM binding is inconsistent: it preopens a directory that needs {needed}, \
                 which its authority does not declare"
            )));
        }
    }
    let exports = binding
        .pointer("/module/exports")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|e| e.get("name").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let manifest = binding.get("manifest").filter(|m| !m.is_null()).cloned();
    Ok(BoundModule {
        sha256,
        source,
        preopens,
        manifest,
        effects,
        exports,
    })
}

/// The manifest for a module without one of its own: `wasm/<sha prefix>`, the binding's
/// effects without the opaque marker.
fn derived_manifest(sha256: &str, effects: &[String]) -> Value {
    let prefix = sha256.get(..12).unwrap_or(sha256);
    let effects: Vec<&str> = effects
        .iter()
        .map(String::as_str)
        .filter(|e| *e != EXTERNAL_OPAQUE_EFFECTS)
        .collect();
    json!({
        "specVersion": "0.1",
        "id": format!("wasm/{prefix}"),
        "version": "0.0.0",
        "name": format!("WASM module {prefix}"),
        "description": format!("WASM module sha256:{sha256}, bound by {WASM_BINDER_ID}."),
        "effects": effects,
    })
}

fn engine_error(context: &str, e: &WasmError) -> BinderError {
    err(format!("{context} ({}): {}", e.kind(), e.message()))
}

impl MetabolicBinder for WasmBinder {
    fn id(&self) -> &str {
        WASM_BINDER_ID
    }
    fn substrate(&self) -> &str {
        WASM_SUBSTRATE
    }
    fn discovery(&self) -> BinderDiscovery {
        BinderDiscovery::Explicit
    }
    fn description(&self) -> &str {
        DESCRIPTION
    }
    fn executable(&self) -> bool {
        true
    }

    fn bind(&self, request: &Value) -> Result<Value, BinderError> {
        let request = parse_request(request)?;
        let bytes = self.acquire(&request.source, request.allow_private)?;
        // The digest is checked before anything parses the bytes.
        let actual = sha256_hex(&bytes);
        if actual != request.sha256 {
            return Err(err(format!(
                "WASM module {} does not match its pinned digest: expected sha256:{}, got \
                 sha256:{actual}; nothing was parsed or kept",
                request.source, request.sha256
            )));
        }
        let shape = inspect_module(&bytes)?;
        check_abi(&shape)?;
        let engine = self.engine()?;
        // No integrity for the engine to check: these bytes were just hashed against the pin.
        let mut spec = WasmModuleSpec::from_bytes(Arc::<[u8]>::from(bytes.as_slice()));
        if let Some(manifest) = &request.manifest {
            spec = spec.with_manifest(manifest.clone());
        }
        let module: WasmModule = engine
            .load(&spec)
            .map_err(|e| engine_error("WASM module refused by the engine", &e))?;
        self.keep(&actual, &bytes)?;

        let mut effects = preopen_effects(&request.preopens);
        effects.push(EXTERNAL_OPAQUE_EFFECTS);
        let names = shape.export_names();
        let mut binding = crate::binding(
            self,
            &request.source,
            &format!("sha256:{actual}"),
            &effects,
            AUTHORITY_NOTE,
            vec![
                format!("sha256:{actual}"),
                format!("exports:{}", names.join(",")),
                format!("source:{}", request.source),
            ],
        );
        binding.insert(
            "module".into(),
            json!({
                "sha256": actual,
                "size": bytes.len(),
                "abi": ABI,
                "exports": shape.exports_value(),
                "imports": shape.imports_value(),
                "embeddedManifest": module.embedded_manifest().is_some(),
            }),
        );
        binding.insert(
            "preopens".into(),
            request.preopens.iter().map(Preopen::to_value).collect(),
        );
        if let Some(manifest) = request.manifest {
            binding.insert("manifest".into(), manifest);
        }
        Ok(Value::Object(binding))
    }

    fn execute(
        &self,
        binding: &Value,
        input: &Value,
        cancel: &CancelToken,
    ) -> Result<BinderExecution, BinderError> {
        let aborted = || err("The operation was aborted");
        if cancel.is_cancelled() {
            return Err(aborted());
        }
        let bound = parse_binding(binding)?;
        let bytes = self.load_cached(&bound.sha256)?;
        let engine = self.engine()?;

        // No integrity for the engine to check: `load_cached` has just verified these bytes.
        // One load: with the binding's manifest, which the engine compares with an embedded one.
        let mut spec = WasmModuleSpec::from_bytes(Arc::<[u8]>::from(bytes));
        if let Some(manifest) = &bound.manifest {
            spec = spec.with_manifest(manifest.clone());
        }
        let (module, limits) = engine
            .load_for_run(&spec, &self.limits)
            .map_err(|e| engine_error("WASM module could not be loaded", &e))?;
        let (manifest, origin) = match (&bound.manifest, module.embedded_manifest()) {
            (Some(manifest), _) => (manifest.clone(), "binding"),
            (None, Some(embedded)) => (embedded.clone(), "embedded"),
            (None, None) => (derived_manifest(&bound.sha256, &bound.effects), "derived"),
        };

        let mut grants = Grants::none();
        for preopen in &bound.preopens {
            grants = if preopen.write {
                grants.write(preopen.path.clone())
            } else {
                grants.read(preopen.path.clone())
            };
        }

        if cancel.is_cancelled() {
            return Err(aborted());
        }
        let started_at = capability_core::js::now_iso();
        let outcome = engine
            .run(
                &module,
                &Invocation::execute(input.clone()),
                &grants,
                &limits,
            )
            .map_err(|e| engine_error("WASM run could not start", &e))?;
        let finished_at = capability_core::js::now_iso();

        let (status, output, error) = match &outcome.result {
            Ok(output) => (BinderStatus::Succeeded, Some(output.clone()), None),
            Err(e) => (BinderStatus::Failed, None, Some(e.to_value())),
        };
        let mut receipt = Map::new();
        receipt.insert("substrate".into(), WASM_SUBSTRATE.into());
        receipt.insert("sha256".into(), bound.sha256.clone().into());
        receipt.insert("source".into(), bound.source.clone().into());
        receipt.insert("exports".into(), json!(bound.exports));
        receipt.insert(
            "preopens".into(),
            Value::Array(bound.preopens.iter().map(Preopen::to_value).collect()),
        );
        receipt.insert(
            "boundary".into(),
            serde_json::to_value(&outcome.boundary).unwrap_or(Value::Null),
        );
        receipt.insert("startedAt".into(), started_at.into());
        receipt.insert("finishedAt".into(), finished_at.into());
        receipt.insert("status".into(), status.as_str().into());
        if let Some(error) = error {
            receipt.insert("error".into(), error);
        }
        let duration_ms = u64::try_from(outcome.duration.as_millis()).unwrap_or(u64::MAX);
        Ok(BinderExecution {
            status,
            output,
            isolation: Some(WASM_ISOLATION.into()),
            upstream_receipt: Some(Value::Object(receipt)),
            metadata: Some(json!({
                "manifest": {
                    "id": manifest.get("id").cloned().unwrap_or(Value::Null),
                    "origin": origin,
                },
                "durationMs": duration_ms,
                "fuelConsumed": outcome.fuel_consumed,
            })),
        })
    }
}
