//! The embedded published schemas, and how they relate to the runtime validators on the
//! vector documents.
//!
//! Every document the reference accepts (an empty `issues` list) must also conform to the
//! published schema, except where the schema is documented to be stricter (§2.20 of the
//! reference description, plus the enforced `date-time` / `uri` formats, see
//! `capability_core::published`). Each schema issue raised on such a document must be one of
//! those documented differences, and some documents of each kind must conform outright.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::validation_support;

use capability_core::published::{PublishedSchema, SchemaIssue, validate_published};
use capability_core::validate::{
    validate_binding, validate_bridge, validate_index, validate_manifest, validate_site,
};
use capability_test_support::vectors::load;
use serde_json::Value;

#[test]
fn embedded_schemas_are_byte_identical_to_the_published_files() {
    for schema in PublishedSchema::ALL {
        let path = format!(
            "{}/../../testdata/schemas/{}",
            env!("CARGO_MANIFEST_DIR"),
            schema.file_name()
        );
        let published = std::fs::read_to_string(&path).unwrap();
        assert!(
            published == schema.text(),
            "{} differs from {path}",
            schema.file_name()
        );
    }
    let files = std::fs::read_dir(format!(
        "{}/../../testdata/schemas",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
    .count();
    assert_eq!(
        files,
        PublishedSchema::ALL.len(),
        "every published schema is embedded"
    );
}

#[test]
fn every_published_schema_compiles_and_rejects_a_non_object() {
    for schema in PublishedSchema::ALL {
        let issues = validate_published(schema, &Value::Null);
        assert_eq!(issues.len(), 1, "{}: {issues:?}", schema.file_name());
        assert_eq!(
            issues[0].keyword,
            "type",
            "{}: {issues:?}",
            schema.file_name()
        );
    }
}

/// JSON Pointer segments of a path.
fn segments(path: &str) -> Vec<&str> {
    path.split('/').skip(1).collect()
}

fn is_index(segment: &str) -> bool {
    !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit())
}

/// Documented ways the manifest schema is stricter than `validateManifest` (paths relative to
/// the manifest): no unknown members, unique effects and tags, non-empty tags, and the
/// unchecked `input`, `output`, `behavior` and `metadata` members typed.
fn manifest_difference(keyword: &str, path: &[&str]) -> bool {
    match (keyword, path) {
        ("additionalProperties", [] | ["behavior"]) => true,
        ("uniqueItems", ["effects" | "tags"]) => true,
        ("minLength", ["tags", i]) => is_index(i),
        ("type", ["input" | "output" | "metadata" | "behavior"]) => true,
        ("type", ["behavior", _]) => true,
        _ => false,
    }
}

fn index_difference(keyword: &str, path: &[&str]) -> bool {
    match (keyword, path) {
        ("additionalProperties", [] | ["packages", _] | ["packages", _, "capabilities", _]) => true,
        ("uniqueItems", ["federates"]) => true,
        ("format" | "pattern", ["federates", _]) => true,
        ("type", ["metadata", _]) => true,
        ("format", ["generatedAt"]) => true,
        (k, ["packages", _, "capabilities", _, "manifest", rest @ ..]) => {
            manifest_difference(k, rest)
        }
        _ => false,
    }
}

fn site_difference(keyword: &str, path: &[&str]) -> bool {
    match (keyword, path) {
        ("additionalProperties", [] | ["package"] | ["mcp", _]) => true,
        ("uniqueItems", ["indexes"]) => true,
        ("format", ["indexes", _] | ["documentation"] | ["repository"]) => true,
        ("minLength", ["package", "version"]) => true,
        ("type", ["metadata", _]) => true,
        // The runtime checks `command` only for stdio and `url` only for http entries, and
        // accepts WHATWG URLs that are not RFC 3986 URIs.
        ("type" | "minLength" | "format", ["mcp", _, "command" | "url"]) => true,
        _ => false,
    }
}

fn bridge_difference(keyword: &str, path: &[&str]) -> bool {
    match (keyword, path) {
        ("additionalProperties", [] | ["target"] | ["authority"]) => true,
        ("type", ["authority", "note"] | ["source"]) => true,
        (k, ["manifest", rest @ ..]) => manifest_difference(k, rest),
        _ => false,
    }
}

fn binding_difference(keyword: &str, path: &[&str]) -> bool {
    matches!(
        (keyword, path),
        ("format", ["createdAt"])
            | ("uniqueItems", ["authority", "effects"])
            | ("additionalProperties", ["authority"])
    )
}

struct Kind {
    file: &'static str,
    count: usize,
    input: &'static str,
    schema: PublishedSchema,
    runtime: fn(&Value, &Value) -> Vec<String>,
    documented: fn(&str, &[&str]) -> bool,
}

fn check_runtime_valid_documents_against_the_schema(kind: &Kind) -> Result<usize, String> {
    let doc = load(kind.file);
    let cases = validation_support::array(&doc, "cases", kind.count);
    let mut conforming = 0;
    let mut runtime_valid = 0;
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let document = &case[kind.input];
        if !(kind.runtime)(document, case).is_empty() {
            continue;
        }
        runtime_valid += 1;
        let issues = validate_published(kind.schema, document);
        if issues.is_empty() {
            conforming += 1;
        }
        let unexplained: Vec<&SchemaIssue> = issues
            .iter()
            .filter(|issue| !(kind.documented)(&issue.keyword, &segments(&issue.path)))
            .collect();
        if !unexplained.is_empty() {
            failures.push(format!(
                "case {i} ({}): {unexplained:?}",
                case["label"].as_str().unwrap_or("")
            ));
        }
    }
    if !failures.is_empty() {
        return Err(format!(
            "{}: schema issues not explained by a documented difference:\n{}",
            kind.file,
            failures.join("\n")
        ));
    }
    if conforming == 0 || runtime_valid == 0 {
        return Err(format!(
            "{}: {runtime_valid} runtime-valid documents, {conforming} conform to the schema",
            kind.file
        ));
    }
    Ok(conforming)
}

