//! What provenance verification adds to an install: the real npm attestations of
//! `@playwright/cli@0.1.1` (a publish attestation and a SLSA provenance, both logged in
//! Rekor) verified against the embedded public-good trusted root, and the parsing of that
//! root. `cargo bench -p capability-acquire --bench attestations`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capability_acquire::attestations::{Subject, TrustedRoot, verify_document};
use capability_acquire::signatures::parse_keys;
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};

const VECTOR: &str = include_str!("../tests/data/npm-playwright-cli-0.1.1.attestations.json");
const SHA512: &str = "f64d7565f0f001f3150c322e1155b55afb3c4a80cd5c863574d43ef42f7f492f199849647317acbb97a82fbbcd6bdea7b626d419aab54ccdaa428aaf765fc8f6";

fn bench(c: &mut Criterion) {
    let doc: Value = serde_json::from_str(VECTOR).unwrap();
    let keys = parse_keys(
        &json!({"keys": [{"keyid": "SHA256:DhQ8wR5APBvFHLF/+Tc+AYvPOdTpcIDqOhxsBHRwC7U",
            "keytype": "ecdsa-sha2-nistp256", "scheme": "ecdsa-sha2-nistp256", "expires": null,
            "key": "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEY6Ya7W++7aUPzvMTrezH6Ycx3c+HOKYCcNGybJZSCJq/fd7Qa8uuAKtdIkUQtQiEKERhAmE5lMMJhP8OkDOa2g=="}]}),
        "npm/",
    )
    .unwrap();
    let root = TrustedRoot::embedded().unwrap();
    let subject = Subject {
        name: "@playwright/cli",
        version: "0.1.1",
        sha512_hex: SHA512,
    };
    c.bench_function("verify_document (npm, 2 bundles)", |b| {
        b.iter(|| verify_document(&doc, "npm", &root, Some(&keys), subject).unwrap())
    });
    c.bench_function("TrustedRoot::embedded", |b| {
        b.iter(|| TrustedRoot::embedded().unwrap())
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
