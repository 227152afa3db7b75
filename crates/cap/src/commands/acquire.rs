//! Acquisition commands: install, probe, npm-inspect, and the federation behind
//! `find --index` / `info --index`.

use std::path::PathBuf;
use std::time::Duration;

use capability_core::index::{IndexEntry, index_entries};
use capability_host::Home;
use capability_host::acquire::{Bounds, FetchConfig, Fetcher, InstallOptions};
use clap::Args;
use serde_json::{Value, json};

use crate::commands::host::HomeArg;
use crate::output::print_json;

/// Where indexes come from and how far federation goes.
#[derive(Args, Debug, Clone, Default)]
pub struct IndexOptions {
    /// A capability index URL (repeatable; default $CAPABILITY_INDEX, comma separated, else
    /// the `indexes` of `<home>/indexes.json`).
    #[arg(long = "index")]
    pub indexes: Vec<String>,
    /// Read the indexes from the home's index cache only (every index fetched is cached).
    #[arg(long)]
    pub offline: bool,
    /// How many `federates` links deep to follow.
    #[arg(long, default_value_t = 4)]
    pub max_depth: usize,
    /// The most indexes to load.
    #[arg(long, default_value_t = 64)]
    pub max_indexes: usize,
    /// The deadline of one HTTP request, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    pub http_timeout_ms: u64,
}

impl IndexOptions {
    fn bounds(&self) -> Bounds {
        Bounds {
            max_depth: self.max_depth,
            max_indexes: self.max_indexes,
        }
    }

    fn fetch(&self) -> FetchConfig {
        FetchConfig {
            timeout: Duration::from_millis(self.http_timeout_ms),
            ..FetchConfig::default()
        }
    }

    /// How `cap exec` acquires an indexed capability that is not installed: these indexes
    /// (after the embedded one), bounds and deadlines, from `registry`.
    pub fn install_options(&self, registry: Option<String>) -> InstallOptions {
        let (progress, _shown) = crate::progress::terminal();
        InstallOptions {
            indexes: self.indexes.clone(),
            embedded: vec![capability_host::defaults::default_index()],
            registry,
            bounds: self.bounds(),
            fetch: self.fetch(),
            offline: self.offline,
            progress,
            ..InstallOptions::default()
        }
    }

    /// The index entries of the configured network (none when no index is configured),
    /// through the index cache of `home`.
    pub fn entries(&self, home: &HomeArg) -> Result<Vec<IndexEntry>, String> {
        Ok(self
            .network(home, &[])?
            .map(|n| index_entries(&n.index))
            .unwrap_or_default())
    }

    /// The configured network merged after `embedded`, through the index cache of `home`
    /// (`None` when no index is configured and nothing is embedded).
    pub fn network(
        &self,
        home: &HomeArg,
        embedded: &[Value],
    ) -> Result<Option<capability_host::acquire::Network>, String> {
        let root = Home::at(&capability_host::home::resolve(home.home.as_deref()));
        let roots =
            capability_host::acquire::federation::configured_indexes(&self.indexes, Some(&root))
                .map_err(|e| e.to_string())?;
        if roots.is_empty() && embedded.is_empty() {
            return Ok(None);
        }
        let (progress, _shown) = crate::progress::terminal();
        let fetcher = Fetcher::new(self.fetch())
            .map_err(|e| e.to_string())?
            .with_progress(progress);
        let cache = capability_host::acquire::federation::IndexCache::in_home(&root, self.offline);
        capability_host::acquire::federate(&fetcher, &roots, embedded, self.bounds(), Some(&cache))
            .map(Some)
            .map_err(|e| e.to_string())
    }
}

#[derive(Args, Debug)]
pub struct InstallArgs {
    /// Capability id (exact) or a query; optional with --locked.
    pub id_or_query: Option<String>,
    /// The npm registry (default $CAP_NPM_REGISTRY, the npmrc `registry=` line, npm's).
    #[arg(long)]
    pub registry: Option<String>,
    /// The lockfile to write (or, with --locked, to reproduce).
    #[arg(long, default_value = "capability.lock.json")]
    pub lock: PathBuf,
    /// Install exactly what the lock names; fail on any difference.
    #[arg(long)]
    pub locked: bool,
    /// Refuse a version without a registry signature verified against the registry's
    /// published keys (`/-/npm/v1/keys`, pinned per registry in the home).
    #[arg(long)]
    pub require_signatures: bool,
    /// A trust policy (JSON); `requireRegistrySignature: true` in it requires signatures too.
    #[arg(long = "trust-policy")]
    pub trust_policy: Option<PathBuf>,
    /// The most bytes an archive may expand to.
    #[arg(long, default_value_t = 256 << 20)]
    pub max_unpacked_bytes: u64,
    #[command(flatten)]
    pub index: IndexOptions,
    #[command(flatten)]
    pub home: HomeArg,
}

