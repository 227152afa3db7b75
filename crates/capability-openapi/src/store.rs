//! Documents kept in a capability home (`cap openapi add|list|remove`): one JSON file per
//! namespace in a directory (`<home>/openapi/<namespace>.json`, mode 0600), holding the
//! document itself (so the source never changes under the host), where it came from, the
//! base URL and the credential references (names of secrets, never their values).
//!
//! What is kept can be read back: entries are read with [`Entry::read`] (the stored-record
//! reader, nested at most [`capability_core::json::RECORD_DEPTH`] levels, so that every
//! document the document reader accepts fits with the entry around it), and [`Store::add`]
//! runs that same reader on the bytes it is about to write, refusing an entry it could not
//! read back (a document nested deeper than a record may be) instead of keeping a file that
//! would fail every later read. [`Store::read_each`] reads every file on its own, so that
//! one damaged file does not hide the others.

use std::path::{Path, PathBuf};

use capability_core::json::{JsonError, parse_record};
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
    /// An entry that, once written, could not be read back (so it is not kept).
    #[error("the document for {namespace} cannot be kept: it could not be read back ({error})")]
    Unreadable {
        namespace: String,
        error: EntryError,
    },
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
    /// The text is not JSON, or nests deeper than [`capability_core::json::RECORD_DEPTH`] levels.
    #[error(transparent)]
    Text(#[from] JsonError),
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

    /// Reads a stored entry's bytes: the one reader of the store, which [`Store::add`] also
    /// runs on what it writes.
    pub fn read(bytes: &[u8]) -> Result<Entry, EntryError> {
        Entry::from_json(parse_record(bytes)?)
    }

    /// The entry of a record, whose document is moved out of it (not copied: a document of
    /// 10,000 operations is megabytes).
    fn from_json(mut v: Value) -> Result<Entry, EntryError> {
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
        let namespace = text("namespace").ok_or(EntryError::NoNamespace)?;
        let (source, base_url) = (text("source").unwrap_or_default(), text("baseUrl"));
        let allow_private = v.get("allowPrivate") == Some(&Value::Bool(true));
        let document = v
            .as_object_mut()
            .and_then(|o| o.remove("document"))
            .ok_or(EntryError::NoDocument)?;
        Ok(Entry {
            namespace,
            source,
            base_url,
            auth,
            allow_private,
            document,
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

    /// Keeps (or replaces) an entry; refused, and nothing written, when the bytes it would
    /// write could not be read back (see the module docs).
    pub fn add(&self, entry: &Entry) -> Result<PathBuf, StoreError> {
        let path = self.path(&entry.namespace)?;
        let text = serde_json::to_vec_pretty(&entry.to_json()).map_err(StoreError::Encode)?;
        Entry::read(&text).map_err(|error| StoreError::Unreadable {
            namespace: entry.namespace.clone(),
            error,
        })?;
        std::fs::create_dir_all(&self.dir).map_err(file_error(&self.dir))?;
        let tmp = path.with_extension("json.tmp");
        write_private(&tmp, &text).map_err(file_error(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(file_error(&path))?;
        Ok(path)
    }

    /// Every entry, by namespace; the first file that does not read fails the whole list
    /// (see [`Store::read_each`] to read past it).
    pub fn list(&self) -> Result<Vec<Entry>, StoreError> {
        self.read_each().into_iter().map(|(_, e)| e).collect()
    }

    /// Every stored file, by namespace, each read on its own: a file that does not read is
    /// an error in its place, never a reason not to read the others.
    pub fn read_each(&self) -> Vec<(PathBuf, Result<Entry, StoreError>)> {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut paths: Vec<PathBuf> = dir
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        paths.sort();
        paths
            .into_iter()
            .map(|p| {
                let entry = std::fs::read(&p).map_err(file_error(&p)).and_then(|bytes| {
                    Entry::read(&bytes).map_err(|error| StoreError::Entry {
                        path: p.clone(),
                        error,
                    })
                });
                (p, entry)
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
