//! npm provenance attestations, verified by the runtime itself (the reference runs
//! `npm audit signatures --include-attestations`).
//!
//! A version that was published with provenance carries
//! `dist.attestations = {url: "<registry>-/npm/v1/attestations/<name>@<version>",
//! provenance: {predicateType}}`; the URL answers `{attestations: [{predicateType, bundle}]}`,
//! each `bundle` a Sigstore bundle (media types `application/vnd.dev.sigstore.bundle+json;
//! version=0.1`, `…;version=0.2` and `application/vnd.dev.sigstore.bundle.v0.3+json`) holding
//! a DSSE envelope over an in-toto statement.
//!
//! # Public API
//!
//! * [`TrustedRoot`]: the Sigstore trust material (Fulcio certificate authorities and Rekor
//!   transparency-log keys) in the `trusted_root.json` format. [`TrustedRoot::load`] reads the
//!   file named by `CAP_SIGSTORE_TRUSTED_ROOT` ([`TRUSTED_ROOT_ENV`]), else
//!   `<home>/sigstore-trusted-root.json` (`Home::sigstore_trusted_root`), else the embedded copy of
//!   Sigstore's public-good root ([`EMBEDDED_TRUSTED_ROOT`], taken from the TUF seeds npm
//!   ships).
//! * [`attestations_url`]: the URL a version's `dist.attestations` names; [`fetch`] fetches
//!   the document (as any document: size-limited, same origin as the registry).
//! * [`verify_document`]: verifies every attestation of the document for a package and the
//!   sha512 of its downloaded tarball, and returns what was verified ([`Verified`]).
//! * [`verify_bundle`]: one bundle, signed by a Fulcio certificate ([`Signer::Fulcio`]) or by a
//!   registry key ([`Signer::Registry`]).
//! * [`pae`] and [`set_message`]: the exact bytes that are signed (DSSE pre-authentication
//!   encoding; Rekor's signed entry timestamp payload).
//!
//! # What is checked
//!
//! For every bundle: the media type is one of the three above and the content a DSSE envelope
//! of payload type `application/vnd.in-toto+json` with exactly one signature; it has at least
//! one transparency-log entry, and **every** entry must (a) name a log of the trusted root
//! whose key is ECDSA P-256 and that was valid at the entry's `integratedTime`, (b) carry a
//! signed entry timestamp (`inclusionPromise.signedEntryTimestamp`) that verifies with that
//! log's key over the canonical JSON `{body, integratedTime, logID, logIndex}`, and (c) have a
//! body (kind `intoto` 0.0.2 or `dsse` 0.0.1, as its `kindVersion` says) whose payload hash is
//! the SHA-256 of the envelope's payload and whose signature is the envelope's signature. The
//! statement (`_type` in-toto Statement v0.1 or v1) has the attestation's predicate type and
//! exactly one subject, `pkg:npm/<name>@<version>` (a scope's `@` written `%40`), whose
//! `digest.sha512` is the sha512 the runtime computed over the downloaded tarball.
//!
//! The SLSA provenance attestation (`https://slsa.dev/provenance/v1` or `/v0.2`): the leaf
//! certificate (`certificate`, or the first of `x509CertificateChain`) is issued by the first
//! certificate of a certificate authority of the trusted root (issuer name and signature),
//! that authority's `validFor` and every certificate of its chain, and the leaf itself, were
//! valid at every entry's `integratedTime`; the leaf is not a CA, has the code-signing
//! extended key usage, and its ECDSA P-256 key verifies the DSSE signature over
//! `PAE(payloadType, payload)`.
//!
//! The npm publish attestation (`https://github.com/npm/attestation/tree/main/specs/publish/v0.1`):
//! the bundle's `publicKey.hint` (and the signature's `keyid`, when it has one) names a key
//! of the registry's (pinned) key set (see [`crate::signatures`]) that had not expired at any
//! entry's `integratedTime`, and that key verifies the DSSE signature.
//!
//! # What is not checked
//!
//! * Signed certificate timestamps (SCTs) of the certificate, and the trusted root's CT logs.
//! * Inclusion proofs and checkpoints of the log entries (only the signed entry timestamp,
//!   the log's promise of inclusion, is verified), RFC 3161 timestamps, and logs whose key is
//!   not ECDSA P-256 (such as Ed25519 Rekor v2 logs): an entry in one of those is refused.
//! * The certificate's identity is recorded, not matched against an expected one: the OIDC
//!   issuer, the subject alternative name (the workflow), the source repository and commit
//!   come from the certificate's Fulcio extensions (`1.3.6.1.4.1.57264.1.*`), the builder from
//!   the SLSA predicate (`runDetails.builder.id`, v0.2 `builder.id`). No policy says which
//!   repositories or workflows may publish a package, beyond the trust policy's
//!   `allowedRepositories` over the recorded repository.
//! * Revocation of anything, and the freshness of the trusted root (it is not updated over TUF).

use capability_exec::home::Home;

use base64::Engine as _;
use p256::ecdsa::signature::Verifier as _;
use p256::ecdsa::{DerSignature, VerifyingKey};
use p256::pkcs8::DecodePublicKey as _;
use serde_json::{Value, json};
use sha2::Digest as _;

use crate::AcquireError;
use crate::error::{FetchError, FetchFault, IoError, SignatureFault};
use crate::fetch::Fetcher;
use crate::signatures::KeySet;

