//! Test material (feature `test-support`): a trust root of its own (a Fulcio-like CA made
//! with rcgen, a Rekor-like P-256 log key), a registry key, and npm attestation documents
//! signed with them, good or damaged on purpose. Nothing here is used outside tests.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use base64::Engine as _;
use p256::ecdsa::SigningKey;
use p256::ecdsa::signature::Signer as _;
use p256::pkcs8::DecodePrivateKey as _;
use rcgen::{
    BasicConstraints, CertificateParams, CustomExtension, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, SanType,
};
use serde_json::{Value, json};
use sha2::Digest as _;

use super::{IN_TOTO, PUBLISH, SLSA_V1, TrustedRoot, pae, set_message};
use crate::signatures::{KEY_TYPE, KeySet, parse_keys};

/// 2024-01-01T12:00:00Z: inside the leaf certificates' validity (2024-01-01 to 2024-01-02).
pub const LOGGED_AT: i64 = 1_704_110_400;
/// The registry key's id.
pub const REGISTRY_KEY_ID: &str = "SHA256:fixture-registry-key";
/// The repository, commit and workflow the fixture certificates name.
pub const REPOSITORY: &str = "https://github.com/fixture/capabilities";
pub const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
pub const WORKFLOW: &str =
    "https://github.com/fixture/capabilities/.github/workflows/release.yml@refs/tags/v1.0.0";
pub const ISSUER: &str = "https://token.actions.githubusercontent.com";
pub const BUILDER: &str = "https://github.com/actions/runner/github-hosted";

/// How many transparency logs and certificate authorities `root` trusts.
pub fn trusted(root: &TrustedRoot) -> (usize, usize) {
    (root.tlogs.len(), root.authorities.len())
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn p256_key() -> (KeyPair, SigningKey) {
    let pair = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let key = SigningKey::from_pkcs8_der(&pair.serialize_der()).unwrap();
    (pair, key)
}

/// The SPKI DER of a P-256 key: the fixed prefix and the uncompressed point.
pub fn spki(key: &SigningKey) -> Vec<u8> {
    let mut der = hex::decode("3059301306072a8648ce3d020106082a8648ce3d030107034200").unwrap();
    der.extend_from_slice(key.verifying_key().to_encoded_point(false).as_bytes());
    der
}

fn der_utf8(s: &str) -> Vec<u8> {
    let mut out = vec![0x0c];
    let len = s.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        out.extend_from_slice(&[0x81, len as u8]);
    }
    out.extend_from_slice(s.as_bytes());
    out
}

fn sign(key: &SigningKey, message: &[u8]) -> Vec<u8> {
    let sig: p256::ecdsa::Signature = key.sign(message);
    sig.to_der().as_bytes().to_vec()
}

/// A certificate authority: its certificate and what issues under it.
pub struct Authority {
    pub der: Vec<u8>,
    issuer: Issuer<'static, KeyPair>,
}

impl Authority {
    pub fn new(name: &str) -> Authority {
        let pair = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.not_before = rcgen::date_time_ymd(2023, 1, 1);
        params.not_after = rcgen::date_time_ymd(2030, 1, 1);
        let der = params.self_signed(&pair).unwrap().der().to_vec();
        Authority {
            der,
            issuer: Issuer::new(params, pair),
        }
    }

    /// A Fulcio-like leaf certificate for `key`, valid as `b` says.
    pub fn leaf(&self, key: &KeyPair, b: &Build) -> Vec<u8> {
        let (from, until) = (b.valid_from, b.valid_until);
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.subject_alt_names = vec![SanType::URI(WORKFLOW.try_into().unwrap())];
        params.extended_key_usages = if b.leaf_without_code_signing {
            vec![ExtendedKeyUsagePurpose::ServerAuth]
        } else {
            vec![ExtendedKeyUsagePurpose::CodeSigning]
        };
        if b.leaf_is_ca {
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        }
        params.not_before = rcgen::date_time_ymd(from.0, from.1, from.2);
        params.not_after = rcgen::date_time_ymd(until.0, until.1, until.2);
        let ext = |n: u64, v: &str| {
            CustomExtension::from_oid_content(&[1, 3, 6, 1, 4, 1, 57264, 1, n], der_utf8(v))
        };
        params.custom_extensions = vec![
            ext(8, ISSUER),
            ext(9, WORKFLOW),
            ext(12, REPOSITORY),
            ext(13, COMMIT),
            ext(14, "refs/tags/v1.0.0"),
        ];
        params.signed_by(key, &self.issuer).unwrap().der().to_vec()
    }
}

