//! The JSON envelope on stdin and the response on stdout (see the crate docs).

use serde_json::{Map, Value, json};

use std::path::Path;

use capability_exec::{Grants, GuestError, Invocation, effects};

use crate::error::SandboxError;
use crate::types::ModuleKind;

/// Builds the request envelope: `{"op", "input", "plan", "output"?, "receipt"?, "manifest",
/// "effects", "secrets"?}`. Secrets are included only when `secrets.read` is granted.
pub fn envelope(invocation: &Invocation, manifest: &Value, grants: &Grants) -> Value {
    let mut m = Map::new();
    m.insert("op".into(), Value::String(invocation.op.as_str().into()));
    m.insert("input".into(), invocation.input.clone());
    m.insert(
        "plan".into(),
        invocation.plan.clone().unwrap_or(Value::Null),
    );
    if let Some(output) = &invocation.output {
        m.insert("output".into(), output.clone());
    }
    if let Some(receipt) = &invocation.receipt {
        m.insert("receipt".into(), receipt.clone());
    }
    m.insert("manifest".into(), manifest.clone());
    m.insert(
        "effects".into(),
        Value::Array(
            grants
                .effects
                .iter()
                .map(|e| Value::String(e.clone()))
                .collect(),
        ),
    );
    if grants.has(effects::SECRETS_READ) && !grants.secrets.is_empty() {
        m.insert("secrets".into(), json!(grants.secrets));
    }
    Value::Object(m)
}

/// A parsed response.
#[derive(Debug)]
pub enum Response {
    Output { output: Value, hook_present: bool },
    Error(GuestError),
}

/// Parses one response object: `{"output": ...}` (with the shims' optional `"hook": false`)
/// or `{"error": {"message": ..., "code"?: ...}}`. Exactly one JSON value may appear
/// (surrounding whitespace is allowed).
pub fn parse_response(bytes: &[u8]) -> Result<Response, SandboxError> {
    let violation = |detail: String| SandboxError::ProtocolViolation { detail };
    let text = trim_ascii(bytes);
    if text.is_empty() {
        return Err(violation("the guest wrote no response on stdout".into()));
    }
    let value = capability_core::json::parse_message(text).map_err(|e| {
        if e.is_too_deep() {
            return violation(capability_core::json::too_deep("Output"));
        }
        violation(format!(
            "stdout is not exactly one JSON object ({e}): {}",
            preview(text)
        ))
    })?;
    response_from_value(value)
}

pub(crate) fn response_from_value(value: Value) -> Result<Response, SandboxError> {
    let violation = |detail: String| SandboxError::ProtocolViolation { detail };
    let Value::Object(mut obj) = value else {
        return Err(violation("the response is not a JSON object".into()));
    };
    if let Some(err) = obj.remove("error") {
        return Ok(Response::Error(guest_error(err)));
    }
    let Some(output) = obj.remove("output") else {
        return Err(violation(
            "the response has neither \"output\" nor \"error\"".into(),
        ));
    };
    let hook_present = !matches!(obj.get("hook"), Some(Value::Bool(false)));
    Ok(Response::Output {
        output,
        hook_present,
    })
}

fn guest_error(err: Value) -> GuestError {
    match err {
        Value::Object(o) => {
            let message = match o.get("message") {
                Some(Value::String(s)) if !s.is_empty() => s.clone(),
                Some(Value::Null) | None => "guest reported an error without a message".into(),
                Some(other) => other.to_string(),
            };
            let code = match o.get("code") {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Number(n)) => Some(n.to_string()),
                _ => None,
            };
            GuestError {
                message: truncate(&message, 4096),
                code,
            }
        }
        Value::String(s) => GuestError {
            message: truncate(&s, 4096),
            code: None,
        },
        other => GuestError {
            message: truncate(&other.to_string(), 4096),
            code: None,
        },
    }
}

/// Whether the module file the host loaded must report a manifest in the shim's handshake.
/// The host decides this from what it loaded, never from what the guest says: a node module
/// must export one (the shim refuses a module without it, so a `null` handshake can only be
/// the guest writing it), a python module must when its source assigns a top-level
/// `MANIFEST`. Native executables have no handshake.
pub(crate) fn manifest_required(kind: ModuleKind, module: &Path) -> bool {
    match kind {
        ModuleKind::Node => true,
        ModuleKind::Python => std::fs::read(module).map_or(true, |b| python_defines_manifest(&b)),
        ModuleKind::Native | ModuleKind::Wasm => false,
    }
}

/// A line `MANIFEST = ...` or `MANIFEST: ... = ...` at the top level of python source.
fn python_defines_manifest(source: &[u8]) -> bool {
    source.split(|&b| b == b'\n').any(|line| {
        line.strip_prefix(b"MANIFEST").is_some_and(|rest| {
            let rest = trim_ascii(rest);
            rest.first().is_some_and(|&c| c == b'=' || c == b':')
        })
    })
}

/// Checks the manifest of a shim's handshake against the inert manifest's canonical hash.
/// `null` passes only when `required` is false (see [`manifest_required`]); anything else
/// must hash equal.
pub(crate) fn check_handshake_manifest(
    loaded: &Value,
    required: bool,
    id: &str,
    expected: &str,
) -> Result<(), SandboxError> {
    if loaded.is_null() && !required {
        return Ok(());
    }
    let loaded_hash = capability_core::json::canonical_hash(loaded);
    if loaded_hash != expected {
        return Err(SandboxError::ManifestMismatch {
            id: id.to_string(),
            expected: expected.to_string(),
            loaded: loaded_hash,
        });
    }
    Ok(())
}

