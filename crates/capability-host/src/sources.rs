//! The host's own capability sources: the OpenAPI documents kept in the home
//! ([`OpenApiSource`]). The trait and the other sources live below the host
//! ([`CapabilitySource`], [`Builtins`](crate::Builtins), [`LocalPackage`](crate::LocalPackage)
//! in the runtime; installed packages in the acquisition crate; MCP upstreams in
//! `capability-upstream`).
//!
//! A stored document is served lazily: opening a host reads it and checks what the whole
//! document decides (its version, its server, that no two of its operations, nor an
//! operation and another document's, share a capability id) without building any operation;
//! each operation is built (imported, its manifest validated, its schemas compiled) the first
//! time it is looked up, and kept (see [`CapabilitySource::deferred_ids`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use capability_core::index::IndexEntry;
use capability_core::{CapabilityError, ErrorCode};
use capability_runtime::capability::Capability;
use capability_runtime::source::CapabilitySource;
use serde_json::{Value, json};

/// The operations of an OpenAPI document kept in the home (`cap openapi add`): each one a
/// capability run by its own HTTP executor (see `capability_openapi`), and an index entry for
/// discovery. Each operation is built when it is first used ([`capability_openapi::LazyApi`]).
#[derive(Debug)]
pub struct OpenApiSource {
    namespace: String,
    /// Where the document was read from.
    source: String,
    /// `info.version` of the document (`0.0.0` when it has none), for the index entries.
    version: String,
    api: capability_openapi::LazyApi,
}

/// The HTTP client of a stored entry's operations.
fn client(
    entry: &capability_openapi::store::Entry,
) -> Result<Arc<capability_openapi::HttpClient>, String> {
    let config = capability_openapi::HttpConfig {
        allow_private: entry.allow_private,
        ..Default::default()
    };
    capability_openapi::HttpClient::new(config, Default::default())
        .map(Arc::new)
        .map_err(|e| e.to_string())
}

/// `INVALID_MANIFEST` for a document (or operation) of `namespace` that cannot be served.
fn failed(namespace: &str, message: impl std::fmt::Display) -> CapabilityError {
    CapabilityError::new(
        ErrorCode::InvalidManifest,
        format!("openapi {namespace}: {message}"),
    )
}

impl OpenApiSource {
    /// Reads a stored entry for serving, building none of its operations (secrets are read
    /// from `secrets_file` or the environment, at execution only). Refuses what the whole
    /// document decides (its version, its server, operations that share a capability id); an
    /// operation that cannot be built is refused when it is first used.
    pub fn open(
        mut entry: capability_openapi::store::Entry,
        secrets_file: Option<PathBuf>,
    ) -> Result<OpenApiSource, CapabilityError> {
        let client = client(&entry).map_err(|m| failed(&entry.namespace, m))?;
        let options = entry.options();
        let document = std::mem::take(&mut entry.document);
        let version = document
            .pointer("/info/version")
            .and_then(Value::as_str)
            .unwrap_or("0.0.0")
            .to_string();
        let api = capability_openapi::LazyApi::new(
            document,
            &options,
            client,
            capability_openapi::Secrets { file: secrets_file },
        )
        .map_err(|e| failed(&entry.namespace, e))?;
        Ok(OpenApiSource {
            namespace: entry.namespace,
            source: entry.source,
            version,
            api,
        })
    }

    /// Builds every operation of an entry now: what `cap openapi add` runs, so that a
    /// document any of whose operations cannot execute is refused before it is kept.
    pub fn build(
        entry: &capability_openapi::store::Entry,
        secrets_file: Option<PathBuf>,
    ) -> Result<capability_openapi::Api, CapabilityError> {
        let client = client(entry).map_err(|m| failed(&entry.namespace, m))?;
        capability_openapi::build_api(
            &entry.document,
            &entry.options(),
            client,
            capability_openapi::Secrets { file: secrets_file },
        )
        .map_err(|e| failed(&entry.namespace, e))
    }

    /// Every document kept in the home that can be served, in namespace order. A document
    /// that cannot (see [`OpenApiSource::load_home`]) is left out with a warning on stderr,
    /// so that one damaged or conflicting file never stops the others (nor every command
    /// that opens the host); it never fails.
    pub fn from_home(home: &crate::Home) -> Result<Vec<OpenApiSource>, CapabilityError> {
        let loaded = OpenApiSource::load_home(home);
        for (what, problem) in &loaded.problems {
            eprintln!("warning: {what}: {problem} (left out)");
        }
        Ok(loaded.sources)
    }

