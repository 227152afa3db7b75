use capability_acquire::registry::*;

#[test]
fn npmrc_and_urls() {
    let rc = "audit=false\n registry = http://127.0.0.1:4873/ \n";
    assert_eq!(
        npmrc_registry(rc).as_deref(),
        Some("http://127.0.0.1:4873/")
    );
    assert_eq!(npmrc_registry("fund=false"), None);
    assert_eq!(
        packument_url("http://r/", "@capfix/hello"),
        "http://r/@capfix%2Fhello"
    );
    assert_eq!(registry_url(Some("http://r")), "http://r/");
    assert_eq!(
        normalize_repository_url("git+https://github.com/a/b.git"),
        "https://github.com/a/b"
    );
    assert_eq!(
        normalize_repository_url("git://github.com/a/b"),
        "https://github.com/a/b"
    );
    // Only a leading scheme is rewritten.
    assert_eq!(
        normalize_repository_url("https://h/x?u=git://y"),
        "https://h/x?u=git://y"
    );
}
