//! # capability-wasm
//!
//! The WASM executor of the Capability 1.x runtime: it runs portable, untrusted capability
//! code compiled to WebAssembly (`wasm32-wasip1`) on wasmtime 48 behind an explicit boundary,
//! and reports that boundary with every run. It has no `unsafe` and does not depend on the
//! runtime crate: [`WasmExecutor`] implements `capability-exec`'s `Executor` for `.wasm`
//! package modules (the runtime, and the sandbox crate's `ModuleExecutor` for `auto`, use it).
//!
//! ## The executor
//!
//! [`WasmExecutor`] runs every hook of a `.wasm` package module on one engine (the
//! process-wide one from [`WasmExecutor::new`], or [`WasmExecutor::with_engine`]). Before
//! anything compiles, the module path is kept inside the package root, the file is read under
//! the engine's size limit and its bytes are checked against the declared integrity
//! (`capability-exec`'s checks, shared with every executor). Grants are the authorized
//! effects and the host's resources they open ([`WasmExecutor::with_host_grants`]; plan hooks
//! get none); the limits ([`WasmExecutor::with_limits`]) are tightened by each request's
//! timeout and governance requirement. Failures map to what the capability "threw": a
//! guest's error keeps its code in the details, an integrity failure is
//! `INVALID_PACKAGE_DECLARATION`, a limit is a named error (`WasmOutOfFuel`, ...).
//!
//! ## API
//!
//! ```no_run
//! use capability_wasm::{
//!     EngineConfig, Grants, Invocation, Limits, WasmEngine, WasmLimits, WasmModuleSpec,
//! };
//! use serde_json::json;
//!
//! # fn main() -> Result<(), capability_wasm::WasmError> {
//! let engine = WasmEngine::new(EngineConfig::default())?; // share one per process
//! let module = engine.load(
//!     &WasmModuleSpec::from_path("guest-add.wasm")
//!         .with_integrity("sha256-<hex or base64>")
//!         .with_manifest(json!({"specVersion": "0.1", "id": "math/add" /* ... */})),
//! )?; // verified, compiled once, cached by SHA-256
//! let outcome = engine.run(
//!     &module,
//!     &Invocation::execute(json!({"a": 2, "b": 3})),
//!     &Grants::none(),
//!     &Limits::<WasmLimits>::default(),
//! )?; // Err: the run could not start
//! match outcome.result {
//!     Ok(output) => println!("{output}"), // {"result": 5}
//!     Err(e) => println!("{}: {}", e.kind(), e.message()), // e.g. outOfFuel: ...
//! }
//! println!("{}", serde_json::to_string(&outcome.boundary).unwrap_or_default());
//! # Ok(()) }
//! ```
//!
//! * [`WasmEngine::new`]`(`[`EngineConfig`]`)` builds one wasmtime `Engine` with fuel metering,
//!   epoch interruption and a pooling instance allocator (`max_instances` slots of at most
//!   `max_memory_bytes` each), a WASI preview 1 linker, a compiled-module cache and an
//!   epoch ticker thread (stopped when the last clone is dropped). `WasmEngine` is
//!   `Send + Sync + Clone`; runs on many threads at once are independent.
//! * [`WasmEngine::load`]`(&`[`WasmModuleSpec`]`)` returns a [`WasmModule`]: the bytes (given or
//!   read from a path; a file above `EngineConfig::max_module_bytes` is refused from its size
//!   before it is read) are checked against `integrity` *before* anything parses them
//!   ([`verify_integrity`]: `sha256-`hex, hex, `sha256-`base64, base64, or `sha512-`base64 —
//!   `capability-exec`'s checker, the one every module kind uses),
//!   then looked up in the cache by the SHA-256 of the exact bytes, else compiled and linked
//!   once. A module that imports anything the host does not provide (say a socket call) fails
//!   here with [`WasmErrorKind::Link`]. Components are refused (build for `wasm32-wasip1`).
//! * [`WasmEngine::run`]`(&module, &`[`Invocation`]`, &`[`Grants`]`, &`[`Limits`]`)` instantiates a
//!   fresh instance from the pool, runs `_start` and returns a [`RunOutcome`]:
//!   `result: Result<Value, WasmError>`, [`WasmReport`], duration, fuel consumed and the
//!   start of stderr (the run vocabulary — [`Grants`], [`Limits`], [`Invocation`], [`Op`],
//!   [`RunOutcome`], [`GuestError`] — is `capability-exec`'s, shared with every boundary;
//!   [`WasmLimits`] is what only this boundary limits). `run` itself fails only when the run cannot start (inconsistent grants
//!   or limits, all pool slots busy: [`WasmErrorKind::Capacity`], scratch directory I/O).
//!   [`WasmEngine::run_spec`] is `load` + `run`.
//! * Every failure is a [`WasmError`]: a [`WasmErrorKind`] (serializable, e.g. `outOfFuel`,
//!   `timeout`, `memoryLimit`, `stackOverflow`, `tmpQuota`, `stdoutLimit`, `trap`, `exit`,
//!   `protocol`, `guest`, ...) and a one-line message for a failed receipt;
//!   [`WasmError::error_code`] maps it to a reference error code.
//!
//! ## The capability ABI (`capability-wasi-p1/1`)
//!
//! A capability is a **WASI preview 1 command module**: it exports `_start` and `memory` and
//! imports only `wasi_snapshot_preview1` functions. Any language that targets
//! `wasm32-wasip1` can implement it with its ordinary stdin/stdout.
//!
//! 1. **Input.** The host writes one JSON envelope to stdin, then end-of-file:
//!    `{"op": "plan"|"execute"|"verify"|"rollback", "input": <any>, "plan"?: <plan>,
//!    "output"?: <output>, "receipt"?: <receipt>}` — the same envelope as the project's
//!    native process protocol. `plan` is the authorized plan (execute, verify, rollback);
//!    `output` is the output being verified or rolled back; `receipt` is the receipt of the
//!    execution being rolled back. At most `WasmLimits::stdin_bytes` bytes.
//! 2. **Output.** The guest writes exactly one JSON object to stdout (whitespace around it is
//!    allowed), at most `Limits::output_bytes` bytes:
//!    * `{"output": <any>}` on success. Per op: `plan` → the plan hook's result
//!      `{"summary"?, "effects"?, "data"?}` (`{}` when the capability has none); `execute` →
//!      the capability output; `verify` → the verification result (`null` when the
//!      capability has no verify hook); `rollback` → the rollback result;
//!    * `{"error": {"message": <string>, "code"?: <string>}}` on failure; `code` should be
//!      one of the 13 reference codes (`INVALID_INPUT`, `ROLLBACK_UNAVAILABLE`, ...).
//!
//!    Any other shape, or no reply, is a [`WasmErrorKind::Protocol`] error.
//! 3. **Exit.** Returning from `_start` or `proc_exit(0)` means "read my reply". A non-zero
//!    exit status is a [`WasmErrorKind::Exit`] error unless stdout holds an `{"error": ...}`
//!    reply, which is then reported. Stderr is free-form diagnostics, kept (capped at
//!    `WasmLimits::stderr_bytes`) in [`RunOutcome::stderr`]; its last line is quoted in trap and
//!    exit messages.
//! 4. **Manifest (optional).** A module may embed its manifest as UTF-8 JSON in a custom
//!    section named [`MANIFEST_SECTION`] (`capability-manifest`). When both it and the
//!    spec's inert manifest are present they must have the same canonical hash
//!    (`capability_core::json::canonical_hash`), else [`WasmErrorKind::ManifestMismatch`].
//!    In Rust: `#[used] #[unsafe(link_section = "capability-manifest")] static M: [u8; N] =
//!    *include_bytes!("../manifest.json");`.
//!
//! `argv` is `["capability"]`. The example guest is `examples/guest-add` (`math/add`, in
//! Rust); its built module and the hostile guests are checked in under `tests/fixtures/`,
//! whose README gives the exact rebuild command (from `crates/capability-wasm/`):
//!
//! ```sh
//! cd examples/guest-add
//! cargo build --release --target wasm32-wasip1
//! cp target/wasm32-wasip1/release/guest-add.wasm ../../tests/fixtures/
//! ```
//!
//! ## The boundary
//!
//! * **CPU**: a fuel budget (`WasmLimits::fuel`, about one unit per instruction) and a wall-clock
//!   timeout enforced by epoch interruption (`EngineConfig::epoch_tick`, 5 ms: the timeout
//!   holds to within one tick). Host calls are not interrupted by epochs, so `poll_oneoff`
//!   (sleep) past the deadline is refused at once as a timeout.
//! * **Memory**: `Limits::memory_bytes` through a `ResourceLimiter`, bounded by the pool's
//!   slot size; a refused growth makes the allocation fail in the guest (and a run that then
//!   fails is reported as [`WasmErrorKind::MemoryLimit`]). Tables are capped too.
//! * **Stack**: `EngineConfig::max_wasm_stack`; unbounded recursion traps
//!   ([`WasmErrorKind::StackOverflow`]). This is the WASM analogue of a fork bomb: there are
//!   no threads or processes to multiply.
//! * **Files**: nothing but what is granted. `filesystem.read` grants mount
//!   `Grants::read_paths` read-only; `filesystem.write` grants mount `Grants::write_paths`
//!   read-write, each at its host path (as in every boundary), which must be absolute,
//!   normalized and not `/tmp` itself. WASI resolves paths inside a preopen only (no `..` or
//!   symlink escapes). Secrets have no channel into a guest: `Grants::secrets` opens nothing.
//! * **`/tmp`**: when `Limits::tmp_bytes > 0`, a private per-run scratch directory (created
//!   `0700` under `EngineConfig::scratch_root`, removed after the run; one in which the guest
//!   created nothing is still empty and is pooled for the next run) is mounted at `/tmp`.
//!   Its quota is enforced by interposing on the preview 1 calls that can grow it (notes in
//!   `src/host.rs`): writes that would pass the quota fail with `EDQUOT` before touching the
//!   disk, links and renames across the `/tmp` boundary fail with `EXDEV`, and usage (file
//!   sizes plus 512 bytes per entry) is re-measured whenever the running estimate nears the
//!   quota. A run that fails after the quota refused a write is reported as
//!   [`WasmErrorKind::TmpQuota`]. (A virtual in-memory `/tmp` would need a filesystem layer
//!   that wasmtime-wasi's preview 1 does not expose; a size-limited tmpfs would need mount
//!   privileges.)
//! * **Environment**: empty unless `environment.read` is granted, then exactly
//!   `Grants::env` (host-chosen); the host's own environment is never inherited. The report
//!   lists variable names, never values.
//! * **Network**: none. WASI preview 1 has no call that creates or connects a socket, and no
//!   socket is preopened, so `network.connect` opens nothing either; modules importing a
//!   socket-creating function (`sock_open`, `sock_connect`, ...) fail to link.
//! * **Processes**: none. WASI preview 1 has no process API at all.
//! * **Clocks and randomness** are the host's (not a grant).
//!
//! The [`WasmReport`] of each run records all of the above: `kind: "wasm"`,
//! `engine: "wasmtime 48"`, the module digest, fuel, memory limit, timeout, tick, stack,
//! stdin/stdout caps, `/tmp` quota, every preopen with its access, env names, and network and
//! process status.

mod abi;
mod binary;
mod config;
mod engine;
mod error;
mod executor;
mod host;
mod integrity;

pub use abi::ABI;
pub use binary::MANIFEST_SECTION;
/// The run vocabulary every executor shares, from `capability-exec`.
pub use capability_exec::{
    Grants, GuestError, Invocation, Limits, Op, PreopenReport, RunOutcome, WasmReport, effects,
};
pub use config::{EngineConfig, TMP_GUEST_PATH, WasmLimits};
pub use engine::{ENGINE, ModuleSource, WasmEngine, WasmModule, WasmModuleSpec};
pub use error::{WasmError, WasmErrorKind};
pub use executor::WasmExecutor;
pub use host::ENTRY_COST;
pub use integrity::{sha256, verify_integrity};
