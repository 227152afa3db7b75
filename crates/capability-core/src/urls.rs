//! WHATWG URL checks used by the validators, and the site discovery probe URLs.
//!
//! The reference tests URLs with `new URL(s)`, so validity means "parses as an absolute URL
//! under the WHATWG URL Standard". The [`url`] crate implements that standard: leading and
//! trailing C0 controls and spaces are stripped, tabs and newlines removed, `https:example.com`
//! and `http:\\example.com\path` are valid, while `https://x:99999/` and
//! `https://256.256.256.256/` are not.
//!
//! * [`is_http_url`]: absolute URL with scheme `http` or `https`.
//! * [`site_discovery_urls`]: the two `/.well-known/capabilities` URLs probed for a site.

use url::Url;

/// The path of the site discovery document, tried first.
pub const WELL_KNOWN_PATH: &str = "/.well-known/capabilities";
/// The alternative path, tried second.
pub const WELL_KNOWN_JSON_PATH: &str = "/.well-known/capabilities.json";

/// `true` when `s` parses as an absolute URL under the WHATWG URL Standard and its scheme is
/// `http` or `https`.
pub fn is_http_url(s: &str) -> bool {
    Url::parse(s).is_ok_and(|u| matches!(u.scheme(), "http" | "https"))
}

/// A site address that is not an absolute URL.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid site URL {site:?}: {reason}")]
pub struct InvalidSiteUrl {
    /// The address as given.
    pub site: String,
    /// Why the URL parser refused it.
    pub reason: String,
}

/// The two discovery URLs probed for `site`, in order: the origin (scheme, host and any
/// non-default port; credentials, path, query and fragment dropped) followed by
/// [`WELL_KNOWN_PATH`], then by [`WELL_KNOWN_JSON_PATH`]. The host is in its serialized form
/// (lower case, IDNA to punycode), as `URL.host` gives it.
///
/// This is the reference's `${url.protocol}//${url.host}` prefix, so a URL without a host
/// (`mailto:x`) yields `mailto:///.well-known/capabilities`, as in JavaScript.
pub fn site_discovery_urls(site: &str) -> Result<[String; 2], InvalidSiteUrl> {
    let url = Url::parse(site).map_err(|e| InvalidSiteUrl {
        site: site.to_string(),
        reason: e.to_string(),
    })?;
    let mut origin = format!("{}://", url.scheme());
    if let Some(host) = url.host_str() {
        origin.push_str(host);
    }
    if let Some(port) = url.port() {
        origin.push(':');
        origin.push_str(&port.to_string());
    }
    Ok([
        format!("{origin}{WELL_KNOWN_PATH}"),
        format!("{origin}{WELL_KNOWN_JSON_PATH}"),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_urls_follow_the_whatwg_standard() {
        for ok in [
            "https://example.com",
            "HTTPS://EXAMPLE.COM",
            " https://example.com ",
            "https:example.com",
            "http:\\\\example.com\\path",
            "https://[::1]/",
            "https://user:pass@host/",
            "https://\u{4f8b}\u{3048}.jp/i",
        ] {
            assert!(is_http_url(ok), "{ok:?}");
        }
        for bad in [
            "",
            "nope",
            "example.com",
            "//example.com",
            "/relative/index.json",
            "ftp://x",
            "ws://example.com",
            "mailto:a@b.c",
            "http://",
            "https://exa mple.com",
            "https://256.256.256.256/",
            "https://x:99999/",
            "https://%zz",
        ] {
            assert!(!is_http_url(bad), "{bad:?}");
        }
    }

    #[test]
    fn discovery_urls_keep_only_the_origin() {
        assert_eq!(
            site_discovery_urls("https://user:pw@example.test:8443/a/b?q=1").ok(),
            Some([
                "https://example.test:8443/.well-known/capabilities".to_string(),
                "https://example.test:8443/.well-known/capabilities.json".to_string(),
            ])
        );
        assert!(site_discovery_urls("not a url").is_err());
    }
}
