//! npm CLI bridge descriptors (`capability.bridge.json`, `bridgeVersion` 0.1):
//! `validateCapabilityBridge` and the generator `createNpmCliBridgeDescriptor`.

use serde_json::{Map, Value, json};

use super::{is_non_empty_string, js_entries, member, validate_manifest};
use crate::effects::EXTERNAL_OPAQUE_EFFECTS;

/// The bridge document format version.
pub const BRIDGE_VERSION: &str = "0.1";

const COMPLETE_NOTE: &str =
    "Bridge author explicitly declared the complete upstream effect surface.";
const INCOMPLETE_NOTE: &str = "Upstream effects are intentionally treated as opaque until a bridge author audits and declares them.";

/// Validates a bridge descriptor like the reference's `validateCapabilityBridge`.
///
/// Issues, in order: `bridgeVersion must be 0.1`; the manifest issues prefixed `manifest: `;
/// `target is required` (not a non-array object) or `target.kind must be npm-cli` and
/// `target.<package|version|bin|binPath> is required` (non-empty strings); `authority.complete
/// must be boolean`; `bridged CLI manifests must declare process.spawn`; `bridged CLI manifests
/// must declare environment.read because child processes inherit an environment`;
/// `incomplete bridge authority must declare custom:external.opaque-effects` (when
/// `authority.complete` is exactly `false`). Absent manifest effects count as none. A value that
/// is not a non-null, non-array object gives only `bridge must be an object`.
///
/// Manifest `effects` that are present but not an array also count as none here (the
/// reference would run a substring search on a string); the manifest issues already report
/// `effects must be an array` for them.
pub fn validate_bridge(bridge: &Value) -> Vec<String> {
    if !bridge.is_object() {
        return vec!["bridge must be an object".to_string()];
    }
    let mut issues = Vec::new();
    if member(bridge, "bridgeVersion").and_then(Value::as_str) != Some(BRIDGE_VERSION) {
        issues.push("bridgeVersion must be 0.1".to_string());
    }
    let manifest = member(bridge, "manifest").unwrap_or(&Value::Null);
    issues.extend(
        validate_manifest(manifest)
            .into_iter()
            .map(|issue| format!("manifest: {issue}")),
    );
    match member(bridge, "target") {
        Some(target @ Value::Object(_)) => {
            if member(target, "kind").and_then(Value::as_str) != Some("npm-cli") {
                issues.push("target.kind must be npm-cli".to_string());
            }
            for key in ["package", "version", "bin", "binPath"] {
                if !is_non_empty_string(member(target, key)) {
                    issues.push(format!("target.{key} is required"));
                }
            }
        }
        _ => issues.push("target is required".to_string()),
    }
    let complete = member(bridge, "authority")
        .filter(|a| a.is_object())
        .and_then(|a| member(a, "complete"));
    if !matches!(complete, Some(Value::Bool(_))) {
        issues.push("authority.complete must be boolean".to_string());
    }
    let effects: &[Value] = match member(manifest, "effects") {
        Some(Value::Array(effects)) => effects,
        _ => &[],
    };
    let declares = |effect: &str| effects.iter().any(|e| e.as_str() == Some(effect));
    if !declares("process.spawn") {
        issues.push("bridged CLI manifests must declare process.spawn".to_string());
    }
    if !declares("environment.read") {
        issues.push(
            "bridged CLI manifests must declare environment.read because child processes inherit an environment"
                .to_string(),
        );
    }
    if complete == Some(&Value::Bool(false)) && !declares(EXTERNAL_OPAQUE_EFFECTS) {
        issues.push(format!(
            "incomplete bridge authority must declare {EXTERNAL_OPAQUE_EFFECTS}"
        ));
    }
    issues
}

/// Why a bridge descriptor could not be generated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BridgeError {
    /// The package publishes no `bin`.
    #[error("{package}@{version} does not publish an npm bin and cannot use the npm-cli bridge")]
    NoBin {
        /// npm package name.
        package: String,
        /// Package version.
        version: String,
    },
    /// Several bins and none selected, or the selected bin is not published.
    #[error("Select one published bin for {package}: {}", bins.join(", "))]
    SelectBin {
        /// npm package name.
        package: String,
        /// The published bins, in package order.
        bins: Vec<String>,
    },
    /// An inspection or options document of the wrong shape.
    #[error("invalid {what}: {reason}")]
    InvalidInput {
        /// `npm package inspection` or `bridge options`.
        what: &'static str,
        /// What was wrong.
        reason: String,
    },
}

/// What the generator needs from an npm package inspection (the reference's
/// `inspectNpmPackage` result).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NpmPackageInspection {
    /// Package name, e.g. `cowsay` or `@scope/pkg`.
    pub name: String,
    /// Exact version.
    pub version: String,
    /// Published bins `(name, path)`, in JavaScript key order.
    pub bins: Vec<(String, String)>,
    /// Normalised repository URL, when known.
    pub repository: Option<String>,
    /// `dist.integrity`, when known.
    pub integrity: Option<String>,
}

