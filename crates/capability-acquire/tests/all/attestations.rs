//! Provenance attestations: Sigstore bundles signed by Fulcio certificates or by a registry
//! key, their transparency-log entries, and the statement's subject; each refusal names what
//! failed. Checked against a test trust root (`attestations::testing`) and npm's real data.

use base64::Engine as _;
use capability_acquire::AcquireError;
use capability_acquire::attestations::testing::{self, Build, Fixture};
use capability_acquire::attestations::*;
use capability_acquire::fetch::Fetcher;
use capability_acquire::signatures::KeySet;
use serde_json::{Value, json};
use sha2::Digest as _;

const TARBALL: &[u8] = b"the bytes of a tarball";

fn sha(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha512::digest(bytes))
}

fn verify(
    f: &Fixture,
    doc: &Value,
    name: &str,
    version: &str,
    tarball: &[u8],
) -> Result<Verified, AcquireError> {
    let digest = sha(tarball);
    let subject = Subject {
        name,
        version,
        sha512_hex: &digest,
    };
    verify_document(doc, "u", &f.trusted_root(), Some(&f.key_set()), subject)
}

fn refused_with(r: Result<Verified, AcquireError>, expected: &str) {
    let e = r.err();
    assert!(
        e.is_some(),
        "accepted, expected a refusal with {expected:?}"
    );
    let e = e.map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains(expected), "{expected:?} not in: {e}");
}

fn b64(s: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(s).ok()
}

