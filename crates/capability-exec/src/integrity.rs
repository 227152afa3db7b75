//! The one integrity checker for package modules of every kind (`.wasm`, `.js`, `.py`,
//! native), and size-limited, streaming reads of module files.
//!
//! # Accepted `integrity` strings
//!
//! One or more whitespace-separated tokens (Subresource Integrity style):
//!
//! * `sha256-<digest>` or a bare `<digest>`, where the digest is 64 hex digits (any case) or
//!   the standard base64 of the 32-byte SHA-256 (padded or not);
//! * `sha512-<digest>`: the standard base64 of the 64-byte SHA-512 (padded or not; 128 hex
//!   digits are accepted too).
//!
//! SRI options after `?` are ignored. When several tokens are given the strongest algorithm
//! present decides and any of its tokens may match; every token must be well formed. Anything
//! else (an empty string, `md5-…`, `sha1-…`, a digest of the wrong length) is
//! [`IntegrityError::Unsupported`]. Digests are compared in constant time.
//!
//! # Reading module files
//!
//! [`digest_file`] hashes a file by streaming it in 64 KiB blocks, so a module is never held
//! whole in memory to be checked; [`read_module`] reads one whole when the executor needs the
//! bytes (to compile them). Both refuse a file above their byte limit
//! ([`DEFAULT_MAX_MODULE_BYTES`] unless the host sets another) from its size *before*
//! reading anything — a 2 GiB sparse file costs one `stat` — and stop reading when a file
//! grows past the limit while it is read. Neither opens anything but a regular file, so a
//! FIFO or a device cannot block or feed them forever.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use sha2::{Digest, Sha256, Sha512};

/// The largest module file read by default: 256 MiB.
pub const DEFAULT_MAX_MODULE_BYTES: u64 = 256 << 20;

/// Bytes read at a time while hashing a file.
const BLOCK: usize = 64 << 10;

/// Why a module's bytes were refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IntegrityError {
    /// The `integrity` string is not in an accepted form.
    #[error(
        "unsupported integrity value {integrity:?}: expected sha256 (hex or base64, optional `sha256-` prefix) or `sha512-<base64>`"
    )]
    Unsupported { integrity: String },
    /// The bytes do not match. `actual` is the computed digest as `<algorithm>-<base64>`.
    #[error("integrity mismatch: expected {expected}, computed {actual}")]
    Mismatch { expected: String, actual: String },
    /// The module file is larger than the limit (nothing, or only the limit, was read).
    #[error("module {path:?} is {size} bytes, above the {limit} byte limit")]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },
    /// The module file could not be read (or is not a regular file).
    #[error("cannot read module {path:?}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The digest algorithms an `integrity` string may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DigestAlgorithm {
    Sha256,
    Sha512,
}

impl DigestAlgorithm {
    /// The SRI prefix without the dash: `sha256`, `sha512`.
    pub fn as_str(self) -> &'static str {
        match self {
            DigestAlgorithm::Sha256 => "sha256",
            DigestAlgorithm::Sha512 => "sha512",
        }
    }

    fn len(self) -> usize {
        match self {
            DigestAlgorithm::Sha256 => 32,
            DigestAlgorithm::Sha512 => 64,
        }
    }
}

/// A parsed `integrity` string: the algorithm that decides and the digests that satisfy it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Integrity {
    text: String,
    algorithm: DigestAlgorithm,
    expected: Vec<Vec<u8>>,
}

impl Integrity {
    /// Parses an `integrity` string (see the module docs for the accepted forms).
    pub fn parse(text: &str) -> Result<Integrity, IntegrityError> {
        let unsupported = || IntegrityError::Unsupported {
            integrity: text.to_string(),
        };
        let mut sha256 = Vec::new();
        let mut sha512 = Vec::new();
        for token in text.split_whitespace() {
            // SRI options (`?...`) are ignored, as the SRI spec says.
            let token = token.split('?').next().unwrap_or(token);
            if let Some(v) = token.strip_prefix("sha512-") {
                sha512.push(decode_digest(v, DigestAlgorithm::Sha512).ok_or_else(unsupported)?);
            } else {
                let v = token.strip_prefix("sha256-").unwrap_or(token);
                sha256.push(decode_digest(v, DigestAlgorithm::Sha256).ok_or_else(unsupported)?);
            }
        }
        let (algorithm, expected) = if !sha512.is_empty() {
            (DigestAlgorithm::Sha512, sha512)
        } else if !sha256.is_empty() {
            (DigestAlgorithm::Sha256, sha256)
        } else {
            return Err(unsupported());
        };
        Ok(Integrity {
            text: text.to_string(),
            algorithm,
            expected,
        })
    }

