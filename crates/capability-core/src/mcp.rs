//! MCP interoperability shapes that need no I/O: the projection of a capability manifest as
//! an MCP tool, and the 13 locked bootstrap tools of a Capability network MCP server.
//!
//! # Projection ([`to_mcp_tool`])
//!
//! A manifest becomes `{name, title, description, inputSchema, outputSchema?, annotations,
//! _meta}`, members in that order:
//!
//! * `name` — [`mcp_tool_name`]: the id with every UTF-16 code unit outside
//!   `[A-Za-z0-9_-]` replaced by `__`, cut to [`MCP_TOOL_NAME_MAX`] (128) characters
//!   (`math/add` → `math__add`, `a.b/c-d_e` → `a__b__c-d_e`);
//! * `title` — the manifest name; `description` — the manifest description;
//! * `inputSchema` — the manifest input schema, or `{"type": "object"}` when it has none;
//! * `outputSchema` — the output schema, only when its `type` is exactly `"object"` (MCP
//!   requires structured output to be an object);
//! * `annotations` — [`mcp_annotations`]: `readOnlyHint` (no mutating effect),
//!   `destructiveHint` (some mutating effect, see [`is_mutating_effect`]), `idempotentHint`
//!   (`behavior.idempotent === true`) and `openWorldHint` (declares `network.connect`);
//! * `_meta` — `{"capability/id", "capability/version"}`, so a client can map a tool back to
//!   the exact capability.
//!
//! Distinct ids can project to the same tool name (`a/b.c` and `a/b/c` both give
//! `a__b__c`); a host that looks tools up by name must treat such a name as ambiguous.
//!
//! # Bootstrap tools ([`bootstrap_tools`])
//!
//! [`BOOTSTRAP_TOOL_NAMES`] are the 13 tool names locked by the 1.x stability lock, in order.
//! [`bootstrap_tools`] gives the full tool descriptors (`{name, title, description,
//! inputSchema, annotations}`) exactly as the reference server advertises them; they are
//! data, copied from the reference's golden vectors.

use serde_json::{Map, Value, json};

use crate::effects::is_mutating_effect;
use crate::manifest::Manifest;

/// The longest tool name MCP clients are guaranteed to accept.
pub const MCP_TOOL_NAME_MAX: usize = 128;

/// The `_meta` key that carries the capability id of a projected tool.
pub const META_CAPABILITY_ID: &str = "capability/id";

/// The `_meta` key that carries the capability version of a projected tool.
pub const META_CAPABILITY_VERSION: &str = "capability/version";

/// The 13 bootstrap MCP tool names locked by the 1.x stability lock, in order.
pub const BOOTSTRAP_TOOL_NAMES: [&str; 13] = [
    "capability_need",
    "capability_search",
    "capability_search_world",
    "capability_mine_repository",
    "capability_forge_repository",
    "capability_solve",
    "capability_metabolize",
    "capability_compose",
    "capability_coverage",
    "capability_inspect",
    "capability_execute",
    "capability_probe_site",
    "capability_doctor",
];

/// The MCP tool name of a capability id: every UTF-16 code unit outside `[A-Za-z0-9_-]`
/// becomes `__` (so a character outside the Basic Multilingual Plane becomes `____`), then
/// the name is cut to [`MCP_TOOL_NAME_MAX`] characters.
pub fn mcp_tool_name(id: &str) -> String {
    let mut name = String::with_capacity(id.len() + 8);
    for c in id.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            name.push(c);
        } else {
            for _ in 0..c.len_utf16() {
                name.push_str("__");
            }
        }
        if name.len() >= MCP_TOOL_NAME_MAX {
            break;
        }
    }
    // Every character pushed is ASCII, so bytes are characters.
    name.truncate(MCP_TOOL_NAME_MAX);
    name
}