fn b64e(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[test]
fn good_attestations_verify_in_every_bundle_format_and_say_who_built_what() {
    let f = Fixture::new();
    for version in ["0.1", "0.2", "0.3"] {
        let build = Build {
            bundle_version: version,
            ..Build::new("@fixture/capabilities", "1.0.0", TARBALL)
        };
        let v = verify(
            &f,
            &f.document(&build),
            "@fixture/capabilities",
            "1.0.0",
            TARBALL,
        )
        .unwrap();
        let id = v.identity();
        assert_eq!(
            id.repository.as_deref(),
            Some(testing::REPOSITORY),
            "{version}"
        );
        assert_eq!(id.commit.as_deref(), Some(testing::COMMIT));
        assert_eq!(id.signer.as_deref(), Some(testing::WORKFLOW));
        assert_eq!(id.issuer.as_deref(), Some(testing::ISSUER));
        assert_eq!(v.builder().as_deref(), Some(testing::BUILDER));
        assert_eq!(v.provenance.integrated_time, testing::LOGGED_AT);
        assert_eq!(
            v.publish.as_ref().and_then(|p| p.key_id.as_deref()),
            Some(testing::REGISTRY_KEY_ID)
        );
        assert_eq!(v.to_json()["repository"], json!(testing::REPOSITORY));
    }
}

#[test]
fn a_tampered_payload_is_refused() {
    let f = Fixture::new();
    let build = Build::new("pkg", "1.0.0", TARBALL);
    let mut doc = f.document(&build);
    // Re-encode the provenance statement with another builder, keeping the signature.
    let envelope = &mut doc["attestations"][1]["bundle"]["dsseEnvelope"];
    let mut statement: Value =
        serde_json::from_slice(&b64(envelope["payload"].as_str().unwrap()).unwrap()).unwrap();
    statement["predicate"]["runDetails"]["builder"]["id"] = json!("https://evil.test/builder");
    let payload = serde_json::to_vec(&statement).unwrap();
    envelope["payload"] = json!(b64e(&payload));
    // The log entry no longer matches the payload: refused there first.
    refused_with(
        verify(&f, &doc, "pkg", "1.0.0", TARBALL),
        "logs another payload",
    );
    // With the logged payload hash rewritten too, the SET no longer verifies.
    let entry = "/attestations/1/bundle/verificationMaterial/tlogEntries/0/canonicalizedBody";
    let logged = b64(doc.pointer(entry).unwrap().as_str().unwrap()).unwrap();
    let mut body: Value = serde_json::from_slice(&logged).unwrap();
    body["spec"]["payloadHash"]["value"] = json!(hex::encode(sha2::Sha256::digest(&payload)));
    *doc.pointer_mut(entry).unwrap() = json!(b64e(&serde_json::to_vec(&body).unwrap()));
    refused_with(
        verify(&f, &doc, "pkg", "1.0.0", TARBALL),
        "signed entry timestamp does not verify",
    );
}

#[test]
fn the_dsse_signature_is_checked_even_when_the_log_agrees() {
    // A payload logged and timestamped by the log but signed by another key than the leaf's.
    let f = Fixture::new();
    let build = Build::new("pkg", "1.0.0", TARBALL);
    let good = f.provenance_bundle(&build);
    let other = f.provenance_bundle(&build);
    let mut bundle = good.clone();
    bundle["verificationMaterial"]["certificate"] =
        other["verificationMaterial"]["certificate"].clone();
    let doc = json!({"attestations": [{"predicateType": SLSA_V1, "bundle": bundle}]});
    refused_with(
        verify(&f, &doc, "pkg", "1.0.0", TARBALL),
        "does not verify with the certificate's key",
    );
}

#[test]
fn a_subject_that_is_not_the_downloaded_tarball_is_refused() {
    let f = Fixture::new();
    let doc = f.document(&Build::new("pkg", "1.0.0", TARBALL));
    refused_with(
        verify(&f, &doc, "pkg", "1.0.0", b"other bytes"),
        "is not the downloaded tarball's",
    );
    // A statement signed over another digest, checked against the real bytes.
    let other = Build::new("pkg", "1.0.0", b"other bytes");
    refused_with(
        verify(&f, &f.document(&other), "pkg", "1.0.0", TARBALL),
        "is not the downloaded tarball's",
    );
}

#[test]
fn another_package_name_or_version_is_refused() {
    let f = Fixture::new();
    let doc = f.document(&Build::new("@fixture/capabilities", "1.0.0", TARBALL));
    refused_with(
        verify(&f, &doc, "@fixture/capabilities", "1.0.1", TARBALL),
        "not \"pkg:npm/%40fixture/capabilities@1.0.1\"",
    );
    refused_with(
        verify(&f, &doc, "@fixture/other", "1.0.0", TARBALL),
        "is about \"pkg:npm/%40fixture/capabilities@1.0.0\"",
    );
    refused_with(
        verify(&f, &doc, "capabilities", "1.0.0", TARBALL),
        "is about",
    );
}

#[test]
fn a_certificate_from_another_authority_is_refused() {
    let f = Fixture::new();
    let build = Build {
        stranger_ca: true,
        ..Build::new("pkg", "1.0.0", TARBALL)
    };
    // The stranger CA has the same name as the trusted one: only the signature tells.
    refused_with(
        verify(&f, &f.document(&build), "pkg", "1.0.0", TARBALL),
        "not issued by a certificate authority of the trusted root",
    );
}

#[test]
fn a_leaf_that_is_a_ca_or_not_for_code_signing_is_refused() {
    let f = Fixture::new();
    let ca = Build {
        leaf_is_ca: true,
        ..Build::new("pkg", "1.0.0", TARBALL)
    };
    refused_with(
        verify(&f, &f.document(&ca), "pkg", "1.0.0", TARBALL),
        "is a CA certificate",
    );
    let server = Build {
        leaf_without_code_signing: true,
        ..Build::new("pkg", "1.0.0", TARBALL)
    };
    refused_with(
        verify(&f, &f.document(&server), "pkg", "1.0.0", TARBALL),
        "is not for code signing",
    );
}

#[test]
fn a_certificate_expired_or_not_yet_valid_at_the_integrated_time_is_refused() {
    let f = Fixture::new();
    for t in [testing::LOGGED_AT + 3 * 86_400, testing::LOGGED_AT - 86_400] {
        let build = Build {
            integrated_time: t,
            ..Build::new("pkg", "1.0.0", TARBALL)
        };
        refused_with(
            verify(&f, &f.document(&build), "pkg", "1.0.0", TARBALL),
            "was not valid at the entry's integrated time",
        );
    }
}

#[test]
fn a_bad_or_missing_signed_entry_timestamp_is_refused() {
    let f = Fixture::new();
    let doc = f.document(&Build::new("pkg", "1.0.0", TARBALL));
    let entry = "/attestations/1/bundle/verificationMaterial/tlogEntries/0";
    // Removed.
    let mut d = doc.clone();
    d.pointer_mut(entry)
        .unwrap()
        .as_object_mut()
        .unwrap()
        .remove("inclusionPromise");
    refused_with(
        verify(&f, &d, "pkg", "1.0.0", TARBALL),
        "has no signed entry timestamp",
    );
    // Another integrated time (inside the certificate's validity) than the one signed.
    let mut d = doc.clone();
    d.pointer_mut(entry).unwrap()["integratedTime"] = json!((testing::LOGGED_AT + 60).to_string());
    refused_with(
        verify(&f, &d, "pkg", "1.0.0", TARBALL),
        "signed entry timestamp does not verify",
    );
    // A SET over the same message by another key.
    let mut d = doc.clone();
    let other = f.document(&Build::new("pkg", "1.0.0", TARBALL));
    d.pointer_mut(entry).unwrap()["inclusionPromise"] =
        other.pointer(entry).unwrap()["inclusionPromise"].clone();
    refused_with(
        verify(&f, &d, "pkg", "1.0.0", TARBALL),
        "signed entry timestamp does not verify",
    );
    // An entry in a log the root does not know.
    let mut d = doc.clone();
    d.pointer_mut(entry).unwrap()["logId"] = json!({"keyId": b64e(&[7; 32])});
    refused_with(
        verify(&f, &d, "pkg", "1.0.0", TARBALL),
        "not in the trusted root",
    );
    // No entry at all.
    let mut d = doc;
    d.pointer_mut("/attestations/1/bundle/verificationMaterial")
        .unwrap()["tlogEntries"] = json!([]);
    refused_with(
        verify(&f, &d, "pkg", "1.0.0", TARBALL),
        "no transparency-log entry",
    );
}

#[test]
fn a_publish_attestation_by_an_unknown_key_is_refused() {
    let f = Fixture::new();
    let build = Build {
        stranger_key: true,
        ..Build::new("pkg", "1.0.0", TARBALL)
    };
    refused_with(
        verify(&f, &f.document(&build), "pkg", "1.0.0", TARBALL),
        "signed by the unknown key \"SHA256:not-published\"",
    );
    // A publish attestation claiming the registry's key id but signed by another key.
    let mut doc = f.document(&build);
    let bundle = &mut doc["attestations"][0]["bundle"];
    bundle["verificationMaterial"]["publicKey"]["hint"] = json!(testing::REGISTRY_KEY_ID);
    bundle["dsseEnvelope"]["signatures"][0]["keyid"] = json!(testing::REGISTRY_KEY_ID);
    refused_with(
        verify(&f, &doc, "pkg", "1.0.0", TARBALL),
        "does not verify with the registry key",
    );
    // Without the registry's keys it cannot be verified at all.
    let good = f.document(&Build::new("pkg", "1.0.0", TARBALL));
    let digest = sha(TARBALL);
    let subject = Subject {
        name: "pkg",
        version: "1.0.0",
        sha512_hex: &digest,
    };
    let e = verify_document(&good, "u", &f.trusted_root(), None, subject).unwrap_err();
    assert!(e.to_string().contains("publishes no signing keys"), "{e}");
}

#[test]
fn malformed_documents_and_bundles_are_refused_clearly() {
    let f = Fixture::new();
    let doc = f.document(&Build::new("pkg", "1.0.0", TARBALL));
    type Damage = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Damage)> = vec![
        ("no `attestations` array", Box::new(|d| *d = json!({}))),
        (
            "holds no SLSA provenance",
            Box::new(|d| {
                d["attestations"].as_array_mut().unwrap().pop();
            }),
        ),
        (
            "unknown type",
            Box::new(|d| d["attestations"][0]["predicateType"] = json!("x")),
        ),
        (
            "more than one",
            Box::new(|d| {
                let p = d["attestations"][1].clone();
                d["attestations"].as_array_mut().unwrap().push(p);
            }),
        ),
        (
            "not a Sigstore bundle",
            Box::new(|d| {
                d["attestations"][1]["bundle"]["mediaType"] =
                    json!("application/vnd.dev.sigstore.bundle.v0.4+json");
            }),
        ),
        (
            "is not application/vnd.in-toto+json",
            Box::new(|d| {
                d["attestations"][1]["bundle"]["dsseEnvelope"]["payloadType"] = json!("text/plain");
            }),
        ),
        (
            "exactly one signature",
            Box::new(|d| {
                let s = d["attestations"][1]["bundle"]["dsseEnvelope"]["signatures"][0].clone();
                d["attestations"][1]["bundle"]["dsseEnvelope"]["signatures"] =
                    json!([s.clone(), s]);
            }),
        ),
        (
            "holds no DSSE envelope",
            Box::new(|d| {
                d["attestations"][1]["bundle"]
                    .as_object_mut()
                    .unwrap()
                    .remove("dsseEnvelope");
            }),
        ),
        (
            "holds no signing certificate",
            Box::new(|d| {
                d["attestations"][1]["bundle"]["verificationMaterial"]
                    .as_object_mut()
                    .unwrap()
                    .remove("certificate");
            }),
        ),
        (
            "predicate type",
            Box::new(|d| d["attestations"][1]["predicateType"] = json!(SLSA_V02)),
        ),
    ];
    for (expected, damage) in cases {
        let mut d = doc.clone();
        damage(&mut d);
        refused_with(verify(&f, &d, "pkg", "1.0.0", TARBALL), expected);
    }
    // A v0.3 bundle must carry `certificate`, not a chain.
    let mut d = doc.clone();
    let material = &mut d["attestations"][1]["bundle"]["verificationMaterial"];
    let cert = material["certificate"].clone();
    material.as_object_mut().unwrap().remove("certificate");
    material["x509CertificateChain"] = json!({"certificates": [cert]});
    refused_with(
        verify(&f, &d, "pkg", "1.0.0", TARBALL),
        "holds no signing certificate",
    );
}

