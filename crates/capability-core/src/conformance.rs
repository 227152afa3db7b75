//! Executable conformance: the 7 offline protocol checks of the reference, and a runner that
//! exercises any third-party [`MetabolicBinder`] through the public registry boundary.

use std::sync::Arc;

use serde::Serialize;
use serde_json::{Value, json};

use crate::binder::{
    BinderDiscovery, BinderError, BinderExecution, BinderStatus, CancelToken, ExecuteOptions,
    MetabolicBinder, MetabolicBinderRegistry,
};
use crate::effects::EXTERNAL_OPAQUE_EFFECTS;
use crate::protocol::{
    CAPABILITY_PROTOCOL_GUARANTEES, CAPABILITY_PROTOCOL_VERSION, CAPABILITY_STABILITY_LINE,
    is_protocol_compatible, protocol_info,
};
use crate::urls::InvalidSiteUrl;

/// One check of a conformance report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConformanceCheck {
    pub id: String,
    pub ok: bool,
    pub message: String,
}

/// `{protocolVersion, ok, checks}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConformanceReport {
    pub protocol_version: String,
    pub ok: bool,
    pub checks: Vec<ConformanceCheck>,
}

impl ConformanceReport {
    fn from_checks(checks: Vec<ConformanceCheck>) -> Self {
        ConformanceReport {
            protocol_version: CAPABILITY_PROTOCOL_VERSION.into(),
            ok: checks.iter().all(|c| c.ok),
            checks,
        }
    }

    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// Why a conformance check failed; its message is the check's `message` in the report.
#[derive(Debug, thiserror::Error)]
enum CheckFailure {
    /// An expectation of the check did not hold (the text says which).
    #[error("{0}")]
    Expected(String),
    /// The registry refused what the check needed.
    #[error(transparent)]
    Binder(#[from] BinderError),
    /// The registry refused, but not for the reason the check expects.
    #[error("unexpected refusal: {0}")]
    Unexpected(BinderError),
    /// The well-known probe URLs could not be derived.
    #[error(transparent)]
    SiteUrl(#[from] InvalidSiteUrl),
}

type Checked<T = ()> = Result<T, CheckFailure>;

fn check(id: &str, outcome: Checked) -> ConformanceCheck {
    match outcome {
        Ok(()) => ConformanceCheck {
            id: id.into(),
            ok: true,
            message: "pass".into(),
        },
        Err(failure) => ConformanceCheck {
            id: id.into(),
            ok: false,
            message: failure.to_string(),
        },
    }
}

fn expect(cond: bool, what: &str) -> Checked {
    if cond {
        Ok(())
    } else {
        Err(CheckFailure::Expected(what.to_string()))
    }
}

/// The artifact digest the reference conformance binding uses.
pub const CONFORMANCE_ARTIFACT: &str =
    "sha256:8a6f1b2f587e6aa5a8b8f2d036f9b15519ed0afcdd851c4a62dde3ca55c9748e";

/// The in-memory binder of the conformance suite: binds to a fixed artifact with incomplete
/// authority and echoes its input.
pub struct ConformanceMemoryBinder {
    /// The `immutableArtifact` it reports (empty to exercise refusal).
    pub artifact: String,
}

impl MetabolicBinder for ConformanceMemoryBinder {
    fn id(&self) -> &str {
        "conformance/memory"
    }
    fn substrate(&self) -> &str {
        "memory"
    }
    fn discovery(&self) -> BinderDiscovery {
        BinderDiscovery::Explicit
    }
    fn description(&self) -> &str {
        "Reference conformance binder."
    }
    fn bind(&self, _request: &Value) -> Result<Value, BinderError> {
        Ok(json!({
            "bindingVersion": "1.0",
            "binderId": self.id(),
            "substrate": self.substrate(),
            "locator": "memory://reference",
            "immutableArtifact": self.artifact,
            "createdAt": crate::js::now_iso(),
            "authority": {
                "complete": false,
                "effects": [EXTERNAL_OPAQUE_EFFECTS],
                "note": "Reference conformance binder."
            },
            "evidence": ["conformance:reference-artifact"]
        }))
    }
    fn executable(&self) -> bool {
        true
    }
    fn execute(
        &self,
        _binding: &Value,
        input: &Value,
        _cancel: &CancelToken,
    ) -> Result<BinderExecution, BinderError> {
        Ok(BinderExecution {
            status: BinderStatus::Succeeded,
            output: Some(input.clone()),
            isolation: Some("in-memory-test-boundary".into()),
            upstream_receipt: Some(json!({"reference": "conformance"})),
            metadata: None,
        })
    }
}

const REFERENCE_MANIFEST: &str = r#"{"specVersion":"0.1","id":"conformance/echo","version":"1.0.0","name":"Conformance Echo","description":"Echo a value for protocol conformance.","input":{"type":"object"},"output":{"type":"object"},"effects":[],"behavior":{"deterministic":true,"idempotent":true,"reversible":false},"tags":["conformance"]}"#;

fn reference_manifest() -> Value {
    crate::json::parse_str(REFERENCE_MANIFEST).unwrap_or(Value::Null)
}

fn protocol_info_check() -> Checked {
    let info = protocol_info();
    expect(
        info["protocolVersion"] == CAPABILITY_PROTOCOL_VERSION,
        "protocolVersion must be 1.0",
    )?;
    expect(
        info["stabilityLine"] == CAPABILITY_STABILITY_LINE,
        "stabilityLine must be 1.x",
    )?;
    expect(
        info["formats"]["metabolicBinding"] == "1.0"
            && info["formats"]["metabolicExecutionReceipt"] == "1.0",
        "binder formats must be 1.0",
    )?;
    expect(
        info["guarantees"].as_array().map(Vec::len) == Some(CAPABILITY_PROTOCOL_GUARANTEES.len()),
        "guarantees are incomplete",
    )?;
    expect(
        is_protocol_compatible("1.0")
            && is_protocol_compatible("1.7.3")
            && !is_protocol_compatible("2.0"),
        "the 1.x compatibility check is wrong",
    )
}

fn manifest_check() -> Checked {
    let good = reference_manifest();
    let issues = crate::validate::validate_manifest(&good);
    expect(
        issues.is_empty(),
        &format!("reference manifest rejected: {}", issues.join("; ")),
    )?;
    let published =
        crate::published::validate_published(crate::published::PublishedSchema::Manifest, &good);
    expect(
        published.is_empty(),
        "reference manifest fails the published schema",
    )?;
    let bad = json!({"specVersion": "0.1", "id": "bad", "version": "v1", "name": " ", "description": "x"});
    let issues = crate::validate::validate_manifest(&bad);
    expect(
        issues.len() == 3 && issues[0] == "id must be a stable namespace/name identifier",
        "an invalid manifest was not rejected as the reference rejects it",
    )
}

fn index_check() -> Checked {
    let index = json!({
        "indexVersion": "0.1",
        "generatedAt": "2026-01-01T00:00:00.000Z",
        "packages": [{
            "name": "@conformance/echo", "version": "1.0.0", "source": "npm",
            "capabilities": [{"manifest": reference_manifest(), "module": "./echo.js"}]
        }]
    });
    let issues = crate::validate::validate_index(&index);
    expect(
        issues.is_empty(),
        &format!("reference index rejected: {}", issues.join("; ")),
    )?;
    let published =
        crate::published::validate_published(crate::published::PublishedSchema::Index, &index);
    expect(
        published.is_empty(),
        "reference index fails the published schema",
    )?;
    let mut escaped = index.clone();
    escaped["packages"][0]["capabilities"][0]["module"] = json!("../echo.js");
    expect(
        !crate::validate::validate_index(&escaped).is_empty(),
        "an index whose module is not package-relative was accepted",
    )
}

fn site_check() -> Checked {
    let site = json!({
        "capabilityDiscoveryVersion": "0.1",
        "indexes": ["https://registry.example.test/index.json"]
    });
    let issues = crate::validate::validate_site(&site);
    expect(
        issues.is_empty(),
        &format!("reference site document rejected: {}", issues.join("; ")),
    )?;
    let urls = crate::urls::site_discovery_urls("https://user:pw@example.test:8443/a/b?q=1")?;
    expect(
        urls == [
            "https://example.test:8443/.well-known/capabilities",
            "https://example.test:8443/.well-known/capabilities.json",
        ],
        "well-known probe URLs are wrong",
    )
}

fn immutable_binding_check() -> Checked {
    let mut registry = MetabolicBinderRegistry::new();
    registry.register(Arc::new(ConformanceMemoryBinder {
        artifact: String::new(),
    }))?;
    match registry.bind("conformance/memory", &json!({})) {
        Ok(_) => expect(
            false,
            "a binding without an immutable artifact was accepted",
        ),
        Err(e) if e.0.contains("immutableArtifact is required") => Ok(()),
        Err(e) => Err(CheckFailure::Unexpected(e)),
    }
}

fn approval_and_receipt() -> Checked<(Value, Value)> {
    let mut registry = MetabolicBinderRegistry::new();
    registry.register(Arc::new(ConformanceMemoryBinder {
        artifact: CONFORMANCE_ARTIFACT.into(),
    }))?;
    let binding = registry.bind("conformance/memory", &json!({}))?;
    let input = json!({"value": "conformance"});
    match registry.execute(
        "conformance/memory",
        &binding,
        &input,
        &ExecuteOptions::default(),
    ) {
        Ok(_) => {
            return Err(CheckFailure::Expected(
                "incomplete authority executed without approval".into(),
            ));
        }
        Err(e) if e.0.contains("explicit approval") => {}
        Err(e) => return Err(CheckFailure::Unexpected(e)),
    }
    let approved = ExecuteOptions {
        approved: true,
        cancel: None,
    };
    let result = registry.execute("conformance/memory", &binding, &input, &approved)?;
    expect(
        result.status == BinderStatus::Succeeded,
        "approved execution did not succeed",
    )?;
    expect(
        result.output.as_ref() == Some(&input),
        "execution output differs from its input",
    )?;
    Ok((binding, result.receipt))
}

fn standard_receipt_check() -> Checked {
    let (binding, receipt) = approval_and_receipt()?;
    expect(
        receipt["receiptVersion"] == "1.0",
        "receiptVersion must be 1.0",
    )?;
    expect(
        receipt["immutableArtifact"] == binding["immutableArtifact"],
        "artifact identity lost",
    )?;
    expect(
        receipt["authority"]["complete"] == false,
        "authority completeness lost",
    )?;
    expect(
        receipt["evidence"]
            .as_array()
            .is_some_and(|e| e.iter().any(|x| x == "conformance:reference-artifact")),
        "binding evidence lost",
    )?;
    expect(
        receipt["isolation"] == "in-memory-test-boundary",
        "isolation label lost",
    )?;
    expect(
        receipt["upstreamReceipt"] == json!({"reference": "conformance"}),
        "upstream receipt lost",
    )?;
    let issues = crate::published::validate_published(
        crate::published::PublishedSchema::MetabolicReceipt,
        &receipt,
    );
    expect(
        issues.is_empty(),
        "execution receipt fails the published schema",
    )
}

/// The reference `runProtocolConformance()`: offline, no network, 7 checks.
pub fn run_protocol_conformance() -> ConformanceReport {
    ConformanceReport::from_checks(vec![
        check("protocol-info", protocol_info_check()),
        check("manifest", manifest_check()),
        check("index", index_check()),
        check("site-discovery", site_check()),
        check("immutable-binding", immutable_binding_check()),
        check("approval-gate", approval_and_receipt().map(|_| ())),
        check("standard-receipt", standard_receipt_check()),
    ])
}

/// The reference `runBinderConformance`: registers a third-party binder in a fresh registry
/// and exercises it only through the registry boundary with `request` and `input`.
///
/// Checks: `register` (definition accepted), `bind` (the binding validates against the
/// binder and the published schema), `tamper` (a binding whose artifact was blanked is
/// refused before execution), `approval-gate` (incomplete authority is refused without
/// approval), `execute` (an approved execution yields a valid 1.0 receipt that preserves the
/// binding's identity, authority and evidence), `cancel` (a cancelled execution does not run).
pub fn run_binder_conformance(
    binder: Arc<dyn MetabolicBinder>,
    request: &Value,
    input: &Value,
) -> ConformanceReport {
    let mut checks = Vec::new();
    let id = binder.id().to_string();
    let mut registry = MetabolicBinderRegistry::new();
    let registered = registry.register(binder).map_err(CheckFailure::from);
    let ok = registered.is_ok();
    checks.push(check("register", registered));
    if !ok {
        return ConformanceReport::from_checks(checks);
    }
    let binding = match registry.bind(&id, request) {
        Ok(b) => {
            let issues = crate::published::validate_published(
                crate::published::PublishedSchema::Binding,
                &b,
            );
            checks.push(check(
                "bind",
                expect(issues.is_empty(), "binding fails the published schema"),
            ));
            b
        }
        Err(e) => {
            checks.push(check("bind", Err(e.into())));
            return ConformanceReport::from_checks(checks);
        }
    };
    let mut tampered = binding.clone();
    tampered["immutableArtifact"] = json!("");
    let approved = ExecuteOptions {
        approved: true,
        cancel: None,
    };
    checks.push(check(
        "tamper",
        expect(
            registry.execute(&id, &tampered, input, &approved).is_err(),
            "a binding without an immutable artifact reached execution",
        ),
    ));
    let executable = registry.get(&id).map(|b| b.executable()).unwrap_or(false);
    let complete = binding.pointer("/authority/complete") == Some(&Value::Bool(true));
    if !complete {
        let refused = registry
            .execute(&id, &binding, input, &ExecuteOptions::default())
            .err()
            .is_some_and(|e| e.0.contains("explicit approval"));
        checks.push(check(
            "approval-gate",
            expect(refused, "incomplete authority ran without approval"),
        ));
    }
    if executable {
        let execute = registry
            .execute(&id, &binding, input, &approved)
            .map_err(CheckFailure::from)
            .and_then(|r| {
                let issues = crate::published::validate_published(
                    crate::published::PublishedSchema::MetabolicReceipt,
                    &r.receipt,
                );
                expect(
                    issues.is_empty(),
                    "execution receipt fails the published schema",
                )?;
                expect(
                    r.receipt["immutableArtifact"] == binding["immutableArtifact"]
                        && r.receipt["evidence"] == binding["evidence"]
                        && r.receipt["authority"]["complete"] == binding["authority"]["complete"],
                    "execution receipt does not preserve the binding",
                )
            });
        checks.push(check("execute", execute));
        let cancel = CancelToken::new();
        cancel.cancel();
        let cancelled = ExecuteOptions {
            approved: true,
            cancel: Some(cancel),
        };
        checks.push(check(
            "cancel",
            expect(
                registry.execute(&id, &binding, input, &cancelled).is_err(),
                "a cancelled execution ran",
            ),
        ));
    }
    ConformanceReport::from_checks(checks)
}
