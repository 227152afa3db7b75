//! [`PypiBinder`]: `capability/pypi-wheel`, the `MetabolicBinder` over the index, the miner,
//! the forge and the sandboxed run.
//!
//! `bind` takes either a package request, which forges (index → verified wheel → mining →
//! dependency closure → forge directory), or `{"forge": <dir>}`, which binds a directory
//! forged earlier (its wheels re-hashed). Either way the answer is a `MetabolicBinding` 1.0:
//!
//! ```json
//! {"bindingVersion": "1.0", "binderId": "capability/pypi-wheel", "substrate": "pypi",
//!  "locator": "pypi:<name>[==<version>]", "immutableArtifact": "<name>@<ver>#sha256:<hex>",
//!  "createdAt": "…", "authority": {"complete": false,
//!  "effects": ["process.spawn", "custom:external.opaque-effects"], "note": "…"},
//!  "evidence": ["<wheel filename>", "sha256:<hex>", "<module>:<symbol>"],
//!  "metadata": {"capabilityId", "directory", "kind", "dependencies"},
//!  "forged": <PythonForge>, "inspection": <PyPiInspection>}
//! ```
//!
//! `execute` runs the forge directory the binding names ([`super::run::execute`]), after
//! checking that the directory still binds the binding's immutable artifact, module and
//! symbol. The registry has already enforced approval (the authority is incomplete), so the
//! run is approved here; calling `execute` directly, outside a registry, bypasses that gate.
//! A guest failure is a `Failed` execution with its receipt, not an error; a refusal before
//! anything ran (a wheel changed on disk, say) is an error, which the registry records as a
//! failed receipt. Cancellation is honoured before the run starts; a run in progress ends at
//! its timeout.

use std::path::PathBuf;
use std::time::Duration;

use capability_core::binder::{
    BinderDiscovery, BinderError, BinderExecution, BinderStatus, CancelToken, MetabolicBinder,
};
use serde_json::{Value, json};

use super::forge::{FORGED_EFFECTS, ForgeOptions, PythonBinding, PythonForge, forge, load_forge};
use super::run::{DEFAULT_TIMEOUT, RunStatus, execute_binding};
use super::{BINDER_ID, Index, PypiConfig, PypiError, SUBSTRATE};

/// The `isolation` label of an execution.
pub const ISOLATION_LABEL: &str = "process-sandbox-network-none";
/// The authority note of every binding.
pub const AUTHORITY_NOTE: &str = "The wheel's code may do anything Python can; it runs in the process sandbox with no network, no new processes, no environment and no host paths, and what it attempts is observed, not declared. Authority stays incomplete.";
const DESCRIPTION: &str = "Binds a Python function or console script of a PyPI wheel (exact bytes, sha256) and runs it in the process sandbox without network.";

/// `capability/pypi-wheel`.
#[derive(Clone, Debug)]
pub struct PypiBinder {
    config: PypiConfig,
    run_timeout: Duration,
}

impl PypiBinder {
    /// A binder using `config`'s index and cache; runs get [`DEFAULT_TIMEOUT`].
    pub fn new(config: PypiConfig) -> PypiBinder {
        PypiBinder {
            config,
            run_timeout: DEFAULT_TIMEOUT,
        }
    }

