//! The `capability` field of `package.json`: `validatePackageDeclaration`.

use serde_json::Value;

use super::{is_js_object, js_entries, member, validate_manifest};
use crate::validate::is_capability_id;

/// Validates a package declaration `{specVersion: "0.1", exports: {<id>: <export>}}` like the
/// reference's `validatePackageDeclaration`, where an export is a module path string starting
/// with `./` or a descriptor `{module, manifest, integrity?}`.
///
/// Issues: `specVersion must be 0.1`; `exports must be an object mapping capability ids to
/// package exports`; then per export, in JavaScript key order: `invalid capability id: <id>`;
/// for a string, `export path for <id> must start with ./`; for a value that is neither a
/// string nor a plain object, `export <id> must be a module path or descriptor`; for a
/// descriptor, the module path rule, the manifest issues prefixed `<id>: `, `<id>: manifest id
/// must equal export id` (when the manifest is a non-null object, arrays included) and
/// `<id>: integrity must be a string` (when present and not a string; `null` counts as
/// present). A declaration that is not a non-null object gives only `package declaration must
/// be an object` (arrays count as objects).
pub fn validate_package_declaration(declaration: &Value) -> Vec<String> {
    if !is_js_object(declaration) {
        return vec!["package declaration must be an object".to_string()];
    }
    let mut issues = Vec::new();
    if member(declaration, "specVersion").and_then(Value::as_str) != Some("0.1") {
        issues.push("specVersion must be 0.1".to_string());
    }
    let Some(Value::Object(exports)) = member(declaration, "exports") else {
        issues.push(
            "exports must be an object mapping capability ids to package exports".to_string(),
        );
        return issues;
    };
    for (id, export) in js_entries(exports) {
        if !is_capability_id(id) {
            issues.push(format!("invalid capability id: {id}"));
        }
        match export {
            Value::String(path) => {
                if !path.starts_with("./") {
                    issues.push(format!("export path for {id} must start with ./"));
                }
            }
            Value::Object(_) => {
                let module_ok = member(export, "module")
                    .and_then(Value::as_str)
                    .is_some_and(|m| m.starts_with("./"));
                if !module_ok {
                    issues.push(format!("export path for {id} must start with ./"));
                }
                let manifest = member(export, "manifest").unwrap_or(&Value::Null);
                issues.extend(
                    validate_manifest(manifest)
                        .into_iter()
                        .map(|issue| format!("{id}: {issue}")),
                );
                if is_js_object(manifest)
                    && member(manifest, "id").and_then(Value::as_str) != Some(id.as_str())
                {
                    issues.push(format!("{id}: manifest id must equal export id"));
                }
                if member(export, "integrity").is_some_and(|i| !i.is_string()) {
                    issues.push(format!("{id}: integrity must be a string"));
                }
            }
            _ => issues.push(format!("export {id} must be a module path or descriptor")),
        }
    }
    issues
}
