//! Documents kept in a capability home (`cap openapi add|list|remove`): one JSON file per
//! namespace in a directory (`<home>/openapi/<namespace>.json`, mode 0600), holding the
//! document itself (so the source never changes under the host), where it came from, the
//! base URL and the credential references (names of secrets, never their values).

use std::path::{Path, PathBuf};

use capability_core::manifest::legacy_slugify;
use serde_json::{Map, Value, json};

use crate::error::ImportError;
use crate::executor::{ApiOptions, SecretRef, SecretRefError};
use crate::http::{HttpClient, HttpConfig, HttpError, Outgoing, Resolver, origin_of};

/// Why a document could not be kept, listed, removed or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A namespace that cannot name a file (`..`).
    #[error("namespace {namespace:?} cannot be used")]
    Namespace { namespace: String },
    /// A file of the store could not be read or written.
    #[error("{}: {error}", path.display())]
    File {
        path: PathBuf,
        error: std::io::Error,
    },
    /// A stored file is not an entry this store wrote.
    #[error("{}: {error}", path.display())]
    Entry { path: PathBuf, error: EntryError },
    /// An entry could not be written as JSON.
    #[error("{0}")]
    Encode(serde_json::Error),
    /// A source URL that does not parse, or has no host.
    #[error("{source_url}: {reason}")]
    SourceUrl { source_url: String, reason: String },
    /// The HTTP client could not start.
    #[error(transparent)]
    Client(HttpError),
    /// The source URL could not be fetched.
    #[error("{source_url}: {error}")]
    Fetch {
        source_url: String,
        error: HttpError,
    },
    /// The source URL answered with a status other than 2xx.
    #[error("{source_url}: HTTP {status}")]
    Status { source_url: String, status: u16 },
    /// The source file could not be read.
    #[error("cannot read {path}: {error}")]
    Read { path: String, error: std::io::Error },
    /// The source is not an OpenAPI document this crate reads.
    #[error("{source_name}: {error}")]
    Document {
        source_name: String,
        error: ImportError,
    },
}

/// What is wrong with a stored entry.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EntryError {
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error("no namespace")]
    NoNamespace,
    #[error("no document")]
    NoDocument,
    #[error(transparent)]
    Secret(#[from] SecretRefError),
}

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

    fn from_json(v: &Value) -> Result<Entry, EntryError> {
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
            namespace: text("namespace").ok_or(EntryError::NoNamespace)?,
            source: text("source").unwrap_or_default(),
            base_url: text("baseUrl"),
            auth,
            allow_private: v.get("allowPrivate") == Some(&Value::Bool(true)),
            document: v.get("document").cloned().ok_or(EntryError::NoDocument)?,
        })
    }
}

/// The directory of stored documents.
#[derive(Clone, Debug)]
pub struct Store {
    dir: PathBuf,
}

/// A namespace usable as a file name and an id prefix.
pub fn namespace_slug(namespace: &str) -> Result<String, StoreError> {
    let slug = legacy_slugify(namespace);
    if slug.bytes().all(|b| b == b'.') || slug.starts_with('.') {
        return Err(StoreError::Namespace {
            namespace: namespace.to_string(),
        });
    }
    Ok(slug)
}

/// `error` at `path`.
fn file_error(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |error| StoreError::File {
        path: path.to_path_buf(),
        error,
    }
}

impl Store {
    pub fn new(dir: impl Into<PathBuf>) -> Store {
        Store { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, namespace: &str) -> Result<PathBuf, StoreError> {
        Ok(self
            .dir
            .join(format!("{}.json", namespace_slug(namespace)?)))
    }

    /// Keeps (or replaces) an entry.
    pub fn add(&self, entry: &Entry) -> Result<PathBuf, StoreError> {
        std::fs::create_dir_all(&self.dir).map_err(file_error(&self.dir))?;
        let path = self.path(&entry.namespace)?;
        let text = serde_json::to_vec_pretty(&entry.to_json()).map_err(StoreError::Encode)?;
        let tmp = path.with_extension("json.tmp");
        write_private(&tmp, &text).map_err(file_error(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(file_error(&path))?;
        Ok(path)
    }

    /// Every entry, by namespace.
    pub fn list(&self) -> Result<Vec<Entry>, StoreError> {
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
                let bytes = std::fs::read(p).map_err(file_error(p))?;
                serde_json::from_slice(&bytes)
                    .map_err(EntryError::from)
                    .and_then(|v: Value| Entry::from_json(&v))
                    .map_err(|error| StoreError::Entry {
                        path: p.clone(),
                        error,
                    })
            })
            .collect()
    }

    /// Removes an entry; `false` when there was none.
    pub fn remove(&self, namespace: &str) -> Result<bool, StoreError> {
        let path = self.path(namespace)?;
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(file_error(&path)(e)),
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
pub fn read_source(source: &str) -> Result<Value, StoreError> {
    let bytes = if source.starts_with("http://") || source.starts_with("https://") {
        let bad_url = |reason: String| StoreError::SourceUrl {
            source_url: source.to_string(),
            reason,
        };
        let url = url::Url::parse(source).map_err(|e| bad_url(e.to_string()))?;
        let origin = origin_of(&url).ok_or_else(|| bad_url("no host".into()))?;
        let client = HttpClient::new(
            HttpConfig {
                allow_private: true,
                max_response_bytes: crate::document::MAX_DOCUMENT_BYTES,
                ..HttpConfig::default()
            },
            Resolver::System,
        )
        .map_err(StoreError::Client)?;
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
            .map_err(|error| StoreError::Fetch {
                source_url: source.to_string(),
                error,
            })?;
        if !(200..300).contains(&response.status) {
            return Err(StoreError::Status {
                source_url: source.to_string(),
                status: response.status,
            });
        }
        response.body
    } else {
        std::fs::read(source).map_err(|error| StoreError::Read {
            path: source.to_string(),
            error,
        })?
    };
    crate::document::parse_document(&bytes).map_err(|error| StoreError::Document {
        source_name: source.to_string(),
        error,
    })
}
