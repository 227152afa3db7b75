//! [`OciBinder`]: `capability/oci-command` as a `MetabolicBinder`.

use std::sync::OnceLock;
use std::time::Duration;

use capability_core::binder::{
    BinderDiscovery, BinderError, BinderExecution, BinderStatus, CancelToken, MetabolicBinder,
};
use capability_core::effects::EXTERNAL_OPAQUE_EFFECTS;
use capability_sandbox::OciEngine;
use serde_json::{Value, json};

use super::reference::{ImageReference, Platform};
use super::run::{RunOptions, detect, run};
use super::{BINDER_ID, OciError, OciErrorKind, OciOptions, SUBSTRATE, inspect};

const DESCRIPTION: &str = "Binds an OCI image to its manifest digest (resolved through the registry's API) and runs it by digest in a hardened container: read-only root, no capabilities, no new privileges, user 65534, no network unless bound with it.";

const NOTE: &str = "An OCI image's effects are opaque: it runs in a hardened container (read-only root, all capabilities dropped, no new privileges, 64 processes, 512 MiB, 1 CPU, user 65534), without network unless the binding grants it.";

/// The binder: inspects with [`OciOptions`], runs with the engine detected (or the one given).
#[derive(Clone, Debug)]
pub struct OciBinder {
    /// How images are inspected (and re-resolved before a run).
    pub options: OciOptions,
    /// One run (the pull has its own bound in [`RunOptions`]).
    pub run_timeout: Duration,
    /// The engine given ([`OciBinder::with_engine`]), else the one detected at the first
    /// execution that found one: kept, so that a run does not probe docker and podman again.
    engine: OnceLock<OciEngine>,
}

/// What a binding runs, read from it: the immutable artifact as written and parsed, the
/// locator parsed, and the inspection options for the platform it was bound for.
struct Pinned<'b> {
    artifact: &'b str,
    pinned: ImageReference,
    locator: &'b str,
    located: ImageReference,
    options: OciOptions,
}

impl OciBinder {
    pub fn new(options: OciOptions) -> Self {
        OciBinder {
            options,
            run_timeout: RunOptions::default().timeout,
            engine: OnceLock::new(),
        }
    }

    /// This binder running with `engine`.
    pub fn with_engine(self, engine: OciEngine) -> Self {
        OciBinder {
            engine: OnceLock::from(engine),
            ..self
        }
    }

    /// The engine given, or the one detected once (a failed detection is tried again at the
    /// next execution).
    fn engine(&self) -> Result<OciEngine, OciError> {
        if let Some(engine) = self.engine.get() {
            return Ok(engine.clone());
        }
        let detected = detect()?;
        Ok(self.engine.get_or_init(|| detected).clone())
    }

    /// What a binding runs: its immutable artifact (a digest reference of the locator's
    /// repository), for the platform it was bound for.
    fn pinned<'b>(&self, binding: &'b Value) -> Result<Pinned<'b>, OciError> {
        let invalid = |m: String| OciError::new(OciErrorKind::Invalid, m);
        let artifact = binding
            .get("immutableArtifact")
            .and_then(Value::as_str)
            .unwrap_or("");
        let pinned = ImageReference::parse(artifact)?;
        if pinned.digest.is_none() {
            return Err(invalid(format!(
                "immutableArtifact {artifact} names no digest"
            )));
        }
        let locator = binding.get("locator").and_then(Value::as_str).unwrap_or("");
        let located = ImageReference::parse(locator)?;
        if located.name() != pinned.name() {
            return Err(invalid(format!(
                "the locator {locator} and the immutable artifact {artifact} name different repositories"
            )));
        }
        let platform = binding
            .pointer("/inspection/platform")
            .and_then(Value::as_str)
            .map(Platform::parse)
            .transpose()?;
        Ok(Pinned {
            artifact,
            pinned,
            locator,
            located,
            options: self.for_platform(platform),
        })
    }

    /// Refuses a binding whose locator is a tag that now shows another image than the one
    /// bound ([`OciErrorKind::Moved`]): the approval was for what the tag showed then. A
    /// locator that names a digest cannot move.
    pub fn check_locator(&self, binding: &Value) -> Result<(), OciError> {
        check_moved(&self.pinned(binding)?)
    }

    /// The artifact, arguments and run options of one execution, after [`Self::check_locator`].
    fn plan<'b>(
        &self,
        binding: &'b Value,
        input: &Value,
        cancel: &CancelToken,
    ) -> Result<(&'b str, Vec<String>, RunOptions), OciError> {
        let args = input_args(input)?;
        let pinned = self.pinned(binding)?;
        check_moved(&pinned)?;
        let network = binding
            .pointer("/authority/effects")
            .and_then(Value::as_array)
            .is_some_and(|effects| effects.iter().any(|e| e == "network.connect"));
        let run_options = RunOptions {
            approved: true,
            network,
            timeout: self.run_timeout,
            insecure: pinned.options.is_insecure(&pinned.pinned)?,
            engine: Some(self.engine()?),
            cancel: Some(cancel.clone()),
            ..RunOptions::default()
        };
        Ok((pinned.artifact, args, run_options))
    }

    /// The options of an inspection for `platform`.
    fn for_platform(&self, platform: Option<Platform>) -> OciOptions {
        let mut options = self.options.clone();
        if let Some(p) = platform {
            options.platform = p;
        }
        options
    }
}

