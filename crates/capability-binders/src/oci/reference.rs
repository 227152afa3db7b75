//! Image references (`[registry/]repository[:tag][@sha256:<hex>]`) with Docker's defaults, and
//! platforms (`os/architecture[/variant]`).

use std::net::IpAddr;

use super::{OciError, OciErrorKind};

/// The registry Docker Hub references name.
pub const DOCKER_HUB: &str = "docker.io";
/// The host Docker Hub's distribution API answers on.
pub const DOCKER_HUB_API: &str = "registry-1.docker.io";
/// The tag of a reference that names neither a tag nor a digest.
pub const DEFAULT_TAG: &str = "latest";

/// A parsed image reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageReference {
    /// The registry as references name it: `docker.io`, `ghcr.io`, `127.0.0.1:5000`.
    pub registry: String,
    /// The repository path: `library/alpine`, `owner/tool`.
    pub repository: String,
    /// The tag (`latest` when the reference names neither tag nor digest).
    pub tag: Option<String>,
    /// `sha256:<64 lowercase hex>` when the reference names a digest.
    pub digest: Option<String>,
}

/// Whether `s` is `sha256:` and 64 lowercase hex digits.
pub fn is_sha256_digest(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

fn invalid(reference: &str, why: &str) -> OciError {
    OciError::new(
        OciErrorKind::Invalid,
        format!("invalid image reference {reference:?}: {why}"),
    )
}

/// A repository path component: `[a-z0-9]+` joined by `.`, `_`, `__` or runs of `-`.
fn valid_component(c: &str) -> bool {
    let bytes = c.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|b| b == b'-');
        if !ok {
            return false;
        }
    }
    true
}

fn valid_tag(t: &str) -> bool {
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

fn valid_registry(r: &str) -> bool {
    let host = host_of(r);
    let port_ok = match r.strip_prefix(host).and_then(|rest| rest.strip_prefix(':')) {
        Some(port) => port.parse::<u16>().is_ok_and(|p| p > 0),
        None => r == host,
    };
    let host_ok = if host.starts_with('[') {
        host.ends_with(']') && host[1..host.len() - 1].parse::<IpAddr>().is_ok()
    } else {
        !host.is_empty()
            && host
                .split('.')
                .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
    };
    port_ok && host_ok
}

/// The host part of `host[:port]` (an IPv6 literal keeps its brackets).
fn host_of(registry: &str) -> &str {
    if registry.starts_with('[') {
        match registry.find(']') {
            Some(end) => &registry[..=end],
            None => registry,
        }
    } else {
        registry.split(':').next().unwrap_or(registry)
    }
}

impl ImageReference {
    /// Parses a reference with Docker's defaults: the first path component is a registry
    /// only when it has a `.` or a `:` or is `localhost`; otherwise the registry is Docker
    /// Hub, where a single-component repository is an official image (`library/<name>`).
    /// Without tag and digest the tag is `latest`. Only sha256 digests are accepted.
    pub fn parse(reference: &str) -> Result<ImageReference, OciError> {
        let trimmed = reference.trim();
        if trimmed.is_empty() {
            return Err(invalid(reference, "it is empty"));
        }
        if trimmed.contains("://") {
            return Err(invalid(
                reference,
                "give registry/repository[:tag][@sha256:…], not a URL",
            ));
        }
        let (name_tag, digest) = match trimmed.split_once('@') {
            Some((n, d)) => {
                if !is_sha256_digest(d) {
                    return Err(invalid(
                        reference,
                        "the digest must be sha256: and 64 lowercase hex digits",
                    ));
                }
                (n, Some(d.to_string()))
            }
            None => (trimmed, None),
        };
        let last_slash = name_tag.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match name_tag[last_slash..].rfind(':') {
            Some(i) => {
                let at = last_slash + i;
                (&name_tag[..at], Some(name_tag[at + 1..].to_string()))
            }
            None => (name_tag, None),
        };
        if let Some(t) = &tag
            && !valid_tag(t)
        {
            return Err(invalid(reference, &format!("{t:?} is not a valid tag")));
        }
        let (registry, path) = match name.split_once('/') {
            Some((first, rest))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first.to_string(), rest.to_string())
            }
            _ => (DOCKER_HUB.to_string(), name.to_string()),
        };
        let registry = match registry.as_str() {
            "index.docker.io" | "registry-1.docker.io" => DOCKER_HUB.to_string(),
            _ => registry,
        };
        if !valid_registry(&registry) {
            return Err(invalid(
                reference,
                &format!("{registry:?} is not a registry host[:port]"),
            ));
        }
        let repository = if registry == DOCKER_HUB && !path.contains('/') {
            format!("library/{path}")
        } else {
            path
        };
        if !repository.split('/').all(valid_component) {
            return Err(invalid(
                reference,
                &format!(
                    "{repository:?} is not a repository path (lowercase letters, digits and single separators)"
                ),
            ));
        }
        let tag = match (&tag, &digest) {
            (None, None) => Some(DEFAULT_TAG.to_string()),
            _ => tag,
        };
        Ok(ImageReference {
            registry,
            repository,
            tag,
            digest,
        })
    }

    /// The host (and port) the distribution API answers on (`registry-1.docker.io` for
    /// Docker Hub).
    pub fn api_host(&self) -> &str {
        if self.registry == DOCKER_HUB {
            DOCKER_HUB_API
        } else {
            &self.registry
        }
    }

    /// The registry's host without its port.
    pub fn host(&self) -> &str {
        host_of(&self.registry)
    }

    /// Whether the registry is on this machine: `localhost` or a loopback IP literal.
    pub fn is_loopback(&self) -> bool {
        let host = self.host();
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        bare.eq_ignore_ascii_case("localhost")
            || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }

    /// `<registry>/<repository>`.
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// `<registry>/<repository>@<digest>`.
    pub fn with_digest(&self, digest: &str) -> String {
        format!("{}@{digest}", self.name())
    }

    /// The fully qualified reference: `<registry>/<repository>[:tag][@digest]`.
    pub fn canonical(&self) -> String {
        let mut s = self.name();
        if let Some(t) = &self.tag {
            s.push(':');
            s.push_str(t);
        }
        if let Some(d) = &self.digest {
            s.push('@');
            s.push_str(d);
        }
        s
    }

    /// What the registry is asked for: the digest when the reference names one, else the tag.
    pub fn target(&self) -> &str {
        self.digest
            .as_deref()
            .or(self.tag.as_deref())
            .unwrap_or(DEFAULT_TAG)
    }
}

