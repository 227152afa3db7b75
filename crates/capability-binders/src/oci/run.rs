//! Running an image by digest through the container engine the project detects (podman or
//! docker), with the reference's hardening.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use capability_core::binder::CancelToken;
use capability_sandbox::{ENGINE_PROBE_TIMEOUT, OciEngine, detect_engine};
use serde_json::{Value, json};

use super::reference::ImageReference;
use super::{OciError, OciErrorKind};

/// The refusal of a run without approval (the reference's words).
pub const APPROVAL_REQUIRED: &str = "OCI first execution requires explicit approval";
/// Kept of stdout (its beginning) and of stderr (its end) by default.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 1 << 20;
/// The user the image runs as.
pub const CONTAINER_USER: &str = "65534:65534";
/// Bound on `rm -f` after a timeout or a cancellation.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_millis(10);

/// How one run goes.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Explicit approval: without it nothing runs ([`APPROVAL_REQUIRED`]).
    pub approved: bool,
    /// `--network=bridge` instead of `none`.
    pub network: bool,
    /// The run itself (the pull has its own [`RunOptions::pull_timeout`]): past it the
    /// container is removed (`rm -f`) and the run fails with [`OciErrorKind::Timeout`].
    pub timeout: Duration,
    /// The pull by digest.
    pub pull_timeout: Duration,
    /// The registry serves plain HTTP (only a loopback registry may): podman pulls with
    /// `--tls-verify=false`. Docker has no such flag; its daemon treats loopback registries
    /// (127.0.0.0/8) as insecure on its own, and others only through its `daemon.json`.
    pub insecure: bool,
    /// The engine; `None` detects one ([`detect_engine`]).
    pub engine: Option<OciEngine>,
    /// Kept of stdout (its beginning) and stderr (its end); the rest is read and dropped.
    pub max_output_bytes: usize,
    /// Checked while the container runs: a cancelled run is removed like a timed-out one.
    pub cancel: Option<CancelToken>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            approved: false,
            network: false,
            timeout: Duration::from_secs(60),
            pull_timeout: Duration::from_secs(180),
            insecure: false,
            engine: None,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            cancel: None,
        }
    }
}

/// One run: the reference's `OciExecutionReceipt` plus the exit code, the engine and the
/// network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OciExecution {
    /// The image as given.
    pub image: String,
    /// `<registry>/<repository>@<digest>`: what ran.
    pub immutable_reference: String,
    pub args: Vec<String>,
    /// Exit status 0.
    pub succeeded: bool,
    /// The container's exit code (`None` when it ended on a signal).
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// Whether stdout or stderr was cut to the limit.
    pub truncated: bool,
    pub started_at: String,
    pub finished_at: String,
    /// `podman` or `docker`.
    pub engine: String,
    pub engine_version: String,
    /// `none` or `bridge`.
    pub network: String,
}

impl OciExecution {
    /// `succeeded` or `failed`.
    pub fn status(&self) -> &'static str {
        if self.succeeded {
            "succeeded"
        } else {
            "failed"
        }
    }

    /// `{substrate:"oci", image, immutableReference, args, status, exitCode, stdout, stderr,
    /// truncated, startedAt, finishedAt, engine, engineVersion, network}`.
    pub fn to_json(&self) -> Value {
        json!({
            "substrate": super::SUBSTRATE,
            "image": self.image,
            "immutableReference": self.immutable_reference,
            "args": self.args,
            "status": self.status(),
            "exitCode": self.exit_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "truncated": self.truncated,
            "startedAt": self.started_at,
            "finishedAt": self.finished_at,
            "engine": self.engine,
            "engineVersion": self.engine_version,
            "network": self.network,
        })
    }
}

fn engine_error(message: String) -> OciError {
    OciError::new(OciErrorKind::Engine, message)
}

/// The engine [`detect_engine`] finds (podman or docker), or why none answers.
pub(crate) fn detect() -> Result<OciEngine, OciError> {
    detect_engine(ENGINE_PROBE_TIMEOUT)
        .map_err(|e| engine_error(format!("no container engine answers: {e}")))
}

