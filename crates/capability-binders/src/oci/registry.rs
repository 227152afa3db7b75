//! The OCI distribution API client: manifests and blobs by digest over the project's blocking
//! HTTP client, with the registry token dance and redirects judged here.
//!
//! * Every request goes to one origin the client was told it may reach: the registry's, a
//!   token realm the registry named, or the host a blob redirect names. Addresses are still
//!   checked by [`HttpClient`] after DNS resolution (private ones only with `allow_private`).
//! * `https://` always, except a registry the caller named insecure that is on loopback
//!   (`localhost` or a loopback IP literal): plain `http://` there, and nowhere else.
//! * A 401 with `WWW-Authenticate: Bearer realm=…,service=…,scope=…` is answered by asking
//!   the realm for a token (anonymously, or with the caller's basic credentials), then the
//!   request is sent again with it; `Basic` is answered with the credentials. The token is
//!   kept for the client's next requests.
//! * Redirects (a blob served from a CDN) are followed here, at most [`MAX_REDIRECTS`]: to
//!   the same origin with the registry's authorization, to another only over `https://` and
//!   without it.
//! * Bytes are checked against their digest before anything reads them.

use std::time::Duration;

use base64::Engine as _;
use capability_openapi::http::{
    HttpClient, HttpConfig, HttpError, Incoming, Origin, Outgoing, Resolver, origin_of,
};
use serde_json::Value;

use super::reference::ImageReference;
use super::{OciError, OciErrorKind, OciOptions};

/// Redirects followed for one request.
pub const MAX_REDIRECTS: u32 = 5;
/// The largest manifest or index accepted (the distribution spec's own limit is 4 MiB).
pub const MAX_MANIFEST_BYTES: usize = 4 << 20;
/// The largest config blob accepted.
pub const MAX_CONFIG_BYTES: usize = 8 << 20;

/// OCI image index.
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// OCI image manifest.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// Docker manifest list v2.
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// Docker image manifest v2 (schema 2).
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// The config media types of an image (anything else is an artifact, not a container image).
pub const IMAGE_CONFIG_TYPES: [&str; 2] = [
    "application/vnd.oci.image.config.v1+json",
    "application/vnd.docker.container.image.v1+json",
];

/// `sha256:<hex>` of some bytes.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", capability_core::json::sha256_hex(bytes))
}

/// A manifest as fetched: its exact bytes, their digest and its media type.
#[derive(Clone, Debug)]
pub struct Fetched {
    pub digest: String,
    pub media_type: String,
    pub document: Value,
}

/// One challenge of a `WWW-Authenticate` header: the scheme and its parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    pub scheme: String,
    pub params: Vec<(String, String)>,
}

impl Challenge {
    fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Parses the first challenge of a `WWW-Authenticate` value:
/// `Scheme key=value, key="quoted \" value", …`.
pub fn parse_challenge(header: &str) -> Option<Challenge> {
    let header = header.trim();
    let (scheme, mut rest) = match header.find(char::is_whitespace) {
        Some(i) => (&header[..i], header[i..].trim_start()),
        None => (header, ""),
    };
    if scheme.is_empty() {
        return None;
    }
    let mut params = Vec::new();
    while !rest.is_empty() {
        let eq = rest.find('=')?;
        let key = rest[..eq].trim().to_string();
        rest = rest[eq + 1..].trim_start();
        let value;
        if let Some(quoted) = rest.strip_prefix('"') {
            let mut v = String::new();
            let mut chars = quoted.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, n)) = chars.next() {
                            v.push(n);
                        }
                    }
                    '"' => {
                        end = Some(i + 1);
                        break;
                    }
                    c => v.push(c),
                }
            }
            value = v;
            rest = &quoted[end?..];
        } else {
            let end = rest.find(',').unwrap_or(rest.len());
            value = rest[..end].trim().to_string();
            rest = &rest[end..];
        }
        params.push((key, value));
        rest = rest.trim_start();
        match rest.strip_prefix(',') {
            Some(r) => rest = r.trim_start(),
            None if rest.is_empty() => {}
            // Another challenge follows (`Bearer …, Basic realm=…` is rare): keep the first.
            None => break,
        }
    }
    Some(Challenge {
        scheme: scheme.to_string(),
        params,
    })
}

/// A client for one repository of one registry.
pub struct RegistryClient<'a> {
    http: HttpClient,
    image: &'a ImageReference,
    options: &'a OciOptions,
    base: url::Url,
    origin: Origin,
    /// `Authorization` for the registry, once a challenge was answered.
    authorization: Option<String>,
}

impl std::fmt::Debug for RegistryClient<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryClient")
            .field("base", &self.base.as_str())
            .field("authorized", &self.authorization.is_some())
            .finish_non_exhaustive()
    }
}