/// How to build one attestation bundle.
#[derive(Clone, Debug)]
pub struct Build {
    pub name: String,
    pub version: String,
    pub sha512_hex: String,
    /// `0.1`, `0.2` or `0.3`.
    pub bundle_version: &'static str,
    pub integrated_time: i64,
    /// Leaf validity.
    pub valid_from: (i32, u8, u8),
    pub valid_until: (i32, u8, u8),
    /// Issue the leaf under a CA that is not in the trusted root.
    pub stranger_ca: bool,
    /// Sign the publish attestation with a key the registry does not publish.
    pub stranger_key: bool,
    /// A leaf that is a CA certificate, or has no code-signing usage.
    pub leaf_is_ca: bool,
    pub leaf_without_code_signing: bool,
}

impl Build {
    pub fn new(name: &str, version: &str, tarball: &[u8]) -> Build {
        Build {
            name: name.into(),
            version: version.into(),
            sha512_hex: hex::encode(sha2::Sha512::digest(tarball)),
            bundle_version: "0.3",
            integrated_time: LOGGED_AT,
            valid_from: (2024, 1, 1),
            valid_until: (2024, 1, 2),
            stranger_ca: false,
            stranger_key: false,
            leaf_is_ca: false,
            leaf_without_code_signing: false,
        }
    }

    fn purl(&self) -> String {
        match self.name.strip_prefix('@') {
            Some(rest) => format!("pkg:npm/%40{rest}@{}", self.version),
            None => format!("pkg:npm/{}@{}", self.name, self.version),
        }
    }

    fn statement(&self, predicate_type: &str) -> Vec<u8> {
        let predicate = if predicate_type == PUBLISH {
            json!({"name": self.name, "version": self.version, "registry": "https://registry.npmjs.org"})
        } else {
            json!({
                "buildDefinition": {
                    "buildType": "https://slsa-framework.github.io/github-actions-buildtypes/workflow/v1",
                    "externalParameters": {"workflow": {"ref": "refs/tags/v1.0.0",
                        "repository": REPOSITORY, "path": ".github/workflows/release.yml"}},
                    "resolvedDependencies": [{"uri": format!("git+{REPOSITORY}@refs/tags/v1.0.0"),
                        "digest": {"gitCommit": COMMIT}}]
                },
                "runDetails": {"builder": {"id": BUILDER}}
            })
        };
        serde_json::to_vec(&json!({
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"name": self.purl(), "digest": {"sha512": self.sha512_hex}}],
            "predicateType": predicate_type,
            "predicate": predicate,
        }))
        .unwrap()
    }
}

/// The trust material and the signers.
pub struct Fixture {
    pub ca: Authority,
    stranger: Authority,
    rekor: SigningKey,
    rekor_spki: Vec<u8>,
    registry: SigningKey,
    stranger_registry: SigningKey,
}

impl Default for Fixture {
    fn default() -> Self {
        Fixture::new()
    }
}

impl Fixture {
    pub fn new() -> Fixture {
        let (_, rekor) = p256_key();
        let rekor_spki = spki(&rekor);
        Fixture {
            ca: Authority::new("fixture-fulcio"),
            stranger: Authority::new("fixture-fulcio"),
            rekor,
            rekor_spki,
            registry: p256_key().1,
            stranger_registry: p256_key().1,
        }
    }

    fn log_id(&self) -> Vec<u8> {
        sha2::Sha256::digest(&self.rekor_spki).to_vec()
    }

