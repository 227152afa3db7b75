//! Public capability indexes (`indexVersion: "0.1"`): creation, merging, discovery,
//! resolution, and lockfiles (`lockVersion: "1"`) that pin a resolution.
//!
//! Federation (fetching) is I/O and lives in the discovery layer; everything here is pure.

use std::cmp::Ordering;

use serde_json::{Map, Value, json};

use crate::discovery::{DiscoveryQuery, Hit, Searchable, discover};
use crate::manifest::Manifest;

/// The index document version.
pub const CAPABILITY_INDEX_VERSION: &str = "0.1";
/// The lockfile version.
pub const CAPABILITY_LOCK_VERSION: &str = "1";

/// An index or lock error (the reference throws `TypeError`/`Error` with these messages).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct IndexError(pub String);

/// One capability of an index, with its package.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexEntry {
    pub package_name: String,
    pub package_version: String,
    pub package_integrity: Option<String>,
    pub source: String,
    pub repository: Option<String>,
    pub manifest: Manifest,
    pub module: String,
    pub integrity: Option<String>,
}

impl IndexEntry {
    /// `name@version` of the package.
    pub fn package_ref(&self) -> String {
        format!("{}@{}", self.package_name, self.package_version)
    }

    /// A search hit as `cap find` and the MCP `capability_search` tool give it:
    /// `{id, capabilityVersion, name, description, effects, package, score, reasons}`.
    pub fn hit_json(&self, score: u32, reasons: &[String]) -> Value {
        let m = &self.manifest;
        json!({
            "id": m.id, "capabilityVersion": m.version, "name": m.name,
            "description": m.description, "effects": m.effects(),
            "package": self.package_ref(), "score": score, "reasons": reasons,
        })
    }
}

/// Validates an index document (`Invalid capability index: <issues>`).
pub fn assert_valid_index(doc: &Value) -> Result<(), IndexError> {
    let issues = crate::validate::validate_index(doc);
    if issues.is_empty() {
        Ok(())
    } else {
        Err(IndexError(format!(
            "Invalid capability index: {}",
            issues.join("; ")
        )))
    }
}

/// The reference `createCapabilityIndex(packages, now, {federates?, metadata?})`.
pub fn create_index(
    packages: Vec<Value>,
    generated_at: &str,
    federates: &[String],
    metadata: Option<Map<String, Value>>,
) -> Result<Value, IndexError> {
    let mut doc = Map::new();
    doc.insert("indexVersion".into(), CAPABILITY_INDEX_VERSION.into());
    doc.insert("generatedAt".into(), generated_at.into());
    doc.insert("packages".into(), Value::Array(packages));
    let federates = crate::plan::unique(federates.iter().cloned());
    if !federates.is_empty() {
        doc.insert("federates".into(), json!(federates));
    }
    if let Some(metadata) = metadata {
        doc.insert("metadata".into(), Value::Object(metadata));
    }
    let doc = Value::Object(doc);
    let issues = crate::validate::validate_index(&doc);
    if !issues.is_empty() {
        return Err(IndexError(issues.join("; ")));
    }
    Ok(doc)
}

/// The reference `mergeCapabilityIndexes`: packages keyed by `name@version` (later documents
/// win), federates unioned, packages sorted by `name@version` (ICU root collation), a fresh
/// `generatedAt` and no metadata.
pub fn merge_indexes(docs: &[Value], generated_at: &str) -> Result<Value, IndexError> {
    let mut packages: Vec<(String, Value)> = Vec::new();
    let mut federates: Vec<String> = Vec::new();
    for doc in docs {
        assert_valid_index(doc)?;
        for pkg in doc["packages"].as_array().into_iter().flatten() {
            let key = format!(
                "{}@{}",
                pkg["name"].as_str().unwrap_or_default(),
                pkg["version"].as_str().unwrap_or_default()
            );
            match packages.iter_mut().find(|(k, _)| *k == key) {
                Some(slot) => slot.1 = pkg.clone(),
                None => packages.push((key, pkg.clone())),
            }
        }
        for f in doc["federates"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !federates.iter().any(|x| x == f) {
                federates.push(f.to_string());
            }
        }
    }
    packages.sort_by(|a, b| crate::js::locale_compare(&a.0, &b.0));
    create_index(
        packages.into_iter().map(|(_, p)| p).collect(),
        generated_at,
        &federates,
        None,
    )
}

