//! `capability/oci-command`: an OCI image bound by its manifest digest and run by that digest
//! in a hardened container.
//!
//! # Design
//!
//! The reference inspects with `docker pull` and `docker image inspect`: it needs an engine
//! and pulls the whole image to learn a digest. Here inspection needs no engine at all:
//!
//! * [`reference`]: image references with Docker's defaults (`alpine` is
//!   `docker.io/library/alpine:latest`, whose API answers on `registry-1.docker.io`), and
//!   platforms (`linux/amd64` by default, from the host's architecture).
//! * [`registry`]: the OCI distribution API over the project's blocking HTTP client
//!   (`capability_openapi::http`): `GET /v2/<repo>/manifests/<tag|digest>` accepting OCI
//!   indexes and manifests and Docker manifest lists and v2 manifests; the digest is the
//!   sha256 of the exact bytes received, checked against `Docker-Content-Digest` and against
//!   the digest the reference names. A 401's `Bearer` challenge is answered with a token from
//!   its realm (anonymous, or with [`OciOptions::credentials`]); blob redirects to a CDN are
//!   followed over `https://` without the registry's authorization. Plain `http://` only for
//!   a registry named in [`OciOptions::insecure_registries`] that is on loopback.
//! * [`inspect()`]: tag → manifest digest, an index → the manifest for the platform, the
//!   config blob (digest-checked) → architecture, os, entrypoint, cmd and the names (never
//!   the values) of its environment; an image for another platform is refused.
//! * [`run()`]: by digest only and only when approved ([`APPROVAL_REQUIRED`]): the engine
//!   `capability_sandbox` detects (podman or docker) pulls `<registry>/<repo>@sha256:…`,
//!   then runs it with the reference's hardening (`--read-only --cap-drop=ALL
//!   --security-opt=no-new-privileges:true --pids-limit=64 --memory=512m --cpus=1
//!   --network=none|bridge`), as user 65534:65534 (a static binary in a `FROM scratch` image
//!   runs as any user; an image whose files only root may read does not), `--pull=never`,
//!   a name of its own so that a timeout or a cancellation removes it (`rm -f`), output
//!   bounded. A non-zero exit is a failed execution with its receipt, not an error.
//! * [`binder`]: [`OciBinder`], the `MetabolicBinder`. Its binding pins the manifest digest
//!   that runs; before each execution a tag locator is resolved again and the run refused
//!   when the tag moved ([`OciErrorKind::Moved`]): the approval was for what the tag showed.
//!
//! Which digest is "the" digest: when a tag leads to an index, the binding pins the
//! platform's image manifest (what actually runs, whatever the engine would pick), and the
//! index's digest is kept in the inspection as `indexDigest`.

use std::time::Duration;

pub mod binder;
pub mod inspect;
pub mod reference;
pub mod registry;
pub mod run;

pub use binder::OciBinder;
pub use inspect::{OciInspection, inspect};
pub use reference::{ImageReference, Platform};
pub use run::{APPROVAL_REQUIRED, OciExecution, RunOptions, run};

/// The binder's id in the registry.
pub const BINDER_ID: &str = "capability/oci-command";
/// The binder's substrate.
pub const SUBSTRATE: &str = "oci";

/// Basic credentials for a registry: sent to the token realm its `Bearer` challenge names
/// (or to the registry itself on a `Basic` challenge), never anywhere else.
#[derive(Clone, PartialEq, Eq)]
pub struct RegistryCredentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for RegistryCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryCredentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// How images are inspected.
#[derive(Clone, Debug)]
pub struct OciOptions {
    /// The platform an index's manifest is chosen for, and that the config must match
    /// (default: `linux/<host architecture>`).
    pub platform: Platform,
    /// Registries (`host:port` as references name them) served over plain HTTP. Only a
    /// loopback registry (`localhost`, `127.0.0.0/8`, `[::1]`) may be named; any other is
    /// refused rather than reached without TLS.
    pub insecure_registries: Vec<String>,
    /// Credentials for the token service (anonymous when `None`).
    pub credentials: Option<RegistryCredentials>,
    /// Registry names may resolve to private addresses (IP literals always may).
    pub allow_private: bool,
    /// PEM roots trusted beside the system's (a private registry's CA).
    pub extra_roots_pem: Option<String>,
    /// One HTTP request.
    pub timeout: Duration,
}

impl Default for OciOptions {
    fn default() -> Self {
        OciOptions {
            platform: Platform::host(),
            insecure_registries: Vec::new(),
            credentials: None,
            allow_private: false,
            extra_roots_pem: None,
            timeout: Duration::from_secs(30),
        }
    }
}

impl OciOptions {
    /// Whether `image`'s registry is reached over plain HTTP: named insecure and on loopback.
    /// Named insecure but elsewhere is an error.
    pub fn is_insecure(&self, image: &ImageReference) -> Result<bool, OciError> {
        let named = self
            .insecure_registries
            .iter()
            .any(|r| r.trim().eq_ignore_ascii_case(&image.registry));
        if named && !image.is_loopback() {
            return Err(OciError::new(
                OciErrorKind::Invalid,
                format!(
                    "registry {} is named insecure but is not on loopback: plain HTTP is allowed only for localhost or a loopback address",
                    image.registry
                ),
            ));
        }
        Ok(named)
    }
}

/// What went wrong, by kind (the CLI prints the message; tests match the kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OciErrorKind {
    /// The registry (or its token service) could not be reached, refused or answered an error.
    Registry,
    /// No such repository, tag or digest.
    NotFound,
    /// Bytes that do not hash to the digest they were asked for or announced with.
    Digest,
    /// The image is not for the platform asked for.
    Platform,
    /// A bound tag now shows another image.
    Moved,
    /// A run without explicit approval.
    Approval,
    /// The container engine is missing or failed to pull or start the image.
    Engine,
    /// The run (or the pull) did not finish in time; the container was removed.
    Timeout,
    /// The run was cancelled; the container was removed.
    Cancelled,
    /// A malformed reference, platform, input, manifest or binding.
    Invalid,
}

/// An OCI binder failure.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct OciError {
    pub kind: OciErrorKind,
    pub message: String,
}

impl OciError {
    pub fn new(kind: OciErrorKind, message: impl Into<String>) -> Self {
        OciError {
            kind,
            message: message.into(),
        }
    }
}