impl NpmPackageInspection {
    /// Reads the reference's inspection JSON: `{name, version, bins: {<bin>: <path>},
    /// repository?, integrity?}`; other members are ignored, absent `bins` means none.
    pub fn from_json(value: &Value) -> Result<Self, BridgeError> {
        let invalid = |reason: String| BridgeError::InvalidInput {
            what: "npm package inspection",
            reason,
        };
        if !value.is_object() {
            return Err(invalid("expected an object".to_string()));
        }
        let string = |key: &str| -> Result<String, BridgeError> {
            member(value, key)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| invalid(format!("{key} must be a string")))
        };
        let optional = |key: &str| -> Result<Option<String>, BridgeError> {
            match member(value, key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(invalid(format!("{key} must be a string"))),
            }
        };
        let bins = match member(value, "bins") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Object(map)) => js_entries(map)
                .into_iter()
                .map(|(bin, path)| match path {
                    Value::String(path) => Ok((bin.clone(), path.clone())),
                    _ => Err(invalid(format!("bins.{bin} must be a string"))),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(invalid("bins must be an object".to_string())),
        };
        Ok(NpmPackageInspection {
            name: string("name")?,
            version: string("version")?,
            bins,
            repository: optional("repository")?,
            integrity: optional("integrity")?,
        })
    }
}

/// Options of the generator (`{bin?, id?, name?, description?, effects?, effectsComplete?,
/// tags?}` in the reference).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NpmCliBridgeOptions {
    /// The bin to bridge; may be omitted when the package publishes exactly one.
    pub bin: Option<String>,
    /// Capability id; defaults to `npm/<slug(package-bin)>`.
    pub id: Option<String>,
    /// Manifest name; defaults to `<bin> via <package>`.
    pub name: Option<String>,
    /// Manifest description; defaults to a fixed sentence naming the package and bin.
    pub description: Option<String>,
    /// Effects declared beyond `process.spawn` and `environment.read`.
    pub effects: Vec<String>,
    /// The declared effects are the complete upstream surface (no opaque marker).
    pub effects_complete: bool,
    /// Tags added after `bridge, external, npm, cli`.
    pub tags: Vec<String>,
}

impl NpmCliBridgeOptions {
    /// Reads the reference's options JSON; absent or `null` members take their defaults.
    pub fn from_json(value: &Value) -> Result<Self, BridgeError> {
        let invalid = |reason: String| BridgeError::InvalidInput {
            what: "bridge options",
            reason,
        };
        if !value.is_object() {
            return Err(invalid("expected an object".to_string()));
        }
        let optional = |key: &str| -> Result<Option<String>, BridgeError> {
            match member(value, key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(invalid(format!("{key} must be a string"))),
            }
        };
        let list = |key: &str| -> Result<Vec<String>, BridgeError> {
            match member(value, key) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|item| {
                        item.as_str()
                            .map(str::to_string)
                            .ok_or_else(|| invalid(format!("{key} must be an array of strings")))
                    })
                    .collect(),
                Some(_) => Err(invalid(format!("{key} must be an array of strings"))),
            }
        };
        let effects_complete = match member(value, "effectsComplete") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(invalid("effectsComplete must be a boolean".to_string())),
        };
        Ok(NpmCliBridgeOptions {
            bin: optional("bin")?,
            id: optional("id")?,
            name: optional("name")?,
            description: optional("description")?,
            effects: list("effects")?,
            effects_complete,
            tags: list("tags")?,
        })
    }
}

/// The bridge id slug: lower case, one leading `@` dropped, runs of characters outside
/// `[a-z0-9]` replaced by `-`, dashes trimmed; `external-tool` when nothing is left.
fn bridge_slug(text: &str) -> String {
    let lower = text.to_lowercase();
    let lower = lower.strip_prefix('@').unwrap_or(&lower);
    let mut slug = String::with_capacity(lower.len());
    for c in lower.chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            slug.push(c);
        } else if !slug.ends_with('-') {
            slug.push('-');
        }
    }
    let slug = slug.trim_matches('-');
    if slug.is_empty() {
        "external-tool".to_string()
    } else {
        slug.to_string()
    }
}

/// The distinct items, in first-seen order.
fn unique<'a>(items: impl IntoIterator<Item = &'a str>) -> Vec<Value> {
    let mut seen: Vec<&str> = Vec::new();
    for item in items {
        if !seen.contains(&item) {
            seen.push(item);
        }
    }
    seen.into_iter()
        .map(|s| Value::String(s.to_string()))
        .collect()
}