    /// The same binder with another wall clock (and CPU) limit per run.
    pub fn with_run_timeout(mut self, timeout: Duration) -> PypiBinder {
        self.run_timeout = timeout;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &PypiConfig {
        &self.config
    }

    /// The binding of a forge (see the module docs); `requested` is the locator's version
    /// part as the request gave it (`None`: the binding names the forged version).
    pub fn binding(&self, forged: &PythonForge, locator: &str) -> Value {
        let b = &forged.binding;
        let mut binding = crate::binding(
            self,
            locator,
            &b.immutable_artifact(),
            &FORGED_EFFECTS,
            AUTHORITY_NOTE,
            evidence(b),
        );
        binding.insert(
            "metadata".into(),
            json!({
                "capabilityId": b.capability_id,
                "directory": forged.directory.to_string_lossy(),
                "kind": b.kind.as_str(),
                "dependencies": b.dependencies.len(),
            }),
        );
        binding.insert("forged".into(), forged.to_json());
        binding.insert("inspection".into(), forged.artifact.to_json());
        Value::Object(binding)
    }

    fn bind_request(&self, request: &Value) -> Result<Value, PypiError> {
        let invalid = |m: String| PypiError::new(super::PypiErrorKind::Invalid, m);
        let obj = request
            .as_object()
            .ok_or_else(|| invalid("a pypi bind request must be an object".into()))?;
        let text = |key: &str| -> Result<Option<String>, PypiError> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_string())),
                Some(_) => Err(invalid(format!("{key} must be a non-empty string"))),
            }
        };
        if let Some(dir) = text("forge")? {
            let forged = load_forge(&PathBuf::from(dir))?;
            let locator = format!(
                "pypi:{}=={}",
                forged.binding.package, forged.binding.version
            );
            return Ok(self.binding(&forged, &locator));
        }
        let package = text("package")?
            .ok_or_else(|| invalid("a pypi bind request needs package (or forge)".into()))?;
        let version = text("version")?;
        let options = ForgeOptions {
            package: package.clone(),
            version: version.clone(),
            query: text("query")?,
            module: text("module")?,
            symbol: text("symbol")?,
            directory: text("directory")?.map(PathBuf::from),
        };
        let index = Index::new(&self.config)?;
        let forged = forge(&index, &options)?;
        let locator = match &version {
            Some(v) => format!("pypi:{package}=={v}"),
            None => format!("pypi:{package}"),
        };
        Ok(self.binding(&forged, &locator))
    }
}

/// `[<wheel>, "sha256:<hex>", "<module>:<symbol>"]`: the evidence of a binding, checked again
/// before each run.
fn evidence(b: &PythonBinding) -> Vec<String> {
    vec![
        b.wheel.clone(),
        format!("sha256:{}", b.sha256),
        format!("{}:{}", b.module, b.symbol),
    ]
}

impl MetabolicBinder for PypiBinder {
    fn id(&self) -> &str {
        BINDER_ID
    }

    fn substrate(&self) -> &str {
        SUBSTRATE
    }

    fn discovery(&self) -> BinderDiscovery {
        BinderDiscovery::Explicit
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    /// `{"package", "version"?, "query"?, "module"?, "symbol"?, "directory"?}` forges;
    /// `{"forge": <dir>}` binds an existing forge directory.
    fn bind(&self, request: &Value) -> Result<Value, BinderError> {
        self.bind_request(request)
            .map_err(|e| BinderError(e.message))
    }

    fn executable(&self) -> bool {
        true
    }

    fn execute(
        &self,
        binding: &Value,
        input: &Value,
        cancel: &CancelToken,
    ) -> Result<BinderExecution, BinderError> {
        let directory = binding
            .pointer("/forged/directory")
            .and_then(Value::as_str)
            .map(PathBuf::from)
            .ok_or_else(|| BinderError("the binding names no forge directory".into()))?;
        let bound = PythonBinding::load(&directory).map_err(|e| BinderError(e.message))?;
        if binding.get("immutableArtifact").and_then(Value::as_str)
            != Some(bound.immutable_artifact().as_str())
            || binding.get("evidence") != Some(&json!(evidence(&bound)))
        {
            return Err(BinderError(format!(
                "{} no longer binds {}: the forge directory was changed after binding",
                directory.display(),
                binding
                    .get("immutableArtifact")
                    .and_then(Value::as_str)
                    .unwrap_or("the binding's artifact")
            )));
        }
        if cancel.is_cancelled() {
            return Err(BinderError("The operation was aborted".into()));
        }
        // Approved by the registry (see the module docs); the binding just checked is the
        // one run.
        let run = execute_binding(&directory, &bound, input, self.run_timeout)
            .map_err(|e| BinderError(e.message))?;
        Ok(BinderExecution {
            status: match run.status {
                RunStatus::Succeeded => BinderStatus::Succeeded,
                RunStatus::Failed => BinderStatus::Failed,
            },
            output: run.output(),
            isolation: Some(ISOLATION_LABEL.into()),
            upstream_receipt: Some(run.to_json()),
            metadata: Some(json!({
                "capabilityId": bound.capability_id,
                "observedEffects": run.observed_effects.len(),
            })),
        })
    }
}
