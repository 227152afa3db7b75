//! The binder commands as a user runs them, against a real package index (pypiserver) and a
//! real OCI registry (docker-registry) on loopback: inspect, mine, forge, run, the refusals,
//! policy, the stored execution receipts and the binder conformance suite.

use capability_test_support::oci::{DockerRegistry, podman, push_guest};
use capability_test_support::pypi::{PypiServer, WheelSpec, sha256_file};
use serde_json::{Value, json};

use crate::common::{cap, stdout_json, succeeded};

fn calc_wheel() -> WheelSpec {
    WheelSpec::new("calc-tools", "1.2.0")
        .file(
            "calc_tools/__init__.py",
            "def add(a, b):\n    \"\"\"Adds two numbers.\"\"\"\n    return a + b\n\n\
             def _hidden():\n    return 0\n",
        )
        .file(
            "calc_tools/cli.py",
            "import sys\n\ndef main():\n    print(' '.join(sys.argv[1:]))\n    return 0\n",
        )
        .script("calc", "calc_tools.cli:main")
}

/// `cap pypi-forge calc-tools --symbol <symbol> --directory <dir> --execute <input> <extra…>`
/// against the index `url`.
fn forge(
    home: &std::path::Path,
    url: &str,
    symbol: &str,
    dir: &std::path::Path,
    input: &str,
    extra: &[&str],
) -> std::process::Output {
    let mut args = vec![
        "pypi-forge",
        "calc-tools",
        "--index-url",
        url,
        "--symbol",
        symbol,
    ];
    args.extend(["--directory", dir.to_str().unwrap(), "--execute", input]);
    args.extend(extra);
    cap(home, &args)
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[test]
fn a_wheel_is_inspected_mined_forged_and_run_once_in_the_sandbox_under_policy() {
    let dir = tempfile::tempdir().unwrap();
    let Some(index) = PypiServer::start(&dir.path().join("packages")) else {
        return;
    };
    let wheel = index.add_wheel(&calc_wheel());
    let home = dir.path().join("home");
    let url = index.url.as_str();

    let out = cap(&home, &["pypi-inspect", "calc-tools", "--index-url", url]);
    succeeded(&out);
    let inspection = stdout_json(&out);
    assert_eq!(inspection["version"], "1.2.0");
    assert_eq!(inspection["wheel"]["sha256"], json!(sha256_file(&wheel)));

    let out = cap(
        &home,
        &[
            "pypi-mine",
            "calc-tools",
            "--index-url",
            url,
            "--query",
            "add numbers",
        ],
    );
    succeeded(&out);
    let mined = stdout_json(&out);
    let first = &mined["candidates"][0];
    assert_eq!(
        (first["module"].as_str(), first["symbol"].as_str()),
        (Some("calc_tools"), Some("add"))
    );
    assert!(
        mined["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["symbol"] != "_hidden"),
        "{mined}"
    );

    // Without consent nothing runs.
    let forge_dir = dir.path().join("forge-1");
    let out = forge(&home, url, "add", &forge_dir, "[2, 3]", &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("explicit approval"),
        "{}",
        stderr(&out)
    );
    assert!(
        stdout_json(&cap(&home, &["receipts", "metabolic"]))
            .as_array()
            .unwrap()
            .is_empty()
    );

    // With it, the function runs in the process sandbox and its receipt is kept.
    let forge_dir = dir.path().join("forge-2");
    let out = forge(&home, url, "add", &forge_dir, "[2, 3]", &["--approve"]);
    succeeded(&out);
    let done = stdout_json(&out);
    assert_eq!(done["output"], json!({"result": 5}));
    assert_eq!(done["capabilityId"], "forged/python/calc-tools/add");
    assert!(forge_dir.join("capability.python.json").is_file());
    let receipt = &done["receipt"];
    assert_eq!(receipt["status"], "succeeded");
    assert_eq!(receipt["isolation"], "process-sandbox-network-none");
    assert_eq!(
        receipt["immutableArtifact"],
        json!(format!("calc-tools@1.2.0#sha256:{}", sha256_file(&wheel)))
    );
    assert_eq!(receipt["upstreamReceipt"]["network"], "none");
    let id = receipt["receiptId"].as_str().unwrap();
    let out = cap(&home, &["receipts", "show", id]);
    succeeded(&out);
    assert_eq!(&stdout_json(&out), receipt);
    let out = cap(&home, &["audit", "verify"]);
    succeeded(&out);

    // A Cedar policy on the bound artifact refuses before anything runs.
    let policy = dir.path().join("no-pypi.cedar");
    std::fs::write(
        &policy,
        r#"permit(principal, action, resource);
@reason("no wheels from this index today")
forbid(principal, action, resource) when { context.input.binding.substrate == "pypi" };"#,
    )
    .unwrap();
    let forge_dir = dir.path().join("forge-3");
    let out = forge(
        &home,
        url,
        "add",
        &forge_dir,
        "[2, 3]",
        &["--approve", "--policy", policy.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no wheels from this index today"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        stdout_json(&cap(&home, &["receipts", "metabolic"]))
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // A console script gets its argv.
    let forge_dir = dir.path().join("forge-4");
    let out = forge(
        &home,
        url,
        "calc",
        &forge_dir,
        r#"["hello", 7]"#,
        &["--approve"],
    );
    succeeded(&out);
    let done = stdout_json(&out);
    assert_eq!(done["output"]["result"]["stdout"], "hello 7\n", "{done}");
}

#[test]
fn an_image_is_inspected_without_an_engine_and_run_by_digest_with_approval() {
    let Some(registry) = DockerRegistry::start() else {
        return;
    };
    let Some(engine) = podman() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let addr = registry.addr.as_str();
    let digest = push_guest(&engine, addr, "cli/echo", "v1", "cli");
    let image = format!("{addr}/cli/echo:v1");

    let out = cap(&home, &["oci-inspect", &image, "--insecure-registry", addr]);
    succeeded(&out);
    let inspection = stdout_json(&out);
    assert_eq!(
        inspection["immutableReference"],
        json!(format!("{addr}/cli/echo@{digest}"))
    );
    // Plain HTTP only when named insecure.
    let out = cap(&home, &["oci-inspect", &image]);
    assert_eq!(out.status.code(), Some(1));

    let out = cap(
        &home,
        &["oci-run", &image, "hello", "--insecure-registry", addr],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("OCI first execution requires explicit approval"),
        "{}",
        stderr(&out)
    );

    let out = cap(
        &home,
        &[
            "oci-run",
            &image,
            "hello",
            "--insecure-registry",
            addr,
            "--approve",
        ],
    );
    succeeded(&out);
    let done = stdout_json(&out);
    assert_eq!(done["receipt"]["status"], "succeeded");
    assert_eq!(done["receipt"]["isolation"], "oci-container-network-none");
    assert_eq!(
        done["receipt"]["immutableArtifact"],
        json!(format!("{addr}/cli/echo@{digest}"))
    );
    let stdout = done["output"]["stdout"].as_str().unwrap();
    assert!(stdout.contains("arg[1]=hello"), "{stdout}");
    assert!(stdout.contains("uid=65534"), "{stdout}");
    let stored = stdout_json(&cap(&home, &["receipts", "metabolic"]));
    assert_eq!(stored.as_array().unwrap().len(), 1);
}

#[test]
fn binder_conformance_passes_for_every_binder_and_coverage_lists_them() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let coverage = stdout_json(&cap(&home, &["coverage"]));
    let binders: Vec<&str> = coverage["binders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["binder"].as_str().unwrap())
        .collect();
    assert_eq!(
        binders,
        [
            "capability/pypi-wheel",
            "capability/oci-command",
            "capability/wasm-module"
        ]
    );

    let wasm = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../capability-wasm/tests/fixtures/guest-add.wasm");
    let sha = sha256_file(&wasm);
    let mut args: Vec<String> = [
        "conformance",
        "--binders",
        "--wasm-module",
        wasm.to_str().unwrap(),
        "--wasm-sha256",
        &sha,
        "--wasm-input",
        r#"{"a": 2, "b": 3}"#,
    ]
    .map(String::from)
    .to_vec();
    let index = PypiServer::start(&dir.path().join("packages"));
    if let Some(index) = &index {
        index.add_wheel(&calc_wheel());
        args.extend(
            [
                "--pypi-package",
                "calc-tools",
                "--pypi-input",
                "[1, 2]",
                "--index-url",
                &index.url,
            ]
            .map(String::from),
        );
    }
    let registry = DockerRegistry::start();
    let mut oci = false;
    if let (Some(registry), Some(engine)) = (&registry, podman()) {
        oci = true;
        push_guest(&engine, &registry.addr, "cli/conformance", "v1", "conf");
        args.extend([
            "--oci-image".to_string(),
            format!("{}/cli/conformance:v1", registry.addr),
            "--insecure-registry".to_string(),
            registry.addr.clone(),
        ]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = cap(&home, &args);
    let report = stdout_json(&out);
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert_eq!(report["ok"], true);
    for suite in report["binders"].as_array().unwrap() {
        if suite.get("skipped").is_some() {
            continue;
        }
        let checks: Vec<&Value> = suite["report"]["checks"]
            .as_array()
            .unwrap()
            .iter()
            .collect();
        assert_eq!(checks.len(), 6, "{suite}");
        assert!(checks.iter().all(|c| c["ok"] == true), "{suite}");
    }
    let ran = report["binders"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s.get("skipped").is_none())
        .count();
    assert_eq!(ran, 1 + usize::from(index.is_some()) + usize::from(oci));
}
