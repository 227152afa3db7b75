//! Governance through `cap`: Cedar policy files on exec, approvals bound to the exact plan
//! (exit 3, approve, single use, changed input and forgery refused, surviving restarts —
//! every command is a new process), the audit log and its verification against edits,
//! deletions and reordering, and the policy tooling (schema, validate, test).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::path::{Path, PathBuf};

use crate::common::{cap, stdout_json, succeeded};
use capability_core::json;
use serde_json::{Value, json};

fn scenarios() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../capability-policy/tests/fixtures/scenarios")
}

const APPROVAL_POLICY: &str = r#"
permit(principal, action, resource);

@id("secret-slugs-need-approval")
@reason("Slugs of secret text need a human")
@decision("approval_required")
forbid(principal, action == Action::"tool_call", resource == Capability::"text/slugify")
when { context.input has text && context.input.text like "*secret*" };

@id("no-hashing-in-prod")
@reason("Hashing is not allowed in prod")
forbid(principal, action, resource == Capability::"data/sha256")
when { context.environment == "prod" };
"#;

fn write_policy(dir: &Path) -> PathBuf {
    let p = dir.join("policy.cedar");
    std::fs::write(&p, APPROVAL_POLICY).unwrap();
    p
}

#[test]
fn approvals_are_bound_to_the_exact_plan_and_single_use() {
    let home = tempfile::tempdir().unwrap();
    let policy = write_policy(home.path());
    let p = policy.to_str().unwrap();
    let input = r#"{"text":"top secret plan"}"#;

    let out = cap(
        home.path(),
        &[
            "exec",
            "text/slugify",
            input,
            "--policy",
            p,
            "--agent",
            "bot",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let approval = stdout_json(&out)["approval"].clone();
    assert_eq!(approval["reason"], "Slugs of secret text need a human");
    assert!(approval["expiresAt"].as_str().unwrap().ends_with('Z'));
    let id = approval["id"].as_str().unwrap().to_string();

    // The pending approval is there for a later process.
    let listed = stdout_json(&cap(
        home.path(),
        &["approvals", "list", "--status", "pending"],
    ));
    assert_eq!(listed[0]["approvalId"], id);
    assert_eq!(
        stdout_json(&cap(home.path(), &["approvals", "show", &id]))["capability"],
        "text/slugify"
    );

    // The requesting agent cannot approve its own request.
    let out = cap(
        home.path(),
        &["approvals", "approve", &id, "--approver", "bot"],
    );
    assert_eq!(out.status.code(), Some(1));
    let out = cap(
        home.path(),
        &["approvals", "approve", &id, "--approver", "alice"],
    );
    succeeded(&out);
    let token = stdout_json(&out)["token"].as_str().unwrap().to_string();

    // A changed input is refused; so is a forged token.
    let out = cap(
        home.path(),
        &[
            "exec",
            "text/slugify",
            r#"{"text":"top secret plans"}"#,
            "--policy",
            p,
            "--agent",
            "bot",
            "--approval",
            &token,
        ],
    );
    assert_eq!(stdout_json(&out)["error"]["code"], "PERMISSION_DENIED");
    let mut forged = token.clone();
    forged.pop();
    forged.push(if token.ends_with('A') { 'B' } else { 'A' });
    let out = cap(
        home.path(),
        &[
            "exec",
            "text/slugify",
            input,
            "--policy",
            p,
            "--agent",
            "bot",
            "--approval",
            &forged,
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout_json(&out)["error"]["code"], "PERMISSION_DENIED");

    // The approved plan runs once.
    let out = cap(
        home.path(),
        &[
            "exec",
            "text/slugify",
            input,
            "--policy",
            p,
            "--agent",
            "bot",
            "--approval",
            &token,
        ],
    );
    succeeded(&out);
    let receipt = stdout_json(&out)["receipt"].clone();
    assert_eq!(receipt["output"], json!({"slug": "top-secret-plan"}));
    assert_eq!(receipt["governance"]["approval"]["approver"], "alice");
    let out = cap(
        home.path(),
        &[
            "exec",
            "text/slugify",
            input,
            "--policy",
            p,
            "--agent",
            "bot",
            "--approval",
            &token,
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout_json(&out)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already used")
    );
    assert_eq!(
        stdout_json(&cap(home.path(), &["approvals", "show", &id]))["status"],
        "consumed"
    );
}

#[test]
fn policy_denials_and_the_audit_log() {
    let home = tempfile::tempdir().unwrap();
    let policy = write_policy(home.path());
    let p = policy.to_str().unwrap();
    let out = cap(
        home.path(),
        &[
            "exec",
            "data/sha256",
            r#"{"value":1}"#,
            "--policy",
            p,
            "--environment",
            "prod",
            "--tenant",
            "acme",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = stdout_json(&out)["error"].clone();
    assert_eq!(err["code"], "PERMISSION_DENIED");
    assert_eq!(err["message"], "Hashing is not allowed in prod");
    let ok = cap(
        home.path(),
        &[
            "exec",
            "data/sha256",
            r#"{"value":1}"#,
            "--policy",
            p,
            "--environment",
            "dev",
            "--tenant",
            "acme",
        ],
    );
    assert_eq!(ok.status.code(), Some(0));
    // Without any policy file the governance layer allows (and still audits).
    assert_eq!(
        cap(home.path(), &["exec", "data/sha256", r#"{"value":2}"#])
            .status
            .code(),
        Some(0)
    );

    let tail = stdout_json(&cap(home.path(), &["audit", "tail", "--tenant", "acme"]));
    let outcomes: Vec<&str> = tail
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["denied_before_execution", "allowed", "executed"]);
    let event_id = tail[0]["event_id"].as_str().unwrap();
    assert_eq!(
        stdout_json(&cap(home.path(), &["audit", "show", event_id]))["reason"],
        "Hashing is not allowed in prod"
    );
    let verify = cap(home.path(), &["audit", "verify"]);
    assert_eq!(verify.status.code(), Some(0));
    assert_eq!(stdout_json(&verify)["records"], 5);

    let out = cap(home.path(), &["audit", "export", "--format", "jsonl"]);
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 5);
    let otel = stdout_json(&cap(home.path(), &["audit", "export", "--format", "otel"]));
    assert!(otel.to_string().contains("logRecords"), "{otel}");
}

/// Runs a few governed executions, then lets `tamper` edit the database directly.
fn tampered(tamper: &str) -> Value {
    let home = tempfile::tempdir().unwrap();
    for i in 0..3 {
        assert_eq!(
            cap(
                home.path(),
                &["exec", "data/sha256", &format!(r#"{{"value":{i}}}"#)]
            )
            .status
            .code(),
            Some(0)
        );
    }
    let db = rusqlite::Connection::open(home.path().join("capability.db")).unwrap();
    db.execute_batch(tamper).unwrap();
    drop(db);
    let out = cap(home.path(), &["audit", "verify"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let report = stdout_json(&out);
    assert_eq!(report["ok"], false);
    report["firstBad"].clone()
}

#[test]
fn audit_verify_catches_an_edited_a_deleted_and_a_reordered_record() {
    let edited = tampered(
        "UPDATE audit_events SET event = replace(event, '\"allowed\"', '\"denied_before_execution\"') WHERE seq = 3",
    );
    assert_eq!(edited["seq"], 3, "{edited}");
    let deleted = tampered("DELETE FROM audit_events WHERE seq = 2");
    assert!(deleted["seq"].as_u64().unwrap() <= 3, "{deleted}");
    let reordered = tampered(
        "UPDATE audit_events SET seq = 100 WHERE seq = 2; UPDATE audit_events SET seq = 2 WHERE seq = 3; UPDATE audit_events SET seq = 3 WHERE seq = 100;",
    );
    assert_eq!(reordered["seq"], 2, "{reordered}");
}

#[test]
fn every_brane_scenario_passes_cap_policy_test() {
    let home = tempfile::tempdir().unwrap();
    let caps = scenarios().join("capabilities.json");
    let mut cedar_files: Vec<PathBuf> = std::fs::read_dir(scenarios())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "cedar"))
        .collect();
    cedar_files.sort();
    assert!(cedar_files.len() >= 16, "{cedar_files:?}");
    for cedar in &cedar_files {
        let fixtures = cedar.with_extension("json");
        let out = cap(
            home.path(),
            &[
                "policy",
                "test",
                cedar.to_str().unwrap(),
                "--fixtures",
                fixtures.to_str().unwrap(),
                "--capabilities",
                caps.to_str().unwrap(),
            ],
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{}: {text}", cedar.display());
        assert!(text.contains("0 failed"), "{text}");
    }
    // A wrong expectation fails with a readable diff.
    let wrong = home.path().join("wrong.json");
    let mut fixtures =
        json::parse(&std::fs::read(scenarios().join("s01_quickstart_refund_limit.json")).unwrap())
            .unwrap();
    fixtures[0]["expect"] = json!("deny");
    std::fs::write(&wrong, fixtures.to_string()).unwrap();
    let out = cap(
        home.path(),
        &[
            "policy",
            "test",
            scenarios()
                .join("s01_quickstart_refund_limit.cedar")
                .to_str()
                .unwrap(),
            "--fixtures",
            wrong.to_str().unwrap(),
            "--capabilities",
            caps.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("1 failed") && text.contains("deny") && text.contains("allow"),
        "{text}"
    );
}

#[test]
fn policy_schema_and_validation_name_file_and_line() {
    let home = tempfile::tempdir().unwrap();
    let out = cap(home.path(), &["policy", "schema"]);
    assert_eq!(out.status.code(), Some(0));
    let schema = String::from_utf8(out.stdout).unwrap();
    assert!(
        schema.contains("entity Capability") && schema.contains("entity Agent"),
        "{schema}"
    );
    let good = write_policy(home.path());
    let out = cap(home.path(), &["policy", "validate", good.to_str().unwrap()]);
    succeeded(&out);
    let bad = home.path().join("bad.cedar");
    std::fs::write(&bad, "permit(principal, action, resource);\n\nforbid(principal, action, resource)\nwhen { context.nosuch == 1 };\n").unwrap();
    let out = cap(home.path(), &["policy", "validate", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let report = stdout_json(&out);
    assert_eq!(report["valid"], false);
    let d = &report["diagnostics"][0];
    assert!(d["file"].as_str().unwrap().ends_with("bad.cedar"));
    assert!(d["line"].as_u64().unwrap() >= 3, "{d}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("bad.cedar:"), "{stderr}");
}

#[test]
fn cap_policy_test_runs_the_documented_fixture_shape_without_a_registry() {
    let home = tempfile::tempdir().unwrap();
    let policy = home.path().join("refunds.cedar");
    std::fs::write(
        &policy,
        r#"permit(principal, action, resource);

@id("refund-limit") @reason("Refund above $100 requires approval")
@decision("approval_required")
forbid(principal, action == Action::"tool_call", resource == Capability::"refund_customer")
when { context.input has amount_usd && context.input.amount_usd > 100 };
"#,
    )
    .unwrap();
    let fixtures = home.path().join("refunds.json");
    std::fs::write(
        &fixtures,
        r#"[{
  "name": "refund under the limit is allowed",
  "action": {
    "capability": "refund_customer", "actionType": "tool_call", "agentId": "support-agent",
    "tenant": "acme", "scopes": ["refunds:create"], "environment": "prod",
    "input": {"amount_usd": 50}
  },
  "expect": "allow"
}, {
  "name": "refund over the limit needs approval",
  "action": {
    "capability": "refund_customer", "actionType": "tool_call", "agentId": "support-agent",
    "tenant": "acme", "scopes": ["refunds:create"], "environment": "prod",
    "input": {"amount_usd": 250}
  },
  "expect": "approval_required"
}]"#,
    )
    .unwrap();
    let out = cap(
        home.path(),
        &[
            "policy",
            "test",
            policy.to_str().unwrap(),
            "--fixtures",
            fixtures.to_str().unwrap(),
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{text}{stderr}");
    assert!(text.ends_with("2 passed, 0 failed\n"), "{text}");
    assert!(!text.contains("not registered;"), "{text}");
    // Each case says its capability attributes were defaulted, and why.
    assert_eq!(
        text.matches("  defaults: kind=tool, risk=low, effects=[], scopes=[], owner=\"\", dataNamespace=\"\", tenant=\"\", environment=\"\" (`refund_customer` is not registered)\n").count(),
        2,
        "{text}"
    );
}

/// A home with `before` governed runs, a checkpoint taken (kept outside the home), then
/// `after` more runs. Returns the home, the checkpoint file and the checkpoint's seq.
fn checkpointed(before: usize, after: usize) -> (tempfile::TempDir, PathBuf, u64) {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let run = |i: usize| {
        let out = cap(
            &home,
            &["exec", "data/sha256", &format!(r#"{{"value":{i}}}"#)],
        );
        assert_eq!(out.status.code(), Some(0));
    };
    (0..before).for_each(run);
    let out = cap(&home, &["audit", "checkpoint"]);
    succeeded(&out);
    let checkpoint = stdout_json(&out);
    let seq = checkpoint["seq"].as_u64().unwrap();
    assert!(seq >= before as u64, "{checkpoint}");
    assert!(checkpoint["signature"].is_string(), "{checkpoint}");
    let file = dir.path().join("checkpoint.json");
    std::fs::write(&file, checkpoint.to_string()).unwrap();
    (before..before + after).for_each(run);
    (dir, file, seq)
}

fn verify(home: &Path, checkpoint: Option<&Path>) -> (Option<i32>, Value) {
    let mut args = vec!["audit", "verify"];
    if let Some(c) = checkpoint {
        args.extend(["--checkpoint", c.to_str().unwrap()]);
    }
    let out = cap(home, &args);
    (out.status.code(), stdout_json(&out))
}

/// Rewrites the chain from `from` on with recomputed hashes (as someone who can write the
/// database would), and moves the head to its end.
fn rechain(db: &rusqlite::Connection, from: u64) {
    let rows: Vec<(i64, String)> = db
        .prepare("SELECT seq, event FROM audit_events WHERE seq >= ?1 ORDER BY seq")
        .unwrap()
        .query_map([from as i64], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut prev: String = db
        .query_row(
            "SELECT hash FROM audit_events WHERE seq = ?1",
            [from as i64 - 1],
            |r| r.get(0),
        )
        .unwrap_or_else(|_| capability_policy::audit::GENESIS_HASH.to_string());
    for (seq, event) in rows {
        let hash = capability_policy::audit::chain_hash_text(seq as u64, &prev, &event);
        db.execute(
            "UPDATE audit_events SET prev_hash = ?1, hash = ?2 WHERE seq = ?3",
            rusqlite::params![prev, hash, seq],
        )
        .unwrap();
        prev = hash;
    }
    db.execute_batch(
        "UPDATE audit_head SET seq = (SELECT MAX(seq) FROM audit_events),
         hash = (SELECT hash FROM audit_events WHERE seq = (SELECT MAX(seq) FROM audit_events))",
    )
    .unwrap();
}

#[test]
fn a_signed_checkpoint_holds_while_the_log_grows() {
    let (dir, file, seq) = checkpointed(2, 3);
    let home = dir.path().join("home");
    let (code, report) = verify(&home, Some(&file));
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["checkpoint"]["ok"], true);
    assert_eq!(report["checkpoint"]["seq"], seq);
    assert_eq!(report["checkpoint"]["counter"], 1);
    assert!(report["headSeq"].as_u64().unwrap() > seq, "{report}");
    // The next checkpoint counts on.
    let next = stdout_json(&cap(&home, &["audit", "checkpoint"]));
    assert_eq!(next["counter"], 2);
    assert_eq!(next["seq"], report["headSeq"]);
    // A checkpoint edited by hand, or signed by another home's key, is refused.
    let mut forged = json::parse(&std::fs::read(&file).unwrap()).unwrap();
    forged["seq"] = json!(1);
    std::fs::write(&file, forged.to_string()).unwrap();
    let out = cap(
        &home,
        &["audit", "verify", "--checkpoint", file.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("signature"), "{said}");
    let (other, other_file, _) = checkpointed(1, 0);
    let out = cap(
        &home,
        &[
            "audit",
            "verify",
            "--checkpoint",
            other_file.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("not by this home's key"), "{said}");
    drop(other);
}

#[test]
fn a_signed_checkpoint_catches_truncation_and_a_rebuilt_chain() {
    // Truncation: the newest events deleted (the checkpoint's among them), the head moved
    // back. The chain alone is consistent again.
    let (dir, file, seq) = checkpointed(3, 2);
    let home = dir.path().join("home");
    let db = rusqlite::Connection::open(home.join("capability.db")).unwrap();
    let deleted = db
        .execute("DELETE FROM audit_events WHERE seq >= ?1", [seq as i64 - 1])
        .unwrap();
    assert_eq!(deleted as u64, 10 - (seq - 2), "seq {seq}");
    rechain(&db, seq - 1);
    drop(db);
    let (code, report) = verify(&home, None);
    assert_eq!(code, Some(0), "the chain alone misses it: {report}");
    let (code, report) = verify(&home, Some(&file));
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(report["ok"], false);
    assert_eq!(report["checkpoint"]["ok"], false);
    let problem = report["checkpoint"]["problem"].as_str().unwrap();
    assert!(problem.contains("removed"), "{problem}");

    // Re-chaining: an event before the checkpoint edited, every later hash recomputed.
    let (dir, file, _) = checkpointed(3, 2);
    let home = dir.path().join("home");
    let db = rusqlite::Connection::open(home.join("capability.db")).unwrap();
    let event = |db: &rusqlite::Connection| -> String {
        db.query_row("SELECT event FROM audit_events WHERE seq = 3", [], |r| {
            r.get(0)
        })
        .unwrap()
    };
    let before = event(&db);
    db.execute(
        "UPDATE audit_events SET event = replace(event, '\"allowed\"', '\"denied_before_execution\"') WHERE seq = 3",
        [],
    )
    .unwrap();
    assert_ne!(event(&db), before, "the event was edited");
    rechain(&db, 3);
    drop(db);
    let (code, report) = verify(&home, None);
    assert_eq!(code, Some(0), "the chain alone misses it: {report}");
    let (code, report) = verify(&home, Some(&file));
    assert_eq!(code, Some(1), "{report}");
    let problem = report["checkpoint"]["problem"].as_str().unwrap();
    assert!(problem.contains("edited"), "{problem}");
}

/// A token made with `cap tokens add` (its secret).
fn add_token(home: &Path, args: &[&str], password: Option<&str>) -> String {
    use std::io::Write as _;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_cap"))
        .env("CAP_HOME", home)
        .args(["tokens", "add"])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(format!("{}\n", password.unwrap_or_default()).as_bytes())
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    stdout_json(&out)["token"].as_str().unwrap().to_string()
}

/// A pending approval for `text` requested by `cap exec --agent <agent>`.
fn pending_by_agent(home: &Path, policy: &str, agent: &str, text: &str) -> String {
    let input = json!({"text": text}).to_string();
    let out = cap(
        home,
        &[
            "exec",
            "text/slugify",
            &input,
            "--policy",
            policy,
            "--agent",
            agent,
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout_json(&out)["approval"]["id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A console session of a login: its cookie (`name=value`).
fn console_login(addr: &str, login: &str, password: &str) -> String {
    let (_, head, page) = common::http(addr, "GET", "/login", &[], "");
    let csrf_cookie = common::set_cookies(&head)
        .into_iter()
        .find(|c| c.starts_with("cap_login_csrf="))
        .unwrap();
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap()
        .to_string();
    let form = format!("csrf={csrf}&login={login}&password={password}");
    let (status, head, _) = common::http(
        addr,
        "POST",
        "/login",
        &[
            ("Cookie", &csrf_cookie),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        &form,
    );
    assert_eq!(status, 303, "{head}");
    common::set_cookies(&head)
        .into_iter()
        .find(|c| c.starts_with("cap_session="))
        .unwrap()
}

/// The console's approve form for `id` as the session `cookie`: status and page.
fn console_approve(addr: &str, cookie: &str, id: &str) -> (u16, String) {
    let (status, _, page) = common::http(
        addr,
        "GET",
        &format!("/console/approvals/{id}"),
        &[("Cookie", cookie)],
        "",
    );
    assert_eq!(status, 200, "{page}");
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap_or_default()
        .to_string();
    let (status, _, page) = common::http(
        addr,
        "POST",
        &format!("/console/approvals/{id}/approve"),
        &[
            ("Cookie", cookie),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        &format!("csrf={csrf}&comment="),
    );
    (status, page)
}

/// The one approval rule, on every surface: a principal never decides a request it made —
/// compared by its principal id (the same token asked), its name (an agent named as its
/// login asked) and its agent id (its own agent asked) — whether it decides with the CLI
/// (`--token`), the HTTP API or the console; a principal that did not ask decides.
#[test]
fn one_rule_refuses_self_approval_on_every_surface() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let policy = write_policy(h);
    let p = policy.to_str().unwrap();
    let root = add_token(
        h,
        &[
            "--role",
            "admin",
            "--agent",
            "root-agent",
            "--login",
            "root",
        ],
        Some("root password"),
    );
    let carol = add_token(
        h,
        &[
            "--role",
            "approver",
            "--tenant",
            "*",
            "--agent",
            "carol-agent",
            "--login",
            "carol",
        ],
        Some("carol password"),
    );
    let dave = add_token(
        h,
        &[
            "--role", "approver", "--tenant", "*", "--agent", "bot", "--login", "dave",
        ],
        Some("dave password"),
    );
    let alice = add_token(
        h,
        &["--role", "approver", "--tenant", "*", "--login", "alice"],
        Some("alice password"),
    );
    let (_server, addr) = common::serve(h, &["--policy", p]);
    let bearer = |t: &str| format!("Bearer {t}");
    // Requested by root's own token over the API (requester `token:<root's id>`).
    let by_root = |text: &str| {
        let body = json!({"capability": "text/slugify", "input": {"text": text}}).to_string();
        let auth = bearer(&root);
        let (status, _, answer) = common::http(
            &addr,
            "POST",
            "/api/v1/invoke",
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            &body,
        );
        assert_eq!(status, 202, "{answer}");
        json::parse(answer.as_bytes()).unwrap()["approval"]["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // The three ways a request is the decider's own, each with its decider.
    type Requester<'a> = Box<dyn Fn(&str) -> String + 'a>;
    let cases: [(&str, &str, &str, Requester); 3] = [
        ("principal id", &root, "root", Box::new(by_root)),
        (
            "name",
            &carol,
            "carol",
            Box::new(|t: &str| pending_by_agent(h, p, "carol", t)),
        ),
        (
            "agent id",
            &dave,
            "dave",
            Box::new(|t: &str| pending_by_agent(h, p, "bot", t)),
        ),
    ];
    let refused = |what: &str, surface: &str, text: &str| {
        assert!(
            text.contains("cannot decide") || text.contains("SELF_APPROVAL"),
            "{surface}, by {what}: {text}"
        );
    };
    for (what, token, login, request) in &cases {
        // The CLI, as the token's holder.
        let id = request(&format!("cli secret by {what}"));
        let out = cap(h, &["approvals", "approve", &id, "--token", token]);
        assert_eq!(out.status.code(), Some(1), "cli, by {what}");
        refused(what, "cli", &String::from_utf8_lossy(&out.stderr));
        // The API.
        let id = request(&format!("api secret by {what}"));
        let auth = bearer(token);
        let (status, _, answer) = common::http(
            &addr,
            "POST",
            &format!("/api/v1/approvals/{id}/approve"),
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            "{}",
        );
        assert_eq!(status, 403, "api, by {what}: {answer}");
        refused(what, "api", &answer);
        // The console: no form is offered, and posting one is refused.
        let id = request(&format!("console secret by {what}"));
        let cookie = console_login(&addr, login, &format!("{login} password"));
        let (_, _, page) = common::http(
            &addr,
            "GET",
            &format!("/console/approvals/{id}"),
            &[("Cookie", &cookie)],
            "",
        );
        assert!(
            page.contains("You cannot decide this approval"),
            "console, by {what}"
        );
        let (status, page) = console_approve(&addr, &cookie, &id);
        assert_eq!(status, 403, "console, by {what}: {page}");
        refused(what, "console", &page);
        // Someone who did not ask decides it.
        let out = cap(h, &["approvals", "approve", &id, "--token", &alice]);
        succeeded(&out);
    }
    // The operator of this machine is refused by name too.
    let id = pending_by_agent(h, p, "erin", "operator secret");
    let out = cap(h, &["approvals", "approve", &id, "--approver", "erin"]);
    assert_eq!(out.status.code(), Some(1));
    refused(
        "name",
        "cli operator",
        &String::from_utf8_lossy(&out.stderr),
    );
}

#[test]
fn serve_refuses_capability_and_budget_files_it_cannot_use_before_listening() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let bad_kind = file(
        "caps.json",
        r#"{"capabilities": [{"name": "x", "type": "spaceship"}]}"#,
    );
    let bad_budget = file(
        "budgets.json",
        r#"{"budgets": [{"id": "b", "per": "team", "windowSeconds": 60, "limitUsd": 1}]}"#,
    );
    let good_caps = file("ok.json", r#"[{"name": "llm", "type": "model"}]"#);
    for (args, says) in [
        (vec!["--capabilities", bad_kind.as_str()], "spaceship"),
        (
            vec!["--capabilities", "/nonexistent/caps.json"],
            "cannot read",
        ),
        (
            vec![
                "--capabilities",
                good_caps.as_str(),
                "--budgets",
                bad_budget.as_str(),
            ],
            "`per`",
        ),
        (vec!["--action-timeout", "0s"], "not a duration"),
    ] {
        let mut all = vec!["serve", "--listen", "127.0.0.1:0"];
        all.extend(args.iter().copied());
        let out = common::cap(&home, &all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// Unreadable records of a dead process's journal are kept in quarantine and said, never
/// deleted in silence (issue 30, item 13): the next command warns with the file, `audit
/// verify` is not ok while they are there, and `cap doctor` counts them.
#[test]
fn unreadable_journal_records_are_quarantined_warned_and_counted() {
    let home = tempfile::tempdir().unwrap();
    succeeded(&cap(
        home.path(),
        &["exec", "text/slugify", r#"{"text":"a b"}"#],
    ));
    let journal = home.path().join("journal");
    // A dead process's journals: a torn audit event and a receipt that is not one.
    std::fs::write(
        journal.join("audit-4244-dead.jsonl"),
        "{\"event_id\": \"evt_torn\", \"tim\n",
    )
    .unwrap();
    std::fs::write(
        journal.join("receipts-4244-dead.jsonl"),
        "{\"receiptId\": 7}\n",
    )
    .unwrap();
    let out = cap(home.path(), &["audit", "verify"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning:") && stderr.contains("quarantine"),
        "{stderr}"
    );
    let report = stdout_json(&out);
    assert_eq!(report["quarantined"], 1, "{report}");
    assert_eq!(report["ok"], false);
    assert_eq!(out.status.code(), Some(1));
    // Kept, byte for byte; the journals themselves are gone.
    let kept = std::fs::read_to_string(journal.join("quarantine/audit-4244-dead.jsonl")).unwrap();
    assert_eq!(kept, "{\"event_id\": \"evt_torn\", \"tim\n");
    assert!(!journal.join("audit-4244-dead.jsonl").exists());
    // The next command has nothing new to warn about, and doctor counts both.
    let out = cap(home.path(), &["receipts", "list"]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("quarantine"));
    let out = cap(home.path(), &["doctor"]);
    let doctor = stdout_json(&out);
    assert_eq!(doctor["quarantine"]["auditEvents"], 1, "{doctor}");
    assert_eq!(doctor["quarantine"]["receipts"], 1, "{doctor}");
    assert_eq!(doctor["ok"], false);
}

/// Anchoring through `cap` (issue 30, item 17): `--audit-witness` (or $CAP_AUDIT_WITNESS)
/// makes every command that writes the log leave a checkpoint outside the home; `audit
/// verify` checks against it; `cap doctor` warns when none is named.
#[test]
fn commands_anchor_the_log_at_the_named_witness_and_verify_checks_it() {
    let home = tempfile::tempdir().unwrap();
    let witness = tempfile::tempdir().unwrap();
    let w = witness.path().to_str().unwrap();
    let out = common::cap(home.path(), &["doctor"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no audit witness"), "{stderr}");
    assert_eq!(stdout_json(&out)["auditWitness"]["configured"], false);
    for text in ["a", "b", "c"] {
        let input = format!("{{\"text\":\"{text}\"}}");
        succeeded(&cap(
            home.path(),
            &["exec", "text/slugify", &input, "--audit-witness", w],
        ));
    }
    assert_eq!(std::fs::read_dir(witness.path()).unwrap().count(), 1);
    let out = cap(home.path(), &["audit", "verify", "--audit-witness", w]);
    succeeded(&out);
    let report = stdout_json(&out);
    let seq = report["witness"]["seq"].as_u64().unwrap();
    assert!(seq >= 3, "{report}");
    let out = common::cap(home.path(), &["doctor", "--audit-witness", w]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("no audit witness"));
    // The newest events cut, the head moved back, the counters forged: found.
    let conn = rusqlite::Connection::open(home.path().join("capability.db")).unwrap();
    let keep = seq - 1;
    conn.execute_batch(&format!(
        "DELETE FROM audit_events WHERE seq > {keep};
         UPDATE audit_head SET seq = {keep}, hash = (SELECT hash FROM audit_events WHERE seq = {keep});
         DELETE FROM audit_tenant_heads; DELETE FROM audit_checkpoints;"
    ))
    .unwrap();
    drop(conn);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cap"))
        .env("CAP_HOME", home.path())
        .env("CAP_AUDIT_WITNESS", w)
        .args(["audit", "verify"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        stdout_json(&out)["witness"]["problem"]
            .as_str()
            .unwrap()
            .contains("removed")
    );
}
