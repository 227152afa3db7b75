//! Package capabilities as the host checks them before, and besides, running them: eval
//! cases run through the whole governed lifecycle (after the trust policy), and the safe
//! acquisition check of a local package's module.

use std::path::Path;

use capability_core::{CapabilityError, ErrorCode};
use capability_runtime::ExecuteOptions;
use capability_runtime::capability::{Capability, Implementation};
use capability_runtime::evals::{EvalCase, EvalReport, run_capability_evals};
use capability_runtime::source::PackageFile;

use crate::{Caller, Host};

/// The package's export `id` as a module-backed capability whose module was acquired
/// safely: its path stays inside the package root and its bytes match the declared
/// integrity (nothing is imported or run).
pub fn check_package_module(package: &Path, id: &str) -> Result<Capability, CapabilityError> {
    let capability = PackageFile::read(package)?.capability(id)?;
    let Implementation::Module(source) = capability.implementation() else {
        return Err(CapabilityError::new(
            ErrorCode::InvalidPackageDeclaration,
            format!("{id} is not a module-backed capability"),
        ));
    };
    let spec = capability_sandbox::ModuleSpec {
        package_root: source.package_root.clone(),
        install_root: None,
        module: source.module.clone(),
        integrity: source.integrity.clone(),
        manifest: capability.manifest().to_value(),
    };
    if let Err(e) = capability_sandbox::resolve_module(&spec) {
        return Err(match capability_sandbox::hook_error(capability.id(), e) {
            capability_exec::HookError::Capability(c) => c,
            other => CapabilityError::new(
                ErrorCode::InvalidPackageDeclaration,
                other.message().to_string(),
            ),
        });
    }
    Ok(capability)
}

impl Host {
    /// Runs eval cases against capability `id` (each case a governed invocation by
    /// `caller`: plan, authorization, policies, execution behind its boundary, receipt,
    /// audit). A capability the trust policy refuses runs no case.
    pub fn run_evals(
        &self,
        id: &str,
        cases: &[EvalCase],
        caller: &Caller,
        approve_effects: bool,
    ) -> Result<EvalReport, CapabilityError> {
        self.check_trust(id)?;
        let options = ExecuteOptions {
            approved: approve_effects,
            caller: Some(caller.clone()),
            ..Default::default()
        };
        Ok(run_capability_evals(&self.runtime, id, cases, &options))
    }
}
