//! Registry signatures: npm's real key and signature verify, and their negative controls fail.

use capability_acquire::signatures::*;
use serde_json::json;

/// A real npm key and signature (public registry data).
const KEY: &str = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE1Olb3zMAFFxXKHiIkQO5cJ3Yhl5i6UPp+IhuteBJbuHcA5UogKo0EWtlWwW6KSaKoTNEYL7JlCQiVnkhBktUgg==";
const KEYID: &str = "SHA256:jl3bwswu80PjjokCgh0o2w5c2U4LhQAE57gj9cz1kzA";
const INTEGRITY: &str = "sha512-RMdeiD0OJC+S2w4931iqdi5MB9xe2T/lXZbRrHxbsmQrSA+FwhPk2bIqIwbNDCmThPgNw841Q272O6EFSYhBjQ==";
const SIG: &str = "MEUCICKQJCEvvV3HdhCSj3TwH9qqIWLwc0GR1m/NED/s1bPIAiEAvkTmhIDIrD4MZoI2g27+HsuxoFJhC/evORT6T2UUwSc=";

fn keys() -> KeySet {
    let doc = json!({"keys": [{"keyid": KEYID, "key": KEY, "keytype": KEY_TYPE,
        "scheme": KEY_TYPE, "expires": "2025-01-29T00:00:00.000Z"}]});
    parse_keys(&doc, "r/").unwrap()
}

#[test]
fn npm_vector_verifies_and_its_negative_controls_fail() {
    let sigs = json!([{"keyid": KEYID, "sig": SIG}]);
    let published = Some("2023-01-01T00:00:00.000Z");
    let got = verify(&keys(), "venv", "0.1.0", INTEGRITY, Some(&sigs), published).unwrap();
    assert_eq!(got.as_deref(), Some(KEYID));
    let e = verify(&keys(), "venv", "0.1.1", INTEGRITY, Some(&sigs), published).unwrap_err();
    assert!(e.to_string().contains("does not verify"), "{e}");
    let other = json!([{"keyid": "SHA256:other", "sig": SIG}]);
    let e = verify(&keys(), "venv", "0.1.0", INTEGRITY, Some(&other), published).unwrap_err();
    assert!(e.to_string().contains("unknown key"), "{e}");
    let late = Some("2025-06-01T00:00:00.000Z");
    let e = verify(&keys(), "venv", "0.1.0", INTEGRITY, Some(&sigs), late).unwrap_err();
    assert!(e.to_string().contains("had expired"), "{e}");
    assert_eq!(
        verify(&keys(), "venv", "0.1.0", INTEGRITY, None, published).unwrap(),
        None
    );
}
