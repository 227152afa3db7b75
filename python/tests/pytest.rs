//! The Python package's own suite (`python/tests`, pytest) against the package installed
//! in `python/.venv` (`.ci/run` installs it with `pip install ./python`; by hand,
//! `maturin develop` in that venv). Without that venv the test says so and passes, unless
//! `CAPABILITY_TEST_REQUIRE_PYTHON=1` (set by `.ci/run`) makes that a failure. `cap` of the
//! same build is given to the suite as `CAP_BIN` (it reads the homes Python wrote).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn pytest_suite() {
    let python = root().join("python/.venv/bin/python");
    let required = std::env::var("CAPABILITY_TEST_REQUIRE_PYTHON").as_deref() == Ok("1");
    // From python/tests, so that `capability` is the installed package (from python/, the
    // directory cargo runs this test in, the source tree would shadow it).
    let tests = root().join("python/tests");
    let installed = python.exists()
        && Command::new(&python)
            .current_dir(&tests)
            .args(["-c", "import capability._native, pytest"])
            .status()
            .is_ok_and(|s| s.success());
    if !installed {
        assert!(
            !required,
            "the capability package is not installed in python/.venv (see python/README.md)"
        );
        eprintln!("skipped: the capability package is not installed in python/.venv");
        return;
    }
    // target/debug/deps/pytest-<hash> → target/debug/cap
    let exe = std::env::current_exe().unwrap();
    let cap = exe.parent().and_then(Path::parent).map(|d| d.join("cap"));
    let mut cmd = Command::new(&python);
    cmd.current_dir(&tests)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "."]);
    if let Some(cap) = cap.filter(|c| c.exists()) {
        cmd.env("CAP_BIN", cap);
    }
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    assert!(out.status.success(), "pytest failed:\n{text}");
}