    /// The string as given.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The algorithm whose digest decides.
    pub fn algorithm(&self) -> DigestAlgorithm {
        self.algorithm
    }

    /// Checks a digest computed with [`Integrity::algorithm`] (constant-time comparison).
    pub fn check_digest(&self, actual: &[u8]) -> Result<(), IntegrityError> {
        if self.expected.iter().any(|e| constant_time_eq(e, actual)) {
            return Ok(());
        }
        Err(IntegrityError::Mismatch {
            expected: self.text.clone(),
            actual: format!("{}-{}", self.algorithm.as_str(), STANDARD.encode(actual)),
        })
    }

    /// Checks bytes held in memory.
    pub fn verify(&self, bytes: &[u8]) -> Result<(), IntegrityError> {
        match self.algorithm {
            DigestAlgorithm::Sha256 => self.check_digest(&Sha256::digest(bytes)),
            DigestAlgorithm::Sha512 => self.check_digest(&Sha512::digest(bytes)),
        }
    }
}

impl std::str::FromStr for Integrity {
    type Err = IntegrityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Integrity::parse(s)
    }
}

/// Checks `bytes` against an `integrity` string. `Ok(())` when it matches.
pub fn verify_integrity(bytes: &[u8], integrity: &str) -> Result<(), IntegrityError> {
    Integrity::parse(integrity)?.verify(bytes)
}

/// Decodes a digest written as hex or base64 (padded or not) of exactly the algorithm's
/// length.
fn decode_digest(text: &str, algorithm: DigestAlgorithm) -> Option<Vec<u8>> {
    let len = algorithm.len();
    if text.len() == len * 2 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return text
            .as_bytes()
            .chunks(2)
            .map(|pair| Some((hex_value(*pair.first()?)? << 4) | hex_value(*pair.get(1)?)?))
            .collect();
    }
    let decoded = STANDARD
        .decode(text)
        .or_else(|_| STANDARD_NO_PAD.decode(text))
        .ok()?;
    (decoded.len() == len).then_some(decoded)
}

fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// What streaming a module file found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleDigest {
    /// Bytes read.
    pub size: u64,
    /// SHA-256 of the exact bytes.
    pub sha256: [u8; 32],
    /// The first bytes (up to the `head` length asked for), for shebang / ELF inspection.
    pub head: Vec<u8>,
}

impl ModuleDigest {
    /// The SHA-256, lowercase hex.
    pub fn sha256_hex(&self) -> String {
        hex(&self.sha256)
    }
}

fn io_error(path: &Path, source: io::Error) -> IntegrityError {
    IntegrityError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Opens a regular file whose size is within `max_bytes`; returns it and its size.
fn open_limited(path: &Path, max_bytes: u64) -> Result<(File, u64), IntegrityError> {
    let not_regular = || {
        io_error(
            path,
            io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"),
        )
    };
    // Checked before opening: opening a FIFO for reading would block.
    let meta = std::fs::metadata(path).map_err(|e| io_error(path, e))?;
    if !meta.is_file() {
        return Err(not_regular());
    }
    let file = File::open(path).map_err(|e| io_error(path, e))?;
    let meta = file.metadata().map_err(|e| io_error(path, e))?;
    if !meta.is_file() {
        return Err(not_regular());
    }
    if meta.len() > max_bytes {
        return Err(IntegrityError::TooLarge {
            path: path.to_path_buf(),
            size: meta.len(),
            limit: max_bytes,
        });
    }
    Ok((file, meta.len()))
}

/// Streams `path` through SHA-256 (and SHA-512 when `integrity` decides by it), keeps its
/// first `head` bytes, and checks `integrity` when given. Refuses a file above `max_bytes`
/// before reading it, and stops when one grows past the limit while it is read.
pub fn digest_file(
    path: &Path,
    integrity: Option<&str>,
    max_bytes: u64,
    head: usize,
) -> Result<ModuleDigest, IntegrityError> {
    let integrity = integrity.map(Integrity::parse).transpose()?;
    let (file, _) = open_limited(path, max_bytes)?;
    let mut sha256 = Sha256::new();
    let mut sha512 = integrity
        .as_ref()
        .filter(|i| i.algorithm() == DigestAlgorithm::Sha512)
        .map(|_| Sha512::new());
    let mut first = Vec::with_capacity(head.min(BLOCK));
    let mut reader = file.take(max_bytes.saturating_add(1));
    let mut buf = vec![0u8; BLOCK];
    let mut size: u64 = 0;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_error(path, e)),
        };
        size = size.saturating_add(n as u64);
        if size > max_bytes {
            return Err(IntegrityError::TooLarge {
                path: path.to_path_buf(),
                size,
                limit: max_bytes,
            });
        }
        let block = &buf[..n];
        if first.len() < head {
            let take = (head - first.len()).min(n);
            first.extend_from_slice(&block[..take]);
        }
        sha256.update(block);
        if let Some(h) = sha512.as_mut() {
            h.update(block);
        }
    }
    let sha256: [u8; 32] = sha256.finalize().into();
    if let Some(integrity) = &integrity {
        match sha512 {
            Some(h) => integrity.check_digest(&h.finalize())?,
            None => integrity.check_digest(&sha256)?,
        }
    }
    Ok(ModuleDigest {
        size,
        sha256,
        head: first,
    })
}