/// Every capability of a (validated) index, in document order.
pub fn index_entries(doc: &Value) -> Vec<IndexEntry> {
    let mut out = Vec::new();
    for pkg in doc["packages"].as_array().into_iter().flatten() {
        let text = |v: &Value| v.as_str().map(String::from);
        for cap in pkg["capabilities"].as_array().into_iter().flatten() {
            let Ok(manifest) = serde_json::from_value::<Manifest>(cap["manifest"].clone()) else {
                continue;
            };
            out.push(IndexEntry {
                package_name: text(&pkg["name"]).unwrap_or_default(),
                package_version: text(&pkg["version"]).unwrap_or_default(),
                package_integrity: text(&pkg["integrity"]),
                source: text(&pkg["source"]).unwrap_or_default(),
                repository: text(&pkg["repository"]),
                manifest,
                module: text(&cap["module"]).unwrap_or_default(),
                integrity: text(&cap["integrity"]),
            });
        }
    }
    out
}

/// Lexical discovery over an index (no exact-id bonus).
pub fn discover_index<'a>(
    entries: &'a [IndexEntry],
    query: &DiscoveryQuery,
) -> Vec<Hit<&'a IndexEntry>> {
    discover(
        entries.iter(),
        |e| Searchable::from(&e.manifest),
        query,
        false,
    )
}

struct ParsedVersion {
    parts: [u64; 3],
    prerelease: Option<String>,
}

fn parse_version(v: &str) -> ParsedVersion {
    let core_end = v.find(['-', '+']).unwrap_or(v.len());
    let nums: Vec<Option<u64>> = v[..core_end].split('.').map(|p| p.parse().ok()).collect();
    if nums.len() == 3 && nums.iter().all(Option::is_some) {
        let parts = [
            nums[0].unwrap_or(0),
            nums[1].unwrap_or(0),
            nums[2].unwrap_or(0),
        ];
        let prerelease = v[core_end..]
            .strip_prefix('-')
            .map(|rest| rest.split('+').next().unwrap_or_default().to_string());
        ParsedVersion { parts, prerelease }
    } else {
        ParsedVersion {
            parts: [0, 0, 0],
            prerelease: Some(v.to_string()),
        }
    }
}

/// The reference version order: `major.minor.patch`, a release above a prerelease,
/// prereleases by collation (the lower string first).
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    let (pa, pb) = (parse_version(a), parse_version(b));
    pa.parts
        .cmp(&pb.parts)
        .then_with(|| match (&pa.prerelease, &pb.prerelease) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Greater,
            (Some(_), None) => Ordering::Less,
            (Some(x), Some(y)) => crate::js::locale_compare(x, y),
        })
}

/// `Number.MAX_SAFE_INTEGER`, the score of an exact or locked resolution.
pub const EXACT_SCORE: u64 = 9_007_199_254_740_991;

/// A resolved capability.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolution<'a> {
    pub entry: &'a IndexEntry,
    pub score: u64,
    pub reasons: Vec<String>,
}

impl Resolution<'_> {
    /// `{package: {name, version, source}, capability: {manifest, module, integrity?},
    /// score, reasons}`, as `cap info` and the MCP `capability_inspect` tool give it.
    pub fn to_json(&self) -> Value {
        let e = self.entry;
        let mut capability = json!({"manifest": e.manifest.to_value(), "module": e.module});
        if let Some(i) = &e.integrity {
            capability["integrity"] = json!(i);
        }
        json!({
            "package": {"name": e.package_name, "version": e.package_version, "source": e.source},
            "capability": capability,
            "score": self.score,
            "reasons": self.reasons,
        })
    }
}

/// The reference `resolveIndexedCapability(index, queryOrId)`: exact manifest ids first (the
/// highest capability version, then package version), else the best lexical match.
pub fn resolve<'a>(entries: &'a [IndexEntry], query: &str) -> Result<Resolution<'a>, IndexError> {
    let exact = entries
        .iter()
        .filter(|e| e.manifest.id == query)
        .max_by(|a, b| {
            compare_versions(&a.manifest.version, &b.manifest.version)
                .then_with(|| compare_versions(&a.package_version, &b.package_version))
                .then(Ordering::Greater)
        });
    if let Some(entry) = exact {
        return Ok(Resolution {
            entry,
            score: EXACT_SCORE,
            reasons: vec!["exact-id".into()],
        });
    }
    let mut hits = discover_index(
        entries,
        &DiscoveryQuery {
            text: query.to_string(),
            limit: Some(20),
            ..Default::default()
        },
    );
    hits.sort_by(|a, b| {
        b.score
            .cmp(&a.score)
            .then_with(|| compare_versions(&b.item.manifest.version, &a.item.manifest.version))
            .then_with(|| compare_versions(&b.item.package_version, &a.item.package_version))
    });
    hits.into_iter()
        .next()
        .map(|h| Resolution {
            entry: h.item,
            score: u64::from(h.score),
            reasons: h.reasons,
        })
        .ok_or_else(|| IndexError(format!("No capability matched: {query}")))
}