/// The MCP annotations of a manifest:
/// `{readOnlyHint, destructiveHint, idempotentHint, openWorldHint}`.
pub fn mcp_annotations(manifest: &Manifest) -> Value {
    let effects = manifest.effects();
    let mutating = effects.iter().any(|e| is_mutating_effect(e));
    json!({
        "readOnlyHint": !mutating,
        "destructiveHint": mutating,
        "idempotentHint": manifest.is_idempotent(),
        "openWorldHint": effects.iter().any(|e| e == "network.connect"),
    })
}

/// Projects a manifest as an MCP tool descriptor (see the module documentation).
pub fn to_mcp_tool(manifest: &Manifest) -> Value {
    let mut tool = Map::new();
    tool.insert("name".into(), Value::String(mcp_tool_name(&manifest.id)));
    tool.insert("title".into(), Value::String(manifest.name.clone()));
    tool.insert(
        "description".into(),
        Value::String(manifest.description.clone()),
    );
    let input = match &manifest.input {
        None | Some(Value::Null) => json!({"type": "object"}),
        Some(schema) => schema.clone(),
    };
    tool.insert("inputSchema".into(), input);
    if let Some(output) = &manifest.output
        && output.get("type").and_then(Value::as_str) == Some("object")
    {
        tool.insert("outputSchema".into(), output.clone());
    }
    tool.insert("annotations".into(), mcp_annotations(manifest));
    tool.insert(
        "_meta".into(),
        json!({
            META_CAPABILITY_ID: manifest.id,
            META_CAPABILITY_VERSION: manifest.version,
        }),
    );
    Value::Object(tool)
}

/// The 13 bootstrap tool descriptors `{name, title, description, inputSchema,
/// annotations}`, in the locked order, as the reference server lists them.
pub fn bootstrap_tools() -> Vec<Value> {
    match crate::json::parse_str(BOOTSTRAP_TOOLS_JSON) {
        Ok(Value::Array(tools)) => tools,
        // Unreachable for the constant below (a unit test parses it); never panic.
        _ => Vec::new(),
    }
}