/// An image platform: `os/architecture[/variant]` in OCI's vocabulary (`linux/amd64`,
/// `linux/arm64/v8`, `linux/arm/v7`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    pub variant: Option<String>,
}

impl Platform {
    /// `linux` and the host's architecture in OCI's names (`x86_64` is `amd64`, `aarch64`
    /// is `arm64`). Containers run Linux whatever the host's own system.
    pub fn host() -> Platform {
        let architecture = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "x86" => "386",
            "aarch64" => "arm64",
            "arm" => "arm",
            "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
            "powerpc64" => "ppc64",
            "loongarch64" => "loong64",
            "mips64" if cfg!(target_endian = "little") => "mips64le",
            other => other,
        };
        Platform {
            os: "linux".into(),
            architecture: architecture.into(),
            variant: None,
        }
    }

    /// Parses `os/architecture[/variant]`.
    pub fn parse(s: &str) -> Result<Platform, OciError> {
        let parts: Vec<&str> = s.trim().split('/').collect();
        let ok = |p: &str| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        };
        match parts.as_slice() {
            [os, arch] if ok(os) && ok(arch) => Ok(Platform {
                os: (*os).into(),
                architecture: (*arch).into(),
                variant: None,
            }),
            [os, arch, variant] if ok(os) && ok(arch) && ok(variant) => Ok(Platform {
                os: (*os).into(),
                architecture: (*arch).into(),
                variant: Some((*variant).into()),
            }),
            _ => Err(OciError::new(
                OciErrorKind::Invalid,
                format!(
                    "invalid platform {s:?}: expected os/architecture[/variant], e.g. linux/amd64"
                ),
            )),
        }
    }

    /// Whether an image described by `os`, `architecture` and `variant` runs on this
    /// platform. A variant is compared only when both name one; `arm64`'s default `v8`
    /// equals none.
    pub fn matches(&self, os: &str, architecture: &str, variant: Option<&str>) -> bool {
        let norm = |arch: &str, v: Option<&str>| match (arch, v) {
            ("arm64", Some("v8")) => None,
            (_, v) => v.map(str::to_string),
        };
        if self.os != os || self.architecture != architecture {
            return false;
        }
        match (
            norm(&self.architecture, self.variant.as_deref()),
            norm(architecture, variant),
        ) {
            (Some(want), Some(have)) => want == have,
            _ => true,
        }
    }
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn references_take_dockers_defaults() {
        let r = ImageReference::parse("alpine").unwrap();
        assert_eq!(r.canonical(), "docker.io/library/alpine:latest");
        assert_eq!(r.api_host(), "registry-1.docker.io");
        let r = ImageReference::parse("owner/tool:1.2").unwrap();
        assert_eq!(r.canonical(), "docker.io/owner/tool:1.2");
        let r = ImageReference::parse("127.0.0.1:5000/a/b:t").unwrap();
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str()),
            ("127.0.0.1:5000", "a/b")
        );
        assert!(r.is_loopback());
        let d = format!("sha256:{}", "a".repeat(64));
        let r = ImageReference::parse(&format!("localhost/x@{d}")).unwrap();
        assert_eq!(r.tag, None);
        assert_eq!(r.target(), d);
        assert!(r.is_loopback());
        let r = ImageReference::parse(&format!("ghcr.io/o/x:v1@{d}")).unwrap();
        assert_eq!(r.canonical(), format!("ghcr.io/o/x:v1@{d}"));
        assert!(!r.is_loopback());
        for bad in [
            "",
            "Upper/x",
            "x@sha256:abc",
            "x:",
            "http://h/x",
            "a//b",
            "h.io:0/x",
        ] {
            assert!(ImageReference::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn platforms_match_with_variants() {
        let p = Platform::parse("linux/arm64").unwrap();
        assert!(p.matches("linux", "arm64", Some("v8")));
        assert!(!p.matches("linux", "amd64", None));
        let p = Platform::parse("linux/arm/v7").unwrap();
        assert!(!p.matches("linux", "arm", Some("v6")));
        assert!(p.matches("linux", "arm", None));
        assert!(Platform::parse("linux").is_err());
        assert_eq!(
            Platform::parse("linux/arm/v7").unwrap().to_string(),
            "linux/arm/v7"
        );
    }
}
