use capability_acquire::integrity::*;

#[test]
fn observed_and_declared() {
    let o = observe(b"abc");
    assert!(o.sri.starts_with("sha512-3a81oZNherrMQXNJriBBMRLm"));
    assert_eq!(o.hex.len(), 128);
    assert!(check_declared(b"abc", &o.sri, "the packument").is_ok());
    let e = check_declared(b"abd", &o.sri, "the packument").unwrap_err();
    assert!(e.to_string().contains("the packument declares"), "{e}");
    let sha256 = "sha256-ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=";
    assert!(check_declared(b"abc", sha256, "the index").is_err());
}
