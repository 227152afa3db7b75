//! [`WasmEngine`]: compile once, cache by digest, run each invocation in a fresh pooled
//! instance behind fuel, epoch, memory and WASI limits.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, InstancePre, Linker, Module,
    PoolConcurrencyLimitError, PoolingAllocationConfig, Store, Trap,
};
use wasmtime_wasi::p2::pipe::{MemoryInputPipe, MemoryOutputPipe};
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtxBuilder};

use capability_exec::{Grants, Invocation, Limits, PreopenReport, RunOutcome, WasmReport, effects};

use crate::abi;
use crate::binary::{self, BinaryKind, MANIFEST_SECTION};
use crate::config::{EngineConfig, TMP_GUEST_PATH, WasmLimits, check_grants};
use crate::error::{WasmError, WasmErrorKind};
use crate::host::{self, RunState, Scratch, Stop};
use crate::integrity;

/// The engine named in every report.
pub const ENGINE: &str = "wasmtime 48";

/// Where a module's bytes come from.
#[derive(Clone, Debug)]
pub enum ModuleSource {
    Bytes(Arc<[u8]>),
    Path(PathBuf),
}

/// A module to load: its bytes, the integrity they must match, and the inert manifest the
/// host authorized (compared with a manifest embedded in the module, if any).
#[derive(Clone, Debug)]
pub struct WasmModuleSpec {
    pub source: ModuleSource,
    pub integrity: Option<String>,
    pub manifest: Option<Value>,
}

impl WasmModuleSpec {
    pub fn from_bytes(bytes: impl Into<Arc<[u8]>>) -> Self {
        WasmModuleSpec {
            source: ModuleSource::Bytes(bytes.into()),
            integrity: None,
            manifest: None,
        }
    }

    pub fn from_path(path: impl Into<PathBuf>) -> Self {
        WasmModuleSpec {
            source: ModuleSource::Path(path.into()),
            integrity: None,
            manifest: None,
        }
    }

    pub fn with_integrity(mut self, integrity: impl Into<String>) -> Self {
        self.integrity = Some(integrity.into());
        self
    }

    pub fn with_manifest(mut self, manifest: Value) -> Self {
        self.manifest = Some(manifest);
        self
    }
}

/// A compiled, linked module: cheap to clone, runnable many times, from many threads.
#[derive(Clone)]
pub struct WasmModule {
    inner: Arc<ModuleInner>,
}

struct ModuleInner {
    sha256_hex: String,
    pre: InstancePre<RunState>,
    embedded_manifest: Option<Value>,
    size: usize,
}

impl std::fmt::Debug for WasmModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmModule")
            .field("sha256", &self.inner.sha256_hex)
            .field("size", &self.inner.size)
            .finish()
    }
}

impl WasmModule {
    /// Lowercase hex SHA-256 of the module bytes.
    pub fn sha256_hex(&self) -> &str {
        &self.inner.sha256_hex
    }

    /// The manifest embedded in the `capability-manifest` custom section, if any.
    pub fn embedded_manifest(&self) -> Option<&Value> {
        self.inner.embedded_manifest.as_ref()
    }

    /// Size of the module bytes.
    pub fn size(&self) -> usize {
        self.inner.size
    }
}

struct Cache {
    entries: HashMap<[u8; 32], (WasmModule, u64)>,
    /// One lock per digest being compiled, so concurrent loads of a module compile it once.
    compiling: HashMap<[u8; 32], Arc<Mutex<()>>>,
    clock: u64,
}

impl Cache {
    fn get(&mut self, digest: &[u8; 32]) -> Option<WasmModule> {
        self.clock += 1;
        let now = self.clock;
        self.entries.get_mut(digest).map(|(m, used)| {
            *used = now;
            m.clone()
        })
    }
}

struct Ticker {
    stop: Option<mpsc::Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

impl Drop for Ticker {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

struct Inner {
    engine: Engine,
    linker: Linker<RunState>,
    config: EngineConfig,
    cache: Mutex<Cache>,
    /// Empty scratch directories ready for the next run.
    scratch_pool: Mutex<Vec<PathBuf>>,
    // Declared last: dropped after everything else.
    _ticker: Mutex<Ticker>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let pool = self
            .scratch_pool
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        for path in pool.drain(..) {
            let _ = std::fs::remove_dir_all(path);
        }
    }
}

/// The WASM executor. `Send + Sync` and cheap to clone; share one per process.
#[derive(Clone)]
pub struct WasmEngine {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for WasmEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmEngine")
            .field("config", &self.inner.config)
            .finish()
    }
}

