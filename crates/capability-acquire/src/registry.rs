//! The npm registry: which one, packuments, the exact version's `dist`, and the reference's
//! `inspectNpmPackage`.

use serde_json::{Value, json};

use crate::AcquireError;
use crate::error::RegistryFault;
use crate::fetch::Fetcher;

/// npm's public registry.
pub const NPM_REGISTRY: &str = "https://registry.npmjs.org/";

/// The `registry=` line of an npmrc text.
pub fn npmrc_registry(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (k, v) = line.trim().split_once('=')?;
        (k.trim() == "registry" && !v.trim().is_empty()).then(|| v.trim().to_string())
    })
}

/// The registry: the flag, else `CAP_NPM_REGISTRY`, else the `registry=` line of the user's
/// npmrc (`$NPM_CONFIG_USERCONFIG`, else `~/.npmrc`), else npm's public registry; always with
/// a trailing slash.
pub fn registry_url(flag: Option<&str>) -> String {
    let from_npmrc = || {
        let path = std::env::var_os("NPM_CONFIG_USERCONFIG")
            .map(std::path::PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".npmrc"))
            })?;
        npmrc_registry(&std::fs::read_to_string(path).ok()?)
    };
    let mut url = flag
        .map(String::from)
        .or_else(|| {
            std::env::var("CAP_NPM_REGISTRY")
                .ok()
                .filter(|s| !s.is_empty())
        })
        .or_else(from_npmrc)
        .unwrap_or_else(|| NPM_REGISTRY.to_string());
    if !url.ends_with('/') {
        url.push('/');
    }
    url
}

/// The packument URL of `name` (a scoped name as `@scope%2Fname`, as npm sends it).
pub fn packument_url(registry: &str, name: &str) -> String {
    format!("{registry}{}", name.replace('/', "%2F"))
}

/// Fetches a packument.
pub fn packument(fetcher: &Fetcher, registry: &str, name: &str) -> Result<Value, AcquireError> {
    let url = packument_url(registry, name);
    let fetched = fetcher.document(&url)?;
    if fetched.status == 404 {
        return Err(RegistryFault::NotFound {
            name: name.to_string(),
            registry: registry.to_string(),
        }
        .into());
    }
    if !(200..300).contains(&fetched.status) {
        return Err(RegistryFault::Status {
            name: name.to_string(),
            url,
            status: fetched.status,
        }
        .into());
    }
    let doc = match capability_core::json::parse(&fetched.body) {
        Ok(doc) => doc,
        Err(error) => {
            let name = name.to_string();
            return Err(RegistryFault::NotJson { name, url, error }.into());
        }
    };
    if doc.get("name").and_then(Value::as_str) != Some(name) {
        let name = name.to_string();
        return Err(RegistryFault::OtherPackage { name, url }.into());
    }
    Ok(doc)
}

/// The version document `version` of a packument (or its `latest` dist-tag).
pub fn version_document<'a>(
    packument: &'a Value,
    name: &str,
    version: Option<&str>,
) -> Result<&'a Value, AcquireError> {
    let version = match version {
        Some(v) => v.to_string(),
        None => packument
            .pointer("/dist-tags/latest")
            .and_then(Value::as_str)
            .map(String::from)
            .ok_or_else(|| RegistryFault::NoLatest {
                name: name.to_string(),
            })?,
    };
    let doc = packument
        .get("versions")
        .and_then(|v| v.get(&version))
        .ok_or_else(|| RegistryFault::NoVersion {
            name: name.to_string(),
            version: version.clone(),
        })?;
    if doc.get("name").and_then(Value::as_str) != Some(name)
        || doc.get("version").and_then(Value::as_str) != Some(version.as_str())
    {
        return Err(RegistryFault::OtherVersion {
            name: name.to_string(),
            version,
        }
        .into());
    }
    Ok(doc)
}

/// A repository URL as the reference normalises it: a leading `git+` dropped, a leading
/// `git://` made `https://`, a trailing `.git` dropped.
pub fn normalize_repository_url(url: &str) -> String {
    let url = url.strip_prefix("git+").unwrap_or(url);
    let url = match url.strip_prefix("git://") {
        Some(rest) => format!("https://{rest}"),
        None => url.to_string(),
    };
    url.strip_suffix(".git").unwrap_or(&url).to_string()
}

fn normalized_repository(v: &Value) -> Option<String> {
    Some(normalize_repository_url(
        v.get("url").unwrap_or(v).as_str()?,
    ))
}

/// The reference's `inspectNpmPackage(name, version?)`.
pub fn inspect(
    fetcher: &Fetcher,
    registry: &str,
    name: &str,
    version: Option<&str>,
) -> Result<Value, AcquireError> {
    let packument = packument(fetcher, registry, name)?;
    let doc = version_document(&packument, name, version)?;
    let either = |k: &str| doc.get(k).or_else(|| packument.get(k)).cloned();
    let bins = match doc.get("bin") {
        Some(Value::String(s)) => {
            json!({ name.rsplit('/').next().unwrap_or(name): s })
        }
        Some(Value::Object(m)) => Value::Object(
            m.iter()
                .filter(|(_, v)| v.is_string())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        _ => json!({}),
    };
    let mut out = json!({
        "name": name,
        "version": doc["version"],
        "description": either("description").filter(Value::is_string).unwrap_or_else(|| json!("npm package")),
        "keywords": doc.get("keywords").cloned().unwrap_or_else(|| json!([])),
        "bins": bins,
        "capabilityDeclared": doc.get("capability").is_some_and(Value::is_object),
        "registry": registry,
    });
    if let Some(r) = either("repository")
        .as_ref()
        .and_then(normalized_repository)
    {
        out["repository"] = r.into();
    }
    for (key, value) in [
        ("homepage", either("homepage")),
        ("license", either("license")),
        ("integrity", doc.pointer("/dist/integrity").cloned()),
        ("shasum", doc.pointer("/dist/shasum").cloned()),
        ("tarball", doc.pointer("/dist/tarball").cloned()),
        ("gitHead", doc.get("gitHead").cloned()),
        ("main", doc.get("main").cloned()),
        ("exports", doc.get("exports").cloned()),
    ] {
        if let Some(v) = value {
            out[key] = v;
        }
    }
    Ok(out)
}
