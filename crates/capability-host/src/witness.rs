//! Audit anchoring: signed checkpoints of the chain's head (`capability_policy::checkpoint`)
//! kept by a witness the operator names, outside the home, so that whoever can write the
//! home's database cannot cut the log short, rebuild the chain or roll the database back to
//! an older copy unseen.
//!
//! * **Where**: a directory (`/var/lib/cap-witness`, best on another machine's mount) or an
//!   HTTP witness (`http(s)://…`; it keeps what is `POST`ed as `{"home", "checkpoint"}` and
//!   answers `GET …?home=<id>` with `{"checkpoint"}` or 404). `HostConfig::audit_witness`;
//!   `cap` reads `--audit-witness` or `CAP_AUDIT_WITNESS`.
//! * **When**: a host whose log moved since the witness's newest checkpoint takes one when
//!   it closes (every one-shot command), and every [`INTERVAL`] while it runs (long-running
//!   surfaces). The witness keeps the newest it was given for each home (an older one never
//!   replaces it).
//! * **Checked**: `audit verify` verifies the chain against the witness's newest checkpoint
//!   (its signature with the home's key, its record still at its place with its hash): a
//!   truncated log, a rebuilt chain and a database rolled back to before it all fail, even
//!   with the checkpoint table forged too, since nothing the witness keeps is in the home.
//!   A replaced host key fails the signature. The newest checkpoint is also where `audit
//!   verify` starts by default: only the records appended since are verified
//!   (`capability_policy::checkpoint::verify_since`; `--full` verifies the whole chain).
//!
//! A home is named at its witness by the SHA-256 of its canonical path (not of its key,
//! which lives in the home).

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use capability_openapi::http::{HttpClient, HttpConfig, Origin, Outgoing, Resolver, origin_of};
use capability_policy::AuditStore;
use capability_policy::approvals::ApprovalManager;
use capability_policy::checkpoint::{self, Checkpoint};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::error::InvalidRequest;

/// How often a running host anchors a log that moved.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// Where checkpoints are kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Witness {
    Directory(PathBuf),
    Http(url::Url),
}

impl Witness {
    /// `http://…` or `https://…` is an HTTP witness; anything else a directory.
    pub fn parse(text: &str) -> Result<Witness, InvalidRequest> {
        let text = text.trim();
        if text.is_empty() {
            return Err(InvalidRequest::new("the audit witness is empty"));
        }
        if text.starts_with("http://") || text.starts_with("https://") {
            let url = url::Url::parse(text)
                .map_err(|e| InvalidRequest::new(format!("audit witness {text}: {e}")))?;
            return Ok(Witness::Http(url));
        }
        Ok(Witness::Directory(PathBuf::from(text)))
    }

    /// How it is shown (`cap doctor`, reports).
    pub fn describe(&self) -> String {
        match self {
            Witness::Directory(d) => d.display().to_string(),
            Witness::Http(u) => u.to_string(),
        }
    }
}

/// The name of a home at its witness.
pub fn home_id(root: &Path) -> String {
    let canonical = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let digest = Sha256::digest(canonical.to_string_lossy().as_bytes());
    hex::encode(&digest[..16])
}

/// A witness bound to one home, with what it needs to take and check checkpoints.
pub(crate) struct Anchor {
    witness: Witness,
    home: String,
    store: Arc<dyn AuditStore>,
    approvals: Arc<ApprovalManager>,
    client: Option<(HttpClient, Origin)>,
    /// The seq of the newest checkpoint this process gave the witness.
    last: Mutex<Option<u64>>,
    /// Stops the periodic thread.
    stop: Mutex<Option<mpsc::Sender<()>>>,
}

impl std::fmt::Debug for Anchor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Anchor")
            .field("witness", &self.witness)
            .finish_non_exhaustive()
    }
}

