//! The runtime commands of `cap`: exec (every built-in), find, info, receipts, rollback, and
//! a receipt surviving a SIGKILL of the process that printed it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{cap, stdout_json, succeeded, vectors};
use capability_core::json;
use capability_core::published::{PublishedSchema, validate_published};
use serde_json::json;

#[test]
fn every_builtin_runs_through_cap_exec() {
    let home = tempfile::tempdir().unwrap();
    let doc = vectors("builtins.json");
    let mut seen = std::collections::BTreeSet::new();
    for case in doc["cases"].as_array().unwrap() {
        let id = case["id"].as_str().unwrap();
        if case.get("error").is_some() || !seen.insert(id.to_string()) {
            continue;
        }
        let input = json::to_js_string(&case["input"]);
        let out = cap(home.path(), &["exec", id, &input]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{id}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let result = stdout_json(&out);
        assert_eq!(result["capability"]["id"], id);
        assert_eq!(result["receipt"]["output"], case["output"], "{id}");
        assert_eq!(result["receipt"]["outputHash"], case["outputHash"], "{id}");
        let issues = validate_published(PublishedSchema::Receipt, &result["receipt"]);
        assert!(issues.is_empty(), "{id}: {issues:?}");
    }
    assert_eq!(seen.len(), 12);
    let listed = stdout_json(&cap(home.path(), &["receipts", "list"]));
    assert_eq!(listed.as_array().unwrap().len(), 12);
}

#[test]
fn exec_failures_print_the_error_and_keep_a_failed_receipt() {
    let home = tempfile::tempdir().unwrap();
    let out = cap(
        home.path(),
        &["exec", "text/slugify", r#"{"text":"x","separator":""}"#],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = stdout_json(&out)["error"].clone();
    assert_eq!(err["code"], "EXECUTION_FAILED");
    let receipt_id = err["receiptId"].as_str().unwrap().to_string();
    let shown = stdout_json(&cap(home.path(), &["receipts", "show", &receipt_id]));
    assert_eq!(shown["status"], "failed");
    assert_eq!(
        shown["error"]["message"],
        "separator must be 1-8 non-alphanumeric characters"
    );
    assert_eq!(
        shown["inputHash"],
        "b5cfc04c7e14299c989ff878e975bde528d0fab31fa63eef5d5e3f5c7906f729"
    );
    assert!(validate_published(PublishedSchema::Receipt, &shown).is_empty());

    let out = cap(home.path(), &["exec", "text/normalize", r#"{"text": 5}"#]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stdout_json(&out),
        json!({"error": {"code": "INVALID_INPUT", "message": "Input failed schema validation",
                          "details": [{"path": "$.text", "message": "expected string"}]}})
    );
    let out = cap(home.path(), &["exec", "no/such-capability-anywhere", "{}"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout_json(&out)["error"]["code"], "NOT_FOUND");
    let out = cap(home.path(), &["exec", "text/slugify", "{not json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("input: invalid JSON"));
}

#[test]
fn presets_and_approval_govern_exec() {
    // The built-ins are effect-free, so even deny-all runs them.
    let home = tempfile::tempdir().unwrap();
    let out = cap(
        home.path(),
        &[
            "exec",
            "data/sha256",
            r#"{"value":{"b":1,"a":[1,2]}}"#,
            "--preset",
            "deny-all",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stdout_json(&out)["receipt"]["inputHash"],
        "04864ccfb78ffbf0f1e4692b1c23518bd4d0970c33d4ffbb29fc329c7eea81b4"
    );
}

#[test]
fn find_and_info_use_the_embedded_index() {
    let home = tempfile::tempdir().unwrap();
    let found = stdout_json(&cap(home.path(), &["find", "slug text"]));
    assert_eq!(found[0]["id"], "text/slugify");
    assert_eq!(found[0]["score"], 23);
    assert_eq!(
        found[0]["reasons"],
        json!([
            "tag:slug",
            "description:slug",
            "id:text",
            "name:text",
            "tag:text",
            "description:text"
        ])
    );
    assert_eq!(found[1]["id"], "text/normalize");
    assert_eq!(found[1]["score"], 17);
    let limited = stdout_json(&cap(home.path(), &["find", "capability", "--limit", "3"]));
    assert_eq!(limited.as_array().unwrap().len(), 3);
    let info = stdout_json(&cap(home.path(), &["info", "hash digest"]));
    assert_eq!(info["capability"]["manifest"]["id"], "data/sha256");
    assert_eq!(info["score"], 10);
    assert_eq!(
        info["reasons"],
        json!(["tag:hash", "tag:digest", "description:digest"])
    );
    let exact = stdout_json(&cap(home.path(), &["info", "json/get"]));
    assert_eq!(exact["reasons"], json!(["exact-id"]));
}

#[test]
fn receipts_filter_export_and_rollback_refusal() {
    let home = tempfile::tempdir().unwrap();
    cap(home.path(), &["exec", "text/slugify", r#"{"text":"A B"}"#]);
    cap(
        home.path(),
        &["exec", "text/normalize", r#"{"text":" A "}"#],
    );
    let out = cap(
        home.path(),
        &["exec", "text/slugify", r#"{"text":"x","separator":"a"}"#],
    );
    assert_eq!(out.status.code(), Some(1));
    let slugs = stdout_json(&cap(
        home.path(),
        &["receipts", "list", "--capability", "text/slugify"],
    ));
    assert_eq!(slugs.as_array().unwrap().len(), 2);
    let failed = stdout_json(&cap(
        home.path(),
        &["receipts", "list", "--status", "failed"],
    ));
    assert_eq!(failed.as_array().unwrap().len(), 1);
    let none = stdout_json(&cap(
        home.path(),
        &["receipts", "list", "--since", "2999-01-01T00:00:00.000Z"],
    ));
    assert_eq!(none, json!([]));
    let out = cap(home.path(), &["receipts", "export"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 3);
    for line in text.lines() {
        assert!(json::parse_str(line).unwrap()["receiptId"].is_string());
    }
    assert_eq!(
        cap(home.path(), &["receipts", "list", "--status", "bogus"])
            .status
            .code(),
        Some(1)
    );
    let ok = slugs[0]["receiptId"].as_str().unwrap();
    let out = cap(home.path(), &["rollback", ok, "--approve"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout_json(&out)["error"]["code"], "ROLLBACK_UNAVAILABLE");
    let out = cap(home.path(), &["receipts", "show", "receipt_missing"]);
    assert_eq!(out.status.code(), Some(1));
}

/// `cap exec` prints a large result into a pipe this test stops reading, so the process is
/// still alive (blocked writing its output) right after the receipt id was printed; it is
/// killed with SIGKILL at that moment, and the receipt must be there afterwards.
#[test]
fn a_receipt_survives_sigkill_right_after_it_was_printed() {
    let home = tempfile::tempdir().unwrap();
    let big = "Hello   World ".repeat(7_000); // ~200 KB of output, beyond a pipe buffer
    let input = json!({"text": big, "case": "lower"}).to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cap"))
        .env("CAP_HOME", home.path())
        .args(["exec", "text/normalize", &input])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut printed = Vec::new();
    let started = Instant::now();
    let receipt_id = loop {
        let mut buf = [0u8; 4096];
        let n = stdout.read(&mut buf).unwrap();
        assert!(
            n > 0 && started.elapsed() < Duration::from_secs(60),
            "no receipt id printed"
        );
        printed.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&printed);
        if let Some(at) = text.find("\"receiptId\": \"") {
            let rest = &text[at + 14..];
            if let Some(end) = rest.find('"') {
                break rest[..end].to_string();
            }
        }
    };
    // Still alive: blocked writing the rest of its output.
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        child.try_wait().unwrap().is_none(),
        "cap exited before it could be killed"
    );
    child.kill().unwrap(); // SIGKILL
    assert!(!child.wait().unwrap().success());

    let out = cap(home.path(), &["receipts", "show", &receipt_id]);
    succeeded(&out);
    let shown = stdout_json(&out);
    assert_eq!(shown["receiptId"], receipt_id.as_str());
    assert_eq!(shown["status"], "succeeded");
    assert_eq!(
        shown["output"]["text"].as_str().unwrap().len(),
        "hello world ".len() * 7_000 - 1
    );
    // Its audit events survived too: the audit log has the execution, and once both stores
    // were opened no journal of the killed process is left.
    let audit = stdout_json(&cap(home.path(), &["audit", "tail"]));
    assert!(
        audit
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["receipt_id"] == receipt_id.as_str() && e["outcome"] == "executed"),
        "{audit}"
    );
    assert_eq!(
        cap(home.path(), &["audit", "verify"]).status.code(),
        Some(0)
    );
    let journals: Vec<_> = std::fs::read_dir(home.path().join("journal"))
        .unwrap()
        .collect();
    assert!(journals.is_empty(), "{journals:?}");
}

/// The README's main command must stay true: `cargo run -p cap -- <args>` picks the `cap`
/// binary (the package has two), and its arguments run a built-in to a successful receipt.
#[test]
fn the_readme_main_command_works() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    assert!(
        manifest.contains("default-run = \"cap\""),
        "`cargo run -p cap` needs default-run: the package has two binaries"
    );
    let readme = std::fs::read_to_string(root.join("../../README.md")).unwrap();
    let line = readme
        .lines()
        .find_map(|l| l.strip_prefix("cargo run -p cap -- "))
        .expect("README shows `cargo run -p cap -- ...`");
    // The shell words of the line: plain words and single-quoted ones.
    let mut args: Vec<String> = Vec::new();
    let mut rest = line.trim();
    while !rest.is_empty() {
        if let Some(quoted) = rest.strip_prefix('\'') {
            let end = quoted.find('\'').expect("closing quote");
            args.push(quoted[..end].to_string());
            rest = quoted[end + 1..].trim_start();
        } else {
            let end = rest.find(' ').unwrap_or(rest.len());
            args.push(rest[..end].to_string());
            rest = rest[end..].trim_start();
        }
    }
    assert_eq!(args.first().map(String::as_str), Some("exec"), "{line}");
    let home = tempfile::tempdir().unwrap();
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = cap(home.path(), &refs);
    assert_eq!(out.status.code(), Some(0), "{line}");
    let result = stdout_json(&out);
    assert_eq!(result["receipt"]["status"], "succeeded", "{result}");
    assert_eq!(result["capability"]["id"], args[1]);
}

/// A small xorshift generator: the kill -9 storm is random, but its seed is printed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Receipt ids in what a `cap exec` printed (the whole receipt, or the part before a kill).
fn printed_receipt_ids(stdout: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(stdout);
    text.match_indices("\"receiptId\": \"")
        .filter_map(|(at, m)| {
            let rest = &text[at + m.len()..];
            rest.find('"').map(|end| rest[..end].to_string())
        })
        .collect()
}

/// Several `cap` processes against one home, a third of them killed with SIGKILL at random
/// moments (while they open the home, replay a dead process's journals, execute, commit):
/// every receipt any of them printed is found afterwards with its audit events, no process
/// that was not killed failed, and the audit chain verifies.
#[test]
fn a_kill_9_storm_loses_no_receipt_and_fails_no_survivor() {
    use std::os::unix::process::ExitStatusExt as _;
    let home = tempfile::tempdir().unwrap();
    let seed = std::env::var("CAP_STORM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("kill -9 storm seed: {seed} (CAP_STORM_SEED={seed} repeats it)");
    let storm = Duration::from_secs(
        std::env::var("CAP_STORM_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(20),
    );
    let started = Instant::now();
    let workers: Vec<_> = (0..4u64)
        .map(|w| {
            let home = home.path().to_path_buf();
            std::thread::spawn(move || {
                let mut rng = Rng(seed.wrapping_mul(w + 1) | 1);
                let (mut printed, mut failures, mut killed, mut runs) =
                    (Vec::new(), Vec::new(), 0, 0);
                while started.elapsed() < storm {
                    runs += 1;
                    let text = format!("Storm {w} run {runs} {}", rng.next());
                    let mut child = Command::new(env!("CARGO_BIN_EXE_cap"))
                        .env("CAP_HOME", &home)
                        .args(["exec", "text/slugify", &json!({"text": text}).to_string()])
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn()
                        .unwrap();
                    if rng.below(3) == 0 {
                        std::thread::sleep(Duration::from_millis(rng.below(120)));
                        let _ = child.kill(); // SIGKILL; it may have exited already
                    }
                    let out = child.wait_with_output().unwrap();
                    printed.extend(printed_receipt_ids(&out.stdout));
                    if out.status.signal() == Some(libc_sigkill()) {
                        killed += 1;
                    } else if !out.status.success() {
                        failures.push(format!(
                            "{:?}: {}{}",
                            out.status,
                            String::from_utf8_lossy(&out.stdout),
                            String::from_utf8_lossy(&out.stderr)
                        ));
                    }
                }
                (printed, failures, killed, runs)
            })
        })
        .collect();
    let (mut printed, mut failures, mut killed, mut runs) = (Vec::new(), Vec::new(), 0, 0);
    for w in workers {
        let (p, f, k, r) = w.join().unwrap();
        printed.extend(p);
        failures.extend(f);
        killed += k;
        runs += r;
    }
    eprintln!(
        "{runs} runs, {killed} killed, {} receipts printed, {} failures, in {:?}",
        printed.len(),
        failures.len(),
        started.elapsed()
    );
    assert!(
        failures.is_empty(),
        "surviving processes failed: {failures:#?}"
    );
    assert!(
        killed > 0 && !printed.is_empty(),
        "{runs} runs, {killed} killed"
    );
    // Every printed receipt is there, and its execution is in the audit log.
    let listed = stdout_json(&cap(home.path(), &["receipts", "list"]));
    let stored: std::collections::HashSet<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["receiptId"].as_str())
        .collect();
    let lost: Vec<&String> = printed
        .iter()
        .filter(|id| !stored.contains(id.as_str()))
        .collect();
    assert!(
        lost.is_empty(),
        "{} of {} printed receipts lost: {lost:?}",
        lost.len(),
        printed.len()
    );
    let audit = cap(home.path(), &["audit", "export"]);
    assert_eq!(audit.status.code(), Some(0));
    let mut executed = std::collections::HashSet::new();
    for line in String::from_utf8_lossy(&audit.stdout).lines() {
        let event = json::parse_record(line.as_bytes()).unwrap();
        if event["outcome"] == "executed"
            && let Some(id) = event["receipt_id"].as_str()
        {
            executed.insert(id.to_string());
        }
    }
    let unaudited: Vec<&String> = printed
        .iter()
        .filter(|id| !executed.contains(*id))
        .collect();
    assert!(
        unaudited.is_empty(),
        "printed receipts without an audit event: {unaudited:?}"
    );
    let out = cap(home.path(), &["audit", "verify"]);
    succeeded(&out);
}

fn libc_sigkill() -> i32 {
    9
}

/// A home this process cannot write (here a read-only bind mount, in a mount namespace of
/// its own) is read as it is: receipts list, show and export, the audit log and approvals;
/// nothing in it changes.
#[test]
fn a_read_only_home_is_read_not_refused() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let mut ids = Vec::new();
    for text in ["one", "two"] {
        let out = common::cap(
            &home,
            &["exec", "text/slugify", &format!("{{\"text\":\"{text}\"}}")],
        );
        assert_eq!(out.status.code(), Some(0));
        ids.push(
            common::stdout_json(&out)["receipt"]["receiptId"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    let before: Vec<_> = std::fs::read_dir(&home)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let h = home.to_str().unwrap();
    let cap = env!("CARGO_BIN_EXE_cap");
    let script = format!(
        "set -e; mount --bind {h} {h}; mount -o remount,bind,ro {h}; \
         touch {h}/probe 2>/dev/null && {{ echo still writable; exit 9; }}; \
         {cap} receipts list --home {h} > {d}/list.json; \
         {cap} receipts show {id} --home {h} > {d}/show.json; \
         {cap} audit verify --home {h} > {d}/verify.json; \
         {cap} approvals list --home {h} > {d}/approvals.json",
        d = dir.path().display(),
        id = ids[0],
    );
    // As root a mount namespace is enough; otherwise a user namespace maps us to root in it.
    let args: &[&str] = if std::fs::metadata("/proc/self")
        .map(|_| running_as_root())
        .unwrap_or(false)
    {
        &["-m"]
    } else {
        &["-rm"]
    };
    let out = match std::process::Command::new("unshare")
        .args(args)
        .args(["sh", "-c", &script])
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!("skipped: unshare is not available: {e}");
            return;
        }
    };
    if !out.status.success()
        && String::from_utf8_lossy(&out.stderr).contains("Operation not permitted")
    {
        eprintln!(
            "skipped: no mount namespace here: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    assert!(
        out.status.success(),
        "{} / {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let read = |f: &str| -> serde_json::Value {
        capability_core::json::parse(&std::fs::read(dir.path().join(f)).unwrap()).unwrap()
    };
    let listed: Vec<String> = read("list.json")
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["receiptId"].as_str().unwrap().to_string())
        .collect();
    for id in &ids {
        assert!(listed.contains(id), "{listed:?}");
    }
    assert_eq!(read("show.json")["output"]["slug"], "one");
    assert_eq!(read("verify.json")["ok"], true);
    assert!(read("approvals.json").is_array());
    let after: Vec<_> = std::fs::read_dir(&home)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(before, after, "the read-only home changed");
}

/// Whether this process runs as root (its effective uid, read from /proc).
fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}
