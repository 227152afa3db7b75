//! # capability-runtime
//!
//! The governed Capability runtime: define capabilities in Rust, register and discover them,
//! and run them through the whole lifecycle — plan → authorize → execute → verify →
//! receipt → rollback — with receipts kept in a durable store.
//!
//! ```
//! use capability_runtime::{Capability, CapabilityRuntime, ExecuteOptions};
//! use serde_json::json;
//!
//! let add = Capability::builder(json!({
//!     "specVersion": "0.1", "id": "math/add", "version": "1.0.0",
//!     "name": "Add", "description": "Adds two numbers.",
//!     "input": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
//!               "required": ["a", "b"]},
//!     "output": {"type": "object", "properties": {"result": {"type": "number"}}, "required": ["result"]},
//!     "effects": []
//! }))
//! .execute_json(|input, _ctx| {
//!     let sum = input["a"].as_f64().unwrap_or(0.0) + input["b"].as_f64().unwrap_or(0.0);
//!     Ok(json!({"result": sum}))
//! })
//! .build()?;
//! let runtime = CapabilityRuntime::default();
//! runtime.register(add)?;
//! let receipt = runtime.invoke("math/add", json!({"a": 20, "b": 22}), &ExecuteOptions::default())?;
//! assert_eq!(receipt.output, Some(json!({"result": 42})));
//! # Ok::<(), capability_core::CapabilityError>(())
//! ```
//!
//! ## Semantics (the reference's, with full JSON Schema)
//!
//! * **plan**: input validated against the manifest's input schema (JSON Schema 2020-12;
//!   `INVALID_INPUT` with `[{path, message}]` details); plan hook precedence: the
//!   capability's, then the executor's, then the default; planned effects must be declared
//!   (`INVALID_PLAN`); the plan is fingerprinted (canonical hash, interoperable with the
//!   TypeScript runtime).
//! * **authorize**: re-checks plan integrity, then effect authorization under the host's
//!   [`EffectPolicy`](capability_core::authorization::EffectPolicy) (deny wins; declared
//!   effects are denied unless allowed).
//! * **execute**: rejects drift (fingerprint, input hash, version); refuses without a receipt
//!   when authorization fails; otherwise every attempt leaves a receipt — a failed receipt is
//!   stored before the error is returned. Native (Rust) capabilities run in process; package
//!   modules run only through an isolating [`Executor`].
//! * **rollback**: only from a successful receipt of a reversible capability with a rollback
//!   implementation, after authorization.
//!
//! ## Executors
//!
//! The [`Executor`] trait and its vocabulary ([`ExecutionRequest`], [`Executed`],
//! [`ExecutionFailure`], [`HookError`], [`ModuleSource`], [`CapabilityView`], ...) are defined
//! in `capability-exec`, so that isolating executors do not depend on this crate; they are
//! re-exported here (and from [`executor`] and [`capability`]) at their old paths.
//! [`Capability`] implements [`CapabilityView`]; [`InProcessExecutor`] reaches its Rust hooks
//! by downcasting the view and refuses anything else.

pub mod builtins;
pub mod capability;
pub mod composition;
pub mod defaults;
pub mod evals;
pub mod executor;
pub mod governance;
pub mod mcp_adapter;
pub mod registry;
pub mod runtime;
pub mod source;
pub mod store;
pub mod trust;

pub use capability::{
    AsyncContext, Capability, CapabilityBuilder, ExecutionContext, HookError, HookResult,
    Implementation, ModuleSource,
};
pub use executor::{
    CapabilityView, Executed, ExecutionFailure, ExecutionRequest, Executor, InProcessExecutor,
};
pub use governance::Caller;
pub use registry::{CapabilityRegistry, Discovered, Embedder, EmbeddingRanker, Ranker};
pub use runtime::{
    CapabilityRuntime, Clock, Completed, ExecuteOptions, Outcome, PendingApproval, RuntimeBuilder,
    SystemClock,
};
pub use source::{Builtins, CapabilitySource, LocalPackage, PackageFile};
pub use store::{MemoryReceiptStore, ReceiptQuery, ReceiptStore, SqliteReceiptStore};
