//! Document commands: validate, hash, conformance, package, index, registry-entry, gap,
//! coverage.

use std::io::{BufRead, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use capability_core::json;
use capability_core::published::{PublishedSchema, validate_published};
use capability_core::validate;
use clap::{Args, ValueEnum};
use serde_json::{Map, Value, json};

use crate::output::{absolute, parse_json_arg, print_json, read_json, write_json};

/// Document kinds `cap validate` knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    Manifest,
    Package,
    Plan,
    Receipt,
    Index,
    Site,
    Binding,
    Lock,
    Bridge,
    Gap,
}

#[derive(Args, Debug)]
pub struct ValidateArgs {
    /// The JSON document.
    pub file: PathBuf,
    /// The document kind.
    #[arg(long, value_enum, default_value = "manifest")]
    pub kind: Kind,
}

fn schema_issues(schema: PublishedSchema, doc: &Value) -> Vec<Value> {
    validate_published(schema, doc)
        .into_iter()
        .map(|i| Value::String(format!("{}: {}", i.path, i.message)))
        .collect()
}

/// The issues of a document of a kind (the reference validator's messages; the published
/// schema for kinds the reference has no validator for).
pub fn issues_for(kind: Kind, doc: &Value) -> Vec<Value> {
    let strings = |v: Vec<String>| v.into_iter().map(Value::String).collect();
    match kind {
        Kind::Manifest => strings(validate::validate_manifest(doc)),
        Kind::Package => {
            // A package.json (with a `capability` member) or the declaration itself.
            let declaration = match doc.get("capability") {
                Some(d) if doc.get("name").is_some() || doc.get("version").is_some() => d,
                _ => doc,
            };
            strings(validate::validate_package_declaration(declaration))
        }
        Kind::Plan => match capability_core::plan::Plan::from_value(doc) {
            Ok(plan) => match plan.verify_integrity() {
                Ok(()) => Vec::new(),
                Err(e) => vec![Value::String(e.message)],
            },
            Err(e) => vec![Value::String(e.message)],
        },
        Kind::Receipt => schema_issues(PublishedSchema::Receipt, doc),
        Kind::Index => strings(validate::validate_index(doc)),
        Kind::Site => strings(validate::validate_site(doc)),
        Kind::Binding => strings(validate::validate_binding(doc, None)),
        Kind::Lock => strings(validate::validate_lock(doc)),
        Kind::Bridge => strings(validate::validate_bridge(doc)),
        Kind::Gap => schema_issues(PublishedSchema::Gap, doc),
    }
}

pub fn validate(args: ValidateArgs) -> Result<i32, String> {
    let doc = read_json(&args.file)?;
    let issues = issues_for(args.kind, &doc);
    let valid = issues.is_empty();
    print_json(&json!({"valid": valid, "issues": issues}))?;
    Ok(if valid { 0 } else { 1 })
}

#[derive(Args, Debug)]
pub struct HashArgs {
    /// JSON text to hash (or `-` for standard input).
    pub json: Option<String>,
    /// Read the JSON text from a file.
    #[arg(long, conflicts_with = "json")]
    pub file: Option<PathBuf>,
    /// Read standard input as one JSON text per line; print `<sha256> <canonical>` per line
    /// (or `error: <message>`).
    #[arg(long, conflicts_with_all = ["json", "file"])]
    pub lines: bool,
}

pub fn hash(args: HashArgs) -> Result<i32, String> {
    if args.lines {
        return hash_lines();
    }
    let text: Vec<u8> = match (&args.json, &args.file) {
        (Some(t), _) if t != "-" => t.as_bytes().to_vec(),
        (_, Some(path)) => crate::output::read_file(path)?,
        _ => {
            let mut buf = Vec::new();
            std::io::stdin()
                .lock()
                .read_to_end(&mut buf)
                .map_err(|e| format!("stdin: {e}"))?;
            buf
        }
    };
    let canonical = json::canonical_text(&text).map_err(|e| e.to_string())?;
    let sha = json::sha256_hex(canonical.as_bytes());
    print_json(&json!({"canonical": canonical, "sha256": sha}))?;
    Ok(0)
}

fn hash_lines() -> Result<i32, String> {
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let stdout = std::io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut line = Vec::with_capacity(4096);
    let mut failures = 0usize;
    loop {
        line.clear();
        let n = input
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("stdin: {e}"))?;
        if n == 0 {
            break;
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        let written = match json::canonical_text(&line) {
            Ok(canonical) => {
                let sha = json::sha256_hex(canonical.as_bytes());
                out.write_all(sha.as_bytes())
                    .and_then(|_| out.write_all(b" "))
                    .and_then(|_| out.write_all(canonical.as_bytes()))
                    .and_then(|_| out.write_all(b"\n"))
            }
            Err(e) => {
                failures += 1;
                writeln!(out, "error: {e}")
            }
        };
        written.map_err(|e| format!("stdout: {e}"))?;
    }
    out.flush().map_err(|e| format!("stdout: {e}"))?;
    Ok(if failures > 0 { 1 } else { 0 })
}

pub fn conformance() -> Result<i32, String> {
    let report = capability_core::conformance::run_protocol_conformance();
    print_json(&report.to_value())?;
    Ok(if report.ok { 0 } else { 1 })
}

#[derive(Args, Debug)]
pub struct PackageArgs {
    /// The package.json (default: ./package.json).
    #[arg(default_value = "package.json")]
    pub package: PathBuf,
}

pub use capability_host::PackageFile;