fn config_error(e: impl std::fmt::Display) -> WasmError {
    WasmError::new(
        WasmErrorKind::Config,
        format!("wasm engine configuration: {e}"),
    )
}

impl WasmEngine {
    /// Builds the engine: wasmtime with fuel, epoch interruption and a pooling allocator, the
    /// WASI preview 1 linker with the quota interposition, and the epoch ticker thread.
    pub fn new(config: EngineConfig) -> Result<WasmEngine, WasmError> {
        if config.max_instances == 0 || config.epoch_tick.is_zero() || config.cache_capacity == 0 {
            return Err(config_error(
                "max_instances, epoch_tick and cache_capacity must be positive",
            ));
        }
        let max_memory = usize::try_from(config.max_memory_bytes).map_err(config_error)?;
        let keep_resident =
            usize::try_from(config.memory_keep_resident.min(config.max_memory_bytes))
                .map_err(config_error)?;
        let mut pool = PoolingAllocationConfig::new();
        pool.total_core_instances(config.max_instances)
            .total_memories(config.max_instances)
            .total_tables(config.max_instances)
            .max_memories_per_module(1)
            .max_tables_per_module(4)
            .max_memory_size(max_memory)
            // Reset only the pages a run dirtied (PAGEMAP_SCAN where the kernel has it) and
            // keep them resident, instead of faulting every page in again on the next run.
            .linear_memory_keep_resident(keep_resident)
            .table_keep_resident(64 << 10)
            .pagemap_scan(Enabled::Auto);
        let mut wasm = Config::new();
        wasm.consume_fuel(true)
            .epoch_interruption(true)
            .max_wasm_stack(config.max_wasm_stack)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&wasm).map_err(config_error)?;

