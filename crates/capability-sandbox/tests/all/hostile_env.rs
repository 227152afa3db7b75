//! Environment and secrets: the host's environment never reaches the guest (not through its
//! own environment, not through /proc of the sandbox init); granted `environment.read` passes
//! exactly the host-chosen variables, and secrets arrive only with `secrets.read`.
//!
//! This file holds one test so that setting a host variable races with no other test thread.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use crate::common::{ALL, Package, limits, ok_output};
use capability_sandbox::Grants;
use serde_json::json;

const NAME: &str = "CAPABILITY_SANDBOX_TEST_SECRET";

#[test]
fn host_environment_and_secrets_do_not_leak() {
    let value = format!(
        "sk-live-{:x}-do-not-leak",
        std::process::id() as u64 * 0x9e37_79b9
    );
    // SAFETY: this test binary runs this single test; no other thread reads the environment.
    unsafe { std::env::set_var(NAME, &value) };
    for lang in ALL {
        let pkg = Package::new(lang);
        let out = pkg.run(json!({"action": "env"}), &Grants::none(), &limits());
        let output = ok_output(&out).clone();
        let text = output.to_string();
        assert!(
            !text.contains(&value),
            "{lang:?} leaked the host variable: {text}"
        );
        assert!(!out.stderr.contains(&value));
        // The guest's environment is empty (Python's own PEP 538 locale coercion aside).
        let env = &output["env"];
        let names: Vec<String> = match env {
            serde_json::Value::Object(o) => o.keys().cloned().collect(),
            serde_json::Value::Array(a) => a
                .iter()
                .map(|v| v.as_str().unwrap().split('=').next().unwrap().to_string())
                .collect(),
            other => panic!("{lang:?}: {other}"),
        };
        assert!(names.iter().all(|n| n == "LC_CTYPE"), "{lang:?}: {env}");
        assert!(out.boundary.environment.is_empty());

        // Granted: exactly the host-chosen variables.
        let grants = Grants::none().env_var("GREETING", "hello");
        let out = pkg.run(json!({"action": "env"}), &grants, &limits());
        let output = ok_output(&out).clone();
        let text = output["env"].to_string();
        assert!(text.contains("GREETING"), "{lang:?}: {text}");
        assert!(
            !output.to_string().contains(&value),
            "{lang:?} leaked with environment.read"
        );
        assert_eq!(out.boundary.environment, vec!["GREETING".to_string()]);
    }
    // Secrets: supplied by the caller, injected only when secrets.read is granted.
    for lang in [common::Lang::Js, common::Lang::Py] {
        let pkg = Package::new(lang);
        let mut grants = Grants::none();
        grants.secrets.insert("API_TOKEN".into(), value.clone());
        let out = pkg.run(json!({"action": "secrets"}), &grants, &limits());
        assert!(!ok_output(&out).to_string().contains(&value), "{lang:?}");
        assert!(out.boundary.secrets.is_empty());
        let out = pkg.run(
            json!({"action": "secrets"}),
            &grants.effect("secrets.read"),
            &limits(),
        );
        assert_eq!(
            ok_output(&out)["secrets"]["API_TOKEN"],
            value.as_str(),
            "{lang:?}"
        );
        assert_eq!(out.boundary.secrets, vec!["API_TOKEN".to_string()]);
    }
}
