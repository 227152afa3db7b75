//! Acquisition through the host: [`Host::install`] (`cap install`) and [`Host::acquire`]
//! (`cap exec` of a capability an index names but the home does not hold). The work is
//! `capability-acquire`'s (indexes, registry, signatures, provenance, unpacking, the
//! store); the host decides what may stay (its trust policy) and registers what was
//! installed, so the same host runs it — nothing is opened twice.

use std::path::PathBuf;

use capability_acquire::{InstallOptions, Installation, Installed};
use capability_runtime::source::CapabilitySource as _;
use capability_runtime::trust::{TrustAssessment, TrustPolicy, assess_trust_of};

use crate::Host;
use crate::error::{HostError, SourceError, TrustRefused};

/// What [`Host::acquire`] installed and registered.
#[derive(Debug)]
pub struct Acquired {
    pub installation: Installation,
    /// The trust assessment it passed.
    pub trust: TrustAssessment,
}

impl Host {
    /// Installs the capability `query` names (see `capability_acquire::install`) into the
    /// home and registers the capabilities of its package in this host.
    pub fn install(
        &self,
        query: &str,
        options: &InstallOptions,
    ) -> Result<Installation, HostError> {
        let installation = capability_acquire::install(&self.home, query, options)?;
        self.register_installed()?;
        Ok(installation)
    }

    /// The reference's `exec` of a capability that is not installed: resolves `query`
    /// against the indexes of `options` (none configured: `Ok(None)`, there is nothing to
    /// acquire from), installs it with every check of [`Host::install`] (signatures and
    /// provenance required when `trust` requires them), assesses it under `trust`, and
    /// registers it. A package the trust policy refuses is removed again: nothing new is
    /// left in the store, and a record the install rewrote (a package installed before for
    /// another capability) is put back.
    pub fn acquire(
        &self,
        query: &str,
        options: &InstallOptions,
        trust: &TrustPolicy,
    ) -> Result<Option<Acquired>, HostError> {
        let roots =
            capability_acquire::federation::configured_indexes(&options.indexes, Some(&self.home))?;
        if roots.is_empty() {
            return Ok(None);
        }
        let packages = self.home.packages();
        let listing = || -> Vec<PathBuf> {
            std::fs::read_dir(&packages)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .collect()
        };
        let before = listing();
        // The records as they were, to put back if the package is refused.
        let records: Vec<(PathBuf, Vec<u8>)> = before
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .filter_map(|p| std::fs::read(p).ok().map(|b| (p.clone(), b)))
            .collect();
        let options = InstallOptions {
            indexes: roots,
            require_signatures: options.require_signatures || trust.require_registry_signature,
            require_provenance: options.require_provenance || trust.require_provenance,
            ..options.clone()
        };
        let installation = capability_acquire::install(&self.home, query, &options)?;
        let id = installation.capability_id().to_string();
        let capability = Installed::from_home(&self.home)
            .capabilities()
            .map_err(|e| SourceError::new("installed packages", e))?
            .into_iter()
            .find(|c| c.id() == id)
            .ok_or_else(|| {
                SourceError::new(
                    "installed packages",
                    capability_core::CapabilityError::new(
                        capability_core::ErrorCode::NotFound,
                        format!("{id} was installed but cannot be loaded"),
                    ),
                )
            })?;
        let assessment = assess_trust_of(&capability, trust);
        if !assessment.accepted {
            for path in listing().into_iter().filter(|p| !before.contains(p)) {
                let _ = if path.is_dir() {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                };
            }
            for (path, bytes) in &records {
                if std::fs::read(path).ok().as_ref() != Some(bytes) {
                    let _ = std::fs::write(path, bytes);
                }
            }
            return Err(TrustRefused::new(id, assessment.failures).into());
        }
        self.register_installed()?;
        Ok(Some(Acquired {
            installation,
            trust: assessment,
        }))
    }

    /// Registers the capabilities installed in the home that this host does not have yet
    /// (with their index entries).
    pub(crate) fn register_installed(&self) -> Result<(), HostError> {
        let installed = Installed::from_home(&self.home);
        let fresh: Vec<_> = installed
            .capabilities()
            .map_err(|e| SourceError::new("installed packages", e))?
            .into_iter()
            .filter(|c| self.runtime.registry().get(c.id()).is_none())
            .collect();
        if fresh.is_empty() {
            return Ok(());
        }
        let ids: Vec<String> = fresh.iter().map(|c| c.id().to_string()).collect();
        self.ensure_module_executor()?;
        for capability in fresh {
            self.runtime
                .register(capability)
                .map_err(|e| SourceError::new("installed packages", e))?;
        }
        self.add_index_entries(
            installed
                .index_entries()
                .into_iter()
                .filter(|e| ids.contains(&e.manifest.id)),
        );
        Ok(())
    }
}