/// Generates the bridge descriptor for an npm package's CLI, like the reference's
/// `createNpmCliBridgeDescriptor`: a manifest `npm/<slug>` at version `1.0.0` with the
/// `{args?, stdin?}` → `{stdout, stderr, exitCode}` contract, effects `process.spawn`,
/// `environment.read`, the supplied effects and (unless `effects_complete`)
/// `custom:external.opaque-effects`; the `npm-cli` target; the authority note; and the
/// upstream `source`. Members are in the reference's order.
///
/// Fails with [`BridgeError::NoBin`] when the package publishes no bin, and with
/// [`BridgeError::SelectBin`] when no bin is selected among several or the selected one is
/// not published.
pub fn create_npm_cli_bridge_descriptor(
    inspection: &NpmPackageInspection,
    options: &NpmCliBridgeOptions,
) -> Result<Value, BridgeError> {
    let package = &inspection.name;
    let version = &inspection.version;
    if inspection.bins.is_empty() {
        return Err(BridgeError::NoBin {
            package: package.clone(),
            version: version.clone(),
        });
    }
    let selected = match (&options.bin, inspection.bins.as_slice()) {
        (Some(bin), _) => Some(bin.as_str()),
        (None, [(only, _)]) => Some(only.as_str()),
        (None, _) => None,
    };
    let chosen = selected.and_then(|bin| {
        inspection
            .bins
            .iter()
            .find(|(name, path)| name == bin && !path.is_empty())
    });
    let Some((bin, bin_path)) = chosen else {
        return Err(BridgeError::SelectBin {
            package: package.clone(),
            bins: inspection
                .bins
                .iter()
                .map(|(name, _)| name.clone())
                .collect(),
        });
    };
    let complete = options.effects_complete;
    let id = options
        .id
        .clone()
        .unwrap_or_else(|| format!("npm/{}", bridge_slug(&format!("{package}-{bin}"))));
    let name = options
        .name
        .clone()
        .unwrap_or_else(|| format!("{bin} via {package}"));
    let description = options.description.clone().unwrap_or_else(|| {
        format!(
            "Use the existing {package}@{version} {bin} command through a thin Capability sidecar instead of rewriting the upstream project."
        )
    });
    let opaque: &[&str] = if complete {
        &[]
    } else {
        &[EXTERNAL_OPAQUE_EFFECTS]
    };
    let effects = unique(
        ["process.spawn", "environment.read"]
            .into_iter()
            .chain(options.effects.iter().map(String::as_str))
            .chain(opaque.iter().copied()),
    );
    let tags = unique(
        ["bridge", "external", "npm", "cli"]
            .into_iter()
            .chain(options.tags.iter().map(String::as_str)),
    );
    let manifest = json!({
        "specVersion": "0.1",
        "id": id,
        "version": "1.0.0",
        "name": name,
        "description": description,
        "input": {
            "type": "object",
            "properties": {
                "args": { "type": "array", "items": { "type": "string" } },
                "stdin": { "type": "string" }
            }
        },
        "output": {
            "type": "object",
            "properties": {
                "stdout": { "type": "string" },
                "stderr": { "type": "string" },
                "exitCode": { "type": "number" }
            },
            "required": ["stdout", "stderr", "exitCode"]
        },
        "effects": effects,
        "behavior": { "deterministic": false, "idempotent": false, "reversible": false },
        "tags": tags,
        "metadata": {
            "bridgeKind": "npm-cli",
            "upstreamPackage": package,
            "upstreamVersion": version,
            "upstreamBin": bin,
            "authorityComplete": complete
        }
    });
    let mut source = Map::new();
    source.insert("registry".into(), "npm".into());
    source.insert("upstreamPackage".into(), package.as_str().into());
    source.insert("upstreamVersion".into(), version.as_str().into());
    source.insert("upstreamBin".into(), bin.as_str().into());
    if let Some(repository) = &inspection.repository {
        source.insert("repository".into(), repository.as_str().into());
    }
    if let Some(integrity) = &inspection.integrity {
        source.insert("integrity".into(), integrity.as_str().into());
    }
    Ok(json!({
        "bridgeVersion": BRIDGE_VERSION,
        "manifest": manifest,
        "target": {
            "kind": "npm-cli",
            "package": package,
            "version": version,
            "bin": bin,
            "binPath": bin_path
        },
        "authority": {
            "complete": complete,
            "note": if complete { COMPLETE_NOTE } else { INCOMPLETE_NOTE }
        },
        "source": source
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slug_rules() {
        assert_eq!(bridge_slug("@Scope/Some_Pkg-Do.It"), "scope-some-pkg-do-it");
        assert_eq!(bridge_slug("@@@-!!!"), "external-tool");
        assert_eq!(bridge_slug("cowsay-cowsay"), "cowsay-cowsay");
    }
}