pub(crate) fn trim_ascii(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |p| p + 1);
    &bytes[start..end.max(start)]
}

pub(crate) fn preview(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned();
    if bytes.len() > 200 {
        format!("{s}...")
    } else {
        s
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn responses() {
        match parse_response(b" {\"output\": {\"result\": 42}}\n").unwrap() {
            Response::Output {
                output,
                hook_present,
            } => {
                assert_eq!(output, json!({"result": 42}));
                assert!(hook_present);
            }
            other => panic!("{other:?}"),
        }
        match parse_response(br#"{"error": {"message": "boom", "code": "EACCES"}}"#).unwrap() {
            Response::Error(g) => {
                assert_eq!(g.message, "boom");
                assert_eq!(g.code.as_deref(), Some("EACCES"));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse_response(br#"{"output": null, "hook": false}"#).unwrap(),
            Response::Output {
                hook_present: false,
                ..
            }
        ));
        for bad in [
            &b""[..],
            b"   ",
            b"{}",
            b"[1]",
            b"{\"output\":1}{\"output\":2}",
            b"hello",
        ] {
            assert!(
                matches!(
                    parse_response(bad),
                    Err(SandboxError::ProtocolViolation { .. })
                ),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn the_host_decides_whether_a_manifest_is_required() {
        assert!(python_defines_manifest(b"import os\nMANIFEST = {}\n"));
        assert!(python_defines_manifest(b"MANIFEST: dict = {}"));
        assert!(python_defines_manifest(b"MANIFEST={}"));
        assert!(!python_defines_manifest(b"def f():\n    MANIFEST = {}\n"));
        assert!(!python_defines_manifest(b"MANIFESTO = 1\n# MANIFEST = 2\n"));
        let expected = capability_core::json::canonical_hash(&json!({"id": "a/b"}));
        let check = |v: Value, required| check_handshake_manifest(&v, required, "a/b", &expected);
        assert!(check(json!({"id": "a/b"}), true).is_ok());
        assert!(check(Value::Null, false).is_ok());
        for (v, required) in [
            (Value::Null, true),
            (json!({"id": "a/c"}), true),
            (json!({"id": "a/c"}), false),
            (json!(false), false),
        ] {
            assert!(
                matches!(
                    check(v, required),
                    Err(SandboxError::ManifestMismatch { .. })
                ),
                "{required}"
            );
        }
    }

    /// Fuzzing of the guest protocol lines (what a guest writes on stdout, and the shims'
    /// handshake): no panic, and a well-formed reply round-trips. 256 cases with a fixed
    /// seed; longer, by hand: `PROPTEST_CASES=100000 cargo test -p capability-sandbox --lib
    /// protocol::tests::fuzz`.
    mod fuzz {
        use super::*;
        use proptest::prelude::*;
        use proptest::test_runner::{Config, RngSeed};

        fn config() -> Config {
            let mut c = Config::default();
            if std::env::var_os("PROPTEST_CASES").is_none() {
                c.cases = 256;
            }
            if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
                c.rng_seed = RngSeed::Fixed(0x6e57);
            }
            c.failure_persistence = None;
            c
        }

        fn value() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i32>().prop_map(Value::from),
                ".{0,10}".prop_map(Value::String),
            ];
            leaf.prop_recursive(5, 48, 5, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                    prop::collection::btree_map(".{0,6}", inner, 0..5)
                        .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        proptest! {
            #![proptest_config(config())]

            #[test]
            fn guest_stdout_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..4096)) {
                let _ = parse_response(&bytes);
                let _ = python_defines_manifest(&bytes);
                if let Ok(v) = capability_core::json::parse(trim_ascii(&bytes)) {
                    let _ = check_handshake_manifest(&v, true, "a/b", "h");
                }
            }

            #[test]
            fn replies_round_trip(v in value(), code in proptest::option::of("[A-Z_]{1,12}"), hook in any::<bool>()) {
                let mut reply = json!({"output": v});
                if !hook {
                    reply["hook"] = json!(false);
                }
                let text = capability_core::json::to_js_string(&reply);
                match parse_response(format!("  {text}\n").as_bytes()).unwrap() {
                    Response::Output { output, hook_present } => {
                        prop_assert_eq!(output, v);
                        prop_assert_eq!(hook_present, hook);
                    }
                    other => prop_assert!(false, "{:?}", other),
                }
                let err = json!({"error": {"message": "m", "code": code}});
                let text = capability_core::json::to_js_string(&err);
                match parse_response(text.as_bytes()).unwrap() {
                    Response::Error(g) => prop_assert_eq!(g.code, code),
                    other => prop_assert!(false, "{:?}", other),
                }
                // Two replies, or a reply with trailing text, are violations.
                let twice = format!("{text}{text}");
                prop_assert!(parse_response(twice.as_bytes()).is_err());
            }
        }
    }

    #[test]
    fn secrets_only_when_granted() {
        let inv = Invocation::execute(json!({"a": 1}));
        let mut grants = Grants::none();
        grants.secrets.insert("TOKEN".into(), "s3cr3t".into());
        let env = envelope(&inv, &json!({}), &grants);
        assert!(env.get("secrets").is_none());
        let env = envelope(&inv, &json!({}), &grants.effect(effects::SECRETS_READ));
        assert_eq!(env["secrets"]["TOKEN"], "s3cr3t");
        assert_eq!(env["op"], "execute");
    }
}
