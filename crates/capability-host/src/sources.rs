//! The host's own capability sources: the OpenAPI documents kept in the home
//! ([`OpenApiSource`]). The trait and the other sources live below the host
//! ([`CapabilitySource`], [`Builtins`], [`LocalPackage`] in the runtime; installed packages in
//! the acquisition crate; MCP upstreams in `capability-upstream`).

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

    /// Every document kept in the home, in namespace order.
    pub fn from_home(home: &crate::Home) -> Result<Vec<OpenApiSource>, CapabilityError> {
        let store = capability_openapi::store::Store::new(home.openapi());
        let entries = store.list().map_err(|m| {
            CapabilityError::new(ErrorCode::InvalidManifest, format!("openapi store: {m}"))
        })?;
        entries
            .into_iter()
            .map(|e| OpenApiSource::open(e, Some(home.secrets())))
            .collect()
    }

    /// The built document.
    pub fn api(&self) -> &capability_openapi::Api {
        &self.api
    }
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