/// The reference `packageExportsToIndexCapabilities`: descriptor exports become index
/// capabilities `{manifest, module, integrity?}`; string exports are skipped.
pub fn package_exports_to_index_capabilities(exports: &Value) -> Result<Vec<Value>, IndexError> {
    let mut out = Vec::new();
    for (id, export) in exports.as_object().into_iter().flatten() {
        let Value::Object(descriptor) = export else {
            continue;
        };
        let manifest = descriptor.get("manifest").cloned().unwrap_or(Value::Null);
        if manifest.get("id").and_then(Value::as_str) != Some(id.as_str()) {
            return Err(IndexError(format!(
                "Package export {id} manifest id does not match"
            )));
        }
        let mut cap = Map::new();
        cap.insert("manifest".into(), manifest);
        cap.insert(
            "module".into(),
            descriptor.get("module").cloned().unwrap_or(Value::Null),
        );
        if let Some(integrity) = descriptor.get("integrity") {
            cap.insert("integrity".into(), integrity.clone());
        }
        out.push(Value::Object(cap));
    }
    Ok(out)
}

/// Validates a lockfile (`Invalid capability lock: <issues>`).
pub fn assert_valid_lock(doc: &Value) -> Result<(), IndexError> {
    let issues = crate::validate::validate_lock(doc);
    if issues.is_empty() {
        Ok(())
    } else {
        Err(IndexError(format!(
            "Invalid capability lock: {}",
            issues.join("; ")
        )))
    }
}

/// The reference `createCapabilityLock`: pins the index (url and canonical digest), the
/// package and the capability of a resolution.
pub fn create_lock(
    index_url: &str,
    index_digest: &str,
    entry: &IndexEntry,
    package_integrity: Option<&str>,
    generated_at: &str,
) -> Value {
    let mut package = json!({"name": entry.package_name, "version": entry.package_version});
    if let Some(i) = package_integrity
        .map(String::from)
        .or_else(|| entry.package_integrity.clone())
    {
        package["integrity"] = i.into();
    }
    let mut capability = json!({
        "id": entry.manifest.id,
        "version": entry.manifest.version,
        "module": entry.module,
    });
    if let Some(i) = &entry.integrity {
        capability["integrity"] = i.clone().into();
    }
    json!({
        "lockVersion": CAPABILITY_LOCK_VERSION,
        "generatedAt": generated_at,
        "index": {"url": index_url, "digest": index_digest},
        "package": package,
        "capability": capability,
    })
}

/// The reference `resolveCapabilityLock(index, lock)`: the exact locked package and
/// capability, with integrity compared where both sides have one.
pub fn resolve_lock<'a>(
    entries: &'a [IndexEntry],
    lock: &Value,
) -> Result<Resolution<'a>, IndexError> {
    assert_valid_lock(lock)?;
    let s = |p: &str| lock.pointer(p).and_then(Value::as_str);
    let (name, version) = (
        s("/package/name").unwrap_or(""),
        s("/package/version").unwrap_or(""),
    );
    let in_package: Vec<&IndexEntry> = entries
        .iter()
        .filter(|e| e.package_name == name && e.package_version == version)
        .collect();
    if in_package.is_empty() {
        return Err(IndexError(format!(
            "Locked package is not present in index: {name}@{version}"
        )));
    }
    if let (Some(locked), Some(indexed)) = (
        s("/package/integrity"),
        in_package[0].package_integrity.as_deref(),
    ) && locked != indexed
    {
        return Err(IndexError(
            "Locked package integrity differs from index".into(),
        ));
    }
    let (id, cap_version, module) = (
        s("/capability/id").unwrap_or(""),
        s("/capability/version").unwrap_or(""),
        s("/capability/module").unwrap_or(""),
    );
    let entry = in_package
        .into_iter()
        .find(|e| e.manifest.id == id && e.manifest.version == cap_version && e.module == module)
        .ok_or_else(|| {
            IndexError(format!(
                "Locked capability is not present in index: {id}@{cap_version}"
            ))
        })?;
    if let (Some(locked), Some(indexed)) = (s("/capability/integrity"), entry.integrity.as_deref())
        && locked != indexed
    {
        return Err(IndexError(
            "Locked module integrity differs from index".into(),
        ));
    }
    Ok(Resolution {
        entry,
        score: EXACT_SCORE,
        reasons: vec!["lockfile".into()],
    })
}
