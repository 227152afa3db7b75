//! Inspecting an image through the registry's HTTP API, without an engine: tag → manifest
//! digest, the platform's manifest out of an index, the config blob.

use serde_json::{Map, Value, json};

use super::reference::{ImageReference, Platform};
use super::registry::{
    DOCKER_LIST, DOCKER_MANIFEST, Fetched, IMAGE_CONFIG_TYPES, OCI_INDEX, OCI_MANIFEST,
    RegistryClient,
};
use super::{OciError, OciErrorKind, OciOptions};

/// What an image is, pinned: the reference's `OciInspection`, plus the platform, the media
/// type and the index it was chosen from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OciInspection {
    /// The reference as given.
    pub reference: String,
    /// `<registry>/<repository>@<manifest digest>`: what runs (and, alone, `repoDigests`).
    pub immutable_reference: String,
    /// The config blob's digest (the image id).
    pub id: String,
    /// The image manifest's digest (sha256 of its exact bytes).
    pub manifest_digest: String,
    /// The image manifest's media type.
    pub media_type: String,
    /// The digest of the index (or manifest list) the manifest was chosen from, when the
    /// reference led to one.
    pub index_digest: Option<String>,
    /// The platform asked for (the config's own `os`/`architecture` matched it).
    pub platform: Platform,
    pub architecture: Option<String>,
    pub os: Option<String>,
    pub entrypoint: Option<Vec<String>>,
    pub cmd: Option<Vec<String>>,
    /// The names of the config's environment variables (never their values).
    pub env_names: Vec<String>,
}

impl OciInspection {
    /// `{reference, immutableReference, repoDigests, id, architecture?, os?, entrypoint?,
    /// cmd?, platform, mediaType, manifestDigest, indexDigest?, envNames}`.
    pub fn to_json(&self) -> Value {
        let mut v = Map::new();
        v.insert("reference".into(), json!(self.reference));
        v.insert("immutableReference".into(), json!(self.immutable_reference));
        v.insert("repoDigests".into(), json!([self.immutable_reference]));
        v.insert("id".into(), json!(self.id));
        if let Some(a) = &self.architecture {
            v.insert("architecture".into(), json!(a));
        }
        if let Some(o) = &self.os {
            v.insert("os".into(), json!(o));
        }
        if let Some(e) = &self.entrypoint {
            v.insert("entrypoint".into(), json!(e));
        }
        if let Some(c) = &self.cmd {
            v.insert("cmd".into(), json!(c));
        }
        v.insert("platform".into(), json!(self.platform.to_string()));
        v.insert("mediaType".into(), json!(self.media_type));
        v.insert("manifestDigest".into(), json!(self.manifest_digest));
        if let Some(i) = &self.index_digest {
            v.insert("indexDigest".into(), json!(i));
        }
        v.insert("envNames".into(), json!(self.env_names));
        Value::Object(v)
    }
}

fn invalid(message: String) -> OciError {
    OciError::new(OciErrorKind::Invalid, message)
}

fn strings(v: Option<&Value>) -> Option<Vec<String>> {
    v?.as_array().map(|items| {
        items
            .iter()
            .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_string))
            .collect()
    })
}

/// Picks the entry of an index for `platform`: the first whose platform matches.
fn pick<'d>(index: &'d Value, platform: &Platform, shown: &str) -> Result<&'d str, OciError> {
    let entries = index
        .get("manifests")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid(format!("index {shown} has no manifests array")))?;
    let mut offered = Vec::new();
    for entry in entries {
        let p = entry.get("platform");
        let field = |k: &str| p.and_then(|p| p.get(k)).and_then(Value::as_str);
        let (Some(os), Some(arch)) = (field("os"), field("architecture")) else {
            continue;
        };
        let variant = field("variant");
        if platform.matches(os, arch, variant) {
            let digest = entry
                .get("digest")
                .and_then(Value::as_str)
                .filter(|d| super::reference::is_sha256_digest(d))
                .ok_or_else(|| {
                    invalid(format!(
                        "index {shown}: the {platform} entry has no sha256 digest"
                    ))
                })?;
            return Ok(digest);
        }
        if os != "unknown" {
            offered.push(match variant {
                Some(v) => format!("{os}/{arch}/{v}"),
                None => format!("{os}/{arch}"),
            });
        }
    }
    Err(OciError::new(
        OciErrorKind::Platform,
        format!(
            "{shown} has no image for {platform} (it offers {}); choose another image or platform",
            if offered.is_empty() {
                "none".to_string()
            } else {
                offered.join(", ")
            }
        ),
    ))
}