    /// Every document kept in the home, in namespace order, each on its own: a file that does
    /// not read, a document that cannot be served (see [`OpenApiSource::open`]), or one with
    /// a capability id another document already serves is left out and its problem recorded
    /// (as the host records an upstream's), and the others are served. Of documents that
    /// share an id, the one in the file `add` writes for its namespace (`<namespace>.json`)
    /// is served first, so that a stray copy never displaces it. No operation is built.
    pub fn load_home(home: &crate::Home) -> LoadedHome {
        let store = capability_openapi::store::Store::new(home.openapi());
        let mut loaded = LoadedHome::default();
        let mut opened = Vec::new();
        for (path, entry) in store.read_each() {
            let what = format!("openapi {}", path.display());
            let source = entry
                .map_err(|e| e.to_string())
                .and_then(|e| OpenApiSource::open(e, Some(home.secrets())).map_err(|e| e.message));
            match source {
                Ok(s) => opened.push((path, what, s)),
                Err(problem) => loaded.problems.push((what, problem)),
            }
        }
        let own_file = |path: &std::path::Path, source: &OpenApiSource| {
            capability_openapi::store::namespace_slug(&source.namespace)
                .is_ok_and(|slug| path.file_stem().is_some_and(|stem| *stem == *slug))
        };
        // Stable: own files first, each group in namespace (file name) order.
        opened.sort_by_key(|(path, _, source)| !own_file(path, source));
        let mut served: BTreeMap<String, String> = BTreeMap::new();
        let mut kept = Vec::new();
        for (path, what, source) in opened {
            let clash = source.api.ids().iter().find_map(|id| {
                served
                    .get(id)
                    .map(|other| format!("the capability {id} is already served by {other}"))
            });
            if let Some(problem) = clash {
                loaded.problems.push((what, problem));
                continue;
            }
            for id in source.api.ids() {
                served.insert(id.clone(), what.clone());
            }
            kept.push((path, source));
        }
        kept.sort_by(|a, b| a.0.cmp(&b.0));
        loaded.sources = kept.into_iter().map(|(_, s)| s).collect();
        loaded.problems.sort();
        loaded
    }

    /// The document, each of its operations built when first asked for.
    pub fn api(&self) -> &capability_openapi::LazyApi {
        &self.api
    }

    /// The operation `id` built (now, if it was not yet): `NOT_FOUND` when the document has
    /// none, `INVALID_MANIFEST` when it cannot be built.
    fn operation(
        &self,
        id: &str,
    ) -> Result<Arc<capability_openapi::HttpOperation>, CapabilityError> {
        self.api
            .operation(id)
            .ok_or_else(|| {
                CapabilityError::new(
                    ErrorCode::NotFound,
                    format!("openapi {} has no operation {id}", self.namespace),
                )
            })?
            .map_err(|e| failed(&self.namespace, e))
    }
}

/// What [`OpenApiSource::load_home`] found in the home.
#[derive(Debug, Default)]
pub struct LoadedHome {
    /// The documents served.
    pub sources: Vec<OpenApiSource>,
    /// `(what, problem)` for each stored file left out (`openapi <path>`, why).
    pub problems: Vec<(String, String)>,
}

impl CapabilitySource for OpenApiSource {
    fn name(&self) -> String {
        format!("openapi {}", self.namespace)
    }

    /// Every operation, built now (the first that cannot be built is the error).
    fn capabilities(&self) -> Result<Vec<Capability>, CapabilityError> {
        self.api
            .ids()
            .iter()
            .map(|id| self.capability(id))
            .collect()
    }

    /// The capability id of every operation: a host registers them deferred.
    fn deferred_ids(&self) -> Option<Vec<String>> {
        Some(self.api.ids().to_vec())
    }

    fn capability(&self, id: &str) -> Result<Capability, CapabilityError> {
        let op = self.operation(id)?;
        let executor: Arc<dyn capability_runtime::executor::Executor> = op.clone();
        Ok(
            Capability::with_executor(&op.manifest, executor)?.with_provenance(json!({
                "source": self.source,
                "openapi": self.namespace,
                "server": self.api.server().as_str(),
            })),
        )
    }

    /// An entry for every operation that can be built (each built now, and kept).
    fn index_entries(&self) -> Vec<IndexEntry> {
        self.api
            .ids()
            .iter()
            .filter_map(|id| {
                let op = self.operation(id).ok()?;
                Some(IndexEntry {
                    package_name: format!("openapi:{}", self.namespace),
                    package_version: self.version.clone(),
                    package_integrity: None,
                    source: self.source.clone(),
                    repository: None,
                    manifest: serde_json::from_value(op.manifest.clone()).ok()?,
                    module: String::new(),
                    integrity: None,
                })
            })
            .collect()
    }
}