fn registry_error(what: &str, e: HttpError) -> OciError {
    OciError::new(OciErrorKind::Registry, format!("{what}: {e}"))
}

/// The registry's own message in an error body (`{"errors":[{"code","message"}]}`).
fn error_detail(body: &[u8]) -> String {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let first = parsed
        .as_ref()
        .and_then(|v| v.get("errors"))
        .and_then(|e| e.get(0));
    match first {
        Some(e) => {
            let code = e.get("code").and_then(Value::as_str).unwrap_or("");
            let message = e.get("message").and_then(Value::as_str).unwrap_or("");
            match (code.is_empty(), message.is_empty()) {
                (false, false) => format!(" ({code}: {message})"),
                (false, true) => format!(" ({code})"),
                (true, false) => format!(" ({message})"),
                (true, true) => String::new(),
            }
        }
        None => String::new(),
    }
}

impl<'a> RegistryClient<'a> {
    /// A client for `image`'s repository: `https://<api host>/`, or `http://` when the
    /// registry is named in [`OciOptions::insecure_registries`] and is on loopback (named
    /// insecure but not on loopback is refused).
    pub fn new(image: &'a ImageReference, options: &'a OciOptions) -> Result<Self, OciError> {
        let insecure = options.is_insecure(image)?;
        let scheme = if insecure { "http" } else { "https" };
        let base = url::Url::parse(&format!("{scheme}://{}/", image.api_host())).map_err(|e| {
            OciError::new(
                OciErrorKind::Invalid,
                format!("registry {} is not a valid host: {e}", image.registry),
            )
        })?;
        let origin = origin_of(&base).ok_or_else(|| {
            OciError::new(
                OciErrorKind::Invalid,
                format!("registry {} has no host", image.registry),
            )
        })?;
        let http = HttpClient::new(
            HttpConfig {
                timeout: options.timeout,
                connect_timeout: options.timeout.min(Duration::from_secs(10)),
                max_response_bytes: MAX_CONFIG_BYTES,
                max_redirects: 0,
                retries: 2,
                retry_backoff: Duration::from_millis(100),
                allow_private: options.allow_private,
                extra_roots_pem: options.extra_roots_pem.clone(),
            },
            Resolver::System,
        )
        .map_err(|e| registry_error("cannot start the HTTP client", e))?;
        Ok(RegistryClient {
            http,
            image,
            options,
            base,
            origin,
            authorization: None,
        })
    }

    fn url(&self, path: &str) -> Result<url::Url, OciError> {
        self.base.join(path).map_err(|e| {
            OciError::new(
                OciErrorKind::Invalid,
                format!("cannot form the URL of {path}: {e}"),
            )
        })
    }

    /// One GET to `url` at `origin` (no redirects followed by the client).
    fn get_once(
        &self,
        url: &url::Url,
        origin: &Origin,
        headers: Vec<(String, String)>,
    ) -> Result<Incoming, OciError> {
        let request = Outgoing {
            method: "GET".into(),
            url: url.clone(),
            headers,
            body: None,
        };
        let shown = format!("GET {}", redact(url));
        self.http
            .send(request, std::slice::from_ref(origin), None, &|| false)
            .map_err(|e| registry_error(&shown, e))
    }

    /// GET `path` of the registry: answers a challenge once, follows redirects.
    fn get(&mut self, path: &str, accept: Option<&str>) -> Result<Incoming, OciError> {
        let url = self.url(path)?;
        let mut answered = false;
        loop {
            let mut headers = Vec::new();
            if let Some(a) = accept {
                headers.push(("Accept".to_string(), a.to_string()));
            }
            let response = self.follow(&url, headers)?;
            if response.status != 401 || answered {
                return Ok(response);
            }
            let challenge = response
                .www_authenticate
                .as_deref()
                .and_then(parse_challenge)
                .ok_or_else(|| {
                    OciError::new(
                        OciErrorKind::Registry,
                        format!(
                            "{} answered 401 without a usable WWW-Authenticate challenge",
                            self.image.registry
                        ),
                    )
                })?;
            self.authorization = Some(self.answer(&challenge)?);
            answered = true;
        }
    }

