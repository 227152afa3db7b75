//! The host's own capability sources: the OpenAPI documents kept in the home
//! ([`OpenApiSource`]). The trait and the other sources live below the host
//! ([`CapabilitySource`], [`Builtins`], [`LocalPackage`] in the runtime; installed packages in
//! the acquisition crate; MCP upstreams in `capability-upstream`).

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
/// discovery.
#[derive(Debug)]
pub struct OpenApiSource {
    entry: capability_openapi::store::Entry,
    api: capability_openapi::Api,
}

impl OpenApiSource {
    /// Builds the operations of a stored entry (secrets are read from `secrets_file` or the
    /// environment, at execution only).
    pub fn open(
        entry: capability_openapi::store::Entry,
        secrets_file: Option<PathBuf>,
    ) -> Result<OpenApiSource, CapabilityError> {
        let failed = |m: String| {
            CapabilityError::new(
                ErrorCode::InvalidManifest,
                format!("openapi {}: {m}", entry.namespace),
            )
        };
        let config = capability_openapi::HttpConfig {
            allow_private: entry.allow_private,
            ..Default::default()
        };
        let client = capability_openapi::HttpClient::new(config, Default::default())
            .map_err(|e| failed(e.to_string()))?;
        let api = capability_openapi::build_api(
            &entry.document,
            &entry.options(),
            Arc::new(client),
            capability_openapi::Secrets { file: secrets_file },
        )
        .map_err(|e| failed(e.to_string()))?;
        Ok(OpenApiSource { entry, api })
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
    /// not read, a document that does not build, or one with a capability id another
    /// document already serves is left out and its problem recorded (as the host records an
    /// upstream's), and the others are served. Of documents that share an id, the one in the
    /// file `add` writes for its namespace (`<namespace>.json`) is served first, so that a
    /// stray copy never displaces it.
    pub fn load_home(home: &crate::Home) -> LoadedHome {
        let store = capability_openapi::store::Store::new(home.openapi());
        let mut loaded = LoadedHome::default();
        let mut built = Vec::new();
        for (path, entry) in store.read_each() {
            let what = format!("openapi {}", path.display());
            let source = entry
                .map_err(|e| e.to_string())
                .and_then(|e| OpenApiSource::open(e, Some(home.secrets())).map_err(|e| e.message));
            match source {
                Ok(s) => built.push((path, what, s)),
                Err(problem) => loaded.problems.push((what, problem)),
            }
        }
        let own_file = |path: &std::path::Path, source: &OpenApiSource| {
            capability_openapi::store::namespace_slug(&source.entry.namespace)
                .is_ok_and(|slug| path.file_stem().is_some_and(|stem| *stem == *slug))
        };
        // Stable: own files first, each group in namespace (file name) order.
        built.sort_by_key(|(path, _, source)| !own_file(path, source));
        let mut served: BTreeMap<String, String> = BTreeMap::new();
        let mut kept = Vec::new();
        for (path, what, source) in built {
            let clash = source.api.operations().iter().find_map(|op| {
                served
                    .get(op.id())
                    .map(|other| format!("the capability {} is already served by {other}", op.id()))
            });
            if let Some(problem) = clash {
                loaded.problems.push((what, problem));
                continue;
            }
            for op in source.api.operations() {
                served.insert(op.id().to_string(), what.clone());
            }
            kept.push((path, source));
        }
        kept.sort_by(|a, b| a.0.cmp(&b.0));
        loaded.sources = kept.into_iter().map(|(_, s)| s).collect();
        loaded.problems.sort();
        loaded
    }

    /// The built document.
    pub fn api(&self) -> &capability_openapi::Api {
        &self.api
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
        format!("openapi {}", self.entry.namespace)
    }

    fn capabilities(&self) -> Result<Vec<Capability>, CapabilityError> {
        self.api
            .operations()
            .iter()
            .map(|op| {
                let executor: Arc<dyn capability_runtime::executor::Executor> = op.clone();
                Ok(
                    Capability::with_executor(&op.manifest, executor)?.with_provenance(json!({
                        "source": self.entry.source,
                        "openapi": self.entry.namespace,
                        "server": self.api.server.as_str(),
                    })),
                )
            })
            .collect()
    }

    fn index_entries(&self) -> Vec<IndexEntry> {
        let version = self
            .entry
            .document
            .pointer("/info/version")
            .and_then(Value::as_str)
            .unwrap_or("0.0.0")
            .to_string();
        self.api
            .operations()
            .iter()
            .filter_map(|op| {
                Some(IndexEntry {
                    package_name: format!("openapi:{}", self.entry.namespace),
                    package_version: version.clone(),
                    package_integrity: None,
                    source: self.entry.source.clone(),
                    repository: None,
                    manifest: serde_json::from_value(op.manifest.clone()).ok()?,
                    module: String::new(),
                    integrity: None,
                })
            })
            .collect()
    }
}
