//! Policy tooling as every surface serves it: the Cedar schema of what this host governs
//! (its capabilities, upstream tools included, and any extra registrations), validation of
//! policy files against it, fixture runs, and the report the console and the API show.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use capability_policy::cedar::{self, GeneratedSchema, SchemaOptions, ValidationReport};
use capability_policy::fixtures::{self, FixtureReport};
use capability_policy::{CapabilityRegistry, CedarPolicies, GovernedCapability, PolicyEngine};
use serde_json::{Value, json};

use crate::Host;
use crate::error::{Forbidden, HostError, InvalidRequest, PolicyError};
use crate::principal::{Access, Principal};

/// A validation report as JSON: `{valid, policies, diagnostics: [{file, line, column,
/// severity, message, policy, expression, fix, capabilities}]}`.
pub fn validation_json(report: &ValidationReport) -> Value {
    json!({
        "valid": report.is_ok(),
        "policies": report.policies,
        "diagnostics": report.diagnostics.iter().map(|d| json!({
            "file": d.file, "line": d.line, "column": d.column,
            "severity": format!("{:?}", d.severity).to_lowercase(),
            "message": d.message, "policy": d.policy_id,
            "expression": d.expression, "fix": d.fix, "capabilities": d.capabilities,
        })).collect::<Vec<_>>(),
    })
}

/// A fixture run as JSON: `{ok, passed, failed, results: [{name, capability, stage,
/// expected, actual, reason, policyIds, passed}]}`.
pub fn fixture_report_json(report: &FixtureReport) -> Value {
    let results: Vec<Value> = report
        .results
        .iter()
        .map(|r| {
            json!({
                "name": r.name,
                "capability": r.capability,
                "stage": format!("{:?}", r.stage),
                "expected": r.expected.to_string(),
                "actual": match &r.actual { Ok(d) => json!(d.to_string()), Err(e) => json!({"error": e.to_string()}) },
                "reason": r.reason,
                "policyIds": r.policy_ids,
                "passed": r.passed(),
            })
        })
        .collect();
    json!({"ok": report.ok(), "passed": report.passed(), "failed": report.failed(), "results": results})
}

impl Host {
    /// The policy files this host was opened with (its own, then each tenant's; directories
    /// expanded).
    pub fn policy_files(&self) -> &[PathBuf] {
        &self.policy_files
    }

    /// What policies talk about: the governed view of every capability of this host
    /// (upstream tools included), with `extra` registrations (things the host does not run:
    /// models, memory, secrets) added.
    pub fn governed_capabilities(&self, extra: &[GovernedCapability]) -> CapabilityRegistry {
        // Capabilities registered deferred (OpenAPI operations) are built, which registers
        // their governed views.
        self.runtime.registry().list();
        let registry = CapabilityRegistry::with_capabilities(
            self.governor
                .capabilities()
                .all()
                .iter()
                .map(|c| c.as_ref().clone()),
        );
        for c in extra {
            registry.register(c.clone());
        }
        registry
    }

    /// The Cedar schema of [`Host::governed_capabilities`].
    pub fn policy_schema(
        &self,
        extra: &[GovernedCapability],
        options: &SchemaOptions,
    ) -> Result<GeneratedSchema, HostError> {
        let registry = self.governed_capabilities(extra);
        let caps = registry.all();
        cedar::generate_schema(caps.iter().map(Arc::as_ref), options)
            .map_err(|e| PolicyError::new(e).into())
    }

    /// Validates policy files (directories expanded) against the capabilities of
    /// [`Host::governed_capabilities`]: each policy that reads the input or output of a call
    /// against the types of every capability it can apply to (so `context.input.a > 100` is
    /// reported, with its fix, when `a` is a JSON Schema `number` of a tool it governs).
    pub fn validate_policies(
        &self,
        files: &[PathBuf],
        extra: &[GovernedCapability],
    ) -> Result<ValidationReport, HostError> {
        let files = crate::config::policy_files(files)?;
        let schema = self.policy_schema(extra, &SchemaOptions::default())?;
        cedar::check_paths(&files, &schema).map_err(|e| PolicyError::new(e).into())
    }

    /// [`Host::validate_policies`] of this host's own policy files against its capabilities
    /// as they are now (upstream tools included): what a long-running surface reports when
    /// it starts, and again when the upstream tools change.
    pub fn check_policies(&self) -> Result<ValidationReport, HostError> {
        if self.policy_files.is_empty() {
            return Ok(ValidationReport::default());
        }
        self.validate_policies(&self.policy_files, &[])
    }

    /// Runs fixtures (a JSON array, see `capability_policy::fixtures`) against policy files,
    /// over [`Host::governed_capabilities`].
    pub fn test_policies(
        &self,
        files: &[PathBuf],
        fixtures_text: &[u8],
        name: &str,
        extra: &[GovernedCapability],
    ) -> Result<FixtureReport, HostError> {
        let files = crate::config::policy_files(files)?;
        if files.is_empty() {
            return Err(InvalidRequest::new("no policy file to test").into());
        }
        let cases = fixtures::parse_fixtures(fixtures_text, name)
            .map_err(|e| InvalidRequest::new(e.to_string()))?;
        let cedar = CedarPolicies::from_paths(&files).map_err(PolicyError::new)?;
        let engine = PolicyEngine::new();
        engine.add_source(Arc::new(cedar));
        Ok(fixtures::run_fixtures(
            &engine,
            &self.governed_capabilities(extra),
            &cases,
        ))
    }

    /// The report the console and the API show a reader: this host's policy files with
    /// their text, their validation, and (with `fixtures`) a fixture run.
    pub fn policy_report(
        &self,
        principal: &Principal,
        fixtures: Option<&Path>,
    ) -> Result<Value, HostError> {
        if !principal.may(Access::Read) {
            return Err(Forbidden::new(
                principal.name(),
                format!("(role {}) may not read policies", principal.role().as_str()),
            )
            .into());
        }
        let files = &self.policy_files;
        let listed: Vec<Value> = files
            .iter()
            .map(|f| {
                json!({"path": f.display().to_string(),
                       "text": std::fs::read_to_string(f).unwrap_or_default()})
            })
            .collect();
        let validation = if files.is_empty() {
            json!({"valid": true, "policies": 0, "diagnostics": []})
        } else {
            match self.validate_policies(files, &[]) {
                Ok(report) => validation_json(&report),
                Err(e) => {
                    json!({"valid": false, "policies": 0, "error": e.to_string(), "diagnostics": []})
                }
            }
        };
        let tests = match fixtures {
            None => Value::Null,
            Some(path) => match std::fs::read(path) {
                Ok(text) => {
                    match self.test_policies(files, &text, &path.display().to_string(), &[]) {
                        Ok(report) => fixture_report_json(&report),
                        Err(e) => json!({"error": e.to_string()}),
                    }
                }
                Err(e) => json!({"error": format!("cannot read {}: {e}", path.display())}),
            },
        };
        Ok(json!({"files": listed, "validation": validation, "tests": tests}))
    }
}