/// Reads a package.json and checks its capability declaration (nothing is imported).
pub fn read_package(path: &Path) -> Result<PackageFile, String> {
    PackageFile::read(path).map_err(|e| e.message)
}

pub fn package(args: PackageArgs) -> Result<i32, String> {
    let pkg = read_package(&args.package)?;
    let mut manifests = Vec::new();
    let mut entries = Vec::new();
    for (id, export) in &pkg.exports {
        match export {
            Value::Object(d) => {
                let manifest = d.get("manifest").cloned().unwrap_or(Value::Null);
                let mut inspection = manifest.clone();
                if let Value::Object(m) = &mut inspection {
                    m.insert("executable".into(), Value::Bool(false));
                }
                manifests.push(inspection);
                let mut entry = json!({"id": id, "module": d.get("module"), "manifest": manifest});
                if let Some(integrity) = d.get("integrity") {
                    entry["integrity"] = integrity.clone();
                }
                entries.push(entry);
            }
            Value::String(module) => entries.push(json!({"id": id, "module": module})),
            _ => {}
        }
    }
    print_json(
        &json!({"name": pkg.name, "version": pkg.version, "manifests": manifests, "entries": entries}),
    )?;
    Ok(0)
}

/// `repository` as a string (or `repository.url`), without a `git+` prefix or `.git` suffix.
fn normalized_repository(doc: &Value) -> Option<String> {
    let raw = match doc.get("repository") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(o)) => o.get("url")?.as_str()?.to_string(),
        _ => return None,
    };
    let s = raw.strip_prefix("git+").unwrap_or(&raw);
    Some(s.strip_suffix(".git").unwrap_or(s).to_string())
}

/// The index package record of a package.json.
pub fn package_record(pkg: &PackageFile, source: &str) -> Result<Value, String> {
    if pkg.name.is_empty() || pkg.version.is_empty() {
        return Err(format!(
            "{} must have a name and a version",
            pkg.path.display()
        ));
    }
    let exports = Value::Object(pkg.exports.clone());
    let capabilities = capability_core::index::package_exports_to_index_capabilities(&exports)
        .map_err(|e| e.to_string())?;
    let mut record = Map::new();
    record.insert("name".into(), pkg.name.clone().into());
    record.insert("version".into(), pkg.version.clone().into());
    record.insert("source".into(), source.into());
    if let Some(repo) = normalized_repository(&pkg.doc) {
        record.insert("repository".into(), repo.into());
    }
    record.insert("capabilities".into(), Value::Array(capabilities));
    Ok(Value::Object(record))
}

#[derive(Args, Debug)]
pub struct IndexArgs {
    /// Where to write the index.
    pub output: PathBuf,
    /// package.json files to index.
    #[arg(required = true)]
    pub packages: Vec<PathBuf>,
}

pub fn index(args: IndexArgs) -> Result<i32, String> {
    let mut records = Vec::new();
    let mut capabilities = 0;
    for path in &args.packages {
        let pkg = read_package(path)?;
        let record = package_record(&pkg, &absolute(path))?;
        capabilities += record["capabilities"].as_array().map_or(0, Vec::len);
        records.push(record);
    }
    let packages = records.len();
    let doc =
        capability_core::index::create_index(records, &capability_core::js::now_iso(), &[], None)
            .map_err(|e| format!("invalid index: {e}"))?;
    write_json(&args.output, &doc)?;
    print_json(
        &json!({"output": absolute(&args.output), "packages": packages, "capabilities": capabilities}),
    )?;
    Ok(0)
}

#[derive(Args, Debug)]
pub struct RegistryEntryArgs {
    /// The package.json (default: ./package.json).
    #[arg(default_value = "package.json")]
    pub package: PathBuf,
    /// Write the record here instead of printing it.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn registry_entry(args: RegistryEntryArgs) -> Result<i32, String> {
    let pkg = read_package(&args.package)?;
    let record = package_record(&pkg, "npm")?;
    match &args.out {
        None => print_json(&record)?,
        Some(out) => {
            write_json(out, &record)?;
            let count = record["capabilities"].as_array().map_or(0, Vec::len);
            print_json(&json!({
                "output": absolute(out),
                "package": format!("{}@{}", pkg.name, pkg.version),
                "capabilities": count,
            }))?;
        }
    }
    Ok(0)
}

#[derive(Args, Debug)]
pub struct GapArgs {
    /// The unresolved intent (words are joined with spaces).
    #[arg(required = true)]
    pub intent: Vec<String>,
    /// An effect the missing capability may use (repeatable).
    #[arg(long = "effect")]
    pub effects: Vec<String>,
    /// Also write the gap document here.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn gap(args: GapArgs) -> Result<i32, String> {
    let intent = args.intent.join(" ");
    let options = capability_core::gap::GapOptions {
        effects_ceiling: Some(args.effects),
        ..Default::default()
    };
    let doc = capability_core::gap::create_capability_gap(
        &intent,
        &options,
        &capability_core::js::now_iso(),
    );
    if let Some(out) = &args.out {
        write_json(out, &doc)?;
    }
    print_json(&doc)?;
    Ok(0)
}

pub fn coverage() -> Result<i32, String> {
    // The reference's report, plus the binders this implementation has (`binders`).
    let mut report = capability_core::gap::metabolic_coverage();
    report["binders"] = capability_binders::coverage();
    print_json(&report)?;
    Ok(0)
}

/// Parses a JSON argument (used by the runtime commands).
#[allow(dead_code)]
pub fn json_arg(text: &str) -> Result<Value, String> {
    parse_json_arg(text, "input")
}
