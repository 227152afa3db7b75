//! Property-based fuzzing of the OpenAPI request builder (issue 30, item 4) and of the
//! credential redactor (item 6): whatever a path parameter holds, the request sent keeps the
//! template's path or is refused; whatever a credential is, none of its echoed forms
//! survives redaction. 256 cases per property with a fixed seed (`PROPTEST_CASES` for more).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use capability_openapi::executor::{Secrets, mask_secrets};
use capability_openapi::{ApiOptions, HttpClient, HttpConfig, Resolver, build_api};
use capability_test_support::fuzz::config;
use proptest::prelude::*;
use serde_json::json;

fn api() -> capability_openapi::Api {
    let doc = json!({
        "openapi": "3.1.0", "info": {"title": "F", "version": "1"},
        "servers": [{"url": "http://127.0.0.1:9/api"}],
        "paths": {"/repos/{owner}/{repo}/issues": {"get": {"operationId": "issues",
            "parameters": [
                {"name": "owner", "in": "path", "required": true, "schema": {"type": "string"}},
                {"name": "repo", "in": "path", "required": true, "schema": {"type": "string"}}],
            "responses": {"200": {"description": "ok"}}}}}
    });
    let client = Arc::new(HttpClient::new(HttpConfig::default(), Resolver::System).unwrap());
    build_api(&doc, &ApiOptions::default(), client, Secrets { file: None }).unwrap()
}

/// Path-ish values: dots, slashes, percent escapes (also of escapes), and noise.
fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::collection::vec(
            prop::sample::select(vec![
                ".", "..", "/", "\\", "%2e", "%2E", "%2f", "%252e", "%25", ";", "?", "#", "a", "é",
                " ", "%",
            ]),
            0..6
        )
        .prop_map(|parts| parts.concat()),
        "\\PC{0,12}",
    ]
}

proptest! {
    #![proptest_config(config(256, 0x0a91_0004))]

    #[test]
    fn the_request_keeps_the_templates_path_or_is_refused(owner in segment(), repo in segment()) {
        let api = api();
        let op = &api.operations()[0];
        if let Ok(spec) = op.request(&json!({"owner": owner, "repo": repo})) {
            let url = spec.url.clone();
            let segments: Vec<&str> = url.path_segments().unwrap().collect();
            prop_assert_eq!(segments.len(), 5, "{}", spec.url);
            prop_assert_eq!(segments[0], "api");
            prop_assert_eq!(segments[1], "repos");
            prop_assert_eq!(segments[4], "issues");
            for s in &segments {
                let decoded = percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned();
                prop_assert!(decoded != "." && decoded != ".." && !s.is_empty(), "{}", spec.url);
            }
        }
    }

    #[test]
    fn no_echoed_form_of_a_credential_survives(secret in "[ -~é]{4,24}", around in "[a-z ]{0,10}") {
        use base64::Engine as _;
        let forms = [
            secret.clone(),
            percent_encoding::utf8_percent_encode(&secret, percent_encoding::NON_ALPHANUMERIC).to_string(),
            url::form_urlencoded::byte_serialize(secret.as_bytes()).collect::<String>(),
            serde_json::to_string(&secret).unwrap().trim_matches('"').to_string(),
            base64::engine::general_purpose::STANDARD.encode(&secret),
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&secret),
        ];
        for form in forms.iter().filter(|f| f.len() >= 4) {
            let text = format!("{around}{form}{around}");
            let masked = mask_secrets(&text, std::slice::from_ref(&secret));
            prop_assert!(!masked.contains(form.as_str()), "{} in {}", form, masked);
        }
    }
}