/// The bootstrap tool descriptors, as the reference advertises them (data).
const BOOTSTRAP_TOOLS_JSON: &str = r##"
[
  {
    "name": "capability_need",
    "title": "Get an Ability",
    "description": "Primary Capability entry point. Describe the outcome you need. Capability prefers prepared providers such as approved connectors, MCP tools, OpenAPI operations and native abilities, then falls back to existing software only when necessary. Set execute=true to run the selected ability; resolution alone never executes it.",
    "inputSchema": {
      "type": "object",
      "properties": {
        "query": {
          "type": "string",
          "description": "Outcome or ability needed"
        },
        "input": {},
        "execute": {
          "type": "boolean",
          "default": false
        },
        "approved": {
          "type": "boolean",
          "default": false
        },
        "pythonPackage": {
          "type": "string"
        },
        "pythonVersion": {
          "type": "string"
        },
        "ociImage": {
          "type": "string"
        },
        "ociArgs": {
          "type": "array",
          "items": {
            "type": "string"
          }
        },
        "externalOnly": {
          "type": "boolean",
          "default": false
        }
      },
      "required": [
        "query"
      ]
    },
    "annotations": {
      "readOnlyHint": false,
      "destructiveHint": true,
      "idempotentHint": false,
      "openWorldHint": true
    }
  },
  {
    "name": "capability_search",
    "title": "Search Capability Network",
    "description": "Discover executable abilities from the federated Capability network before installing code.",
    "inputSchema": {
      "type": "object",
      "properties": {
        "query": {
          "type": "string"
        },
        "limit": {
          "type": "integer",
          "minimum": 1,
          "maximum": 25
        }
      },
      "required": [
        "query"
      ]
    },
    "annotations": {
      "readOnlyHint": true,
      "destructiveHint": false,
      "idempotentHint": true,
      "openWorldHint": true
    }
  },
  {
    "name": "capability_search_world",
    "title": "Search the Software World",
    "description": "Advanced discovery across native Capability indexes plus external npm and GitHub catalogs. External results are candidates, not trusted executable capabilities, until a contract or binder supplies a defensible execution boundary.",
    "inputSchema": {
      "type": "object",
      "properties": {
        "query": {
          "type": "string"
        },
        "limit": {
          "type": "integer",
          "minimum": 1,
          "maximum": 25
        },
        "npm": {
          "type": "boolean",
          "default": true
        },
        "github": {
          "type": "boolean",
          "default": true
        }
      },
      "required": [
        "query"
      ]
    },
    "annotations": {
      "readOnlyHint": true,
      "destructiveHint": false,
      "idempotentHint": true,
      "openWorldHint": true
    }
  },
  {
    "name": "capability_mine_repository",
    "title": "Mine GitHub Repository Abilities",
    "description": "Advanced: inspect an arbitrary GitHub repository at an exact commit and infer useful public abilities without executing repository code. Inferences remain non-executable candidates.",
    "inputSchema": {
      "type": "object",
      "properties": {
        "repository": {
          "type": "string",
          "description": "owner/repo or a GitHub repository URL"
        },
        "ref": {
          "type": "string"
        },
        "query": {
          "type": "string"
        },
        "limit": {
          "type": "integer",
          "minimum": 1,
          "maximum": 500
        },
        "maxFiles": {
          "type": "integer",
          "minimum": 8,
          "maximum": 500
        }
      },
      "required": [
        "repository"
      ]
    },
    "annotations": {
      "readOnlyHint": true,
      "destructiveHint": false,
      "idempotentHint": true,
      "openWorldHint": true
    }
  },
  {
    "name": "capability_forge_repository",
    "title": "Forge Repository Ability",
    "description": "Advanced: turn a mined GitHub function or CLI into a private Capability sidecar pinned to an exact npm artifact and source revision when available. First execution requires explicit approval and Docker isolation.",
    "inputSchema": {
      "type": "object",
      "properties": {
        "repository": {
          "type": "string"
        },
        "query": {
          "type": "string"
        },
        "symbol": {
          "type": "string"
        },
        "candidateId": {
          "type": "string"
        },
        "input": {},
        "approved": {
          "type": "boolean",
          "default": false
        },
        "allowUnverifiedSource": {
          "type": "boolean",
          "default": false
        }
      },
      "required": [
        "repository"
      ]
    },
    "annotations": {
      "readOnlyHint": false,
      "destructiveHint": false,
      "idempotentHint": false,
      "openWorldHint": true
    }
  },
  {
    "name": "capability_solve",
    "title": "Solve With the Software World",
    "description": "Advanced: search native abilities and existing software, then forge a defensible npm-backed operation when necessary.",
    "inputSchema": {
      "type": "object",
      "properties": {
        "query": {
          "type": "string"
        },
        "input": {},
        "approved": {
          "type": "boolean",
          "default": false
        },
        "externalOnly": {
          "type": "boolean",
          "default": false
        },
        "allowUnverifiedSource": {
          "type": "boolean",
          "default": false
        }
      },
      "required": [
        "query"
      ]
    },
    "annotations": {
      "readOnlyHint": false,
      "destructiveHint": false,
      "idempotentHint": false,
      "openWorldHint": true
    }
  },
  {
    "name": "capability_metabolize",
    "title": "Metabolize Existing Software",
    "description": "Advanced substrate control for acquiring an ability through native Capability, npm/GitHub Forge, an explicitly selected PyPI package, or an OCI image.",
    "inputSchema": {
      "type": "object",
      "properties": {
        "query": {
          "type": "string"
        },
        "input": {},
        "approved": {
          "type": "boolean",
          "default": false
        },
        "pythonPackage": {
          "type": "string"
        },
        "pythonVersion": {
          "type": "string"
        },
        "ociImage": {
          "type": "string"
        },
        "ociArgs": {
          "type": "array",
          "items": {
            "type": "string"
          }
        },
        "externalOnly": {
          "type": "boolean",
          "default": false
        }
      },
      "required": [
        "query"
      ]
    },
    "annotations": {
      "readOnlyHint": false,
      "destructiveHint": false,
      "idempotentHint": false,
      "openWorldHint": true
    }
  },
  {
    "name": "capability_compose",
    "title": "Compose Capability Pipeline",
    "description": "Advanced: discover compatible contracts, synthesize a composite manifest and optionally execute the pipeline with per-step receipts.",
    "inputSchema": {
      "type": "object",
      "properties": {
        "intent": {
          "type": "string"
        },
        "input": {},
        "approved": {
          "type": "boolean",
          "default": false
        }
      },
      "required": [
        "intent"
      ]
    },
    "annotations": {
      "readOnlyHint": false,
      "destructiveHint": false,
      "idempotentHint": false,
      "openWorldHint": true
    }
  },
  {
    "name": "capability_coverage",
    "title": "Capability Software Coverage",
    "description": "Report which software families Capability can currently discover, mine, bind and execute.",
    "inputSchema": {
      "type": "object",
      "properties": {}
    },
    "annotations": {
      "readOnlyHint": true,
      "destructiveHint": false,
      "idempotentHint": true,
      "openWorldHint": false
    }
  },
  {
    "name": "capability_inspect",
    "title": "Inspect Capability",
    "description": "Inspect a discovered ability's inert contract, package identity, effects, and version without executing its code.",
    "inputSchema": {
      "type": "object",
      "properties": {
        "id": {
          "type": "string"
        }
      },
      "required": [
        "id"
      ]
    },
    "annotations": {
      "readOnlyHint": true,
      "destructiveHint": false,
      "idempotentHint": true,
      "openWorldHint": true
    }
  },
  {
    "name": "capability_execute",
    "title": "Acquire and Execute Capability",
    "description": "Resolve, verify, acquire, authorize, and execute a known Capability-network ability through Capability's isolation boundary.",
    "inputSchema": {
      "type": "object",
      "properties": {
        "id": {
          "type": "string"
        },
        "input": {},
        "approved": {
          "type": "boolean",
          "default": false
        }
      },
      "required": [
        "id",
        "input"
      ]
    },
    "annotations": {
      "readOnlyHint": false,
      "destructiveHint": true,
      "idempotentHint": false,
      "openWorldHint": true
    }
  },
  {
    "name": "capability_probe_site",
    "title": "Probe Website for Capabilities",
    "description": "Check a website's /.well-known/capabilities discovery document and enumerate the Capability indexes it advertises.",
    "inputSchema": {
      "type": "object",
      "properties": {
        "site": {
          "type": "string"
        }
      },
      "required": [
        "site"
      ]
    },
    "annotations": {
      "readOnlyHint": true,
      "destructiveHint": false,
      "idempotentHint": true,
      "openWorldHint": true
    }
  },
  {
    "name": "capability_doctor",
    "title": "Capability Network Status",
    "description": "Check whether the local environment can reach the Capability network and provide an isolation boundary.",
    "inputSchema": {
      "type": "object",
      "properties": {
        "index": {
          "type": "string"
        }
      }
    },
    "annotations": {
      "readOnlyHint": true,
      "destructiveHint": false,
      "idempotentHint": true,
      "openWorldHint": true
    }
  }
]"##;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_tools_parse_and_follow_the_locked_names() {
        let tools = bootstrap_tools();
        let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
        assert_eq!(names, BOOTSTRAP_TOOL_NAMES);
        for tool in &tools {
            assert_eq!(tool["inputSchema"]["type"], "object", "{}", tool["name"]);
            assert!(tool["annotations"]["readOnlyHint"].is_boolean());
        }
    }

    #[test]
    fn tool_names_replace_each_utf16_unit_and_cut_at_128() {
        assert_eq!(mcp_tool_name("math/add"), "math__add");
        assert_eq!(mcp_tool_name("a.b/c-d_e"), "a__b__c-d_e");
        assert_eq!(mcp_tool_name("é"), "__");
        assert_eq!(mcp_tool_name("😀"), "____");
        assert_eq!(mcp_tool_name(&"a/".repeat(100)).len(), 128);
        assert_eq!(mcp_tool_name(&"x".repeat(127)).len(), 127);
        assert_eq!(
            mcp_tool_name(&format!("{}/", "x".repeat(127))),
            format!("{}_", "x".repeat(127))
        );
    }
}