#[test]
fn trusted_roots_are_parsed_strictly_and_replaced_from_the_home() {
    let f = Fixture::new();
    let embedded = TrustedRoot::embedded().unwrap();
    assert_eq!(embedded.origin, "embedded");
    // The Ed25519 log of the public-good root is left out, the P-256 one kept.
    assert_eq!(testing::trusted(&embedded), (1, 2));
    let e = TrustedRoot::parse(&json!({"mediaType": "x"}), "t").unwrap_err();
    assert!(e.to_string().contains("is not a trusted root"), "{e}");
    let mut doc = f.root_document();
    doc["certificateAuthorities"][0]["certChain"]["certificates"][0]["rawBytes"] = json!("AAAA");
    let e = TrustedRoot::parse(&doc, "t").unwrap_err();
    assert!(e.to_string().contains("not DER X.509"), "{e}");
    // The home's replacement is used (this test does not set the environment variable).
    if std::env::var_os(TRUSTED_ROOT_ENV).is_none() {
        let dir = tempfile::tempdir().unwrap();
        let home = capability_exec::home::Home::at(dir.path());
        assert_eq!(TrustedRoot::load(&home).unwrap().origin, "embedded");
        let path = home.sigstore_trusted_root();
        std::fs::write(&path, serde_json::to_vec(&f.root_document()).unwrap()).unwrap();
        let loaded = TrustedRoot::load(&home).unwrap();
        assert_eq!(loaded.origin, path.display().to_string());
        std::fs::write(&path, b"{").unwrap();
        assert!(
            TrustedRoot::load(&home).is_err(),
            "a broken replacement is an error"
        );
    }
}

