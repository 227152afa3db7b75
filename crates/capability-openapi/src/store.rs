//! Documents kept in a capability home (`cap openapi add|list|remove`): one JSON file per
//! namespace in a directory (`<home>/openapi/<namespace>.json`, mode 0600), holding the
//! document itself (so the source never changes under the host), where it came from, the
//! base URL and the credential references (names of secrets, never their values).

use std::path::{Path, PathBuf};

use capability_core::manifest::legacy_slugify;
use serde_json::{Map, Value, json};

use crate::executor::{ApiOptions, SecretRef};
use crate::http::{HttpClient, HttpConfig, Outgoing, Resolver, origin_of};

/// One stored document.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub namespace: String,
    /// The file or URL it was read from.
    pub source: String,
    pub base_url: Option<String>,
    pub auth: Vec<(String, SecretRef)>,
    /// Names may resolve to private addresses (an intranet API).
    pub allow_private: bool,
    pub document: Value,
}

impl Entry {
    /// The options the document is built with.
    pub fn options(&self) -> ApiOptions {
        ApiOptions {
            namespace: Some(self.namespace.clone()),
            base_url: self.base_url.clone(),
            auth: self.auth.clone(),
            document_url: self.source.starts_with("http").then(|| self.source.clone()),
        }
    }

    fn to_json(&self) -> Value {
        let mut auth = Map::new();
        for (k, v) in &self.auth {
            auth.insert(k.clone(), json!(v.to_text()));
        }
        json!({
            "namespace": self.namespace, "source": self.source, "baseUrl": self.base_url,
            "auth": auth, "allowPrivate": self.allow_private, "document": self.document,
        })
    }

    fn from_json(v: &Value) -> Result<Entry, String> {
        let text = |k: &str| v.get(k).and_then(Value::as_str).map(String::from);
        let mut auth = Vec::new();
        for (k, r) in v
            .get("auth")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            auth.push((k.clone(), SecretRef::parse(r.as_str().unwrap_or_default())?));
        }
        Ok(Entry {
            namespace: text("namespace").ok_or("no namespace")?,
            source: text("source").unwrap_or_default(),
            base_url: text("baseUrl"),
            auth,
            allow_private: v.get("allowPrivate") == Some(&Value::Bool(true)),
            document: v.get("document").cloned().ok_or("no document")?,
        })
    }
}

/// The directory of stored documents.
#[derive(Clone, Debug)]
pub struct Store {
    dir: PathBuf,
}

/// A namespace usable as a file name and an id prefix.
pub fn namespace_slug(namespace: &str) -> Result<String, String> {
    let slug = legacy_slugify(namespace);
    if slug.bytes().all(|b| b == b'.') || slug.starts_with('.') {
        return Err(format!("namespace {namespace:?} cannot be used"));
    }
    Ok(slug)
}

impl Store {
    pub fn new(dir: impl Into<PathBuf>) -> Store {
        Store { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, namespace: &str) -> Result<PathBuf, String> {
        Ok(self
            .dir
            .join(format!("{}.json", namespace_slug(namespace)?)))
    }

    /// Keeps (or replaces) an entry.
    pub fn add(&self, entry: &Entry) -> Result<PathBuf, String> {
        std::fs::create_dir_all(&self.dir).map_err(|e| format!("{}: {e}", self.dir.display()))?;
        let path = self.path(&entry.namespace)?;
        let text = serde_json::to_vec_pretty(&entry.to_json()).map_err(|e| e.to_string())?;
        let tmp = path.with_extension("json.tmp");
        write_private(&tmp, &text).map_err(|e| format!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, &path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(path)
    }

    /// Every entry, by namespace.
    pub fn list(&self) -> Result<Vec<Entry>, String> {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return Ok(Vec::new());
        };
        let mut paths: Vec<PathBuf> = dir
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        paths.sort();
        paths
            .iter()
            .map(|p| {
                let bytes = std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?;
                let v: Value =
                    serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", p.display()))?;
                Entry::from_json(&v).map_err(|e| format!("{}: {e}", p.display()))
            })
            .collect()
    }

    /// Removes an entry; `false` when there was none.
    pub fn remove(&self, namespace: &str) -> Result<bool, String> {
        let path = self.path(namespace)?;
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }
}

#[cfg(unix)]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)
}

#[cfg(not(unix))]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, bytes)
}

/// Reads a document from a file path or an `http://` or `https://` URL (the URL's own
/// origin is the only destination; it may be loopback, since the user named it).
pub fn read_source(source: &str) -> Result<Value, String> {
    let bytes = if source.starts_with("http://") || source.starts_with("https://") {
        let url = url::Url::parse(source).map_err(|e| format!("{source}: {e}"))?;
        let origin = origin_of(&url).ok_or_else(|| format!("{source}: no host"))?;
        let client = HttpClient::new(
            HttpConfig {
                allow_private: true,
                max_response_bytes: crate::document::MAX_DOCUMENT_BYTES,
                ..HttpConfig::default()
            },
            Resolver::System,
        )
        .map_err(|e| e.to_string())?;
        let response = client
            .send(
                Outgoing {
                    method: "GET".into(),
                    url,
                    headers: Vec::new(),
                    body: None,
                },
                &[origin],
                None,
                &|| false,
            )
            .map_err(|e| format!("{source}: {e}"))?;
        if !(200..300).contains(&response.status) {
            return Err(format!("{source}: HTTP {}", response.status));
        }
        response.body
    } else {
        std::fs::read(source).map_err(|e| format!("cannot read {source}: {e}"))?
    };
    crate::document::parse_document(&bytes).map_err(|e| format!("{source}: {e}"))
}