    /// Sends a GET, following up to [`MAX_REDIRECTS`] redirects itself.
    fn follow(
        &self,
        start: &url::Url,
        headers: Vec<(String, String)>,
    ) -> Result<Incoming, OciError> {
        let mut url = start.clone();
        for _ in 0..=MAX_REDIRECTS {
            let origin = origin_of(&url).ok_or_else(|| {
                OciError::new(
                    OciErrorKind::Registry,
                    "a redirect named no host".to_string(),
                )
            })?;
            let mut h = headers.clone();
            if origin == self.origin
                && let Some(a) = &self.authorization
            {
                h.push(("Authorization".into(), a.clone()));
            }
            let response = self.get_once(&url, &origin, h)?;
            if !matches!(response.status, 301 | 302 | 303 | 307 | 308) {
                return Ok(response);
            }
            let location = response.location.as_deref().ok_or_else(|| {
                OciError::new(
                    OciErrorKind::Registry,
                    format!("{} redirected without a Location", redact(&url)),
                )
            })?;
            let next = url.join(location).map_err(|e| {
                OciError::new(
                    OciErrorKind::Registry,
                    format!("{} redirected to an invalid location: {e}", redact(&url)),
                )
            })?;
            let same = origin_of(&next).as_ref() == Some(&self.origin);
            if !same && next.scheme() != "https" {
                return Err(OciError::new(
                    OciErrorKind::Registry,
                    format!(
                        "{} redirected to {} outside https://: refused",
                        redact(&url),
                        redact(&next)
                    ),
                ));
            }
            url = next;
        }
        Err(OciError::new(
            OciErrorKind::Registry,
            format!("more than {MAX_REDIRECTS} redirects from {}", redact(start)),
        ))
    }