/// Reads a whole module file of at most `max_bytes`, refusing a larger one before reading it
/// (and one that grows past the limit while it is read).
pub fn read_module(path: &Path, max_bytes: u64) -> Result<Vec<u8>, IntegrityError> {
    let (file, len) = open_limited(path, max_bytes)?;
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(path, e))?;
    if bytes.len() as u64 > max_bytes {
        return Err(IntegrityError::TooLarge {
            path: path.to_path_buf(),
            size: bytes.len() as u64,
            limit: max_bytes,
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    const DATA: &[u8] = b"export default 1;\n";

    fn b64_256() -> String {
        STANDARD.encode(Sha256::digest(DATA))
    }

    fn b64_512() -> String {
        STANDARD.encode(Sha512::digest(DATA))
    }

    /// Every form accepted by either checker before they were merged.
    pub(crate) fn accepted() -> Vec<String> {
        let h = hex(&Sha256::digest(DATA));
        vec![
            h.clone(),
            h.to_uppercase(),
            format!("sha256-{h}"),
            format!("sha256-{}", h.to_uppercase()),
            b64_256(),
            format!("sha256-{}", b64_256()),
            format!("sha256-{}", b64_256().trim_end_matches('=')),
            format!("  sha256-{}\n", b64_256()),
            format!("sha512-{}", b64_512()),
            format!("sha512-{}", b64_512().trim_end_matches('=')),
            format!("sha512-{}", hex(&Sha512::digest(DATA))),
            format!("sha512-{}?opt=1", b64_512()),
            format!("sha256-{} sha512-{}", b64_256(), b64_512()),
            // The strongest algorithm decides: a wrong sha256 next to a right sha512 passes.
            format!("sha256-{} sha512-{}", hex(&[0; 32]), b64_512()),
            format!("sha512-{} sha512-{}", STANDARD.encode([0u8; 64]), b64_512()),
        ]
    }

    #[test]
    fn every_accepted_form_matches() {
        for form in accepted() {
            let r = verify_integrity(DATA, &form);
            assert!(r.is_ok(), "{form:?}: {r:?}");
        }
    }

    #[test]
    fn malformed_strings_are_unsupported() {
        for bad in [
            "",
            "   ",
            "zz",
            "sha256-",
            "sha512-",
            "sha512-AAAA",
            "sha256-AAAA",
            "md5-1B2M2Y8AsgTpgAmY7PhCfg==",
            "sha1-qUqP5cyxm6YcTAhz05Hph5gvu9M=",
            "sha384-OLBgp1GsljhM2TJ+sbHjaiH9txEUvgdDTAzHv2P24donTt6/529l+9Ua0vFImLlb",
            // A well-formed sha512 does not excuse a malformed sha256 next to it.
            &format!("sha256-AAAA sha512-{}", b64_512()),
            &format!("sha256-{}0", hex(&Sha256::digest(DATA))),
        ] {
            let e = verify_integrity(DATA, bad).unwrap_err();
            assert!(
                matches!(&e, IntegrityError::Unsupported { integrity } if integrity == bad),
                "{bad:?}: {e:?}"
            );
        }
        assert_eq!(
            Integrity::parse("md5-x").unwrap_err().to_string(),
            "unsupported integrity value \"md5-x\": expected sha256 (hex or base64, optional \
             `sha256-` prefix) or `sha512-<base64>`"
        );
    }

    #[test]
    fn a_wrong_digest_is_a_mismatch_naming_the_computed_one() {
        let wrong = hex(&Sha256::digest(b"other"));
        let e = verify_integrity(DATA, &wrong).unwrap_err();
        let IntegrityError::Mismatch { expected, actual } = &e else {
            panic!("{e:?}");
        };
        assert_eq!(expected, &wrong);
        assert_eq!(actual, &format!("sha256-{}", b64_256()));
        assert!(e.to_string().starts_with("integrity mismatch: expected "));
        let wrong512 = format!("sha512-{}", STANDARD.encode(Sha512::digest(b"x")));
        let e = verify_integrity(DATA, &wrong512).unwrap_err();
        assert!(
            matches!(&e, IntegrityError::Mismatch { actual, .. } if actual == &format!("sha512-{}", b64_512())),
            "{e:?}"
        );
    }

    #[test]
    fn files_are_hashed_by_streaming_with_the_same_rules() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.js");
        // More than one block, so the streaming path is exercised.
        let data: Vec<u8> = DATA.iter().copied().cycle().take(3 * BLOCK + 7).collect();
        std::fs::write(&path, &data).unwrap();
        let d = digest_file(&path, None, DEFAULT_MAX_MODULE_BYTES, 4096).unwrap();
        assert_eq!(d.size, data.len() as u64);
        assert_eq!(d.sha256_hex(), hex(&Sha256::digest(&data)));
        assert_eq!(d.head, &data[..4096]);
        let sri = format!("sha512-{}", STANDARD.encode(Sha512::digest(&data)));
        digest_file(&path, Some(&sri), DEFAULT_MAX_MODULE_BYTES, 0).unwrap();
        digest_file(&path, Some(&d.sha256_hex()), DEFAULT_MAX_MODULE_BYTES, 0).unwrap();
        assert!(matches!(
            digest_file(&path, Some(&hex(&[0; 32])), DEFAULT_MAX_MODULE_BYTES, 0),
            Err(IntegrityError::Mismatch { .. })
        ));
        assert!(matches!(
            digest_file(&path, Some("md5-x"), DEFAULT_MAX_MODULE_BYTES, 0),
            Err(IntegrityError::Unsupported { .. })
        ));
        assert_eq!(read_module(&path, data.len() as u64).unwrap(), data);
    }

    #[test]
    fn the_size_limit_is_exact_and_configurable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.bin");
        std::fs::write(&path, [7u8; 1024]).unwrap();
        assert!(digest_file(&path, None, 1024, 16).is_ok());
        assert!(read_module(&path, 1024).is_ok());
        for r in [
            digest_file(&path, None, 1023, 16).map(|_| ()),
            read_module(&path, 1023).map(|_| ()),
        ] {
            let e = r.unwrap_err();
            assert!(
                matches!(
                    e,
                    IntegrityError::TooLarge {
                        size: 1024,
                        limit: 1023,
                        ..
                    }
                ),
                "{e:?}"
            );
            assert!(
                e.to_string()
                    .ends_with("is 1024 bytes, above the 1023 byte limit")
            );
        }
    }

    #[test]
    fn a_2_gib_sparse_module_is_refused_without_being_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("huge.wasm");
        File::create(&path).unwrap().set_len(2 << 30).unwrap();
        let started = std::time::Instant::now();
        let e =
            digest_file(&path, Some(&hex(&[0; 32])), DEFAULT_MAX_MODULE_BYTES, 4096).unwrap_err();
        assert!(
            matches!(e, IntegrityError::TooLarge { size, limit, .. } if size == 2 << 30 && limit == DEFAULT_MAX_MODULE_BYTES),
            "{e:?}"
        );
        let e = read_module(&path, DEFAULT_MAX_MODULE_BYTES).unwrap_err();
        assert!(matches!(e, IntegrityError::TooLarge { .. }), "{e:?}");
        // Hashing 2 GiB would take many seconds (minutes in a debug build).
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn only_regular_files_are_opened() {
        let dir = tempfile::tempdir().unwrap();
        let e = digest_file(dir.path(), None, DEFAULT_MAX_MODULE_BYTES, 0).unwrap_err();
        assert!(matches!(e, IntegrityError::Io { .. }), "{e:?}");
        let e = read_module(&dir.path().join("missing"), 10).unwrap_err();
        assert!(matches!(e, IntegrityError::Io { .. }), "{e:?}");
    }
}