    /// The trusted root document (`trusted_root.json` format).
    pub fn root_document(&self) -> Value {
        json!({
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": [{
                "baseUrl": "https://rekor.fixture.test",
                "hashAlgorithm": "SHA2_256",
                "publicKey": {"rawBytes": b64(&self.rekor_spki),
                    "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                    "validFor": {"start": "2023-01-01T00:00:00Z"}},
                "logId": {"keyId": b64(&self.log_id())}
            }],
            "certificateAuthorities": [{
                "subject": {"organization": "fixture", "commonName": "fixture-fulcio"},
                "uri": "https://fulcio.fixture.test",
                "certChain": {"certificates": [{"rawBytes": b64(&self.ca.der)}]},
                "validFor": {"start": "2023-01-01T00:00:00Z"}
            }],
            "ctlogs": [],
            "timestampAuthorities": []
        })
    }

    pub fn trusted_root(&self) -> TrustedRoot {
        TrustedRoot::parse(&self.root_document(), "fixture").unwrap()
    }

    /// The registry's `/-/npm/v1/keys` document.
    pub fn keys_document(&self) -> Value {
        json!({"keys": [{"keyid": REGISTRY_KEY_ID, "key": b64(&spki(&self.registry)),
            "keytype": KEY_TYPE, "scheme": KEY_TYPE, "expires": null}]})
    }

    pub fn key_set(&self) -> KeySet {
        parse_keys(&self.keys_document(), "fixture/").unwrap()
    }

    /// The registry signature (`dist.signatures` entry) over `<name>@<version>:<integrity>`.
    pub fn registry_signature(&self, message: &str) -> Value {
        json!({"keyid": REGISTRY_KEY_ID, "sig": b64(&sign(&self.registry, message.as_bytes()))})
    }

    /// A log entry for an envelope (`payload`, `sig`), signed by the fixture log; `verifier`
    /// is the certificate or key that is logged.
    fn entry(&self, b: &Build, payload: &[u8], sig: &[u8], verifier: &[u8], index: u64) -> Value {
        let payload_hash = hex::encode(sha2::Sha256::digest(payload));
        let (kind, version, body) = if b.bundle_version == "0.1" {
            let body = json!({"apiVersion": "0.0.2", "kind": "intoto", "spec": {"content": {
                "envelope": {"payloadType": IN_TOTO, "signatures": [{
                    "sig": b64(b64(sig).as_bytes()), "publicKey": b64(verifier)}]},
                "hash": {"algorithm": "sha256", "value": payload_hash},
                "payloadHash": {"algorithm": "sha256", "value": payload_hash}}}});
            ("intoto", "0.0.2", body)
        } else {
            let body = json!({"apiVersion": "0.0.1", "kind": "dsse", "spec": {
                "envelopeHash": {"algorithm": "sha256", "value": payload_hash},
                "payloadHash": {"algorithm": "sha256", "value": payload_hash},
                "signatures": [{"signature": b64(sig), "verifier": b64(verifier)}]}});
            ("dsse", "0.0.1", body)
        };
        let body = b64(&serde_json::to_vec(&body).unwrap());
        let log_id = self.log_id();
        let set = sign(
            &self.rekor,
            set_message(&body, b.integrated_time, &log_id, index).as_bytes(),
        );
        json!({
            "logIndex": index.to_string(),
            "logId": {"keyId": b64(&log_id)},
            "kindVersion": {"kind": kind, "version": version},
            "integratedTime": b.integrated_time.to_string(),
            "inclusionPromise": {"signedEntryTimestamp": b64(&set)},
            "canonicalizedBody": body
        })
    }

    fn media(b: &Build) -> &'static str {
        match b.bundle_version {
            "0.1" => "application/vnd.dev.sigstore.bundle+json;version=0.1",
            "0.2" => "application/vnd.dev.sigstore.bundle+json;version=0.2",
            _ => "application/vnd.dev.sigstore.bundle.v0.3+json",
        }
    }

    /// The SLSA provenance bundle.
    pub fn provenance_bundle(&self, b: &Build) -> Value {
        let (pair, key) = p256_key();
        let ca = if b.stranger_ca {
            &self.stranger
        } else {
            &self.ca
        };
        let leaf = ca.leaf(&pair, b);
        let payload = b.statement(SLSA_V1);
        let sig = sign(&key, &pae(IN_TOTO, &payload));
        let entry = self.entry(b, &payload, &sig, &leaf, 100);
        let certificate = if b.bundle_version == "0.3" {
            json!({"certificate": {"rawBytes": b64(&leaf)}})
        } else {
            json!({"x509CertificateChain": {"certificates": [{"rawBytes": b64(&leaf)}]}})
        };
        let mut material = certificate;
        material["tlogEntries"] = json!([entry]);
        json!({
            "mediaType": Fixture::media(b),
            "verificationMaterial": material,
            "dsseEnvelope": {"payload": b64(&payload), "payloadType": IN_TOTO,
                "signatures": [{"sig": b64(&sig), "keyid": ""}]}
        })
    }

    /// The npm publish attestation bundle.
    pub fn publish_bundle(&self, b: &Build) -> Value {
        let key = if b.stranger_key {
            &self.stranger_registry
        } else {
            &self.registry
        };
        let keyid = if b.stranger_key {
            "SHA256:not-published"
        } else {
            REGISTRY_KEY_ID
        };
        let payload = b.statement(PUBLISH);
        let sig = sign(key, &pae(IN_TOTO, &payload));
        let entry = self.entry(b, &payload, &sig, &spki(key), 101);
        json!({
            "mediaType": Fixture::media(&Build { bundle_version: "0.2", ..b.clone() }),
            "verificationMaterial": {"publicKey": {"hint": keyid}, "tlogEntries": [entry]},
            "dsseEnvelope": {"payload": b64(&payload), "payloadType": IN_TOTO,
                "signatures": [{"sig": b64(&sig), "keyid": keyid}]}
        })
    }

    /// The attestations document npm serves: the publish attestation, then the provenance.
    pub fn document(&self, b: &Build) -> Value {
        json!({"attestations": [
            {"predicateType": PUBLISH, "bundle": self.publish_bundle(b)},
            {"predicateType": SLSA_V1, "bundle": self.provenance_bundle(b)},
        ]})
    }
}