impl Anchor {
    pub(crate) fn new(
        witness: Witness,
        home_root: &Path,
        store: Arc<dyn AuditStore>,
        approvals: Arc<ApprovalManager>,
    ) -> Result<Arc<Anchor>, InvalidRequest> {
        let client = match &witness {
            Witness::Directory(_) => None,
            Witness::Http(url) => {
                let origin = origin_of(url).ok_or_else(|| {
                    InvalidRequest::new(format!("audit witness {url}: no origin"))
                })?;
                let config = HttpConfig {
                    timeout: Duration::from_secs(5),
                    max_response_bytes: 64 << 10,
                    retries: 1,
                    allow_private: true,
                    ..HttpConfig::default()
                };
                let client = HttpClient::new(config, Resolver::System)
                    .map_err(|e| InvalidRequest::new(format!("audit witness {url}: {e}")))?;
                Some((client, origin))
            }
        };
        Ok(Arc::new(Anchor {
            witness,
            home: home_id(home_root),
            store,
            approvals,
            client,
            last: Mutex::new(None),
            stop: Mutex::new(None),
        }))
    }

    pub(crate) fn witness(&self) -> &Witness {
        &self.witness
    }

    /// Anchors the log every [`INTERVAL`] while the host runs.
    pub(crate) fn run_periodically(self: &Arc<Self>) {
        let (tx, rx) = mpsc::channel::<()>();
        *self.stop.lock().unwrap_or_else(PoisonError::into_inner) = Some(tx);
        let anchor = Arc::clone(self);
        let _ = std::thread::Builder::new()
            .name("audit-anchor".into())
            .spawn(move || {
                loop {
                    match rx.recv_timeout(INTERVAL) {
                        Err(RecvTimeoutError::Timeout) => {
                            let _ = anchor.anchor();
                        }
                        _ => return,
                    }
                }
            });
    }