pub fn install(args: InstallArgs) -> Result<i32, String> {
    let host = crate::commands::host::open_home(&args.home)?;
    let locked: Option<capability_core::documents::CapabilityLock> = if args.locked {
        let doc = crate::output::read_json(&args.lock)?;
        Some(
            serde_json::from_value(doc)
                .map_err(|e| format!("{}: not a capability lock: {e}", args.lock.display()))?,
        )
    } else {
        None
    };
    let query = match (&args.id_or_query, &locked) {
        (Some(q), _) => q.clone(),
        (None, Some(lock)) => lock.capability.id.clone(),
        (None, None) => return Err("install: a capability id or query is required".into()),
    };
    if let (Some(lock), Some(q)) = (&locked, &args.id_or_query)
        && lock.capability.id != *q
    {
        return Err(format!(
            "install --locked: the lock names another capability than {q}"
        ));
    }
    let trust = match &args.trust_policy {
        Some(p) => Some(read_trust_policy(p)?),
        None => None,
    };
    let (progress, shown) = crate::progress::terminal();
    let options = InstallOptions {
        indexes: args.index.indexes.clone(),
        embedded: vec![capability_host::defaults::default_index()],
        registry: args.registry.clone(),
        bounds: args.index.bounds(),
        fetch: args.index.fetch(),
        locked,
        offline: args.index.offline,
        require_signatures: args.require_signatures
            || trust.as_ref().is_some_and(|t| t.require_registry_signature),
        require_provenance: trust.as_ref().is_some_and(|t| t.require_provenance),
        limits: capability_host::acquire::unpack::Limits {
            max_unpacked_bytes: args.max_unpacked_bytes,
            ..Default::default()
        },
        progress,
    };
    let done = host.install(&query, &options).map_err(|e| e.to_string())?;
    drop(shown);
    let lock_path = crate::output::absolute(&args.lock);
    if !args.locked {
        let lock = done.lock.to_value();
        capability_core::index::assert_valid_lock(&lock).map_err(|e| e.to_string())?;
        let text = serde_json::to_string_pretty(&lock).map_err(|e| e.to_string())?;
        std::fs::write(&args.lock, text + "\n")
            .map_err(|e| format!("cannot write {}: {e}", args.lock.display()))?;
    }
    let r = &done.record;
    print_json(&json!({
        "installed": r.package_ref(),
        "capability": format!("{}@{}", done.lock.capability.id, done.lock.capability.version),
        "integrity": r.package.integrity,
        "registry": r.registry,
        "signatureKeyId": r.signature_key_id,
        "provenanceVerified": r.provenance_verified,
        "attestation": r.attestation,
        "store": done.store.display().to_string(),
        "lock": lock_path,
        "locked": args.locked,
    }))?;
    Ok(0)
}

/// Reads a trust policy file.
pub fn read_trust_policy(
    path: &std::path::Path,
) -> Result<capability_host::trust::TrustPolicy, String> {
    serde_json::from_value(crate::output::read_json(path)?)
        .map_err(|e| format!("{}: {e}", path.display()))
}

#[derive(Args, Debug)]
pub struct ProbeArgs {
    /// The site (any URL of it: only its origin is used).
    pub site: String,
    /// Do not fetch the advertised indexes.
    #[arg(long)]
    pub no_indexes: bool,
    /// The deadline of one HTTP request, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    pub http_timeout_ms: u64,
}

