use capability_acquire::probe::*;

#[test]
fn urls_keep_the_port_and_drop_the_rest() {
    let (origin, urls) = discovery_urls("http://user:pw@127.0.0.1:8080/a/b?q=1").unwrap();
    assert_eq!(origin, "http://127.0.0.1:8080");
    assert_eq!(urls[0], "http://127.0.0.1:8080/.well-known/capabilities");
    assert_eq!(
        urls[1],
        "http://127.0.0.1:8080/.well-known/capabilities.json"
    );
    assert!(discovery_urls("ftp://x").is_err());
    assert!(discovery_urls("nope").is_err());
}
