//! npm registry signatures: `versions[v].dist.signatures = [{keyid, sig}]`, each an ECDSA
//! P-256 signature (DER, base64) over the UTF-8 bytes of `<name>@<version>:<dist.integrity>`,
//! checked against the keys the registry publishes at `/-/npm/v1/keys`
//! (`{keys: [{keyid, key: <base64 SPKI DER>, keytype, scheme, expires}]}`).
//!
//! The key set of a registry is pinned in the home on first use
//! (`<home>/registry-keys/<sha256 of the registry URL>.json`): a later key set that differs
//! is refused until the pin is removed by hand, and the pinned set stands in for the
//! registry's when the keys endpoint cannot be reached. A registry that answers 404 publishes
//! no keys; a registry whose keys were pinned may not stop publishing them.

use std::path::PathBuf;

use capability_exec::home::Home;

use base64::Engine as _;
use p256::ecdsa::signature::Verifier as _;
use p256::ecdsa::{DerSignature, VerifyingKey};
use p256::pkcs8::DecodePublicKey as _;
use serde_json::{Value, json};
use sha2::Digest as _;

use crate::AcquireError;
use crate::error::{FetchError, FetchFault, IoError, SignatureFault};
use crate::fetch::Fetcher;

/// The only key type and scheme npm uses.
pub const KEY_TYPE: &str = "ecdsa-sha2-nistp256";

/// One usable registry key.
#[derive(Clone, Debug)]
pub struct RegistryKey {
    pub keyid: String,
    pub key: VerifyingKey,
    /// `expires` as milliseconds since the epoch (`None`: never).
    pub expires: Option<f64>,
}

/// A registry's key set: the document's `keys` (sorted by key id, what is pinned) and the
/// usable keys among them.
#[derive(Clone, Debug)]
pub struct KeySet {
    pub document: Value,
    pub keys: Vec<RegistryKey>,
}

/// `<registry>-/npm/v1/keys`.
pub fn keys_url(registry: &str) -> String {
    format!("{registry}-/npm/v1/keys")
}

/// What is wrong with a registry's key document.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum KeysProblem {
    #[error("no `keys` array")]
    NoKeys,
    #[error("a key has no keyid")]
    NoKeyId,
    #[error("key {keyid} is not base64")]
    NotBase64 { keyid: String },
    #[error("key {keyid} is not a P-256 public key: {reason}")]
    NotP256 { keyid: String, reason: String },
    #[error("key {keyid} expires at {expires:?}, not a date")]
    ExpiresNotDate { keyid: String, expires: String },
    #[error("key {keyid}: expires is not a date")]
    ExpiresNotString { keyid: String },
}

/// Reads a key document. Keys of another type or scheme are left out (a signature by one of
/// them is then a signature by an unknown key); a malformed key of npm's type is an error.
pub fn parse_keys(doc: &Value, registry: &str) -> Result<KeySet, AcquireError> {
    let bad = |problem: KeysProblem| {
        AcquireError::from(SignatureFault::Keys {
            registry: registry.to_string(),
            problem,
        })
    };
    let mut listed: Vec<Value> = doc
        .get("keys")
        .and_then(Value::as_array)
        .ok_or_else(|| bad(KeysProblem::NoKeys))?
        .clone();
    listed.sort_by(|a, b| {
        let id = |v: &Value| v["keyid"].as_str().unwrap_or_default().to_string();
        id(a).cmp(&id(b))
    });
    let mut keys = Vec::new();
    for k in &listed {
        let keyid = k
            .get("keyid")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| bad(KeysProblem::NoKeyId))?;
        if k.get("keytype").and_then(Value::as_str) != Some(KEY_TYPE)
            || k.get("scheme").and_then(Value::as_str) != Some(KEY_TYPE)
        {
            continue;
        }
        let der = k
            .get("key")
            .and_then(Value::as_str)
            .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
            .ok_or_else(|| {
                bad(KeysProblem::NotBase64 {
                    keyid: keyid.to_string(),
                })
            })?;
        let key = VerifyingKey::from_public_key_der(&der).map_err(|e| {
            bad(KeysProblem::NotP256 {
                keyid: keyid.to_string(),
                reason: e.to_string(),
            })
        })?;
        let expires = match k.get("expires") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => {
                Some(capability_core::dates::date_parse(s).ok_or_else(|| {
                    bad(KeysProblem::ExpiresNotDate {
                        keyid: keyid.to_string(),
                        expires: s.clone(),
                    })
                })?)
            }
            Some(_) => {
                return Err(bad(KeysProblem::ExpiresNotString {
                    keyid: keyid.to_string(),
                }));
            }
        };
        keys.push(RegistryKey {
            keyid: keyid.to_string(),
            key,
            expires,
        });
    }
    Ok(KeySet {
        document: json!({ "keys": listed }),
        keys,
    })
}