impl Default for OciBinder {
    fn default() -> Self {
        OciBinder::new(OciOptions::default())
    }
}

/// [`OciBinder::check_locator`] of a binding already read.
fn check_moved(p: &Pinned<'_>) -> Result<(), OciError> {
    if p.located.digest.is_some() {
        return Ok(());
    }
    let bound = p.pinned.digest.as_deref().unwrap_or_default();
    let now = inspect(p.locator, &p.options)?;
    if now.manifest_digest != bound {
        return Err(OciError::new(
            OciErrorKind::Moved,
            format!(
                "tag {} moved from {bound} to {} since it was bound; bind it again",
                p.located.canonical(),
                now.manifest_digest
            ),
        ));
    }
    Ok(())
}

fn refuse(e: OciError) -> BinderError {
    BinderError(e.message)
}

/// The arguments of an input: an array, or `{args: [...]}` (none when absent), each item
/// turned into a string as JavaScript's `String()` does.
pub fn input_args(input: &Value) -> Result<Vec<String>, OciError> {
    let items = match input {
        Value::Array(items) => items.as_slice(),
        Value::Null => &[],
        Value::Object(o) => match o.get("args") {
            Some(Value::Array(items)) => items.as_slice(),
            None | Some(Value::Null) => &[],
            Some(_) => {
                return Err(OciError::new(
                    OciErrorKind::Invalid,
                    "input.args must be an array",
                ));
            }
        },
        _ => {
            return Err(OciError::new(
                OciErrorKind::Invalid,
                "the input must be an array of arguments or {args: [...]}",
            ));
        }
    };
    Ok(items
        .iter()
        .map(capability_core::json::js_string_of)
        .collect())
}

impl MetabolicBinder for OciBinder {
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
    fn executable(&self) -> bool {
        true
    }

    /// `{"image": reference, "network"?: bool, "platform"?: "os/arch[/variant]"}`: inspects
    /// the image and binds its manifest digest.
    fn bind(&self, request: &Value) -> Result<Value, BinderError> {
        let image = request
            .get("image")
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| BinderError("OCI binding requires image".into()))?;
        let network = match request.get("network") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(BinderError("network must be a boolean".into())),
        };
        let platform = match request.get("platform") {
            None | Some(Value::Null) => None,
            Some(Value::String(p)) => Some(Platform::parse(p).map_err(refuse)?),
            Some(_) => {
                return Err(BinderError(
                    "platform must be a string such as linux/amd64".into(),
                ));
            }
        };
        let inspection = inspect(image, &self.for_platform(platform)).map_err(refuse)?;
        let mut effects = vec!["process.spawn", EXTERNAL_OPAQUE_EFFECTS];
        if network {
            effects.push("network.connect");
        }
        let mut binding = crate::binding(
            self,
            image,
            &inspection.immutable_reference,
            &effects,
            NOTE,
            vec![
                format!("image:{}", inspection.id),
                format!("digest:{}", inspection.manifest_digest),
            ],
        );
        binding.insert("inspection".into(), inspection.to_json());
        Ok(Value::Object(binding))
    }

    /// Runs the bound digest. A tag locator is resolved again first: when it shows another
    /// image than the one bound (and approved), nothing runs ([`OciBinder::check_locator`]).
    fn execute(
        &self,
        binding: &Value,
        input: &Value,
        cancel: &CancelToken,
    ) -> Result<BinderExecution, BinderError> {
        let (artifact, args, run_options) = self.plan(binding, input, cancel).map_err(refuse)?;
        let execution = run(artifact, &args, &run_options).map_err(refuse)?;
        Ok(BinderExecution {
            status: if execution.succeeded {
                BinderStatus::Succeeded
            } else {
                BinderStatus::Failed
            },
            output: Some(json!({"stdout": execution.stdout, "exitCode": execution.exit_code})),
            isolation: Some(format!("oci-container-network-{}", execution.network)),
            upstream_receipt: Some(execution.to_json()),
            metadata: None,
        })
    }
}