pub fn probe(args: ProbeArgs) -> Result<i32, String> {
    let fetcher = Fetcher::new(FetchConfig {
        timeout: Duration::from_millis(args.http_timeout_ms),
        ..FetchConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let report = capability_host::acquire::probe::probe(&fetcher, &args.site, !args.no_indexes)
        .map_err(|e| e.to_string())?;
    print_json(&report)?;
    Ok(0)
}

#[derive(Args, Debug)]
pub struct NpmInspectArgs {
    /// The npm package name.
    pub package: String,
    /// The version (default: the `latest` dist-tag).
    #[arg(long)]
    pub version: Option<String>,
    /// The npm registry (default $CAP_NPM_REGISTRY, the npmrc `registry=` line, npm's).
    #[arg(long)]
    pub registry: Option<String>,
}

pub fn npm_inspect(args: NpmInspectArgs) -> Result<i32, String> {
    let fetcher = Fetcher::new(FetchConfig::default()).map_err(|e| e.to_string())?;
    let registry = capability_host::acquire::registry::registry_url(args.registry.as_deref());
    let report = capability_host::acquire::registry::inspect(
        &fetcher,
        &registry,
        &args.package,
        args.version.as_deref(),
    )
    .map_err(|e| e.to_string())?;
    print_json(&report)?;
    Ok(0)
}

#[derive(Args, Debug)]
pub struct NoveltyArgs {
    /// A capability id exported by --package, or a manifest file (`*.json`).
    pub id_or_manifest: String,
    /// The package.json exporting the id.
    #[arg(long, default_value = "package.json")]
    pub package: PathBuf,
    #[command(flatten)]
    pub index: IndexOptions,
    #[command(flatten)]
    pub home: HomeArg,
}

/// `cap novelty`: the proposed manifest against every manifest of the network (the embedded
/// index and the configured ones), as the reference's novelty radar.
pub fn novelty(args: NoveltyArgs) -> Result<i32, String> {
    let proposed = if args.id_or_manifest.ends_with(".json") {
        let manifest = crate::output::read_json(std::path::Path::new(&args.id_or_manifest))?;
        capability_core::manifest::assert_valid_manifest(&manifest).map_err(|e| e.message)?;
        manifest
    } else {
        let package = capability_host::PackageFile::read(&args.package).map_err(|e| e.message)?;
        let id = &args.id_or_manifest;
        match package.exports.get(id) {
            Some(Value::Object(d)) => d
                .get("manifest")
                .cloned()
                .ok_or_else(|| format!("{} has no manifest for {id}", args.package.display()))?,
            Some(_) => {
                return Err(format!(
                    "{}: the export {id} is a string, not a descriptor with a manifest",
                    args.package.display()
                ));
            }
            None => {
                return Err(format!("{} does not export {id}", args.package.display()));
            }
        }
    };
    let embedded = capability_host::defaults::default_index();
    let network = args
        .index
        .network(&args.home, std::slice::from_ref(&embedded))?
        .ok_or("no capability index")?;
    let existing: Vec<Value> = network.index["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| p["capabilities"].as_array().into_iter().flatten())
        .filter_map(|c| c.get("manifest").cloned())
        .collect();
    let assessment = capability_host::builtins::novelty_radar::assess(&proposed, &existing)
        .map_err(|e| e.to_string())?;
    let mut sources = vec![json!("embedded:index")];
    sources.extend(network.sources().into_iter().map(Value::from));
    let mut out = json!({
        "proposed": {"id": proposed.get("id"), "version": proposed.get("version")},
        "sources": sources,
    });
    for key in [
        "uniquenessScore",
        "classification",
        "nearest",
        "recommendation",
    ] {
        out[key] = assessment.get(key).cloned().unwrap_or(Value::Null);
    }
    print_json(&out)?;
    Ok(0)
}

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// A capability index URL to check (repeatable; default $CAPABILITY_INDEX, else the
    /// `indexes` of `<home>/indexes.json`).
    #[arg(long = "index")]
    pub indexes: Vec<String>,
    /// An npm registry to check (its `/-/ping` and signing keys); default $CAP_NPM_REGISTRY.
    #[arg(long)]
    pub registry: Option<String>,
    /// The deadline of one HTTP request, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub http_timeout_ms: u64,
    #[command(flatten)]
    pub home: HomeArg,
}

/// The network part of `cap doctor`: each configured index fetched and validated (not
/// federated, not from the cache), and the registry pinged with its signing keys counted.
/// `None` when neither an index nor a registry is configured.
pub fn network_checks(args: &DoctorArgs) -> Result<Option<Value>, String> {
    let root = Home::at(&capability_host::home::resolve(args.home.home.as_deref()));
    let indexes =
        capability_host::acquire::federation::configured_indexes(&args.indexes, Some(&root))
            .map_err(|e| e.to_string())?;
    let registry = args.registry.clone().or_else(|| {
        std::env::var("CAP_NPM_REGISTRY")
            .ok()
            .filter(|s| !s.is_empty())
    });
    if indexes.is_empty() && registry.is_none() {
        return Ok(None);
    }
    let (progress, _shown) = crate::progress::terminal();
    let fetcher = Fetcher::new(FetchConfig {
        timeout: Duration::from_millis(args.http_timeout_ms),
        ..FetchConfig::default()
    })
    .map_err(|e| e.to_string())?
    .with_progress(progress);
    let mut ok = true;
    let checked: Vec<Value> = indexes
        .iter()
        .map(
            |url| match capability_host::acquire::federation::fetch_index(&fetcher, url) {
                Ok(doc) => json!({
                    "url": url,
                    "ok": true,
                    "packages": doc["packages"].as_array().map_or(0, Vec::len),
                }),
                Err(e) => {
                    ok = false;
                    json!({"url": url, "ok": false, "error": e.to_string()})
                }
            },
        )
        .collect();
    let mut out = json!({ "indexes": checked });
    if let Some(r) = registry {
        let url = capability_host::acquire::registry::registry_url(Some(&r));
        let ping = fetcher
            .document(&format!("{url}-/ping"))
            .map_err(|e| e.to_string())
            .and_then(|f| match f.status {
                200..=299 => Ok(()),
                s => Err(format!("{url}-/ping: HTTP {s}")),
            });
        let mut report = json!({"url": url, "ok": ping.is_ok()});
        match ping {
            Ok(()) => {
                report["signingKeys"] =
                    match capability_host::acquire::signatures::fetch_keys(&fetcher, &url) {
                        Ok(Some(keys)) => json!(keys.keys.len()),
                        Ok(None) => Value::Null,
                        Err(e) => json!({"error": e.to_string()}),
                    }
            }
            Err(e) => {
                ok = false;
                report["error"] = json!(e.to_string());
            }
        }
        out["registry"] = report;
    }
    out["ok"] = json!(ok);
    Ok(Some(out))
}