#[test]
fn documents_the_reference_accepts_conform_to_the_published_schemas() {
    let kinds = [
        Kind {
            file: "manifest-validation.json",
            count: 468,
            input: "manifest",
            schema: PublishedSchema::Manifest,
            runtime: |d, _| validate_manifest(d),
            documented: manifest_difference,
        },
        Kind {
            file: "index-validation.json",
            count: 147,
            input: "document",
            schema: PublishedSchema::Index,
            runtime: |d, _| validate_index(d),
            documented: index_difference,
        },
        Kind {
            file: "site-validation.json",
            count: 118,
            input: "document",
            schema: PublishedSchema::Site,
            runtime: |d, _| validate_site(d),
            documented: site_difference,
        },
        Kind {
            file: "bridge-validation.json",
            count: 43,
            input: "document",
            schema: PublishedSchema::Bridge,
            runtime: |d, _| validate_bridge(d),
            documented: bridge_difference,
        },
        Kind {
            file: "binding-validation.json",
            count: 234,
            input: "binding",
            schema: PublishedSchema::Binding,
            runtime: |d, case| {
                let expected = case["expected"].as_object().map(|e| {
                    (
                        e["id"].as_str().unwrap_or_default(),
                        e["substrate"].as_str().unwrap_or_default(),
                    )
                });
                validate_binding(d, expected)
            },
            documented: binding_difference,
        },
    ];
    let failures: Vec<String> = kinds
        .iter()
        .filter_map(|kind| check_runtime_valid_documents_against_the_schema(kind).err())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn lenient_dates_fail_the_date_time_format() {
    let doc = load("binding-validation.json");
    let cases = validation_support::array(&doc, "cases", 234);
    let valid = cases
        .iter()
        .find(|c| c["label"] == "valid conformance binding")
        .expect("the conformance binding case");
    let binding = &valid["binding"];
    assert!(validate_published(PublishedSchema::Binding, binding).is_empty());
    for lenient in [
        "2026-02-30",
        "Tue, 01 Jan 2026 00:00:00 GMT",
        "2026-01-01T00:00",
    ] {
        let mut b = binding.clone();
        b["createdAt"] = Value::from(lenient);
        assert!(validate_binding(&b, None).is_empty(), "{lenient}");
        let issues = validate_published(PublishedSchema::Binding, &b);
        assert_eq!(issues.len(), 1, "{lenient}: {issues:?}");
        assert_eq!(
            (issues[0].keyword.as_str(), issues[0].path.as_str()),
            ("format", "/createdAt")
        );
    }
}