/// Sigstore's public-good trusted root (`trusted_root.json` of the TUF repository
/// `https://tuf-repo-cdn.sigstore.dev`, as seeded in npm's `@sigstore/tuf`).
pub const EMBEDDED_TRUSTED_ROOT: &str = include_str!("../data/sigstore-trusted-root.json");
/// The environment variable naming a replacement trusted root.
pub const TRUSTED_ROOT_ENV: &str = "CAP_SIGSTORE_TRUSTED_ROOT";
/// The replacement trusted root in the home.
/// The SLSA provenance predicate npm publishes.
pub const SLSA_V1: &str = "https://slsa.dev/provenance/v1";
/// The SLSA provenance predicate of older npm versions.
pub const SLSA_V02: &str = "https://slsa.dev/provenance/v0.2";
/// npm's publish attestation.
pub const PUBLISH: &str = "https://github.com/npm/attestation/tree/main/specs/publish/v0.1";
/// The only DSSE payload type accepted.
pub const IN_TOTO: &str = "application/vnd.in-toto+json";

const BUNDLE_V01: &str = "application/vnd.dev.sigstore.bundle+json;version=0.1";
const BUNDLE_V02: &str = "application/vnd.dev.sigstore.bundle+json;version=0.2";
const BUNDLE_V03: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
const STATEMENTS: [&str; 2] = [
    "https://in-toto.io/Statement/v0.1",
    "https://in-toto.io/Statement/v1",
];
const P256: &str = "PKIX_ECDSA_P256_SHA_256";
/// Fulcio's certificate extensions.
const FULCIO_OID: &str = "1.3.6.1.4.1.57264.1.";

/// What is wrong with a Sigstore trusted root.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RootProblem {
    #[error("media type {media:?} is not a trusted root")]
    MediaType { media: String },
    #[error("{what}: {field} is not base64")]
    NotBase64 { what: String, field: &'static str },
    #[error("{what}: not a P-256 public key: {reason}")]
    NotP256 { what: String, reason: String },
    #[error(transparent)]
    Validity(#[from] ValidityProblem),
    #[error("{what}: no certChain.certificates")]
    NoChain { what: String },
    #[error("{what}: a certificate is not DER X.509")]
    NotX509 { what: String },
    #[error("it has no ECDSA P-256 transparency log or no certificate authority")]
    Incomplete,
    #[error(transparent)]
    NotJson(#[from] capability_core::json::JsonError),
}

/// A `validFor` of a trusted root that does not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ValidityProblem {
    #[error("{what}: validFor.{key} {value:?} is not a date")]
    NotDate {
        what: String,
        key: &'static str,
        value: String,
    },
    #[error("{what}: validFor.{key} is not a date")]
    NotString { what: String, key: &'static str },
    #[error("{what}: validFor.start is missing")]
    NoStart { what: String },
}

/// What is wrong with an attestations document as a whole.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DocumentProblem {
    #[error("{url} has no `attestations` array")]
    NoArray { url: String },
    #[error("attestation {index} has no bundle")]
    NoBundle { index: usize },
    #[error("the publish attestation cannot be verified: the registry publishes no signing keys")]
    NoKeysForPublish,
    #[error("more than one attestation of type {predicate}")]
    Duplicate { predicate: String },
    #[error("attestation {index} has the unknown type {predicate:?}")]
    UnknownType { index: usize, predicate: String },
    #[error("{url} holds no SLSA provenance attestation")]
    NoProvenance { url: String },
}

/// Why one bundle does not verify.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BundleProblem {
    #[error("the bundle media type {media:?} is not a Sigstore bundle v0.1, v0.2 or v0.3")]
    MediaType { media: String },
    #[error("the bundle holds no DSSE envelope")]
    NoEnvelope,
    #[error("the payload type {payload_type:?} is not {IN_TOTO}")]
    PayloadType { payload_type: String },
    #[error("the envelope's payload is not base64")]
    PayloadNotBase64,
    #[error("the envelope must hold exactly one signature")]
    SignatureCount,
    #[error("the envelope's signature is not base64")]
    SignatureNotBase64,
    #[error("the signature is not a DER ECDSA signature")]
    SignatureNotDer,
    #[error("the bundle has no verificationMaterial")]
    NoMaterial,
    #[error("the bundle has no transparency-log entry")]
    NoEntry,
    #[error(transparent)]
    Entry(#[from] EntryProblem),
    #[error(transparent)]
    Certificate(#[from] CertificateProblem),
    #[error("the DSSE signature does not verify with the certificate's key")]
    CertificateSignature,
    #[error("the bundle names no registry key (publicKey.hint)")]
    NoHint,
    #[error("the signature's keyid {keyid:?} is not the bundle's key {hint:?}")]
    KeyIdMismatch { keyid: String, hint: String },
    #[error("signed by the unknown key {hint:?}: the registry publishes no such key")]
    UnknownKey { hint: String },
    #[error("signed by the key {hint}, which had expired when the entry was logged")]
    ExpiredKey { hint: String },
    #[error("the DSSE signature does not verify with the registry key {hint}")]
    RegistrySignature { hint: String },
    #[error("the statement is not JSON: {reason}")]
    StatementNotJson { reason: String },
    #[error("the statement type {kind:?} is not in-toto")]
    StatementType { kind: String },
    #[error("the statement's predicate type {declared:?} is not {expected:?}")]
    Predicate { declared: String, expected: String },
    #[error("the statement must name exactly one subject")]
    SubjectCount,
    #[error("the statement is about {named:?}, not {purl:?}")]
    Subject { named: String, purl: String },
    #[error("the statement's sha512 {digest:?} is not the downloaded tarball's ({expected})")]
    Digest { digest: String, expected: String },
}

/// Why a transparency-log entry of a bundle does not verify.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EntryProblem {
    #[error("a log entry has no logId")]
    NoLogId,
    #[error("a log entry has no logIndex")]
    NoLogIndex,
    #[error("a log entry has no integratedTime")]
    NoTime,
    #[error(
        "log entry {index} is in the transparency log {log_id}, which is not in the trusted root ({origin}) or has no ECDSA P-256 key"
    )]
    UnknownLog {
        index: u64,
        log_id: String,
        origin: String,
    },
    #[error("log entry {index} was integrated at {time}, when the key of {log} was not valid")]
    KeyNotValid { index: u64, time: i64, log: String },
    #[error("a log entry has no canonicalizedBody")]
    NoBody,
    #[error("log entry {index} has no signed entry timestamp")]
    NoTimestamp { index: u64 },
    #[error("log entry {index}: the signed entry timestamp is malformed")]
    TimestampMalformed { index: u64 },
    #[error("log entry {index}: the signed entry timestamp does not verify with the key of {log}")]
    TimestampSignature { index: u64, log: String },
    #[error("log entry {index}: the body is not base64 JSON")]
    BodyNotJson { index: u64 },
    #[error("log entry {index}: the body is a {kind} {version}, not what kindVersion says")]
    KindMismatch {
        index: u64,
        kind: String,
        version: String,
    },
    #[error(
        "log entry {index} is a {kind} {version} entry: only intoto 0.0.2 and dsse 0.0.1 are accepted"
    )]
    UnsupportedKind {
        index: u64,
        kind: String,
        version: String,
    },
    #[error("log entry {index} logs another payload than the envelope's")]
    OtherPayload { index: u64 },
    #[error("log entry {index} logs another signature than the envelope's")]
    OtherSignature { index: u64 },
}

