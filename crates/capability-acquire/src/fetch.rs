//! GET over the blocking client of `capability-openapi`: limits, one deadline per request,
//! same-origin redirects only, destinations checked after DNS resolution, `http://` and
//! `https://` (trusting the system's roots or `SSL_CERT_FILE`).

use std::time::Duration;

use capability_openapi::http::{HttpClient, HttpConfig, Outgoing, Resolver, origin_of};

use crate::error::{FetchError, FetchFault};
use crate::progress::{Download, Reporter};

/// Limits of the fetcher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchConfig {
    /// One request: connect, redirects and body.
    pub timeout: Duration,
    /// The largest index, discovery document or packument.
    pub max_document_bytes: usize,
    /// The largest tarball.
    pub max_tarball_bytes: usize,
    pub max_redirects: u32,
    /// Names may resolve to private addresses (IP literals such as 127.0.0.1 always may).
    pub allow_private: bool,
}

impl Default for FetchConfig {
    fn default() -> Self {
        FetchConfig {
            timeout: Duration::from_secs(30),
            max_document_bytes: 8 << 20,
            max_tarball_bytes: 64 << 20,
            max_redirects: 5,
            allow_private: false,
        }
    }
}

/// A response body and where it came from.
#[derive(Clone, Debug)]
pub struct Fetched {
    pub status: u16,
    pub body: Vec<u8>,
    pub url: url::Url,
    /// The response's `ETag`.
    pub etag: Option<String>,
}

/// Two clients: one for documents, one for tarballs (their byte limits differ).
#[derive(Debug)]
pub struct Fetcher {
    documents: HttpClient,
    tarballs: HttpClient,
    config: FetchConfig,
    progress: Reporter,
}

impl Fetcher {
    pub fn new(config: FetchConfig) -> Result<Fetcher, FetchError> {
        let client = |limit: usize| {
            HttpClient::new(
                HttpConfig {
                    timeout: config.timeout,
                    connect_timeout: config.timeout.min(Duration::from_secs(10)),
                    max_response_bytes: limit,
                    max_redirects: config.max_redirects,
                    retries: 1,
                    retry_backoff: Duration::from_millis(50),
                    allow_private: config.allow_private,
                    ..HttpConfig::default()
                },
                Resolver::System,
            )
            .map_err(|e| FetchError::from(FetchFault::Client(e)))
        };
        Ok(Fetcher {
            documents: client(config.max_document_bytes)?,
            tarballs: client(config.max_tarball_bytes)?,
            config,
            progress: Reporter::default(),
        })
    }

    /// This fetcher reporting its downloads (and the crawls made with it) to `progress`.
    pub fn with_progress(mut self, progress: Reporter) -> Fetcher {
        self.progress = progress;
        self
    }

    /// Where this fetcher reports.
    pub fn progress(&self) -> &Reporter {
        &self.progress
    }

    pub fn config(&self) -> &FetchConfig {
        &self.config
    }

    fn get(
        &self,
        client: &HttpClient,
        url: &str,
        headers: Vec<(String, String)>,
        what: Download,
    ) -> Result<Fetched, FetchError> {
        let parsed = url::Url::parse(url).map_err(|error| FetchFault::Url {
            url: url.to_string(),
            error,
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(FetchFault::Scheme {
                url: url.to_string(),
            }
            .into());
        }
        let origin = origin_of(&parsed).ok_or_else(|| FetchFault::NoHost {
            url: url.to_string(),
        })?;
        let request = Outgoing {
            method: "GET".into(),
            url: parsed.clone(),
            headers,
            body: None,
        };
        let response = client
            .send_observed(
                request,
                &[origin],
                None,
                &|| false,
                self.progress.body(url, what),
            )
            .map_err(|error| FetchFault::Http {
                url: url.to_string(),
                error,
            })?;
        Ok(Fetched {
            status: response.status,
            body: response.body,
            url: parsed,
            etag: response.etag,
        })
    }

    /// A JSON document (index, discovery document, packument, key set).
    pub fn document(&self, url: &str) -> Result<Fetched, FetchError> {
        self.get(&self.documents, url, Vec::new(), Download::Document)
    }

    /// A JSON document fetched with extra request headers (`accept`, `authorization`, ...).
    pub fn document_with_headers(
        &self,
        url: &str,
        headers: Vec<(String, String)>,
    ) -> Result<Fetched, FetchError> {
        self.get(&self.documents, url, headers, Download::Document)
    }

    /// A JSON document unless it still has the entity tag `etag` (then status 304 and no
    /// body): a conditional GET with `If-None-Match`.
    pub fn document_if_none_match(&self, url: &str, etag: &str) -> Result<Fetched, FetchError> {
        let headers = vec![("If-None-Match".to_string(), etag.to_string())];
        self.get(&self.documents, url, headers, Download::Document)
    }

    /// A tarball.
    pub fn tarball(&self, url: &str) -> Result<Fetched, FetchError> {
        self.get(&self.tarballs, url, Vec::new(), Download::Tarball)
    }
}