    /// Stops the periodic thread, then anchors what the host wrote last.
    pub(crate) fn close(&self) -> Result<Option<u64>, String> {
        if let Some(tx) = self
            .stop
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = tx.send(());
        }
        self.anchor()
    }

    /// Gives the witness a checkpoint of the head when the log moved past the newest one it
    /// keeps; the seq anchored, or `None` when there was nothing new.
    pub(crate) fn anchor(&self) -> Result<Option<u64>, String> {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let head = self
            .store
            .head()
            .map_err(|e| e.to_string())?
            .map_or(0, |(seq, _)| seq);
        if last.is_some_and(|l| l >= head) {
            return Ok(None);
        }
        let kept = self
            .read()?
            .and_then(|doc| doc.get("seq").and_then(Value::as_u64));
        if kept.is_some_and(|k| k >= head) {
            *last = kept;
            return Ok(None);
        }
        let now = capability_core::js::now_iso();
        let doc = checkpoint::take(self.store.as_ref(), self.approvals.key(), &now)
            .map_err(|e| e.to_string())?;
        self.write(&doc)?;
        let seq = doc.get("seq").and_then(Value::as_u64);
        *last = seq;
        Ok(seq)
    }

    /// The witness's newest checkpoint for this home (unverified).
    pub(crate) fn read(&self) -> Result<Option<Value>, String> {
        match (&self.witness, &self.client) {
            (Witness::Directory(dir), _) => {
                let path = dir.join(format!("{}.json", self.home));
                match std::fs::read(&path) {
                    Ok(bytes) => capability_core::json::parse(&bytes)
                        .map(Some)
                        .map_err(|e| format!("{}: {e}", path.display())),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(format!("{}: {e}", path.display())),
                }
            }
            (Witness::Http(url), Some((client, origin))) => {
                let mut url = url.clone();
                url.query_pairs_mut().append_pair("home", &self.home);
                let request = Outgoing {
                    method: "GET".into(),
                    url,
                    headers: vec![("accept".into(), "application/json".into())],
                    body: None,
                };
                let response = client
                    .send(request, std::slice::from_ref(origin), None, &|| false)
                    .map_err(|e| e.to_string())?;
                match response.status {
                    404 => Ok(None),
                    200..=299 => capability_core::json::parse(&response.body)
                        .map(|v| v.get("checkpoint").cloned().filter(|c| !c.is_null()))
                        .map_err(|e| format!("the witness answered: {e}")),
                    s => Err(format!("the witness answered HTTP {s}")),
                }
            }
            (Witness::Http(_), None) => Err("no HTTP client for the witness".into()),
        }
    }

    fn write(&self, doc: &Value) -> Result<(), String> {
        match (&self.witness, &self.client) {
            (Witness::Directory(dir), _) => {
                std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                let path = dir.join(format!("{}.json", self.home));
                let staging = dir.join(format!(".{}.{}.tmp", self.home, std::process::id()));
                let text = capability_core::json::to_pretty_string(doc);
                std::fs::write(&staging, text.as_bytes())
                    .and_then(|()| std::fs::rename(&staging, &path))
                    .map_err(|e| format!("{}: {e}", path.display()))
            }
            (Witness::Http(url), Some((client, origin))) => {
                let body = json!({"home": self.home, "checkpoint": doc}).to_string();
                let request = Outgoing {
                    method: "POST".into(),
                    url: url.clone(),
                    headers: Vec::new(),
                    body: Some(("application/json".into(), body.into_bytes())),
                };
                let response = client
                    .send(request, std::slice::from_ref(origin), None, &|| false)
                    .map_err(|e| e.to_string())?;
                if (200..300).contains(&response.status) {
                    Ok(())
                } else {
                    Err(format!("the witness answered HTTP {}", response.status))
                }
            }
            (Witness::Http(_), None) => Err("no HTTP client for the witness".into()),
        }
    }

    /// The witness's newest checkpoint with its signature checked against this home's key:
    /// `Ok(None)` when nothing was witnessed yet, `Err` when it cannot be read or does not
    /// verify.
    pub(crate) fn checkpoint(&self) -> Result<Option<Checkpoint>, String> {
        match self.read() {
            Ok(Some(doc)) => Checkpoint::verify(&doc, self.approvals.key())
                .map(Some)
                .map_err(|e| format!("the witnessed checkpoint: {e}")),
            Ok(None) => Ok(None),
            Err(e) => Err(format!("the witness cannot be read: {e}")),
        }
    }

    /// The check of the chain against the witness's newest checkpoint as reports show it:
    /// `{"location", "seq", "counter", "createdAt", "ok", "problem"}` (`seq` null when
    /// nothing was witnessed yet). `checked` is [`Anchor::checkpoint`]'s answer with, for a
    /// checkpoint, why the log does not extend it (`None`: it does).
    pub(crate) fn check_json(
        &self,
        checked: Result<Option<(Checkpoint, Option<String>)>, String>,
    ) -> Value {
        let location = self.witness.describe();
        match checked {
            Ok(Some((checkpoint, problem))) => json!({
                "location": location,
                "seq": checkpoint.seq,
                "counter": checkpoint.counter,
                "createdAt": checkpoint.created_at,
                "ok": problem.is_none(),
                "problem": problem,
            }),
            Ok(None) => json!({"location": location, "seq": null, "ok": true,
                               "problem": null, "note": "nothing witnessed yet"}),
            Err(problem) => json!({"location": location, "ok": false, "problem": problem}),
        }
    }

    /// The check of the log against the witness's newest checkpoint (that the log still
    /// extends it; the chain itself is verified by the caller), as [`Anchor::check_json`].
    pub(crate) fn check(&self) -> Value {
        let checked = self.checkpoint().and_then(|c| match c {
            Some(c) => checkpoint::extends(self.store.as_ref(), &c)
                .map(|problem| Some((c, problem)))
                .map_err(|e| e.to_string()),
            None => Ok(None),
        });
        self.check_json(checked)
    }
}