/// Reads a pipe to its end on a thread: the first `cap` bytes (`head`) or the last (tail),
/// and whether anything was dropped.
fn drain(
    mut pipe: impl Read + Send + 'static,
    cap: usize,
    head: bool,
) -> mpsc::Receiver<(Vec<u8>, bool)> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut dropped = false;
        let mut buf = [0u8; 16 << 10];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            kept.extend_from_slice(&buf[..n]);
            if kept.len() > cap {
                dropped = true;
                if head {
                    kept.truncate(cap);
                } else if kept.len() > 2 * cap {
                    kept.drain(..kept.len() - cap);
                }
            }
        }
        if kept.len() > cap {
            kept.drain(..kept.len() - cap);
        }
        let _ = tx.send((kept, dropped));
    });
    rx
}

/// What a child printed and how it ended.
struct Finished {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    truncated: bool,
}

enum Ended {
    Exited(Finished),
    TimedOut,
    Cancelled,
}

/// Runs the engine with `args` until it exits, `deadline` passes or `cancel` is set; on the
/// last two `on_abort` runs (it removes the container) and the child is killed.
fn supervise(
    engine: &OciEngine,
    args: &[String],
    deadline: Instant,
    cap: usize,
    cancel: Option<&CancelToken>,
    on_abort: &dyn Fn(),
) -> Result<Ended, OciError> {
    let mut child: Child = Command::new(&engine.program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            engine_error(format!(
                "{} could not be started: {e}",
                engine.program.display()
            ))
        })?;
    let out = child.stdout.take().map(|p| drain(p, cap, true));
    let err = child.stderr.take().map(|p| drain(p, cap, false));
    let ended = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) => {
                let cancelled = cancel.is_some_and(CancelToken::is_cancelled);
                if cancelled || Instant::now() >= deadline {
                    on_abort();
                    let _ = child.kill();
                    let _ = child.wait();
                    break Err(if cancelled {
                        Ended::Cancelled
                    } else {
                        Ended::TimedOut
                    });
                }
                std::thread::sleep(POLL);
            }
            Err(e) => {
                on_abort();
                let _ = child.kill();
                let _ = child.wait();
                return Err(engine_error(format!(
                    "waiting for {} failed: {e}",
                    engine.program.display()
                )));
            }
        }
    };
    let status = match ended {
        Ok(status) => status,
        Err(aborted) => return Ok(aborted),
    };
    // Something the engine started may hold a pipe open: do not wait for it for long.
    let take = |rx: Option<mpsc::Receiver<(Vec<u8>, bool)>>| {
        rx.and_then(|r| r.recv_timeout(Duration::from_secs(5)).ok())
            .unwrap_or_default()
    };
    let (stdout, cut_out) = take(out);
    let (stderr, cut_err) = take(err);
    Ok(Ended::Exited(Finished {
        code: status.code(),
        stdout,
        stderr,
        truncated: cut_out || cut_err,
    }))
}

/// The `run` arguments: the reference's hardening, by digest, nothing pulled at run time.
/// Podman's `--read-only` also mounts writable tmpfs on `/tmp`, `/var/tmp` and `/run`;
/// `--read-only-tmpfs=false` keeps the root entirely read-only, as docker's does.
pub fn run_args(
    engine: &OciEngine,
    name: &str,
    image: &str,
    network: bool,
    args: &[String],
) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "run".into(),
        "--rm".into(),
        format!("--name={name}"),
        "--pull=never".into(),
        "--read-only".into(),
    ];
    if engine.name == "podman" {
        a.push("--read-only-tmpfs=false".into());
    }
    a.extend([
        "--cap-drop=ALL".into(),
        "--security-opt=no-new-privileges:true".into(),
        "--pids-limit=64".into(),
        "--memory=512m".into(),
        "--cpus=1".into(),
        format!("--network={}", if network { "bridge" } else { "none" }),
        format!("--user={CONTAINER_USER}"),
        image.to_string(),
    ]);
    a.extend(args.iter().cloned());
    a
}

