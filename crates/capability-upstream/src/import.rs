//! `cap mcp-import`: the tools of an MCP server as capability manifests, as the reference's
//! `capabilitiesFromMcpTools` makes them (§2.17 of the reference).

use std::collections::BTreeMap;
use std::time::Duration;

use capability_core::manifest::legacy_slugify as slugify;
use capability_sandbox::ProcessSandbox;
use serde_json::{Value, json};

use crate::config::sandbox_spec;
use crate::session::{McpSession as _, StdioSession, UpstreamError};

/// `cap mcp-import`: the reference's `capabilitiesFromMcpTools` over a stdio server; with
/// `sandbox` (the effects granted) the server runs inside the process sandbox, as a
/// gateway's `sandbox = true` server does.
pub fn import_stdio(
    command: &str,
    args: &[String],
    namespace: Option<&str>,
    version: Option<&str>,
    effects_complete: bool,
    sandbox: Option<&[String]>,
) -> Result<Vec<Value>, UpstreamError> {
    let timeout = Duration::from_secs(30);
    let session = match sandbox {
        Some(effects) => {
            ProcessSandbox::check_children().map_err(|e| UpstreamError::Spawn(e.to_string()))?;
            let spec = sandbox_spec(command, args, &BTreeMap::new(), effects, &[], &[])?;
            StdioSession::start_sandboxed(&spec, timeout)
        }
        None => {
            let env: Vec<(String, String)> = std::env::vars().collect();
            StdioSession::start(command, args, &env, timeout)
        }
    }?;
    let tools = session.list_tools(Duration::from_secs(30))?;
    session.kill();
    Ok(capabilities_from_mcp_tools(
        &tools,
        namespace,
        version,
        &["process.spawn".to_string(), "environment.read".to_string()],
        effects_complete,
        Some("stdio"),
    ))
}

/// Whether `v` starts with `\d+.\d+.\d+`.
fn starts_with_semver(v: &str) -> bool {
    let mut rest = v;
    for i in 0..3 {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        if i < 2 {
            match rest.strip_prefix('.') {
                Some(r) => rest = r,
                None => return false,
            }
        }
    }
    true
}

/// The reference `capabilitiesFromMcpTools` (manifests; see §2.17 of the reference).
pub fn capabilities_from_mcp_tools(
    tools: &[Value],
    namespace: Option<&str>,
    version: Option<&str>,
    base_effects: &[String],
    effects_complete: bool,
    transport: Option<&str>,
) -> Vec<Value> {
    let ns = slugify(namespace.unwrap_or("mcp"));
    let version = version.filter(|v| starts_with_semver(v)).unwrap_or("0.0.0");
    let mut seen = std::collections::HashSet::new();
    tools
        .iter()
        .filter_map(|tool| {
            let name = tool.get("name").and_then(Value::as_str)?;
            let id = format!("{ns}/{}", slugify(name));
            if !seen.insert(id.clone()) {
                return None;
            }
            let hint = |k: &str| tool.pointer(&format!("/annotations/{k}")) == Some(&Value::Bool(true));
            let mut effects: Vec<String> = Vec::new();
            let mut add = |e: &str| {
                if !effects.iter().any(|x| x == e) {
                    effects.push(e.to_string());
                }
            };
            for e in base_effects {
                add(e);
            }
            if hint("openWorldHint") {
                add("network.connect");
            }
            if hint("destructiveHint") {
                add("custom:mcp.destructive");
            }
            if !effects_complete {
                add("custom:mcp.opaque-effects");
            }
            let input = tool
                .get("inputSchema")
                .filter(|v| v.is_object())
                .cloned()
                .unwrap_or_else(|| json!({"type": "object"}));
            let mut manifest = json!({
                "specVersion": "0.1",
                "id": id,
                "version": version,
                "name": tool.get("title").and_then(Value::as_str).unwrap_or(name),
                "description": tool.get("description").and_then(Value::as_str).map(str::to_string)
                    .unwrap_or_else(|| format!("Imported MCP tool {name}")),
                "input": input,
            });
            if let Some(o) = tool.get("outputSchema").filter(|v| v.is_object()) {
                manifest["output"] = o.clone();
            }
            manifest["effects"] = json!(effects);
            manifest["behavior"] = json!({"deterministic": false, "idempotent": hint("idempotentHint"), "reversible": false});
            let mut tags = vec![json!("mcp"), json!("imported")];
            if let Some(t) = transport {
                tags.push(json!(t));
            }
            manifest["tags"] = Value::Array(tags);
            manifest["metadata"] = json!({
                "mcpTool": tool,
                "transport": transport.unwrap_or("host-provided"),
                "authorityComplete": effects_complete,
            });
            Some(manifest)
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn import_follows_the_reference_example() {
        // §8.9: stdio tool `Send.Mail` (destructive, open world), namespace `My Server`,
        // version `2.1.0-beta`.
        let tool = json!({"name": "Send.Mail", "annotations": {"destructiveHint": true, "openWorldHint": true}});
        let caps = capabilities_from_mcp_tools(
            &[tool],
            Some("My Server"),
            Some("2.1.0-beta"),
            &["process.spawn".into(), "environment.read".into()],
            false,
            Some("stdio"),
        );
        let m = &caps[0];
        assert_eq!(m["id"], "my-server/send.mail");
        assert_eq!(m["version"], "2.1.0-beta");
        assert_eq!(
            m["effects"],
            json!([
                "process.spawn",
                "environment.read",
                "network.connect",
                "custom:mcp.destructive",
                "custom:mcp.opaque-effects"
            ])
        );
        assert_eq!(m["tags"], json!(["mcp", "imported", "stdio"]));
        assert_eq!(m["description"], "Imported MCP tool Send.Mail");
        let v =
            capabilities_from_mcp_tools(&[json!({"name": "a"})], None, Some("v1"), &[], true, None);
        assert_eq!(v[0]["version"], "0.0.0");
        assert_eq!(v[0]["id"], "mcp/a");
    }
}
