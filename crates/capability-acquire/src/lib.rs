//! Discovery and exact-artifact acquisition.
//!
//! The runtime fetches and checks what it runs itself, and never spawns `npm`:
//!
//! * [`federation`]: public capability indexes fetched over HTTP, validated, merged, with
//!   `federates` links followed breadth-first (each level in parallel) under depth and count
//!   bounds, with de-duplication, through an index cache in the home (`--offline` reads only
//!   the cache);
//! * [`registry`]: the npm registry (packuments and exact tarballs);
//! * [`integrity`]: sha512 over the downloaded bytes, compared with the packument's
//!   `dist.integrity` and the index's declared integrity (an observed integrity is never
//!   replaced by a declared one);
//! * [`signatures`]: npm registry signatures (ECDSA P-256 over `<name>@<version>:<integrity>`)
//!   checked against the registry's published keys, pinned per registry in the home;
//! * [`attestations`]: npm provenance attestations (Sigstore bundles: the SLSA provenance
//!   signed by a Fulcio certificate and logged in Rekor, the publish attestation signed by the
//!   registry's key) verified against a Sigstore trusted root (the embedded public-good one,
//!   or `$CAP_SIGSTORE_TRUSTED_ROOT`, or `<home>/sigstore-trusted-root.json`) and the sha512
//!   of the downloaded tarball; its documentation says what is and is not checked;
//! * [`unpack`]: tarballs unpacked into the content-addressed store of the home, refusing
//!   absolute paths, `..`, links that leave the package (each link resolved fully through the
//!   package's other links), device files, duplicate entries and archives that expand past a
//!   limit; no lifecycle script ever runs;
//! * [`install`](mod@install): the whole flow and the reference lockfile
//!   (`capability.lock.json`);
//! * [`store`]: the installed-package store, its records (with every file of the package
//!   and its SHA-256) and the [`Installed`] source that registers its capabilities, each
//!   package sealed so that it runs only as it was installed, from the home's own private
//!   store;
//! * [`probe`]: site discovery (`/.well-known/capabilities`);
//! * [`world`]: external software discovery over npm search and GitHub repository search,
//!   with the reference's query planning and relevance scores (`cap world`);
//! * [`progress`]: the events of a crawl and of downloads, for a caller that shows progress.
//!
//! `http://` and `https://` are spoken through the client of `capability-openapi` (rustls, certificates always verified).

pub mod attestations;
pub mod error;
pub mod federation;
pub mod fetch;
pub mod install;
pub mod integrity;
pub mod probe;
pub mod progress;
pub mod registry;
pub mod signatures;
pub mod store;
pub mod unpack;
pub mod world;

pub use error::{
    AcquireError, FetchError, IndexError, IntegrityError, IoError, LockError, PackageError,
    RegistryError, SignatureError, StoreError, UnpackError,
};
pub use federation::{Bounds, Network, federate};
pub use fetch::{FetchConfig, Fetcher};
pub use install::{InstallOptions, Installation, install};
pub use progress::{Progress, Reporter};
pub use store::{InstallRecord, Installed};
