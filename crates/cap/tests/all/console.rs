//! The console in a real browser (Debian's chromium through chromedriver, WebDriver): an
//! agent's `cap exec` needs approval; an approver signs in, sees it appear live, approves
//! it; the agent's retry with the token succeeds; the audit page shows the whole story.
//! Screenshots of every page are saved under the test's target temp dir.
//!
//! chromium and chromium-driver are installed by `.ci/run`. Without them this test says so
//! and passes, unless `CAPABILITY_TEST_REQUIRE_BROWSER=1` (set by CI), where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{self, Running, stdout_json, succeeded};
use capability_test_support::http::free_port;
use fantoccini::{ClientBuilder, Locator};
use serde_json::json;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

fn browser_present() -> bool {
    let present = Path::new(CHROMIUM).exists() && Path::new(CHROMEDRIVER).exists();
    if !present {
        assert!(
            std::env::var("CAPABILITY_TEST_REQUIRE_BROWSER").as_deref() != Ok("1"),
            "chromium and chromedriver are not installed (see .ci/run)"
        );
        eprintln!("skipped: chromium and chromedriver are not installed (see .ci/run)");
    }
    present
}

fn cap_cmd(home: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cap"));
    c.env("CAP_HOME", home);
    c
}

/// `cap serve` on a free loopback port; returns it and its base URL.
fn serve(home: &Path, policy: &Path, fixtures: &Path) -> (Running, String) {
    let (running, addr) = common::serve(
        home,
        &[
            "--policy",
            policy.to_str().unwrap(),
            "--policy-fixtures",
            fixtures.to_str().unwrap(),
        ],
    );
    (running, format!("http://{addr}"))
}

fn chromedriver(port: u16) -> Running {
    let child = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .arg("--allowed-ips=127.0.0.1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "chromedriver did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    Running(child)
}

fn shots_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn shot(client: &fantoccini::Client, name: &str) {
    let png = client.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "{name} is not a PNG");
    let path = shots_dir().join(format!("{name}.png"));
    std::fs::write(&path, &png).unwrap();
    eprintln!("screenshot: {}", path.display());
}

