//! Capability gaps (`gapVersion: "0.1"`): a machine-readable specification for missing
//! software, and the substrate coverage report.

use serde_json::{Map, Value, json};

/// The gap document version.
pub const GAP_VERSION: &str = "0.1";

/// Options of [`create_capability_gap`] (the reference option names).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GapOptions {
    pub input: Option<Value>,
    pub output: Option<Value>,
    pub effects_ceiling: Option<Vec<String>>,
    pub verification: Option<Vec<String>>,
    pub searched: Option<Vec<String>>,
    pub native_candidates: Option<Vec<Value>>,
    pub external_candidates: Option<Vec<Value>>,
    pub composition_attempts: Option<Vec<Value>>,
}

impl GapOptions {
    /// Reads the reference's options object (`{input?, output?, effectsCeiling?, ...}`).
    pub fn from_value(v: &Value) -> GapOptions {
        let strings = |k: &str| {
            v.get(k).and_then(Value::as_array).map(|a| {
                a.iter()
                    .map(|x| {
                        x.as_str()
                            .map_or_else(|| crate::json::js_string_of(x), String::from)
                    })
                    .collect()
            })
        };
        let values = |k: &str| v.get(k).and_then(Value::as_array).cloned();
        GapOptions {
            input: v.get("input").cloned(),
            output: v.get("output").cloned(),
            effects_ceiling: strings("effectsCeiling"),
            verification: strings("verification"),
            searched: strings("searched"),
            native_candidates: values("nativeCandidates"),
            external_candidates: values("externalCandidates"),
            composition_attempts: values("compositionAttempts"),
        }
    }
}

/// The gap-id slug: lowercase, runs outside `[a-z0-9]` become `-`, ONE leading and ONE
/// trailing `-` stripped, cut to 64 characters (so it may end with `-`), else
/// `missing-ability`.
pub fn gap_slug(intent: &str) -> String {
    let lower = intent.to_lowercase();
    let mut s = String::with_capacity(lower.len());
    let mut in_run = false;
    for c in lower.chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            s.push(c);
            in_run = false;
        } else if !in_run {
            s.push('-');
            in_run = true;
        }
    }
    let s = s.strip_prefix('-').unwrap_or(&s);
    let s = s.strip_suffix('-').unwrap_or(s);
    let cut: String = s.chars().take(64).collect();
    if cut.is_empty() {
        "missing-ability".into()
    } else {
        cut
    }
}

/// The reference `createCapabilityGap(intent, opts)`; `created_at` is the creation time.
pub fn create_capability_gap(intent: &str, options: &GapOptions, created_at: &str) -> Value {
    let mut required = Map::new();
    if let Some(input) = &options.input {
        required.insert("input".into(), input.clone());
    }
    if let Some(output) = &options.output {
        required.insert("output".into(), output.clone());
    }
    required.insert(
        "effectsCeiling".into(),
        json!(options.effects_ceiling.clone().unwrap_or_default()),
    );
    required.insert(
        "verification".into(),
        json!(options.verification.clone().unwrap_or_else(|| vec![
            "Output must satisfy the requested outcome and declared output contract.".into()
        ])),
    );
    json!({
        "gapVersion": GAP_VERSION,
        "id": format!("gap/{}", gap_slug(intent)),
        "intent": intent,
        "createdAt": created_at,
        "required": required,
        "searched": options.searched.clone().unwrap_or_else(|| {
            ["native", "npm", "repository", "composition"].map(String::from).to_vec()
        }),
        "evidence": {
            "nativeCandidates": options.native_candidates.clone().unwrap_or_default(),
            "externalCandidates": options.external_candidates.clone().unwrap_or_default(),
            "compositionAttempts": options.composition_attempts.clone().unwrap_or_default(),
        },
        "status": "unresolved",
    })
}

/// The reference `metabolicCoverage()` report: concrete substrate support, never an invented
/// percentage.
pub fn metabolic_coverage() -> Value {
    let rows: [(&str, &str, &str, &str, &str, &str); 9] = [
        (
            "native",
            "automatic",
            "contract",
            "native",
            "normal",
            "Federated inert Capability contracts.",
        ),
        (
            "npm",
            "automatic",
            "source",
            "automatic",
            "docker",
            "Root-callable JavaScript/TypeScript exports and npm CLIs through Forge.",
        ),
        (
            "pypi",
            "explicit",
            "artifact",
            "automatic",
            "docker",
            "Universal Python wheel functions and console scripts; exact wheel bytes are SHA256-verified, stored with the binding, and executed with no dependency/network drift.",
        ),
        (
            "oci",
            "explicit",
            "metadata",
            "automatic",
            "container",
            "OCI/Docker images are pinned to an immutable RepoDigest and exposed as command capabilities.",
        ),
        (
            "mcp",
            "explicit",
            "contract",
            "automatic",
            "external",
            "Existing MCP tools become Capability contracts without upstream changes.",
        ),
        (
            "openapi",
            "explicit",
            "contract",
            "automatic",
            "external",
            "OpenAPI operations become Capability contracts.",
        ),
        (
            "repository",
            "automatic",
            "source",
            "planned",
            "none",
            "Evidence mining spans more languages than automatic execution binders.",
        ),
        (
            "composition",
            "derived",
            "contract",
            "automatic",
            "normal",
            "Schema-compatible contracts can be planned into pipelines; each step keeps its own authority boundary.",
        ),
        (
            "gap",
            "derived",
            "contract",
            "none",
            "none",
            "Unresolved outcomes become machine-readable missing-capability specifications.",
        ),
    ];
    let entries: Vec<Value> = rows
        .iter()
        .map(|(substrate, discovery, mining, binding, first, notes)| {
            json!({"substrate": substrate, "discovery": discovery, "mining": mining, "binding": binding, "firstExecution": first, "notes": notes})
        })
        .collect();
    json!({
        "version": "0.1",
        "principle": "Coverage is reported as concrete substrate support, never as an invented percentage of all software.",
        "entries": entries,
    })
}