/// npm's attestations of `@playwright/cli@0.1.1` (public registry data, as served by
/// `https://registry.npmjs.org/-/npm/v1/attestations/@playwright%2fcli@0.1.1`), verified
/// against the embedded public-good root and npm's published key. The tarball's sha512 is
/// the one both signed statements name (the tarball itself is not vendored).
const NPM_VECTOR: &str =
    include_str!("../../tests/data/npm-playwright-cli-0.1.1.attestations.json");
const NPM_SHA512: &str = "f64d7565f0f001f3150c322e1155b55afb3c4a80cd5c863574d43ef42f7f492f199849647317acbb97a82fbbcd6bdea7b626d419aab54ccdaa428aaf765fc8f6";
const NPM_KEYS: &str = r#"{"keys": [{"keyid": "SHA256:DhQ8wR5APBvFHLF/+Tc+AYvPOdTpcIDqOhxsBHRwC7U",
  "keytype": "ecdsa-sha2-nistp256", "scheme": "ecdsa-sha2-nistp256", "expires": null,
  "key": "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEY6Ya7W++7aUPzvMTrezH6Ycx3c+HOKYCcNGybJZSCJq/fd7Qa8uuAKtdIkUQtQiEKERhAmE5lMMJhP8OkDOa2g=="}]}"#;

fn npm_verify(doc: &Value, version: &str, digest: &str) -> Result<Verified, AcquireError> {
    let keys = parse_keys_doc();
    let subject = Subject {
        name: "@playwright/cli",
        version,
        sha512_hex: digest,
    };
    verify_document(
        doc,
        "npm",
        &TrustedRoot::embedded().unwrap(),
        Some(&keys),
        subject,
    )
}

fn parse_keys_doc() -> KeySet {
    capability_acquire::signatures::parse_keys(&serde_json::from_str(NPM_KEYS).unwrap(), "npm/")
        .unwrap()
}