/// Fetches the registry's key set: `None` when the registry publishes none (HTTP 404).
pub fn fetch_keys(fetcher: &Fetcher, registry: &str) -> Result<Option<KeySet>, AcquireError> {
    let url = keys_url(registry);
    let fetched = fetcher.document(&url)?;
    if fetched.status == 404 {
        return Ok(None);
    }
    if !(200..300).contains(&fetched.status) {
        let fault = FetchFault::Status {
            url,
            status: fetched.status,
        };
        return Err(FetchError::from(fault)
            .of("the registry's signing keys")
            .into());
    }
    let doc = capability_core::json::parse(&fetched.body).map_err(|error| {
        SignatureFault::KeysNotJson {
            registry: registry.to_string(),
            location: url,
            error,
        }
    })?;
    parse_keys(&doc, registry).map(Some)
}

/// The pin file of `registry` in the home.
pub fn pin_path(home: &Home, registry: &str) -> PathBuf {
    home.registry_keys().join(format!(
        "{}.json",
        hex::encode(sha2::Sha256::digest(registry))
    ))
}

/// The pinned key set of `registry`, if any.
pub fn pinned(home: &Home, registry: &str) -> Result<Option<KeySet>, AcquireError> {
    let path = pin_path(home, registry);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(IoError::file(&path, &e)),
    };
    let doc =
        capability_core::json::parse(&bytes).map_err(|error| SignatureFault::KeysNotJson {
            registry: registry.to_string(),
            location: path.display().to_string(),
            error,
        })?;
    parse_keys(&doc, registry).map(Some)
}

/// The key set to verify with: the fetched one, which must equal the pinned one when there is
/// a pin; the pinned one when the registry cannot be reached (`fetched` is an error).
pub fn effective_keys(
    home: &Home,
    registry: &str,
    fetched: Result<Option<KeySet>, AcquireError>,
) -> Result<Option<KeySet>, AcquireError> {
    let pin = pinned(home, registry)?;
    let path = pin_path(home, registry);
    match (fetched, pin) {
        (Err(e), None) => Err(e),
        (Err(_), Some(pin)) => Ok(Some(pin)),
        (Ok(None), Some(_)) => Err(SignatureFault::Unpublished {
            registry: registry.to_string(),
            pin: path,
        }
        .into()),
        (Ok(Some(now)), Some(pin)) if now.document != pin.document => {
            Err(SignatureFault::KeysChanged {
                registry: registry.to_string(),
                pin: path,
            }
            .into())
        }
        (Ok(fetched), _) => Ok(fetched),
    }
}

/// Pins `keys` for `registry` (when nothing is pinned yet).
pub fn pin(home: &Home, registry: &str, keys: &KeySet) -> Result<(), AcquireError> {
    let path = pin_path(home, registry);
    if path.exists() {
        return Ok(());
    }
    let failed = |e: std::io::Error| IoError::file(&path, &e);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(failed)?;
    }
    let mut doc = keys.document.clone();
    doc["registry"] = json!(registry);
    doc["pinnedAt"] = json!(capability_core::js::now_iso());
    let text = serde_json::to_string_pretty(&doc).map_err(|e| IoError::encode(&e))?;
    let tmp = path.with_extension(format!("tmp-{}", uuid::Uuid::new_v4()));
    std::fs::write(&tmp, text + "\n").map_err(failed)?;
    std::fs::rename(&tmp, &path).map_err(failed)
}

/// Checks every signature of `name@version` (whose `dist.integrity` is `integrity`, published
/// at `published`) against `keys`. Returns the key id of the first signature, or `None` when
/// the version carries no signature. An unknown key, a key that had expired when the version
/// was published, or a signature that does not verify is an error.
pub fn verify(
    keys: &KeySet,
    name: &str,
    version: &str,
    integrity: &str,
    signatures: Option<&Value>,
    published: Option<&str>,
) -> Result<Option<String>, AcquireError> {
    let spec = format!("{name}@{version}");
    let signatures = match signatures {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(a)) if a.is_empty() => return Ok(None),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(SignatureFault::NotArray { spec }.into()),
    };
    let message = format!("{spec}:{integrity}");
    let published = published.and_then(capability_core::dates::date_parse);
    let mut first = None;
    for s in signatures {
        let keyid = s.get("keyid").and_then(Value::as_str).unwrap_or_default();
        let key = keys.keys.iter().find(|k| k.keyid == keyid).ok_or_else(|| {
            SignatureFault::UnknownKey {
                spec: spec.clone(),
                keyid: keyid.to_string(),
            }
        })?;
        if let Some(expires) = key.expires {
            let at = published.unwrap_or_else(|| capability_core::js::now_millis() as f64);
            if at >= expires {
                return Err(SignatureFault::ExpiredKey {
                    spec,
                    keyid: keyid.to_string(),
                }
                .into());
            }
        }
        let sig = s
            .get("sig")
            .and_then(Value::as_str)
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .and_then(|der| DerSignature::try_from(der.as_slice()).ok())
            .ok_or_else(|| SignatureFault::Malformed {
                spec: spec.clone(),
                keyid: keyid.to_string(),
            })?;
        key.key
            .verify(message.as_bytes(), &sig)
            .map_err(|_| SignatureFault::DoesNotVerify {
                spec: spec.clone(),
                keyid: keyid.to_string(),
                message: message.clone(),
            })?;
        first.get_or_insert_with(|| keyid.to_string());
    }
    Ok(first)
}
