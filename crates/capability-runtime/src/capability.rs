//! Defining capabilities: a validated manifest, compiled schemas, provenance, and an
//! implementation — Rust hooks that run in process (the host's own, trusted code), a package
//! module that must run behind an isolation boundary, or nothing (inspect only).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use capability_core::binder::CancelToken;
use capability_core::manifest::{Manifest, manifest_from_legacy};
use capability_core::plan::PlanDetails;
use capability_core::receipt::{Receipt, Verification};
use capability_core::schema::{CompiledSchema, SchemaIssue};
use capability_core::{CapabilityError, ErrorCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use capability_exec::CapabilityView;

// The hook vocabulary is shared with every executor; it lives in `capability-exec` and keeps
// its paths here (`capability_runtime::capability::{HookError, HookResult, ...}`).
pub use capability_exec::{ExecutionContext, HookError, HookResult, ModuleSource};

/// The owned context an async `execute` receives.
#[derive(Clone, Debug)]
pub struct AsyncContext {
    pub capability_id: String,
    pub approved: bool,
    pub metadata: Option<Value>,
    pub cancel: CancelToken,
}

/// A boxed future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

pub(crate) type SyncExecute =
    dyn Fn(&Value, &ExecutionContext<'_>) -> HookResult<Value> + Send + Sync;
type AsyncExecute = dyn Fn(Value, AsyncContext) -> BoxFuture<HookResult<Value>> + Send + Sync;
type PlanHook = dyn Fn(&Value, &ExecutionContext<'_>) -> HookResult<PlanDetails> + Send + Sync;
type VerifyHook =
    dyn Fn(&Value, &Value, &ExecutionContext<'_>) -> HookResult<Verification> + Send + Sync;
type RollbackHook = dyn Fn(&Receipt, &ExecutionContext<'_>) -> HookResult<Value> + Send + Sync;

/// The `execute` hook, synchronous or asynchronous.
#[derive(Clone)]
pub enum ExecuteHook {
    Sync(Arc<SyncExecute>),
    Async(Arc<AsyncExecute>),
}

/// Rust hooks of an in-process capability.
#[derive(Clone)]
pub struct Hooks {
    pub execute: ExecuteHook,
    pub plan: Option<Arc<PlanHook>>,
    pub verify: Option<Arc<VerifyHook>>,
    pub rollback: Option<Arc<RollbackHook>>,
}

/// How a capability is implemented.
#[derive(Clone)]
pub enum Implementation {
    /// Rust hooks: the host's own code, run in process.
    Native(Hooks),
    /// A package module, run by an isolating executor.
    Module(ModuleSource),
    /// Run by its own executor: an operation of a remote API (an OpenAPI HTTP call, an MCP
    /// upstream tool) that the executor reaches across its boundary. The executor's plan,
    /// verify and rollback hooks apply.
    Executor(Arc<dyn capability_exec::Executor>),
    /// Metadata only: inspectable, never executable.
    Inert,
}

/// A registered capability: manifest, compiled schemas, provenance and implementation.
pub struct Capability {
    /// Shared so that a hook run on a helper thread (an execution with a timeout) can keep
    /// it without copying.
    manifest: Arc<Manifest>,
    input_schema: Schema,
    output_schema: Schema,
    implementation: Implementation,
    provenance: Option<Value>,
}

/// An input or output schema, compiled when the capability is made (every capability from
/// outside: a schema that does not compile refuses it) or when first used (the built-ins,
/// whose manifests are embedded in this crate and checked by its tests: a one-shot command
/// then compiles only the schemas of the capability it runs).
struct Schema(OnceLock<Result<Option<CompiledSchema>, String>>);

impl Schema {
    /// Compiled now.
    fn eager(schema: Option<&Value>, which: &str) -> Result<Schema, CapabilityError> {
        let compiled = compile(schema, which)?;
        Ok(Schema(OnceLock::from(Ok(compiled))))
    }

    /// Compiled on first use.
    fn deferred() -> Schema {
        Schema(OnceLock::new())
    }

    /// The issues of `value` against `schema` (the manifest's, which this was or will be
    /// compiled from); a schema that does not compile is one issue, never a pass.
    fn validate(&self, schema: Option<&Value>, which: &str, value: &Value) -> Vec<SchemaIssue> {
        let compiled = self
            .0
            .get_or_init(|| compile(schema, which).map_err(|e| e.message));
        match compiled {
            Ok(Some(s)) => s.validate(value),
            Ok(None) => Vec::new(),
            Err(e) => vec![SchemaIssue {
                path: "$".into(),
                message: e.clone(),
            }],
        }
    }
}

impl std::fmt::Debug for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capability")
            .field("id", &self.manifest.id)
            .finish()
    }
}

fn compile(schema: Option<&Value>, which: &str) -> Result<Option<CompiledSchema>, CapabilityError> {
    match schema {
        None => Ok(None),
        Some(s) => CompiledSchema::compile(s).map(Some).map_err(|e| {
            CapabilityError::new(ErrorCode::InvalidManifest, format!("{which} schema: {e}"))
        }),
    }
}

impl Capability {
    /// A capability from a manifest and an implementation; validates the manifest and
    /// compiles its schemas.
    pub fn new(
        manifest: Manifest,
        implementation: Implementation,
    ) -> Result<Self, CapabilityError> {
        capability_core::manifest::assert_valid_manifest(&manifest.to_value())?;
        Ok(Capability {
            input_schema: Schema::eager(manifest.input.as_ref(), "input")?,
            output_schema: Schema::eager(manifest.output.as_ref(), "output")?,
            manifest: Arc::new(manifest),
            implementation,
            provenance: None,
        })
    }

    /// An embedded built-in: its manifest is not validated again and its schemas are
    /// compiled on first use (see [`Schema`]); the crate's tests check every built-in the
    /// way [`Capability::new`] checks a manifest.
    pub(crate) fn embedded(manifest: Manifest, hooks: Hooks, provenance: Value) -> Self {
        Capability {
            manifest: Arc::new(manifest),
            input_schema: Schema::deferred(),
            output_schema: Schema::deferred(),
            implementation: Implementation::Native(hooks),
            provenance: Some(provenance),
        }
    }

    /// Starts a builder from manifest JSON.
    pub fn builder(manifest: Value) -> CapabilityBuilder {
        CapabilityBuilder::start(manifest, false)
    }

    /// Starts a builder from a legacy definition (`{name, description, effects?, ...}`;
    /// the id defaults to `local/<slug(name)>`).
    pub fn legacy(definition: Value) -> CapabilityBuilder {
        CapabilityBuilder::start(definition, true)
    }

    /// An inert capability from manifest JSON.
    pub fn inert(manifest: &Value) -> Result<Self, CapabilityError> {
        Capability::new(Manifest::from_value(manifest)?, Implementation::Inert)
    }

    /// A package-module capability from its inert manifest.
    pub fn module(manifest: &Value, source: ModuleSource) -> Result<Self, CapabilityError> {
        Capability::new(
            Manifest::from_value(manifest)?,
            Implementation::Module(source),
        )
    }

    /// A capability run by its own executor (see [`Implementation::Executor`]).
    pub fn with_executor(
        manifest: &Value,
        executor: Arc<dyn capability_exec::Executor>,
    ) -> Result<Self, CapabilityError> {
        Capability::new(
            Manifest::from_value(manifest)?,
            Implementation::Executor(executor),
        )
    }

    /// A capability the host defines under a name of its own, run by its own executor: an
    /// MCP upstream tool is `mcp.<server>.<tool>`, named after the server and the tool as
    /// policies see them. The manifest is checked as a package's is, except that its `id`
    /// need not be a package capability id (`namespace/name`); it must be 1 to 256
    /// characters without whitespace or control characters.
    pub fn host_defined(
        manifest: &Value,
        executor: Arc<dyn capability_exec::Executor>,
    ) -> Result<Self, CapabilityError> {
        let invalid = |m: String| CapabilityError::new(ErrorCode::InvalidManifest, m);
        let id = manifest
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid("manifest.id must be a string".into()))?;
        if id.is_empty()
            || id.len() > 256
            || id.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(invalid(format!(
                "host-defined capability id {id:?} must be 1 to 256 characters without whitespace"
            )));
        }
        let mut checked = manifest.clone();
        checked["id"] = Value::String("host/defined".into());
        capability_core::manifest::assert_valid_manifest(&checked)?;
        let manifest: Manifest = serde_json::from_value(manifest.clone())
            .map_err(|e| invalid(format!("manifest: {e}")))?;
        Ok(Capability {
            input_schema: Schema::eager(manifest.input.as_ref(), "input")?,
            output_schema: Schema::eager(manifest.output.as_ref(), "output")?,
            manifest: Arc::new(manifest),
            implementation: Implementation::Executor(executor),
            provenance: None,
        })
    }

    /// Attaches a provenance record (copied into every receipt).
    pub fn with_provenance(mut self, provenance: Value) -> Self {
        self.provenance = Some(provenance);
        self
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    pub fn id(&self) -> &str {
        &self.manifest.id
    }

    pub fn implementation(&self) -> &Implementation {
        &self.implementation
    }

    pub fn provenance(&self) -> Option<&Value> {
        self.provenance.as_ref()
    }

    /// In-process code: the host's own Rust hooks.
    pub fn is_native(&self) -> bool {
        matches!(self.implementation, Implementation::Native(_))
    }

    /// Input issues; empty when valid or when there is no input schema.
    pub fn validate_input(&self, input: &Value) -> Vec<SchemaIssue> {
        self.input_schema
            .validate(self.manifest.input.as_ref(), "input", input)
    }

    /// Output issues; empty when valid or when there is no output schema.
    pub fn validate_output(&self, output: &Value) -> Vec<SchemaIssue> {
        self.output_schema
            .validate(self.manifest.output.as_ref(), "output", output)
    }

    /// The reference `inspectCapability`: manifest members plus `executable: false`.
    pub fn inspect(&self) -> Value {
        self.manifest.inspect()
    }

    pub(crate) fn hooks(&self) -> Option<&Hooks> {
        match &self.implementation {
            Implementation::Native(h) => Some(h),
            _ => None,
        }
    }

    /// The manifest, shared.
    pub(crate) fn shared_manifest(&self) -> Arc<Manifest> {
        Arc::clone(&self.manifest)
    }
}

/// What executors see of a capability. The Rust hooks are not part of the view: the
/// runtime's in-process executor reaches them through [`CapabilityView::as_any`].
impl CapabilityView for Capability {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn id(&self) -> &str {
        &self.manifest.id
    }

    fn module_source(&self) -> Option<&ModuleSource> {
        match &self.implementation {
            Implementation::Module(m) => Some(m),
            _ => None,
        }
    }

    fn provenance(&self) -> Option<&Value> {
        self.provenance.as_ref()
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Builds a capability from manifest JSON and Rust hooks; [`CapabilityBuilder::build`]
/// validates the manifest and compiles its schemas.
pub struct CapabilityBuilder {
    manifest: Result<Value, CapabilityError>,
    execute: Option<ExecuteHook>,
    plan: Option<Arc<PlanHook>>,
    verify: Option<Arc<VerifyHook>>,
    rollback: Option<Arc<RollbackHook>>,
    provenance: Option<Value>,
    legacy: bool,
}

fn decode<I: DeserializeOwned>(input: &Value) -> HookResult<I> {
    I::deserialize(input).map_err(|e| {
        HookError::Capability(CapabilityError::new(
            ErrorCode::InvalidInput,
            format!("Input could not be decoded: {e}"),
        ))
    })
}

fn encode<O: Serialize>(output: O) -> HookResult<Value> {
    serde_json::to_value(output)
        .map_err(|e| HookError::msg(format!("Output could not be encoded: {e}")))
}

impl CapabilityBuilder {
    fn start(manifest: Value, legacy: bool) -> Self {
        CapabilityBuilder {
            manifest: Ok(manifest),
            execute: None,
            plan: None,
            verify: None,
            rollback: None,
            provenance: None,
            legacy,
        }
    }

    fn set_execute(mut self, execute: ExecuteHook) -> Self {
        self.execute = Some(execute);
        self
    }

    /// A synchronous `execute` over JSON values.
    pub fn execute_json<F>(self, f: F) -> Self
    where
        F: Fn(&Value, &ExecutionContext<'_>) -> HookResult<Value> + Send + Sync + 'static,
    {
        self.set_execute(ExecuteHook::Sync(Arc::new(f)))
    }

    /// A synchronous, typed `execute`: the input is decoded with serde (after schema
    /// validation) and the output encoded.
    pub fn execute<I, O, F>(self, f: F) -> Self
    where
        I: DeserializeOwned,
        O: Serialize,
        F: Fn(I, &ExecutionContext<'_>) -> HookResult<O> + Send + Sync + 'static,
    {
        self.execute_json(move |input, ctx| encode(f(decode(input)?, ctx)?))
    }

    /// An asynchronous, typed `execute`. The runtime drives the future itself, so a timeout
    /// or cancellation drops it at its next suspension point.
    pub fn execute_async<I, O, F, Fut>(self, f: F) -> Self
    where
        I: DeserializeOwned,
        O: Serialize,
        F: Fn(I, AsyncContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HookResult<O>> + Send + 'static,
    {
        let f = Arc::new(f);
        self.set_execute(ExecuteHook::Async(Arc::new(
            move |input: Value, ctx: AsyncContext| {
                let f = Arc::clone(&f);
                Box::pin(async move {
                    let decoded = decode(&input)?;
                    encode(f(decoded, ctx).await?)
                }) as BoxFuture<HookResult<Value>>
            },
        )))
    }

    /// A plan hook (precedence: this hook, then the executor's, then the default plan).
    pub fn plan<F>(mut self, f: F) -> Self
    where
        F: Fn(&Value, &ExecutionContext<'_>) -> HookResult<PlanDetails> + Send + Sync + 'static,
    {
        self.plan = Some(Arc::new(f));
        self
    }

    /// A verification hook over `(input, output)`.
    pub fn verify<F>(mut self, f: F) -> Self
    where
        F: Fn(&Value, &Value, &ExecutionContext<'_>) -> HookResult<Verification>
            + Send
            + Sync
            + 'static,
    {
        self.verify = Some(Arc::new(f));
        self
    }

    /// A rollback hook over the successful receipt to undo.
    pub fn rollback<F>(mut self, f: F) -> Self
    where
        F: Fn(&Receipt, &ExecutionContext<'_>) -> HookResult<Value> + Send + Sync + 'static,
    {
        self.rollback = Some(Arc::new(f));
        self
    }

    /// Attaches a provenance record.
    pub fn provenance(mut self, provenance: Value) -> Self {
        self.provenance = Some(provenance);
        self
    }

    /// Validates the manifest, compiles the schemas and returns the capability. Without an
    /// `execute` hook the capability is inert.
    pub fn build(self) -> Result<Capability, CapabilityError> {
        let raw = self.manifest?;
        let manifest = if self.legacy {
            manifest_from_legacy(&raw)?
        } else {
            Manifest::from_value(&raw)?
        };
        let implementation = match self.execute {
            Some(execute) => Implementation::Native(Hooks {
                execute,
                plan: self.plan,
                verify: self.verify,
                rollback: self.rollback,
            }),
            None if self.plan.is_some() || self.verify.is_some() || self.rollback.is_some() => {
                return Err(CapabilityError::new(
                    ErrorCode::InvalidManifest,
                    format!("capability {} has hooks but no execute", manifest.id),
                ));
            }
            None => Implementation::Inert,
        };
        let mut cap = Capability::new(manifest, implementation)?;
        cap.provenance = self.provenance;
        Ok(cap)
    }
}