#[test]
fn a_real_npm_attestation_verifies_against_the_public_good_root() {
    let doc: Value = serde_json::from_str(NPM_VECTOR).unwrap();
    let v = npm_verify(&doc, "0.1.1", NPM_SHA512).unwrap();
    let id = v.identity();
    assert_eq!(
        id.repository.as_deref(),
        Some("https://github.com/microsoft/playwright-cli")
    );
    assert_eq!(
        id.commit.as_deref(),
        Some("d1c6d1113932ddcee243e8b111b6d4aea553df20")
    );
    assert_eq!(
        id.issuer.as_deref(),
        Some("https://token.actions.githubusercontent.com")
    );
    assert_eq!(
        id.signer.as_deref(),
        Some(
            "https://github.com/microsoft/playwright-cli/.github/workflows/publish.yml@refs/tags/v0.1.1"
        )
    );
    assert_eq!(
        v.builder().as_deref(),
        Some("https://github.com/actions/runner/github-hosted")
    );
    assert_eq!(
        (v.provenance.log_index, v.provenance.integrated_time),
        (953_297_574, 1_771_111_723)
    );
    assert_eq!(
        v.publish.as_ref().and_then(|p| p.key_id.as_deref()),
        Some("SHA256:DhQ8wR5APBvFHLF/+Tc+AYvPOdTpcIDqOhxsBHRwC7U")
    );
}

#[test]
fn the_real_npm_attestation_fails_its_negative_controls() {
    let doc: Value = serde_json::from_str(NPM_VECTOR).unwrap();
    // Another digest, another version.
    let mut other = NPM_SHA512.to_string();
    other.replace_range(0..1, "0");
    refused_with(
        npm_verify(&doc, "0.1.1", &other),
        "is not the downloaded tarball's",
    );
    refused_with(npm_verify(&doc, "0.1.2", NPM_SHA512), "is about");
    // One bit of the logged signature timestamp flipped.
    let mut d = doc.clone();
    let set = d.pointer_mut("/attestations/1/bundle/verificationMaterial/tlogEntries/0/inclusionPromise/signedEntryTimestamp").unwrap();
    let mut bytes = b64(set.as_str().unwrap()).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    *set = json!(b64e(&bytes));
    refused_with(
        npm_verify(&d, "0.1.1", NPM_SHA512),
        "signed entry timestamp does not verify",
    );
    // The fixture root (another Fulcio, another Rekor) does not trust it.
    let f = Fixture::new();
    let subject = Subject {
        name: "@playwright/cli",
        version: "0.1.1",
        sha512_hex: NPM_SHA512,
    };
    let e = verify_document(
        &doc,
        "npm",
        &f.trusted_root(),
        Some(&parse_keys_doc()),
        subject,
    )
    .unwrap_err();
    assert!(e.to_string().contains("not in the trusted root"), "{e}");
    // A registry key set without npm's key.
    let e = verify_document(
        &doc,
        "npm",
        &TrustedRoot::embedded().unwrap(),
        Some(&f.key_set()),
        subject,
    )
    .unwrap_err();
    assert!(e.to_string().contains("unknown key"), "{e}");
}

#[test]
fn attestations_are_named_by_dist_and_fetched_from_the_registry_origin_only() {
    assert_eq!(attestations_url(&json!({})).unwrap(), None);
    let named = |dist: Value| attestations_url(&dist).unwrap();
    assert_eq!(named(json!({"attestations": "u"})).as_deref(), Some("u"));
    let dist = json!({"attestations": {"url": "u", "provenance": {"predicateType": SLSA_V1}}});
    assert_eq!(named(dist).as_deref(), Some("u"));
    let e = attestations_url(&json!({"attestations": {"provenance": {}}})).unwrap_err();
    assert!(e.to_string().contains("names no url"), "{e}");
    // Another origin is refused before anything is sent (nothing listens on these ports).
    let fetcher = Fetcher::new(capability_acquire::fetch::FetchConfig::default()).unwrap();
    for url in [
        "http://127.0.0.2:9/-/npm/v1/attestations/pkg@1.0.0",
        "https://127.0.0.1:9/-/npm/v1/attestations/pkg@1.0.0",
        "http://127.0.0.1:10/-/npm/v1/attestations/pkg@1.0.0",
    ] {
        let e = fetch(&fetcher, "http://127.0.0.1:9/", url).unwrap_err();
        assert!(e.to_string().contains("outside the registry"), "{url}: {e}");
    }
    let e = fetch(&fetcher, "http://127.0.0.1:9/", "http://127.0.0.1:9/x").unwrap_err();
    assert!(!e.to_string().contains("outside the registry"), "{e}");
}
