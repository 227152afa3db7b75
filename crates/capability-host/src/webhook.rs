//! The webhook called on each new pending approval ([`Host::serve_webhook`]: a thread
//! that consumes the host's approval events, see [`crate::events`]).
//!
//! `POST <url>` with `{"type": "approval.pending", "approval": {...}}` (the approval as
//! every surface shows it, [`crate::approvals::approval_json`]),
//! `X-Capability-Timestamp: <unix seconds>` and
//! `X-Capability-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`. A
//! receiver recomputes the HMAC over the timestamp, a dot and the raw body, compares in
//! constant time and rejects old timestamps. A failed delivery (an error or a status other
//! than 2xx) is retried with exponential backoff. `http://` and `https://` URLs, sent by the
//! shared HTTP client of `capability-openapi` (an `https://` receiver's certificate is
//! verified against the system's roots, or `SSL_CERT_FILE`); the receiver may be on a
//! private or loopback address, since the operator named it.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use capability_openapi::http::{
    HttpClient, HttpConfig, HttpError, Origin, Outgoing, Resolver, origin_of,
};
use capability_policy::ApprovalStatus;
use capability_policy::approvals::ApprovalRecord;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::Host;

/// Why a webhook could not be set up, or a delivery failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    #[error("webhook URL {url:?}: {reason}")]
    Url { url: String, reason: String },
    #[error("the webhook secret must not be empty")]
    NoSecret,
    #[error("webhook {url}: {reason}")]
    Delivery { url: String, reason: String },
}

/// Why one delivery attempt failed.
#[derive(Debug, thiserror::Error)]
enum AttemptFailed {
    /// The request could not be sent, or its answer read.
    #[error(transparent)]
    Http(#[from] HttpError),
    /// The receiver answered with a status other than 2xx.
    #[error("status {0}")]
    Status(u16),
}

/// Where and how pending approvals are announced.
#[derive(Clone)]
pub struct Webhook {
    url: url::Url,
    origin: Origin,
    secret: Vec<u8>,
    /// Deliveries tried before giving up.
    pub attempts: u32,
    /// The wait after the first failure; doubled after each.
    pub backoff: Duration,
    client: Arc<HttpClient>,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("url", &self.url.as_str())
            .field("attempts", &self.attempts)
            .finish_non_exhaustive()
    }
}

/// `sha256=<hex>` of HMAC-SHA256 over `<timestamp>.<body>`.
pub fn signature(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(m) => m,
        // HMAC takes keys of any length; this arm is unreachable.
        Err(_) => return String::new(),
    };
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

impl Webhook {
    /// A webhook to an `http://` or `https://` URL, signed with `secret`.
    pub fn new(url: &str, secret: impl Into<Vec<u8>>) -> Result<Webhook, WebhookError> {
        Webhook::with_roots(url, secret, None)
    }

    /// [`Webhook::new`], trusting the PEM certificates `extra_roots_pem` besides the
    /// system's roots for an `https://` receiver (a private certificate authority).
    pub fn with_roots(
        url: &str,
        secret: impl Into<Vec<u8>>,
        extra_roots_pem: Option<String>,
    ) -> Result<Webhook, WebhookError> {
        let bad = |reason: String| WebhookError::Url {
            url: url.to_string(),
            reason,
        };
        let parsed = url::Url::parse(url).map_err(|e| bad(e.to_string()))?;
        let origin = origin_of(&parsed)
            .filter(|_| matches!(parsed.scheme(), "http" | "https"))
            .ok_or_else(|| bad("only http(s)://host[:port]/path URLs are supported".into()))?;
        let secret = secret.into();
        if secret.is_empty() {
            return Err(WebhookError::NoSecret);
        }
        let config = HttpConfig {
            timeout: Duration::from_secs(10),
            max_response_bytes: 64 << 10,
            // Failed deliveries are retried here, with the webhook's own backoff.
            retries: 0,
            allow_private: true,
            extra_roots_pem,
            ..HttpConfig::default()
        };
        let client = HttpClient::new(config, Resolver::System).map_err(|e| bad(e.to_string()))?;
        Ok(Webhook {
            url: parsed,
            origin,
            secret,
            attempts: 5,
            backoff: Duration::from_millis(500),
            client: Arc::new(client),
        })
    }

    fn post_once(&self, body: &[u8], timestamp: u64) -> Result<(), AttemptFailed> {
        let request = Outgoing {
            method: "POST".into(),
            url: self.url.clone(),
            headers: vec![
                ("user-agent".into(), "cap-serve".into()),
                ("x-capability-timestamp".into(), timestamp.to_string()),
                (
                    "x-capability-signature".into(),
                    signature(&self.secret, timestamp, body),
                ),
            ],
            body: Some(("application/json".into(), body.to_vec())),
        };
        let allowed = [self.origin.clone()];
        let response = self.client.send(request, &allowed, None, &|| false)?;
        if (200..300).contains(&response.status) {
            Ok(())
        } else {
            Err(AttemptFailed::Status(response.status))
        }
    }

    /// Delivers one pending approval (blocking: retries sleep); returns the attempts it
    /// took, or the last error.
    pub fn deliver(&self, record: &ApprovalRecord) -> Result<u32, WebhookError> {
        // The input as the console shows it: secret-looking values are not posted.
        let mut approval = crate::approvals::approval_json(record);
        if let Some(input) = approval.get("input") {
            approval["input"] = crate::approvals::redact_secret_looking(input);
        }
        let body = serde_json::json!({
            "type": "approval.pending",
            "approval": approval,
        });
        let body = body.to_string().into_bytes();
        let mut wait = self.backoff;
        let mut last = None;
        for attempt in 1..=self.attempts.max(1) {
            let timestamp = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            match self.post_once(&body, timestamp) {
                Ok(()) => return Ok(attempt),
                Err(e) => last = Some(e),
            }
            if attempt < self.attempts {
                std::thread::sleep(wait);
                wait = wait.saturating_mul(2);
            }
        }
        Err(WebhookError::Delivery {
            url: self.url.to_string(),
            reason: format!(
                "{} for {}",
                last.map(|e| e.to_string()).unwrap_or_default(),
                record.approval_id
            ),
        })
    }
}

impl Host {
    /// Delivers each approval that becomes pending from now on to `webhook`, each in a
    /// thread of its own (a slow receiver delays no other delivery); a delivery that fails
    /// every attempt is reported on stderr. Runs until the host is dropped.
    pub fn serve_webhook(&self, webhook: Webhook) {
        let mut events = self.approval_events();
        let webhook = Arc::new(webhook);
        let spawned = std::thread::Builder::new()
            .name("capability-webhook".into())
            .spawn(move || {
                use tokio::sync::broadcast::error::RecvError;
                loop {
                    let change = match events.blocking_recv() {
                        Ok(change) => change,
                        Err(RecvError::Lagged(_)) => continue,
                        Err(RecvError::Closed) => return,
                    };
                    if change.record.status != ApprovalStatus::Pending {
                        continue;
                    }
                    let webhook = Arc::clone(&webhook);
                    std::thread::spawn(move || {
                        if let Err(e) = webhook.deliver(&change.record) {
                            eprintln!("cap: {e}");
                        }
                    });
                }
            });
        if let Err(e) = spawned {
            eprintln!("cap: the webhook cannot start: {e}");
        }
    }
}