        let mut linker: Linker<RunState> = Linker::new(&engine);
        wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |s: &mut RunState| &mut s.wasi)
            .map_err(config_error)?;
        host::add_interposition(&mut linker).map_err(config_error)?;

        std::fs::create_dir_all(&config.scratch_root).map_err(|e| {
            WasmError::new(
                WasmErrorKind::Io,
                format!(
                    "cannot create scratch root {:?}: {e}",
                    config.scratch_root.display().to_string()
                ),
            )
        })?;

        sweep_stale_scratch(&config.scratch_root);

        let (tx, rx) = mpsc::channel::<()>();
        let tick = config.epoch_tick;
        let ticking = engine.clone();
        let handle = std::thread::Builder::new()
            .name("capability-wasm-epoch".into())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(tick) {
                    ticking.increment_epoch();
                }
            })
            .map_err(|e| config_error(format!("cannot start the epoch thread: {e}")))?;

        Ok(WasmEngine {
            inner: Arc::new(Inner {
                engine,
                linker,
                config,
                cache: Mutex::new(Cache {
                    entries: HashMap::new(),
                    compiling: HashMap::new(),
                    clock: 0,
                }),
                scratch_pool: Mutex::new(Vec::new()),
                _ticker: Mutex::new(Ticker {
                    stop: Some(tx),
                    handle: Some(handle),
                }),
            }),
        })
    }

    /// The configuration the engine was built with.
    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// Number of compiled modules in the cache.
    pub fn cached_modules(&self) -> usize {
        self.lock_cache().entries.len()
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.inner
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Verifies, compiles (or finds in the cache) and links a module.
    ///
    /// Order: read the bytes (a file above `max_module_bytes` is refused from its size, before
    /// it is read); check `integrity` (before anything parses them); look the
    /// SHA-256 up in the cache, else refuse components, read the embedded manifest, compile
    /// and link (an import the host does not provide fails here, as [`WasmErrorKind::Link`]);
    /// finally compare the embedded manifest with the spec's by canonical hash.
    pub fn load(&self, spec: &WasmModuleSpec) -> Result<WasmModule, WasmError> {
        self.load_within(spec, None)
    }

    /// [`WasmEngine::load`] with a deadline for compiling: a module not in the cache is
    /// compiled on a worker thread, and when `deadline` passes first the load is refused with
    /// [`WasmErrorKind::Timeout`] ("compiling the module ..."). Compilation itself cannot be
    /// interrupted: the worker finishes in the background (one per module digest at a time)
    /// and caches the module, so the refusal comes on time while the host's CPU keeps being
    /// spent for at most one compile of a module no larger than `max_module_bytes`.
    pub fn load_within(
        &self,
        spec: &WasmModuleSpec,
        deadline: Option<Instant>,
    ) -> Result<WasmModule, WasmError> {
        let bytes: Arc<[u8]> = match &spec.source {
            ModuleSource::Bytes(b) => b.clone(),
            ModuleSource::Path(p) => self.read_module(p)?.into(),
        };
        if bytes.len() > self.inner.config.max_module_bytes {
            return Err(WasmError::new(
                WasmErrorKind::InvalidModule,
                format!(
                    "module is {} bytes, above the {} byte limit",
                    bytes.len(),
                    self.inner.config.max_module_bytes
                ),
            ));
        }
        if let Some(integrity) = &spec.integrity {
            integrity::verify_integrity(&bytes, integrity)?;
        }
        let digest = integrity::sha256(&bytes);
        let cached = self.lock_cache().get(&digest);
        let module = match (cached, deadline) {
            (Some(m), _) => m,
            (None, None) => self.compile_and_cache(&bytes, digest)?,
            (None, Some(deadline)) => self.compile_before(bytes, digest, deadline)?,
        };
        if let (Some(inert), Some(embedded)) = (&spec.manifest, module.embedded_manifest()) {
            let inert_hash = capability_core::json::canonical_hash(inert);
            if inert_hash != capability_core::json::canonical_hash(embedded) {
                let id = inert.get("id").and_then(Value::as_str).unwrap_or("?");
                return Err(WasmError::new(
                    WasmErrorKind::ManifestMismatch,
                    format!("loaded manifest for {id} does not match the inert manifest"),
                ));
            }
        }
        Ok(module)
    }

    /// Compiles on a worker thread and waits for it until `deadline`.
    fn compile_before(
        &self,
        bytes: Arc<[u8]>,
        digest: [u8; 32],
        deadline: Instant,
    ) -> Result<WasmModule, WasmError> {
        let started = Instant::now();
        let budget = deadline.saturating_duration_since(started);
        let too_slow = || {
            WasmError::new(
                WasmErrorKind::Timeout,
                format!(
                    "compiling the module ({} bytes) did not finish within the {} ms left of \
                     the timeout: refused before it ran",
                    bytes.len(),
                    millis(budget)
                ),
            )
        };
        if budget.is_zero() {
            return Err(too_slow());
        }
        let (tx, rx) = mpsc::sync_channel(1);
        let engine = self.clone();
        let work = bytes.clone();
        std::thread::Builder::new()
            .name("capability-wasm-compile".into())
            .spawn(move || {
                // The receiver is gone when the deadline passed: the module stays cached.
                let _ = tx.send(engine.compile_and_cache(&work, digest));
            })
            .map_err(|e| {
                WasmError::new(
                    WasmErrorKind::Internal,
                    format!("cannot start a compile thread: {e}"),
                )
            })?;
        match rx.recv_timeout(budget) {
            Ok(result) => result,
            Err(RecvTimeoutError::Timeout) => Err(too_slow()),
            Err(RecvTimeoutError::Disconnected) => Err(WasmError::new(
                WasmErrorKind::Internal,
                "the compile thread ended without a result",
            )),
        }
    }

    /// Compiles once per digest (concurrent loads wait for the first) and caches the module.
    fn compile_and_cache(&self, bytes: &[u8], digest: [u8; 32]) -> Result<WasmModule, WasmError> {
        let gate = self
            .lock_cache()
            .compiling
            .entry(digest)
            .or_default()
            .clone();
        let _compiling = gate.lock().unwrap_or_else(PoisonError::into_inner);
        // Another thread may have compiled it while this one waited.
        let again = self.lock_cache().get(&digest);
        let compiled = match again {
            Some(m) => Ok(m),
            None => self.compile(bytes, digest),
        };
        let mut cache = self.lock_cache();
        cache.compiling.remove(&digest);
        let m = compiled?;
        if !cache.entries.contains_key(&digest)
            && cache.entries.len() >= self.inner.config.cache_capacity
            && let Some(oldest) = cache
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| *k)
        {
            cache.entries.remove(&oldest);
        }
        let now = cache.clock;
        Ok(cache.entries.entry(digest).or_insert((m, now)).0.clone())
    }

    /// Reads a module file of at most `max_module_bytes`: a larger file is refused from its
    /// size, before anything is read.
    fn read_module(&self, path: &Path) -> Result<Vec<u8>, WasmError> {
        let limit = self.inner.config.max_module_bytes as u64;
        capability_exec::read_module(path, limit).map_err(|e| match e {
            capability_exec::IntegrityError::TooLarge { size, limit, .. } => WasmError::new(
                WasmErrorKind::InvalidModule,
                format!("module is {size} bytes, above the {limit} byte limit"),
            ),
            capability_exec::IntegrityError::Io { source, .. } => WasmError::new(
                WasmErrorKind::Io,
                format!(
                    "cannot read module {:?}: {source}",
                    path.display().to_string()
                ),
            ),
            other => crate::integrity::integrity_error(other),
        })
    }

    fn compile(&self, bytes: &[u8], digest: [u8; 32]) -> Result<WasmModule, WasmError> {
        let invalid = |m: String| WasmError::new(WasmErrorKind::InvalidModule, m);
        if binary::kind(bytes)? == BinaryKind::Component {
            return Err(invalid(
                "components are not supported: build a WASI preview 1 command module \
                 (wasm32-wasip1)"
                    .into(),
            ));
        }
        let sections = binary::custom_sections(bytes, MANIFEST_SECTION)?;
        let embedded_manifest = match sections.as_slice() {
            [] => None,
            [one] => Some(
                capability_core::json::parse(one)
                    .map_err(|e| invalid(format!("embedded {MANIFEST_SECTION} section: {e}")))?,
            ),
            _ => {
                return Err(invalid(format!(
                    "module has {} {MANIFEST_SECTION} sections",
                    sections.len()
                )));
            }
        };
        let module = Module::new(&self.inner.engine, bytes)
            .map_err(|e| invalid(format!("module does not compile: {}", root_message(&e))))?;
        if module.get_export("_start").is_none() {
            return Err(invalid(
                "module does not export _start: it must be a WASI command".into(),
            ));
        }
        let pre = self.inner.linker.instantiate_pre(&module).map_err(|e| {
            WasmError::new(
                WasmErrorKind::Link,
                format!(
                    "module imports what the host does not provide: {}",
                    root_message(&e)
                ),
            )
        })?;
        Ok(WasmModule {
            inner: Arc::new(ModuleInner {
                sha256_hex: hex::encode(digest),
                pre,
                embedded_manifest,
                size: bytes.len(),
            }),
        })
    }

    /// An empty scratch directory: a pooled one, else a new one.
    fn scratch_dir(&self) -> Result<ScratchDir, WasmError> {
        let pooled = self
            .inner
            .scratch_pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        if let Some(path) = pooled {
            return Ok(ScratchDir {
                path,
                reusable: false,
            });
        }
        // Unique across engines and processes sharing the root: process id, a process-wide
        // counter, and the time (in case a pid is reused).
        let n = RUNS.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        ScratchDir::create(
            &self.inner.config.scratch_root,
            &format!("run-{}-{n}-{nanos:08x}", std::process::id()),
        )
    }

    /// [`WasmEngine::load`] then [`WasmEngine::run`].
    pub fn run_spec(
        &self,
        spec: &WasmModuleSpec,
        invocation: &Invocation,
        grants: &Grants,
        limits: &Limits<WasmLimits>,
    ) -> Result<RunOutcome<WasmError, WasmReport>, WasmError> {
        let (module, limits) = self.load_for_run(spec, limits)?;
        self.run(&module, invocation, grants, &limits)
    }

    /// Loads `spec` within `limits.timeout` (see [`WasmEngine::load_within`]) and returns the
    /// limits for the run with the time the load took taken off the timeout: compiling and
    /// running together stay within it.
    pub fn load_for_run(
        &self,
        spec: &WasmModuleSpec,
        limits: &Limits<WasmLimits>,
    ) -> Result<(WasmModule, Limits<WasmLimits>), WasmError> {
        let started = Instant::now();
        let module = self.load_within(spec, Some(started + limits.timeout))?;
        let mut left = limits.clone();
        left.timeout = limits
            .timeout
            .saturating_sub(started.elapsed())
            .max(Duration::from_millis(1));
        Ok((module, left))
    }

    /// Runs one invocation in a fresh instance.
    ///
    /// `Err` means the run did not start (bad grants or limits, no free instance slot, the
    /// scratch directory could not be made). Once it starts, the outcome always carries the
    /// boundary report, and `outcome.result` says how it ended.
    pub fn run(
        &self,
        module: &WasmModule,
        invocation: &Invocation,
        grants: &Grants,
        limits: &Limits<WasmLimits>,
    ) -> Result<RunOutcome<WasmError, WasmReport>, WasmError> {
        let started = Instant::now();
        let config = &self.inner.config;
        if !Engine::same(module.inner.pre.module().engine(), &self.inner.engine) {
            return Err(WasmError::new(
                WasmErrorKind::InvalidModule,
                "module was loaded by another engine",
            ));
        }
        check_limits(limits, config)?;
        check_grants(grants, limits.tmp_bytes > 0)?;
        let envelope = abi::envelope(invocation);
        if envelope.len() as u64 > limits.boundary.stdin_bytes {
            return Err(WasmError::new(
                WasmErrorKind::InvalidInvocation,
                format!(
                    "envelope is {} bytes, above the {} byte stdin limit",
                    envelope.len(),
                    limits.boundary.stdin_bytes
                ),
            ));
        }

        let mut scratch_dir = if limits.tmp_bytes > 0 {
            Some(self.scratch_dir()?)
        } else {
            None
        };

        let stdout = MemoryOutputPipe::new(cap(limits.output_bytes).saturating_add(1));
        let stderr = MemoryOutputPipe::new(cap(limits.boundary.stderr_bytes));
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdin(MemoryInputPipe::new(envelope))
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .arg("capability")
            .allow_blocking_current_thread(true);
        if grants.has(effects::ENVIRONMENT_READ) {
            for (k, v) in &grants.env {
                wasi.env(k, v);
            }
        }
        let mut preopens = Vec::new();
        let preopen_error = |host: &Path, e: wasmtime::Error| {
            WasmError::new(
                WasmErrorKind::Io,
                format!(
                    "cannot open {:?} for the guest: {}",
                    host.display().to_string(),
                    root_message(&e)
                ),
            )
        };
        if let Some(dir) = &scratch_dir {
            wasi.preopened_dir(&dir.path, TMP_GUEST_PATH, FsPerms::ReadWrite)
                .map_err(|e| preopen_error(&dir.path, e))?;
            preopens.push(PreopenReport {
                guest: TMP_GUEST_PATH.into(),
                host: dir.path.display().to_string(),
                access: "scratch".into(),
                quota_bytes: Some(limits.tmp_bytes),
            });
        }
        // Granted directories show at their host path.
        for (dirs, perms, access) in [
            (&grants.read_paths, FsPerms::ReadOnly, "read"),
            (&grants.write_paths, FsPerms::ReadWrite, "write"),
        ] {
            for p in dirs {
                let at = p.display().to_string();
                wasi.preopened_dir(p, &at, perms)
                    .map_err(|e| preopen_error(p, e))?;
                preopens.push(PreopenReport {
                    guest: at.clone(),
                    host: at,
                    access: access.into(),
                    quota_bytes: None,
                });
            }
        }

        let boundary = WasmReport {
            engine: ENGINE.into(),
            abi: abi::ABI.into(),
            wasi: "preview1".into(),
            module_sha256: module.inner.sha256_hex.clone(),
            instance_allocator: "pooling".into(),
            fuel: limits.boundary.fuel,
            memory_limit: limits.memory_bytes,
            timeout_ms: millis(limits.timeout),
            epoch_tick_ms: millis(config.epoch_tick),
            max_wasm_stack: config.max_wasm_stack as u64,
            stdin_limit: limits.boundary.stdin_bytes,
            stdout_limit: limits.output_bytes,
            tmp_quota: limits.tmp_bytes,
            preopens,
            env: if grants.has(effects::ENVIRONMENT_READ) {
                grants.env.keys().cloned().collect()
            } else {
                Vec::new()
            },
            network: if grants.network() {
                "none: network.connect is granted but WASI preview 1 has no socket creation"
            } else {
                "none: WASI preview 1 has no socket creation and no sockets are preopened"
            }
            .into(),
            process_spawn: if grants.spawn() {
                "none: process.spawn is granted but WASI preview 1 has no process API"
            } else {
                "none: WASI preview 1 has no process API"
            }
            .into(),
            effects: grants.effects.iter().cloned().collect(),
        };

        let ticks = limits
            .timeout
            .as_nanos()
            .div_ceil(config.epoch_tick.as_nanos().max(1))
            .max(1);
        let mut store = Store::new(
            &self.inner.engine,
            RunState {
                wasi: wasi.build_p1(),
                memory_limit: cap(limits.memory_bytes),
                table_limit: cap(limits.boundary.table_elements),
                memory_hit: false,
                scratch: scratch_dir
                    .as_ref()
                    .map(|d| Scratch::new(d.path.clone(), limits.tmp_bytes, 3)),
                deadline: started + limits.timeout,
            },
        );
        store.limiter(|s| s as &mut dyn wasmtime::ResourceLimiter);
        store
            .set_fuel(limits.boundary.fuel)
            .map_err(|e| WasmError::new(WasmErrorKind::Internal, root_message(&e)))?;
        store.set_epoch_deadline(u64::try_from(ticks).unwrap_or(u64::MAX));
        store.epoch_deadline_trap();

        let ended = match module.inner.pre.instantiate(&mut store) {
            Err(e) if e.is::<PoolConcurrencyLimitError>() => {
                return Err(WasmError::new(
                    WasmErrorKind::Capacity,
                    format!(
                        "all {} pooled instance slots are in use",
                        config.max_instances
                    ),
                ));
            }
            Err(e) => Err(e),
            Ok(instance) => match instance.get_typed_func::<(), ()>(&mut store, "_start") {
                Ok(start) => start.call(&mut store, ()),
                Err(e) => Err(e),
            },
        };

        let fuel_consumed = limits
            .boundary
            .fuel
            .saturating_sub(store.get_fuel().unwrap_or(0));
        let state = store.data();
        let flags = Flags {
            memory: state.memory_hit,
            tmp: state.scratch.as_ref().is_some_and(|s| s.hit),
        };
        let tmp_untouched = state.scratch.as_ref().is_some_and(|s| !s.touched);
        drop(store);
        // A /tmp the guest never created anything in is still empty: keep it for the next
        // run (creating and removing a directory costs ~0.1 + ~0.8 ms on ext4 here).
        if let Some(dir) = scratch_dir.as_mut()
            && tmp_untouched
        {
            let mut pool = self
                .inner
                .scratch_pool
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if pool.len() < config.max_instances as usize {
                pool.push(dir.path.clone());
                dir.reusable = true;
            }
        }
        drop(scratch_dir);

        let out = stdout.contents();
        let err = stderr.contents();
        let stderr_text = String::from_utf8_lossy(&err).into_owned();
        let result = conclude(ended, &out, &stderr_text, limits, flags);
        Ok(RunOutcome {
            result,
            // The ABI has no way to say a hook is missing: the guest answers for it.
            hook_present: true,
            boundary,
            duration: started.elapsed(),
            stderr: stderr_text,
            fuel_consumed: Some(fuel_consumed),
        })
    }
}

