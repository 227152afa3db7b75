//! The TypeScript client of `/api/v1/actions` (`clients/typescript`) against this build's
//! `cap serve`: its own suite (`npm test`: tsc, then `node --test`), which starts the server
//! with `CAP_BIN`. Without `npm ci` in that directory the test says so and passes, unless
//! `CAPABILITY_TEST_REQUIRE_TS=1` (set by `.ci/run`) makes that a failure.

use std::path::Path;
use std::process::Command;

#[test]
fn typescript_client_suite() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/typescript");
    let required = std::env::var("CAPABILITY_TEST_REQUIRE_TS").as_deref() == Ok("1");
    if !dir.join("node_modules/typescript").exists() {
        assert!(
            !required,
            "clients/typescript has no node_modules: run `npm ci` there"
        );
        eprintln!("skipped: clients/typescript has no node_modules (`npm ci` there)");
        return;
    }
    let out = Command::new("npm")
        .current_dir(&dir)
        .args(["test", "--silent"])
        .env("CAP_BIN", env!("CARGO_BIN_EXE_cap"))
        // The suite's own server must run: its absence is a failure, not a skip.
        .env("CAPABILITY_TEST_REQUIRE_TS", "1")
        .env("CAP_NO_PROGRESS", "1")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "the TypeScript client's suite failed:\n{text}"
    );
    // The end-to-end tests ran (not skipped) and passed.
    assert!(text.contains("# skipped 0"), "{text}");
    assert!(text.contains("# fail 0"), "{text}");
}