/// Why the signing certificate of a bundle is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CertificateProblem {
    #[error("the bundle holds no signing certificate")]
    Missing,
    #[error("the signing certificate is not DER X.509: {reason}")]
    NotX509 { reason: String },
    #[error(
        "the signing certificate was not valid at the entry's integrated time {time} (valid from {from} to {until})"
    )]
    NotValidAt { time: i64, from: i64, until: i64 },
    #[error(
        "the signing certificate's authority {uri} was not valid at the entry's integrated time"
    )]
    AuthorityNotValid { uri: String },
    #[error(
        "the signing certificate is not issued by a certificate authority of the trusted root ({origin})"
    )]
    NotIssued { origin: String },
    #[error("the signing certificate is a CA certificate")]
    IsCa,
    #[error("the signing certificate is not for code signing")]
    NotCodeSigning,
    #[error("the signing certificate's key is not ECDSA P-256")]
    NotP256,
}

fn b64(s: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(s).ok()
}

/// `[start, end]` in seconds since the epoch (`end` `None`: open).
#[derive(Clone, Copy, Debug)]
struct Validity {
    start: i64,
    end: Option<i64>,
}

impl Validity {
    fn parse(v: Option<&Value>, what: &str) -> Result<Validity, ValidityProblem> {
        let date = |key: &'static str| -> Result<Option<i64>, ValidityProblem> {
            match v.and_then(|v| v.get(key)) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => capability_core::dates::date_parse(s)
                    .map(|ms| Some((ms / 1000.0).floor() as i64))
                    .ok_or_else(|| ValidityProblem::NotDate {
                        what: what.to_string(),
                        key,
                        value: s.clone(),
                    }),
                Some(_) => Err(ValidityProblem::NotString {
                    what: what.to_string(),
                    key,
                }),
            }
        };
        Ok(Validity {
            start: date("start")?.ok_or_else(|| ValidityProblem::NoStart {
                what: what.to_string(),
            })?,
            end: date("end")?,
        })
    }

    fn contains(&self, t: i64) -> bool {
        t >= self.start && self.end.is_none_or(|e| t <= e)
    }
}

#[derive(Clone, Debug)]
struct Tlog {
    log_id: Vec<u8>,
    base_url: String,
    key: VerifyingKey,
    valid: Validity,
}

#[derive(Clone, Debug)]
struct Authority {
    uri: String,
    /// DER, the issuing certificate first.
    chain: Vec<Vec<u8>>,
    valid: Validity,
}

/// Sigstore trust material: the transparency logs with an ECDSA P-256 key and the
/// certificate authorities of a `trusted_root.json`.
#[derive(Clone, Debug)]
pub struct TrustedRoot {
    tlogs: Vec<Tlog>,
    authorities: Vec<Authority>,
    /// Where it came from (`embedded`, or a path).
    pub origin: String,
}