/// Runs started by this process, for unique scratch directory names.
static RUNS: AtomicU64 = AtomicU64::new(0);

struct Flags {
    memory: bool,
    tmp: bool,
}

fn cap(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn check_limits(limits: &Limits<WasmLimits>, config: &EngineConfig) -> Result<(), WasmError> {
    let bad = |m: String| Err(WasmError::new(WasmErrorKind::InvalidLimits, m));
    if limits.memory_bytes > config.max_memory_bytes {
        return bad(format!(
            "memory limit {} is above the engine's pooled slot size {}",
            limits.memory_bytes, config.max_memory_bytes
        ));
    }
    if limits.timeout.is_zero() || limits.boundary.fuel == 0 || limits.output_bytes == 0 {
        return bad("timeout, fuel and stdout limit must be positive".into());
    }
    Ok(())
}

/// A wasmtime error with its whole context chain, on one line.
fn root_message(e: &wasmtime::Error) -> String {
    format!("{e:#}")
}

fn last_line(stderr: &str) -> Option<&str> {
    stderr.lines().rev().map(str::trim).find(|l| !l.is_empty())
}

fn with_stderr(message: String, stderr: &str) -> String {
    match last_line(stderr) {
        Some(line) => format!("{message} (stderr: {line})"),
        None => message,
    }
}

/// Turns how `_start` ended, plus stdout and the limit flags, into the run's result.
fn conclude(
    ended: wasmtime::Result<()>,
    stdout: &[u8],
    stderr: &str,
    limits: &Limits<WasmLimits>,
    flags: Flags,
) -> Result<Value, WasmError> {
    let err = WasmError::new;
    let stdout_over = stdout.len() as u64 > limits.output_bytes;
    let exit = match ended {
        Ok(()) => Ok(0),
        Err(e) => match e.downcast_ref::<I32Exit>() {
            Some(code) => Ok(code.0),
            None => Err(e),
        },
    };
    let primary = match exit {
        Err(e) => {
            if let Some(stop) = e.downcast_ref::<Stop>() {
                err(stop.kind, stop.message.clone())
            } else if let Some(trap) = e.downcast_ref::<Trap>() {
                match trap {
                    Trap::OutOfFuel => err(
                        WasmErrorKind::OutOfFuel,
                        format!(
                            "guest used its whole fuel budget of {}",
                            limits.boundary.fuel
                        ),
                    ),
                    Trap::Interrupt => err(
                        WasmErrorKind::Timeout,
                        format!(
                            "guest ran past its timeout of {} ms",
                            millis(limits.timeout)
                        ),
                    ),
                    Trap::StackOverflow => err(
                        WasmErrorKind::StackOverflow,
                        "guest exhausted its call stack (unbounded recursion)".to_string(),
                    ),
                    other => err(
                        WasmErrorKind::Trap,
                        with_stderr(format!("guest trapped: {other}"), stderr),
                    ),
                }
            } else {
                let message = root_message(&e);
                if message.contains("write beyond capacity of MemoryOutputPipe") {
                    if stdout_over {
                        err(
                            WasmErrorKind::StdoutLimit,
                            format!(
                                "guest wrote more than {} bytes to stdout",
                                limits.output_bytes
                            ),
                        )
                    } else {
                        err(
                            WasmErrorKind::StdoutLimit,
                            format!(
                                "guest wrote more than {} bytes to stderr",
                                limits.boundary.stderr_bytes
                            ),
                        )
                    }
                } else {
                    err(
                        WasmErrorKind::Trap,
                        with_stderr(format!("guest failed: {message}"), stderr),
                    )
                }
            }
        }
        Ok(_) if stdout_over => err(
            WasmErrorKind::StdoutLimit,
            format!(
                "guest wrote more than {} bytes to stdout",
                limits.output_bytes
            ),
        ),
        Ok(0) => match abi::parse_reply(stdout) {
            Ok(Ok(output)) => return Ok(output),
            Ok(Err(guest)) => WasmError::guest(guest),
            Err(e) => e,
        },
        Ok(code) => match abi::parse_reply(stdout) {
            Ok(Err(guest)) => WasmError::guest(guest),
            _ => err(
                WasmErrorKind::Exit,
                with_stderr(format!("guest exited with status {code}"), stderr),
            ),
        },
    };
    // A guest that failed after a limit refused it failed because of that limit.
    let blamable = matches!(
        primary.kind(),
        WasmErrorKind::Trap | WasmErrorKind::Exit | WasmErrorKind::Protocol | WasmErrorKind::Guest
    );
    if blamable && flags.memory {
        return Err(err(
            WasmErrorKind::MemoryLimit,
            format!(
                "guest tried to grow its memory past the {} byte limit ({})",
                limits.memory_bytes,
                primary.message()
            ),
        ));
    }
    if blamable && flags.tmp {
        return Err(err(
            WasmErrorKind::TmpQuota,
            format!(
                "guest exceeded its {} byte /tmp quota ({})",
                limits.tmp_bytes,
                primary.message()
            ),
        ));
    }
    Err(primary)
}

/// Removes scratch directories left by processes that no longer exist (a killed host cannot
/// clean up after itself). Best effort, Linux only: names are `run-<pid>-...`.
fn sweep_stale_scratch(root: &Path) {
    if !cfg!(target_os = "linux") {
        return;
    }
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("run-"))
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// A per-run scratch directory, removed (with everything in it) when dropped unless it went
/// back to the engine's pool of empty scratch directories.
struct ScratchDir {
    path: PathBuf,
    reusable: bool,
}

impl ScratchDir {
    fn create(root: &Path, name: &str) -> Result<ScratchDir, WasmError> {
        let path = root.join(name);
        let mut builder = std::fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(&path).map_err(|e| {
            WasmError::new(
                WasmErrorKind::Io,
                format!(
                    "cannot create scratch directory {:?}: {e}",
                    path.display().to_string()
                ),
            )
        })?;
        Ok(ScratchDir {
            path,
            reusable: false,
        })
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if !self.reusable {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}