    /// The `Authorization` value answering a challenge.
    fn answer(&self, challenge: &Challenge) -> Result<String, OciError> {
        let basic = self.options.credentials.as_ref().map(|c| {
            let pair = format!("{}:{}", c.username, c.password);
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            )
        });
        if challenge.scheme.eq_ignore_ascii_case("basic") {
            return basic.ok_or_else(|| {
                OciError::new(
                    OciErrorKind::Registry,
                    format!(
                        "{} requires credentials (Basic authentication) and none were given",
                        self.image.registry
                    ),
                )
            });
        }
        if !challenge.scheme.eq_ignore_ascii_case("bearer") {
            return Err(OciError::new(
                OciErrorKind::Registry,
                format!(
                    "{} asks for {} authentication, which is not supported (Bearer and Basic are)",
                    self.image.registry, challenge.scheme
                ),
            ));
        }
        let realm = challenge.param("realm").ok_or_else(|| {
            OciError::new(
                OciErrorKind::Registry,
                format!("{}'s Bearer challenge names no realm", self.image.registry),
            )
        })?;
        let mut token_url = url::Url::parse(realm).map_err(|e| {
            OciError::new(
                OciErrorKind::Registry,
                format!(
                    "{}'s token realm {realm:?} is not a URL: {e}",
                    self.image.registry
                ),
            )
        })?;
        let realm_loopback = match token_url.host() {
            Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
            Some(url::Host::Ipv4(a)) => a.is_loopback(),
            Some(url::Host::Ipv6(a)) => a.is_loopback(),
            None => false,
        };
        let realm_ok = token_url.scheme() == "https"
            || (token_url.scheme() == "http" && realm_loopback && self.image.is_loopback());
        if !realm_ok {
            return Err(OciError::new(
                OciErrorKind::Registry,
                format!(
                    "{}'s token realm {} is refused: https:// only (plain http:// only on loopback for a loopback registry)",
                    self.image.registry,
                    redact(&token_url)
                ),
            ));
        }
        let default_scope = format!("repository:{}:pull", self.image.repository);
        {
            let mut query = token_url.query_pairs_mut();
            if let Some(service) = challenge.param("service") {
                query.append_pair("service", service);
            }
            query.append_pair("scope", challenge.param("scope").unwrap_or(&default_scope));
        }
        let origin = origin_of(&token_url).ok_or_else(|| {
            OciError::new(
                OciErrorKind::Registry,
                "the token realm has no host".to_string(),
            )
        })?;
        let mut headers = vec![("Accept".to_string(), "application/json".to_string())];
        if let Some(b) = basic {
            headers.push(("Authorization".into(), b));
        }
        let response = self.get_once(&token_url, &origin, headers)?;
        if response.status != 200 {
            return Err(OciError::new(
                OciErrorKind::Registry,
                format!(
                    "the token service {} answered HTTP {}{}",
                    redact(&token_url),
                    response.status,
                    error_detail(&response.body)
                ),
            ));
        }
        let doc: Value = serde_json::from_slice(&response.body).map_err(|e| {
            OciError::new(
                OciErrorKind::Registry,
                format!("the token service's answer is not JSON: {e}"),
            )
        })?;
        let token = doc
            .get("token")
            .or_else(|| doc.get("access_token"))
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                OciError::new(
                    OciErrorKind::Registry,
                    "the token service's answer has no token".to_string(),
                )
            })?;
        Ok(format!("Bearer {token}"))
    }

    /// Fails with the right kind for a non-200 answer about `what`.
    fn check_status(&self, response: &Incoming, what: &str) -> Result<(), OciError> {
        match response.status {
            200 => Ok(()),
            404 => Err(OciError::new(
                OciErrorKind::NotFound,
                format!("{what} not found{}", error_detail(&response.body)),
            )),
            401 | 403 => Err(OciError::new(
                OciErrorKind::Registry,
                format!(
                    "{} refused access to {what} (HTTP {}){}",
                    self.image.registry,
                    response.status,
                    error_detail(&response.body)
                ),
            )),
            s => Err(OciError::new(
                OciErrorKind::Registry,
                format!(
                    "{} answered HTTP {s} for {what}{}",
                    self.image.registry,
                    error_detail(&response.body)
                ),
            )),
        }
    }

    /// The manifest (or index) at `target` (a tag or a digest). Its digest is the sha256 of
    /// the exact bytes received; it must equal `Docker-Content-Digest` when the registry
    /// sends one, and `expected` when given.
    pub fn manifest(&mut self, target: &str, expected: Option<&str>) -> Result<Fetched, OciError> {
        let accept = [OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST].join(", ");
        let path = format!("v2/{}/manifests/{target}", self.image.repository);
        let shown = format!("{}:{target}", self.image.name()).replace(":sha256:", "@sha256:");
        let response = self.get(&path, Some(&accept))?;
        self.check_status(&response, &format!("manifest {shown}"))?;
        if response.body.len() > MAX_MANIFEST_BYTES {
            return Err(OciError::new(
                OciErrorKind::Invalid,
                format!("manifest {shown} exceeds {MAX_MANIFEST_BYTES} bytes"),
            ));
        }
        let digest = sha256_digest(&response.body);
        if let Some(said) = response
            .docker_content_digest
            .as_deref()
            .map(str::trim)
            .filter(|d| d.starts_with("sha256:"))
            && said != digest
        {
            return Err(OciError::new(
                OciErrorKind::Digest,
                format!(
                    "manifest {shown}: the registry says its digest is {said} but its bytes hash to {digest}"
                ),
            ));
        }
        if let Some(want) = expected
            && want != digest
        {
            return Err(OciError::new(
                OciErrorKind::Digest,
                format!("manifest {shown}: expected {want} but its bytes hash to {digest}"),
            ));
        }
        let document: Value = serde_json::from_slice(&response.body).map_err(|e| {
            OciError::new(
                OciErrorKind::Invalid,
                format!("manifest {shown} is not JSON: {e}"),
            )
        })?;
        let media_type = document
            .get("mediaType")
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| {
                response
                    .content_type
                    .as_deref()
                    .map(|c| c.split(';').next().unwrap_or("").trim().to_string())
            })
            .unwrap_or_default();
        Ok(Fetched {
            digest,
            media_type,
            document,
        })
    }

    /// The blob `digest`, checked against it (and against `size` when known).
    pub fn blob(&mut self, digest: &str, size: Option<u64>) -> Result<Vec<u8>, OciError> {
        let path = format!("v2/{}/blobs/{digest}", self.image.repository);
        let what = format!("blob {digest} of {}", self.image.name());
        let response = self.get(&path, None)?;
        self.check_status(&response, &what)?;
        if let Some(size) = size
            && response.body.len() as u64 != size
        {
            return Err(OciError::new(
                OciErrorKind::Digest,
                format!(
                    "{what}: {} bytes received, the manifest says {size}",
                    response.body.len()
                ),
            ));
        }
        let actual = sha256_digest(&response.body);
        if actual != digest {
            return Err(OciError::new(
                OciErrorKind::Digest,
                format!("{what}: its bytes hash to {actual}"),
            ));
        }
        Ok(response.body)
    }
}

/// A URL without its query (pre-signed blob URLs carry credentials there).
fn redact(url: &url::Url) -> String {
    let mut u = url.clone();
    u.set_query(None);
    let _ = u.set_password(None);
    let _ = u.set_username("");
    u.to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn challenges_parse_quoted_parameters() {
        let c = parse_challenge(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/alpine:pull""#,
        )
        .unwrap();
        assert_eq!(c.scheme, "Bearer");
        assert_eq!(c.param("realm"), Some("https://auth.docker.io/token"));
        assert_eq!(c.param("SERVICE"), Some("registry.docker.io"));
        assert_eq!(c.param("scope"), Some("repository:library/alpine:pull"));
        let c = parse_challenge(r#"Basic realm="a \"b\", c""#).unwrap();
        assert_eq!(c.param("realm"), Some(r#"a "b", c"#));
        let c = parse_challenge("Bearer realm=http://x/t , service=s").unwrap();
        assert_eq!(c.param("realm"), Some("http://x/t"));
        assert_eq!(c.param("service"), Some("s"));
        assert!(parse_challenge("").is_none());
        assert!(parse_challenge(r#"Bearer realm="unterminated"#).is_none());
    }
}