/// Pulls then runs `image` (`<registry>/<repository>@sha256:…`: by digest only) with `args`
/// through the engine. Without [`RunOptions::approved`] nothing runs. A non-zero exit is a
/// failed execution, not an error; the engine failing to pull or start the container is
/// ([`OciErrorKind::Engine`]), as are a timeout and a cancellation (the container is removed).
pub fn run(image: &str, args: &[String], options: &RunOptions) -> Result<OciExecution, OciError> {
    if !options.approved {
        return Err(OciError::new(OciErrorKind::Approval, APPROVAL_REQUIRED));
    }
    let parsed = ImageReference::parse(image)?;
    let Some(digest) = parsed.digest.as_deref() else {
        return Err(OciError::new(
            OciErrorKind::Invalid,
            format!("{image} names no digest: images run by digest only (inspect it first)"),
        ));
    };
    let pinned = parsed.with_digest(digest);
    if options.insecure && !parsed.is_loopback() {
        return Err(OciError::new(
            OciErrorKind::Invalid,
            format!(
                "{} is not on loopback: only a loopback registry may be pulled from without TLS",
                parsed.registry
            ),
        ));
    }
    let engine = match &options.engine {
        Some(e) => e.clone(),
        None => detect()?,
    };
    let cancel = options.cancel.as_ref();
    if cancel.is_some_and(CancelToken::is_cancelled) {
        return Err(OciError::new(
            OciErrorKind::Cancelled,
            "the run was cancelled",
        ));
    }
    // Pull by digest first, so that the run starts nothing but the pinned image.
    let mut pull = vec!["pull".to_string(), "-q".to_string()];
    if options.insecure && engine.name == "podman" {
        pull.push("--tls-verify=false".into());
    }
    pull.push(pinned.clone());
    let pulled = supervise(
        &engine,
        &pull,
        Instant::now() + options.pull_timeout,
        64 << 10,
        cancel,
        &|| {},
    )?;
    match pulled {
        Ended::Exited(f) if f.code == Some(0) => {}
        Ended::Exited(f) => {
            return Err(engine_error(format!(
                "{} pull {pinned} failed (exit {}): {}",
                engine.name,
                f.code
                    .map_or_else(|| "on a signal".to_string(), |c| c.to_string()),
                capability_sandbox::engine_message(&String::from_utf8_lossy(&f.stderr))
            )));
        }
        Ended::TimedOut => {
            return Err(OciError::new(
                OciErrorKind::Timeout,
                format!(
                    "{} pull {pinned} did not finish within {} s",
                    engine.name,
                    options.pull_timeout.as_secs()
                ),
            ));
        }
        Ended::Cancelled => {
            return Err(OciError::new(
                OciErrorKind::Cancelled,
                "the run was cancelled",
            ));
        }
    }
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        "capability-oci-{}-{}-{}",
        std::process::id(),
        capability_core::js::now_millis(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let run_args = run_args(&engine, &name, &pinned, options.network, args);
    let started_at = capability_core::js::now_iso();
    let remove = || {
        let rm = ["rm".to_string(), "-f".to_string(), name.clone()];
        let _ = supervise(
            &engine,
            &rm,
            Instant::now() + CLEANUP_TIMEOUT,
            64 << 10,
            None,
            &|| {},
        );
    };
    let ended = supervise(
        &engine,
        &run_args,
        Instant::now() + options.timeout,
        options.max_output_bytes,
        cancel,
        &remove,
    )?;
    let finished_at = capability_core::js::now_iso();
    let f = match ended {
        Ended::Exited(f) => f,
        Ended::TimedOut => {
            return Err(OciError::new(
                OciErrorKind::Timeout,
                format!(
                    "{pinned} did not finish within {} s: container {name} removed",
                    options.timeout.as_secs()
                ),
            ));
        }
        Ended::Cancelled => {
            return Err(OciError::new(
                OciErrorKind::Cancelled,
                format!("the run of {pinned} was cancelled: container {name} removed"),
            ));
        }
    };
    let stderr = String::from_utf8_lossy(&f.stderr).into_owned();
    // 125: the engine itself failed (the container did not start).
    if f.code == Some(125) {
        return Err(engine_error(format!(
            "{} could not start {pinned} (exit 125): {}",
            engine.name,
            capability_sandbox::engine_message(&stderr)
        )));
    }
    Ok(OciExecution {
        image: image.to_string(),
        immutable_reference: pinned,
        args: args.to_vec(),
        succeeded: f.code == Some(0),
        exit_code: f.code,
        stdout: String::from_utf8_lossy(&f.stdout).into_owned(),
        stderr,
        truncated: f.truncated,
        started_at,
        finished_at,
        engine: engine.name.to_string(),
        engine_version: engine.server_version.clone(),
        network: if options.network { "bridge" } else { "none" }.into(),
    })
}