impl TrustedRoot {
    /// Reads a `trusted_root.json` document. Transparency logs whose key is not ECDSA P-256
    /// are left out (an entry in one of them is then refused); anything malformed is an
    /// error.
    pub fn parse(doc: &Value, origin: &str) -> Result<TrustedRoot, AcquireError> {
        let bad = |problem: RootProblem| {
            AcquireError::from(SignatureFault::TrustedRoot {
                origin: origin.to_string(),
                problem,
            })
        };
        let media = doc.get("mediaType").and_then(Value::as_str).unwrap_or("");
        if !media.starts_with("application/vnd.dev.sigstore.trustedroot") {
            return Err(bad(RootProblem::MediaType {
                media: media.to_string(),
            }));
        }
        let list = |k: &str| doc.get(k).and_then(Value::as_array).cloned();
        let mut tlogs = Vec::new();
        for (i, t) in list("tlogs").unwrap_or_default().iter().enumerate() {
            let what = format!("tlogs[{i}]");
            let key = &t["publicKey"];
            if key.get("keyDetails").and_then(Value::as_str) != Some(P256) {
                continue;
            }
            let der = key
                .get("rawBytes")
                .and_then(Value::as_str)
                .and_then(b64)
                .ok_or_else(|| {
                    bad(RootProblem::NotBase64 {
                        what: what.clone(),
                        field: "publicKey.rawBytes",
                    })
                })?;
            let key_parsed = VerifyingKey::from_public_key_der(&der).map_err(|e| {
                bad(RootProblem::NotP256 {
                    what: what.clone(),
                    reason: e.to_string(),
                })
            })?;
            let log_id = t
                .pointer("/logId/keyId")
                .and_then(Value::as_str)
                .and_then(b64)
                .ok_or_else(|| {
                    bad(RootProblem::NotBase64 {
                        what: what.clone(),
                        field: "logId.keyId",
                    })
                })?;
            tlogs.push(Tlog {
                log_id,
                base_url: t
                    .get("baseUrl")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                key: key_parsed,
                valid: Validity::parse(key.get("validFor"), &what).map_err(|p| bad(p.into()))?,
            });
        }
        let mut authorities = Vec::new();
        for (i, ca) in list("certificateAuthorities")
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let what = format!("certificateAuthorities[{i}]");
            let chain = ca
                .pointer("/certChain/certificates")
                .and_then(Value::as_array)
                .filter(|c| !c.is_empty())
                .ok_or_else(|| bad(RootProblem::NoChain { what: what.clone() }))?
                .iter()
                .map(|c| {
                    let der = c.get("rawBytes").and_then(Value::as_str).and_then(b64);
                    match der {
                        Some(d) if x509_parser::parse_x509_certificate(&d).is_ok() => Ok(d),
                        _ => Err(bad(RootProblem::NotX509 { what: what.clone() })),
                    }
                })
                .collect::<Result<Vec<_>, _>>()?;
            authorities.push(Authority {
                uri: ca
                    .get("uri")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                chain,
                valid: Validity::parse(ca.get("validFor"), &what).map_err(|p| bad(p.into()))?,
            });
        }
        if tlogs.is_empty() || authorities.is_empty() {
            return Err(bad(RootProblem::Incomplete));
        }
        Ok(TrustedRoot {
            tlogs,
            authorities,
            origin: origin.to_string(),
        })
    }

    /// The embedded public-good root.
    pub fn embedded() -> Result<TrustedRoot, AcquireError> {
        let doc = capability_core::json::parse(EMBEDDED_TRUSTED_ROOT.as_bytes())
            .map_err(|error| SignatureFault::EmbeddedRoot { error })?;
        TrustedRoot::parse(&doc, "embedded")
    }

    /// The root to verify with: `$CAP_SIGSTORE_TRUSTED_ROOT`, else
    /// `<home_root>/sigstore-trusted-root.json`, else the embedded one. A replacement that
    /// cannot be read or parsed is an error (never a silent fall-back).
    pub fn load(home: &Home) -> Result<TrustedRoot, AcquireError> {
        let path = match std::env::var_os(TRUSTED_ROOT_ENV) {
            Some(p) if !p.is_empty() => std::path::PathBuf::from(p),
            _ => home.sigstore_trusted_root(),
        };
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    && std::env::var_os(TRUSTED_ROOT_ENV).is_none_or(|p| p.is_empty()) =>
            {
                return TrustedRoot::embedded();
            }
            Err(e) => return Err(IoError::file(&path, &e)),
        };
        let origin = path.display().to_string();
        let doc =
            capability_core::json::parse(&bytes).map_err(|e| SignatureFault::TrustedRoot {
                origin: origin.clone(),
                problem: e.into(),
            })?;
        TrustedRoot::parse(&doc, &origin)
    }
}

/// Who must have signed a bundle.
#[derive(Clone, Copy, Debug)]
pub enum Signer<'a> {
    /// A Fulcio certificate issued under the trusted root.
    Fulcio(&'a TrustedRoot),
    /// A key of the registry's key set (the publish attestation); its log entries are
    /// checked against the trusted root's logs.
    Registry(&'a TrustedRoot, &'a KeySet),
}

/// The artifact an attestation must be about.
#[derive(Clone, Copy, Debug)]
pub struct Subject<'a> {
    pub name: &'a str,
    pub version: &'a str,
    /// Lowercase hex of the sha512 of the tarball's bytes.
    pub sha512_hex: &'a str,
}

impl Subject<'_> {
    /// `pkg:npm/<name>@<version>`, a scope's `@` written `%40` (as npm writes it).
    pub fn purl(&self) -> String {
        let name = match self.name.strip_prefix('@') {
            Some(rest) => format!("%40{rest}"),
            None => self.name.to_string(),
        };
        format!("pkg:npm/{name}@{}", self.version)
    }
}

