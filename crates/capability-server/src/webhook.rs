//! The webhook called on each new pending approval.
//!
//! `POST <url>` with `{"type": "approval.pending", "approval": {...}}` (the API's approval
//! JSON), `X-Capability-Timestamp: <unix seconds>` and
//! `X-Capability-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`. A
//! receiver recomputes the HMAC over the timestamp, a dot and the raw body, compares in
//! constant time and rejects old timestamps. A failed delivery (an error or a status other
//! than 2xx) is retried with exponential backoff. `http://` and `https://` URLs, sent by the
//! shared HTTP client of `capability-openapi` (an `https://` receiver's certificate is
//! verified against the system's roots, or `SSL_CERT_FILE`); the receiver may be on a
//! private or loopback address, since the operator named it.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use capability_openapi::http::{HttpClient, HttpConfig, Origin, Outgoing, Resolver, origin_of};
use capability_policy::approvals::ApprovalRecord;
use hmac::{Hmac, Mac};
use sha2::Sha256;

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
    pub fn new(url: &str, secret: impl Into<Vec<u8>>) -> Result<Webhook, String> {
        Webhook::with_roots(url, secret, None)
    }

    /// [`Webhook::new`], trusting the PEM certificates `extra_roots_pem` besides the
    /// system's roots for an `https://` receiver (a private certificate authority).
    pub fn with_roots(
        url: &str,
        secret: impl Into<Vec<u8>>,
        extra_roots_pem: Option<String>,
    ) -> Result<Webhook, String> {
        let parsed = url::Url::parse(url).map_err(|e| format!("webhook URL {url:?}: {e}"))?;
        let origin = origin_of(&parsed)
            .filter(|_| matches!(parsed.scheme(), "http" | "https"))
            .ok_or_else(|| {
                format!("webhook URL {url:?}: only http(s)://host[:port]/path URLs are supported")
            })?;
        let secret = secret.into();
        if secret.is_empty() {
            return Err("the webhook secret must not be empty".into());
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
        let client = HttpClient::new(config, Resolver::System).map_err(|e| e.to_string())?;
        Ok(Webhook {
            url: parsed,
            origin,
            secret,
            attempts: 5,
            backoff: Duration::from_millis(500),
            client: Arc::new(client),
        })
    }

    async fn post_once(&self, body: &Bytes, timestamp: u64) -> Result<(), String> {
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
        let client = Arc::clone(&self.client);
        let allowed = [self.origin.clone()];
        // The shared client blocks its caller: run it off the async workers.
        let response =
            tokio::task::spawn_blocking(move || client.send(request, &allowed, None, &|| false))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
        if (200..300).contains(&response.status) {
            Ok(())
        } else {
            Err(format!("status {}", response.status))
        }
    }

    /// Delivers one pending approval; returns the attempts it took, or the last error.
    pub async fn deliver(&self, record: &ApprovalRecord) -> Result<u32, String> {
        let body = serde_json::json!({
            "type": "approval.pending",
            "approval": crate::api::approval_json(record),
        });
        let body = Bytes::from(body.to_string());
        let mut wait = self.backoff;
        let mut last = String::new();
        for attempt in 1..=self.attempts.max(1) {
            let timestamp = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            match self.post_once(&body, timestamp).await {
                Ok(()) => return Ok(attempt),
                Err(e) => last = e,
            }
            if attempt < self.attempts {
                tokio::time::sleep(wait).await;
                wait = wait.saturating_mul(2);
            }
        }
        eprintln!(
            "cap serve: webhook {} failed for {}: {last}",
            self.url, record.approval_id
        );
        Err(last)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?"; here the
        // data is "<timestamp>.<body>", so split it at a dot-free boundary instead.
        let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        let a = signature(b"k", 1, b"{}");
        assert!(a.starts_with("sha256=") && a.len() == 7 + 64);
        assert_ne!(a, signature(b"k", 2, b"{}"));
        assert_ne!(a, signature(b"j", 1, b"{}"));
    }

    #[test]
    fn only_http_and_https_urls() {
        assert!(Webhook::new("http://127.0.0.1:9/hook", "s").is_ok());
        assert!(Webhook::new("https://example.com/hook", "s").is_ok());
        assert!(Webhook::new("ftp://example.com/hook", "s").is_err());
        assert!(Webhook::new("file:///tmp/hook", "s").is_err());
        assert!(Webhook::new("not a url", "s").is_err());
        assert!(Webhook::new("http://127.0.0.1:9/hook", "").is_err());
    }
}