/// Inspects `reference` through its registry's distribution API (no engine): the tag (or
/// the digest the reference names) is resolved to its manifest, an index to the entry for
/// [`OciOptions::platform`], the config blob is fetched; every document is checked against
/// its digest, and the config's `os`/`architecture` must match the platform.
pub fn inspect(reference: &str, options: &OciOptions) -> Result<OciInspection, OciError> {
    let image = ImageReference::parse(reference)?;
    let platform = &options.platform;
    let mut client = RegistryClient::new(&image, options)?;
    let shown = image.canonical();
    let top = client.manifest(image.target(), image.digest.as_deref())?;
    let (manifest, index_digest): (Fetched, Option<String>) = match top.media_type.as_str() {
        OCI_INDEX | DOCKER_LIST => {
            let digest = pick(&top.document, platform, &shown)?.to_string();
            let child = client.manifest(&digest, Some(&digest))?;
            (child, Some(top.digest))
        }
        _ => (top, None),
    };
    match manifest.media_type.as_str() {
        OCI_MANIFEST | DOCKER_MANIFEST => {}
        OCI_INDEX | DOCKER_LIST => {
            return Err(invalid(format!(
                "{shown}: an index inside an index is not supported"
            )));
        }
        t if t.starts_with("application/vnd.docker.distribution.manifest.v1") => {
            return Err(invalid(format!(
                "{shown} has a schema 1 manifest ({t}), which is not supported; push it again with a current tool"
            )));
        }
        t => {
            return Err(invalid(format!(
                "{shown} has a manifest of type {t:?}, not an image manifest"
            )));
        }
    }
    let config = manifest
        .document
        .get("config")
        .ok_or_else(|| invalid(format!("manifest of {shown} has no config")))?;
    let config_type = config
        .get("mediaType")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !IMAGE_CONFIG_TYPES.contains(&config_type) {
        return Err(invalid(format!(
            "{shown} is not a container image: its config is {config_type:?}"
        )));
    }
    let config_digest = config
        .get("digest")
        .and_then(Value::as_str)
        .filter(|d| super::reference::is_sha256_digest(d))
        .ok_or_else(|| {
            invalid(format!(
                "manifest of {shown}: the config has no sha256 digest"
            ))
        })?
        .to_string();
    let config_bytes = client.blob(&config_digest, config.get("size").and_then(Value::as_u64))?;
    let config_doc: Value = serde_json::from_slice(&config_bytes)
        .map_err(|e| invalid(format!("the config of {shown} is not JSON: {e}")))?;
    let architecture = config_doc
        .get("architecture")
        .and_then(Value::as_str)
        .map(str::to_string);
    let os = config_doc
        .get("os")
        .and_then(Value::as_str)
        .map(str::to_string);
    let variant = config_doc.get("variant").and_then(Value::as_str);
    let runs_here = match (&os, &architecture) {
        (Some(o), Some(a)) => platform.matches(o, a, variant),
        _ => false,
    };
    if !runs_here {
        let is = format!(
            "{}/{}{}",
            os.as_deref().unwrap_or("?"),
            architecture.as_deref().unwrap_or("?"),
            variant.map(|v| format!("/{v}")).unwrap_or_default()
        );
        return Err(OciError::new(
            OciErrorKind::Platform,
            format!(
                "{shown} is an image for {is}, not {platform}; it would not run here (choose an image built for {platform}, or set the platform)"
            ),
        ));
    }
    let inner = config_doc.get("config");
    let env_names = inner
        .and_then(|c| c.get("Env"))
        .and_then(Value::as_array)
        .map(|env| {
            env.iter()
                .filter_map(Value::as_str)
                .map(|e| e.split('=').next().unwrap_or("").to_string())
                .filter(|n| !n.is_empty())
                .collect()
        })
        .unwrap_or_default();
    Ok(OciInspection {
        reference: reference.to_string(),
        immutable_reference: image.with_digest(&manifest.digest),
        id: config_digest,
        manifest_digest: manifest.digest,
        media_type: manifest.media_type,
        index_digest,
        platform: platform.clone(),
        architecture,
        os,
        entrypoint: strings(inner.and_then(|c| c.get("Entrypoint"))),
        cmd: strings(inner.and_then(|c| c.get("Cmd"))),
        env_names,
    })
}