/// The identity a Fulcio certificate carries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// The OIDC issuer (`1.3.6.1.4.1.57264.1.8`, else `.1`).
    pub issuer: Option<String>,
    /// The subject alternative name (a URI such as the workflow, or an e-mail).
    pub signer: Option<String>,
    /// The source repository (`.12`, else `https://github.com/` + `.5` for GitHub).
    pub repository: Option<String>,
    /// The source commit (`.13`, else `.3`).
    pub commit: Option<String>,
    /// The source ref (`.14`, else `.6`).
    pub git_ref: Option<String>,
    /// The run invocation (`.21`).
    pub run: Option<String>,
}

/// One verified bundle.
#[derive(Clone, Debug)]
pub struct VerifiedBundle {
    pub predicate_type: String,
    /// The statement's predicate.
    pub predicate: Value,
    /// The certificate's identity (`None` for a registry key).
    pub identity: Option<Identity>,
    /// The registry key id (`None` for a certificate).
    pub key_id: Option<String>,
    /// The first log entry's index and integrated time (seconds).
    pub log_index: u64,
    pub integrated_time: i64,
}

/// What [`verify_document`] verified.
#[derive(Clone, Debug)]
pub struct Verified {
    /// The attestations URL.
    pub url: String,
    pub provenance: VerifiedBundle,
    /// The publish attestation, when the document has one.
    pub publish: Option<VerifiedBundle>,
}

impl Verified {
    /// The certificate's identity.
    pub fn identity(&self) -> Identity {
        self.provenance.identity.clone().unwrap_or_default()
    }

    /// The SLSA builder id.
    pub fn builder(&self) -> Option<String> {
        let p = &self.provenance.predicate;
        p.pointer("/runDetails/builder/id")
            .or_else(|| p.pointer("/builder/id"))
            .and_then(Value::as_str)
            .map(String::from)
    }

    /// A JSON summary, as recorded in the installed-package record.
    pub fn to_json(&self) -> Value {
        let id = self.identity();
        json!({
            "url": self.url,
            "predicateType": self.provenance.predicate_type,
            "issuer": id.issuer,
            "signer": id.signer,
            "repository": id.repository,
            "commit": id.commit,
            "ref": id.git_ref,
            "run": id.run,
            "builder": self.builder(),
            "logIndex": self.provenance.log_index,
            "integratedTime": self.provenance.integrated_time,
            "publishKeyId": self.publish.as_ref().and_then(|p| p.key_id.clone()),
        })
    }
}

/// The attestations URL of a version's `dist` (`dist.attestations.url`, or
/// `dist.attestations` itself as a string); `None` when the version has no attestations.
pub fn attestations_url(dist: &Value) -> Result<Option<String>, AcquireError> {
    match dist.get("attestations") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(a) => a
            .get("url")
            .and_then(Value::as_str)
            .map(|s| Some(s.to_string()))
            .ok_or_else(|| SignatureFault::NoAttestationsUrl { spec: None }.into()),
    }
}

/// Fetches the attestations document at `url`, which must have the origin of `registry`.
pub fn fetch(fetcher: &Fetcher, registry: &str, url: &str) -> Result<Value, AcquireError> {
    let same_origin = match (url::Url::parse(url), url::Url::parse(registry)) {
        (Ok(a), Ok(b)) => a.origin() == b.origin(),
        _ => false,
    };
    if !same_origin {
        return Err(SignatureFault::AttestationsElsewhere {
            url: url.to_string(),
            registry: registry.to_string(),
        }
        .into());
    }
    let fetched = fetcher.document(url)?;
    if !(200..300).contains(&fetched.status) {
        let fault = FetchFault::Status {
            url: url.to_string(),
            status: fetched.status,
        };
        return Err(FetchError::from(fault)
            .of("the provenance attestations")
            .into());
    }
    capability_core::json::parse(&fetched.body).map_err(|error| {
        SignatureFault::AttestationsNotJson {
            url: url.to_string(),
            error,
        }
        .into()
    })
}

/// Verifies the attestations document `doc` (fetched from `url`) for `subject`: exactly one
/// SLSA provenance attestation, verified with [`Signer::Fulcio`], and at most one publish
/// attestation, verified with [`Signer::Registry`] (which needs `keys`). An attestation of
/// another predicate type is refused.
pub fn verify_document(
    doc: &Value,
    url: &str,
    root: &TrustedRoot,
    keys: Option<&KeySet>,
    subject: Subject<'_>,
) -> Result<Verified, AcquireError> {
    let spec = format!("{}@{}", subject.name, subject.version);
    let bad = |problem: DocumentProblem| {
        AcquireError::from(SignatureFault::Attestations {
            spec: spec.clone(),
            problem,
        })
    };
    let list = doc
        .get("attestations")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            bad(DocumentProblem::NoArray {
                url: url.to_string(),
            })
        })?;
    let (mut provenance, mut publish) = (None, None);
    for (i, a) in list.iter().enumerate() {
        let predicate = a.get("predicateType").and_then(Value::as_str).unwrap_or("");
        let bundle = a
            .get("bundle")
            .ok_or_else(|| bad(DocumentProblem::NoBundle { index: i }))?;
        let verified = match predicate {
            SLSA_V1 | SLSA_V02 if provenance.is_none() => {
                verify_bundle(bundle, predicate, Signer::Fulcio(root), subject)?
            }
            PUBLISH if publish.is_none() => {
                let keys = keys.ok_or_else(|| bad(DocumentProblem::NoKeysForPublish))?;
                verify_bundle(bundle, predicate, Signer::Registry(root, keys), subject)?
            }
            SLSA_V1 | SLSA_V02 | PUBLISH => {
                return Err(bad(DocumentProblem::Duplicate {
                    predicate: predicate.to_string(),
                }));
            }
            other => {
                return Err(bad(DocumentProblem::UnknownType {
                    index: i,
                    predicate: other.to_string(),
                }));
            }
        };
        if predicate == PUBLISH {
            publish = Some(verified);
        } else {
            provenance = Some(verified);
        }
    }
    let provenance = provenance.ok_or_else(|| {
        bad(DocumentProblem::NoProvenance {
            url: url.to_string(),
        })
    })?;
    Ok(Verified {
        url: url.to_string(),
        provenance,
        publish,
    })
}