const POLICY: &str = r#"@id("allow-all") permit(principal, action, resource);
@id("secrets-need-approval") @decision("approval_required") @reason("secrets need a human")
forbid(principal, action, resource) when { context.input has text && context.input.text like "*secret*" };
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approver_approves_an_agents_call_in_the_browser() {
    if !browser_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let policy = dir.path().join("policies.cedar");
    std::fs::write(&policy, POLICY).unwrap();
    let fixtures = dir.path().join("fixtures.json");
    std::fs::write(
        &fixtures,
        json!([
            {"name": "plain text runs", "action": {"capability": "text/slugify", "actionType": "tool_call", "agentId": "bot", "tenant": "acme", "input": {"text": "hello"}}, "expect": "allow"},
            {"name": "secrets wait for a human", "action": {"capability": "text/slugify", "actionType": "tool_call", "agentId": "bot", "tenant": "acme", "input": {"text": "top secret"}}, "expect": "approval_required"}
        ])
        .to_string(),
    )
    .unwrap();
    // The approver's login: the password on standard input.
    let mut add = cap_cmd(&home)
        .args(["tokens", "add", "--role", "approver", "--login", "alice"])
        .args(["--tenant", "acme", "--password-stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    add.stdin
        .take()
        .unwrap()
        .write_all(b"correct horse battery\n")
        .unwrap();
    let out = add.wait_with_output().unwrap();
    assert!(out.status.success());
    let token = stdout_json(&out);
    assert_eq!(token["login"], "alice");
    assert_eq!(token["tenants"], json!(["acme"]));

    let (_server, base) = serve(&home, &policy, &fixtures);
    let port = free_port();
    let _driver = chromedriver(port);
    let profile = tempfile::tempdir().unwrap();
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({"binary": CHROMIUM, "args": [
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--window-size=1280,900", format!("--user-data-dir={}", profile.path().display()),
        ]}),
    );
    let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .unwrap();

    // Sign in.
    client.goto(&format!("{base}/console")).await.unwrap();
    assert!(
        client
            .current_url()
            .await
            .unwrap()
            .path()
            .ends_with("/login")
    );
    client
        .find(Locator::Css("#login"))
        .await
        .unwrap()
        .send_keys("alice")
        .await
        .unwrap();
    client
        .find(Locator::Css("#password"))
        .await
        .unwrap()
        .send_keys("correct horse battery")
        .await
        .unwrap();
    shot(&client, "01-login").await;
    client
        .find(Locator::Css("button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let status = client
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("#live-status"))
        .await
        .unwrap();
    // Live updates connected before the agent asks.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !status.text().await.unwrap().contains("connected") {
        assert!(
            Instant::now() < deadline,
            "the event stream did not connect"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shot(&client, "02-pending-empty").await;

    // The agent's call needs approval (exit status 3).
    let exec = |extra: &[&str]| {
        cap_cmd(&home)
            .args(["exec", "text/slugify", r#"{"text":"a secret plan"}"#])
            .args(["--agent", "bot", "--tenant", "acme", "--policy"])
            .arg(&policy)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = exec(&[]);
    assert_eq!(out.status.code(), Some(3));
    let id = stdout_json(&out)["approval"]["id"]
        .as_str()
        .unwrap()
        .to_string();

    // It appears without a reload.
    let card = format!("article[id='{id}']");
    client
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css(&card))
        .await
        .unwrap_or_else(|e| panic!("{id} did not appear live: {e}"));
    let text = client
        .find(Locator::Css(&card))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for want in [
        "text/slugify",
        "acme",
        "bot",
        "a secret plan",
        "secrets-need-approval",
        "secrets need a human",
    ] {
        assert!(text.contains(want), "{want} missing from {text}");
    }
    assert!(
        status
            .text()
            .await
            .unwrap()
            .contains("New approval pending")
    );
    shot(&client, "03-pending-live").await;

    // Approve with a comment, from the keyboard-reachable form.
    client
        .find(Locator::Css(&format!("textarea[id='c-{id}']")))
        .await
        .unwrap()
        .send_keys("checked with the owner")
        .await
        .unwrap();
    client
        .find(Locator::Css(&format!("button[id='approve-{id}']")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let approval_token = client
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("#approval-token"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(approval_token.starts_with("capapr1."));
    shot(&client, "04-approved").await;

    // The agent's retry with the token runs the exact call.
    let out = exec(&["--approval", approval_token.trim()]);
    succeeded(&out);
    let receipt = stdout_json(&out)["receipt"].clone();
    assert_eq!(receipt["output"], json!({"slug": "a-secret-plan"}));
    let receipt_id = receipt["receiptId"].as_str().unwrap().to_string();

    // The decided page names the approver.
    client
        .goto(&format!("{base}/console/decided"))
        .await
        .unwrap();
    let decided = client.source().await.unwrap();
    assert!(decided.contains(&id) && decided.contains("alice"));
    assert!(decided.contains("consumed"), "the token was redeemed");
    shot(&client, "05-decided").await;

    // The audit page shows the story: held for approval, then allowed with a receipt.
    client
        .goto(&format!("{base}/console/audit?tenant=acme"))
        .await
        .unwrap();
    let chain = client
        .find(Locator::Css("#chain-status"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(chain.contains("verified"), "{chain}");
    let rows = client
        .find(Locator::Css("#audit-events"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for want in ["approval_required", "allow", &id, &receipt_id, "bot"] {
        assert!(
            rows.contains(want),
            "{want} missing from the audit page: {rows}"
        );
    }
    shot(&client, "06-audit").await;

    // The receipt viewer and the policies with their test results.
    client
        .find(Locator::LinkText(&receipt_id))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let json = client
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("#receipt-json"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(json.contains("a-secret-plan"));
    shot(&client, "07-receipt").await;
    client
        .goto(&format!("{base}/console/policies"))
        .await
        .unwrap();
    let tests = client
        .find(Locator::Css("#policy-tests"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(tests.contains("secrets wait for a human") && !tests.contains("FAIL"));
    shot(&client, "08-policies").await;
    client.close().await.unwrap();
}