/// DSSE's pre-authentication encoding: `DSSEv1 <len type> <type> <len payload> <payload>`.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// What a Rekor signed entry timestamp signs: the canonical JSON of
/// `{body, integratedTime, logID, logIndex}` (`body` the base64 canonicalized body, `logID`
/// the hex log id).
pub fn set_message(body_b64: &str, integrated_time: i64, log_id: &[u8], log_index: u64) -> String {
    format!(
        "{{\"body\":{},\"integratedTime\":{integrated_time},\"logID\":\"{}\",\"logIndex\":{log_index}}}",
        Value::String(body_b64.to_string()),
        hex::encode(log_id)
    )
}

fn text<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

/// A decimal integer given as a JSON string (as protobuf JSON writes int64) or a number.
fn int(v: &Value, pointer: &str) -> Option<i64> {
    match v.pointer(pointer)? {
        Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse().ok()
        }
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

/// Verifies one bundle of predicate type `predicate_type` about `subject`, signed as
/// `signer` says (see the module documentation for every check).
pub fn verify_bundle(
    bundle: &Value,
    predicate_type: &str,
    signer: Signer<'_>,
    subject: Subject<'_>,
) -> Result<VerifiedBundle, AcquireError> {
    let what = if predicate_type == PUBLISH {
        "publish attestation"
    } else {
        "provenance attestation"
    };
    let spec = format!("{}@{}", subject.name, subject.version);
    let bad = |problem: BundleProblem| {
        AcquireError::from(SignatureFault::Bundle {
            what,
            spec: spec.clone(),
            problem,
        })
    };
    let media = bundle
        .get("mediaType")
        .and_then(Value::as_str)
        .unwrap_or("");
    if ![BUNDLE_V01, BUNDLE_V02, BUNDLE_V03].contains(&media) {
        return Err(bad(BundleProblem::MediaType {
            media: media.to_string(),
        }));
    }
    // The envelope and its one signature.
    let envelope = bundle
        .get("dsseEnvelope")
        .filter(|e| e.is_object())
        .ok_or_else(|| bad(BundleProblem::NoEnvelope))?;
    let payload_type = text(envelope, "/payloadType").unwrap_or("");
    if payload_type != IN_TOTO {
        return Err(bad(BundleProblem::PayloadType {
            payload_type: payload_type.to_string(),
        }));
    }
    let payload = text(envelope, "/payload")
        .and_then(b64)
        .ok_or_else(|| bad(BundleProblem::PayloadNotBase64))?;
    let signature = match envelope.get("signatures").and_then(Value::as_array) {
        Some(s) if s.len() == 1 => &s[0],
        _ => return Err(bad(BundleProblem::SignatureCount)),
    };
    let sig_bytes = text(signature, "/sig")
        .and_then(b64)
        .ok_or_else(|| bad(BundleProblem::SignatureNotBase64))?;
    let sig = DerSignature::try_from(sig_bytes.as_slice())
        .map_err(|_| bad(BundleProblem::SignatureNotDer))?;
    let material = bundle
        .get("verificationMaterial")
        .ok_or_else(|| bad(BundleProblem::NoMaterial))?;
    let root = match signer {
        Signer::Fulcio(root) | Signer::Registry(root, _) => root,
    };

    // The transparency-log entries.
    let entries = material
        .get("tlogEntries")
        .and_then(Value::as_array)
        .filter(|e| !e.is_empty())
        .ok_or_else(|| bad(BundleProblem::NoEntry))?;
    let mut times = Vec::new();
    let mut first_index = None;
    for e in entries {
        let (time, index) =
            verify_entry(e, root, &payload, &sig_bytes).map_err(|p| bad(p.into()))?;
        times.push(time);
        first_index.get_or_insert(index);
    }

    // The signer.
    let message = pae(payload_type, &payload);
    let (identity, key_id) = match signer {
        Signer::Fulcio(root) => {
            let leaf = leaf_certificate(material, media).map_err(|p| bad(p.into()))?;
            let (key, identity) =
                check_certificate(&leaf, root, &times).map_err(|p| bad(p.into()))?;
            key.verify(&message, &sig)
                .map_err(|_| bad(BundleProblem::CertificateSignature))?;
            (Some(identity), None)
        }
        Signer::Registry(_, keys) => {
            let hint = text(material, "/publicKey/hint").unwrap_or("");
            if hint.is_empty() {
                return Err(bad(BundleProblem::NoHint));
            }
            let keyid = text(signature, "/keyid").unwrap_or("");
            if !keyid.is_empty() && keyid != hint {
                return Err(bad(BundleProblem::KeyIdMismatch {
                    keyid: keyid.to_string(),
                    hint: hint.to_string(),
                }));
            }
            let key = keys.keys.iter().find(|k| k.keyid == hint).ok_or_else(|| {
                bad(BundleProblem::UnknownKey {
                    hint: hint.to_string(),
                })
            })?;
            if let Some(expires) = key.expires
                && times.iter().any(|t| (*t as f64) * 1000.0 >= expires)
            {
                return Err(bad(BundleProblem::ExpiredKey {
                    hint: hint.to_string(),
                }));
            }
            key.key.verify(&message, &sig).map_err(|_| {
                bad(BundleProblem::RegistrySignature {
                    hint: hint.to_string(),
                })
            })?;
            (None, Some(hint.to_string()))
        }
    };

    // The statement.
    let statement: Value = serde_json::from_slice(&payload).map_err(|e| {
        bad(BundleProblem::StatementNotJson {
            reason: e.to_string(),
        })
    })?;
    let kind = text(&statement, "/_type").unwrap_or("");
    if !STATEMENTS.contains(&kind) {
        return Err(bad(BundleProblem::StatementType {
            kind: kind.to_string(),
        }));
    }
    let declared = text(&statement, "/predicateType").unwrap_or("");
    if declared != predicate_type {
        return Err(bad(BundleProblem::Predicate {
            declared: declared.to_string(),
            expected: predicate_type.to_string(),
        }));
    }
    let subjects = match statement.get("subject").and_then(Value::as_array) {
        Some(s) if s.len() == 1 => &s[0],
        _ => return Err(bad(BundleProblem::SubjectCount)),
    };
    let purl = subject.purl();
    let named = text(subjects, "/name").unwrap_or("");
    if named != purl {
        return Err(bad(BundleProblem::Subject {
            named: named.to_string(),
            purl,
        }));
    }
    let digest = text(subjects, "/digest/sha512").unwrap_or("");
    if !digest.eq_ignore_ascii_case(subject.sha512_hex) || digest.is_empty() {
        return Err(bad(BundleProblem::Digest {
            digest: digest.to_string(),
            expected: subject.sha512_hex.to_string(),
        }));
    }
    Ok(VerifiedBundle {
        predicate_type: predicate_type.to_string(),
        predicate: statement.get("predicate").cloned().unwrap_or(Value::Null),
        identity,
        key_id,
        log_index: first_index.unwrap_or_default(),
        integrated_time: times.first().copied().unwrap_or_default(),
    })
}

/// One log entry: its log, signed entry timestamp and body. Returns its integrated time
/// and index.
fn verify_entry(
    e: &Value,
    root: &TrustedRoot,
    payload: &[u8],
    sig: &[u8],
) -> Result<(i64, u64), EntryProblem> {
    let log_id = text(e, "/logId/keyId")
        .and_then(b64)
        .ok_or(EntryProblem::NoLogId)?;
    let index = int(e, "/logIndex")
        .and_then(|i| u64::try_from(i).ok())
        .ok_or(EntryProblem::NoLogIndex)?;
    let time = int(e, "/integratedTime").ok_or(EntryProblem::NoTime)?;
    let log = root
        .tlogs
        .iter()
        .find(|t| t.log_id == log_id)
        .ok_or_else(|| EntryProblem::UnknownLog {
            index,
            log_id: hex::encode(&log_id),
            origin: root.origin.clone(),
        })?;
    if !log.valid.contains(time) {
        return Err(EntryProblem::KeyNotValid {
            index,
            time,
            log: log.base_url.clone(),
        });
    }
    let body_b64 = text(e, "/canonicalizedBody").ok_or(EntryProblem::NoBody)?;
    let set = text(e, "/inclusionPromise/signedEntryTimestamp")
        .filter(|s| !s.is_empty())
        .ok_or(EntryProblem::NoTimestamp { index })?;
    let set = b64(set)
        .and_then(|d| DerSignature::try_from(d.as_slice()).ok())
        .ok_or(EntryProblem::TimestampMalformed { index })?;
    let message = set_message(body_b64, time, &log_id, index);
    log.key
        .verify(message.as_bytes(), &set)
        .map_err(|_| EntryProblem::TimestampSignature {
            index,
            log: log.base_url.clone(),
        })?;
    // The logged body is about this envelope.
    let body: Value = b64(body_b64)
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or(EntryProblem::BodyNotJson { index })?;
    let (kind, version) = (
        text(&body, "/kind").unwrap_or(""),
        text(&body, "/apiVersion").unwrap_or(""),
    );
    if text(e, "/kindVersion/kind") != Some(kind)
        || text(e, "/kindVersion/version") != Some(version)
    {
        return Err(EntryProblem::KindMismatch {
            index,
            kind: kind.to_string(),
            version: version.to_string(),
        });
    }
    let (hash, logged_sig) = match (kind, version) {
        ("intoto", "0.0.2") => (
            text(&body, "/spec/content/payloadHash/value"),
            // The envelope's base64 signature, base64-encoded again.
            text(&body, "/spec/content/envelope/signatures/0/sig")
                .and_then(b64)
                .and_then(|s| String::from_utf8(s).ok())
                .and_then(|s| b64(&s)),
        ),
        ("dsse", "0.0.1") => (
            text(&body, "/spec/payloadHash/value"),
            text(&body, "/spec/signatures/0/signature").and_then(b64),
        ),
        _ => {
            return Err(EntryProblem::UnsupportedKind {
                index,
                kind: kind.to_string(),
                version: version.to_string(),
            });
        }
    };
    if hash != Some(hex::encode(sha2::Sha256::digest(payload)).as_str()) {
        return Err(EntryProblem::OtherPayload { index });
    }
    if logged_sig.as_deref() != Some(sig) {
        return Err(EntryProblem::OtherSignature { index });
    }
    Ok((time, index))
}

/// The leaf certificate's DER: `certificate` (v0.3) or the first of `x509CertificateChain`
/// (v0.1, v0.2).
fn leaf_certificate(material: &Value, media: &str) -> Result<Vec<u8>, CertificateProblem> {
    let raw = if media == BUNDLE_V03 {
        text(material, "/certificate/rawBytes")
    } else {
        text(material, "/x509CertificateChain/certificates/0/rawBytes")
    };
    raw.and_then(b64).ok_or(CertificateProblem::Missing)
}

/// Checks the leaf against the trusted root at every time of `times`, returns its key and
/// identity.
fn check_certificate(
    der: &[u8],
    root: &TrustedRoot,
    times: &[i64],
) -> Result<(VerifyingKey, Identity), CertificateProblem> {
    let (_, leaf) =
        x509_parser::parse_x509_certificate(der).map_err(|e| CertificateProblem::NotX509 {
            reason: e.to_string(),
        })?;
    let valid = leaf.validity();
    let (from, until) = (valid.not_before.timestamp(), valid.not_after.timestamp());
    if let Some(t) = times.iter().find(|t| **t < from || **t > until) {
        return Err(CertificateProblem::NotValidAt {
            time: *t,
            from,
            until,
        });
    }
    let mut last = None;
    let issued = root.authorities.iter().find(|ca| {
        let Some(issuer) = ca
            .chain
            .first()
            .and_then(|d| x509_parser::parse_x509_certificate(d).ok())
            .map(|(_, c)| c)
        else {
            return false;
        };
        if issuer.subject().as_raw() != leaf.issuer().as_raw()
            || leaf.verify_signature(Some(issuer.public_key())).is_err()
        {
            return false;
        }
        let chain_valid = ca.chain.iter().all(|d| {
            x509_parser::parse_x509_certificate(d).is_ok_and(|(_, c)| {
                let v = c.validity();
                times
                    .iter()
                    .all(|t| *t >= v.not_before.timestamp() && *t <= v.not_after.timestamp())
            })
        });
        if !(chain_valid && times.iter().all(|t| ca.valid.contains(*t))) {
            last = Some(ca.uri.clone());
            return false;
        }
        true
    });
    if issued.is_none() {
        return Err(match last {
            Some(uri) => CertificateProblem::AuthorityNotValid { uri },
            None => CertificateProblem::NotIssued {
                origin: root.origin.clone(),
            },
        });
    }
    if leaf.is_ca() {
        return Err(CertificateProblem::IsCa);
    }
    let code_signing = leaf
        .extended_key_usage()
        .ok()
        .flatten()
        .is_some_and(|e| e.value.code_signing);
    if !code_signing {
        return Err(CertificateProblem::NotCodeSigning);
    }
    let key = VerifyingKey::from_public_key_der(leaf.public_key().raw)
        .map_err(|_| CertificateProblem::NotP256)?;
    Ok((key, identity(&leaf)))
}

/// A DER UTF8String's text.
fn der_utf8(value: &[u8]) -> Option<String> {
    let (&tag, rest) = value.split_first()?;
    let (&len, rest) = rest.split_first()?;
    if tag != 0x0c {
        return None;
    }
    let (len, rest) = if len < 0x80 {
        (usize::from(len), rest)
    } else {
        let n = usize::from(len & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let l = rest[..n]
            .iter()
            .fold(0usize, |a, b| (a << 8) | usize::from(*b));
        (l, &rest[n..])
    };
    (rest.len() == len)
        .then(|| String::from_utf8(rest.to_vec()).ok())
        .flatten()
}

fn identity(leaf: &x509_parser::certificate::X509Certificate<'_>) -> Identity {
    let ext = |n: u32, der: bool| {
        let oid = format!("{FULCIO_OID}{n}");
        leaf.extensions()
            .iter()
            .find(|e| e.oid.to_id_string() == oid)
            .and_then(|e| {
                if der {
                    der_utf8(e.value)
                } else {
                    String::from_utf8(e.value.to_vec()).ok()
                }
            })
            .filter(|s| !s.is_empty())
    };
    let issuer = ext(8, true).or_else(|| ext(1, false));
    let github = issuer.as_deref() == Some("https://token.actions.githubusercontent.com");
    let signer = leaf
        .subject_alternative_name()
        .ok()
        .flatten()
        .and_then(|san| {
            san.value.general_names.iter().find_map(|n| match n {
                x509_parser::extensions::GeneralName::URI(u) => Some(u.to_string()),
                x509_parser::extensions::GeneralName::RFC822Name(m) => Some(m.to_string()),
                _ => None,
            })
        });
    Identity {
        repository: ext(12, true).or_else(|| {
            ext(5, false)
                .filter(|_| github)
                .map(|r| format!("https://github.com/{r}"))
        }),
        commit: ext(13, true).or_else(|| ext(3, false)),
        git_ref: ext(14, true).or_else(|| ext(6, false)),
        run: ext(21, true),
        issuer,
        signer,
    }
}

#[cfg(any(test, feature = "test-support"))]
pub mod testing;
