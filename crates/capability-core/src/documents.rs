//! Typed serde models of the 1.x documents that [`crate::manifest`], [`crate::plan`] and
//! [`crate::receipt`] do not already define.
//!
//! Every model keeps members it does not know in an `extra` map and keeps a present `null`
//! distinct from an absent member, so a document read and written again has the same
//! canonical hash. Validate untrusted JSON with [`crate::validate`] first: these types
//! describe valid documents.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::manifest::Manifest;

macro_rules! document {
    ($ty:ident) => {
        impl $ty {
            /// Reads the document.
            pub fn from_value(value: &Value) -> Result<Self, serde_json::Error> {
                serde_json::from_value(value.clone())
            }

            /// The document as JSON.
            pub fn to_value(&self) -> Value {
                serde_json::to_value(self).unwrap_or(Value::Null)
            }
        }
    };
}

/// One export of a package declaration: a legacy module path, or an inert descriptor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PackageExport {
    Descriptor(Box<PackageExportDescriptor>),
    Legacy(String),
}

/// `{module, manifest, integrity?}`: an export that can be inspected before any code loads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PackageExportDescriptor {
    pub module: String,
    pub manifest: Manifest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integrity: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The `capability` member of package.json.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PackageDeclaration {
    pub spec_version: String,
    pub exports: indexmap_like::OrderedMap<PackageExport>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
document!(PackageDeclaration);

/// An ordered string-keyed map (member order as written).
pub mod indexmap_like {
    use serde::de::{Deserializer, MapAccess, Visitor};
    use serde::ser::{SerializeMap, Serializer};
    use serde::{Deserialize, Serialize};

    /// Members in document order.
    #[derive(Clone, Debug, PartialEq, Default)]
    pub struct OrderedMap<V>(pub Vec<(String, V)>);

    impl<V> OrderedMap<V> {
        pub fn get(&self, key: &str) -> Option<&V> {
            self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
        }
        pub fn iter(&self) -> impl Iterator<Item = (&String, &V)> {
            self.0.iter().map(|(k, v)| (k, v))
        }
        pub fn len(&self) -> usize {
            self.0.len()
        }
        pub fn is_empty(&self) -> bool {
            self.0.is_empty()
        }
    }

    impl<V: Serialize> Serialize for OrderedMap<V> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut map = s.serialize_map(Some(self.0.len()))?;
            for (k, v) in &self.0 {
                map.serialize_entry(k, v)?;
            }
            map.end()
        }
    }

    impl<'de, V: Deserialize<'de>> Deserialize<'de> for OrderedMap<V> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V2<V>(std::marker::PhantomData<V>);
            impl<'de, V: Deserialize<'de>> Visitor<'de> for V2<V> {
                type Value = OrderedMap<V>;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
                    let mut out: Vec<(String, V)> = Vec::new();
                    while let Some((k, v)) = a.next_entry::<String, V>()? {
                        match out.iter_mut().find(|(key, _)| *key == k) {
                            Some(slot) => slot.1 = v,
                            None => out.push((k, v)),
                        }
                    }
                    Ok(OrderedMap(out))
                }
            }
            d.deserialize_map(V2(std::marker::PhantomData))
        }
    }
}

/// A capability of a public index.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IndexCapability {
    pub manifest: Manifest,
    pub module: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integrity: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A package of a public index: exact version, source and inert descriptors.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IndexPackage {
    pub name: String,
    pub version: String,
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integrity: Option<String>,
    pub capabilities: Vec<IndexCapability>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A public capability index (`indexVersion: "0.1"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityIndex {
    pub index_version: String,
    pub generated_at: String,
    pub packages: Vec<IndexPackage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub federates: Option<Vec<String>>,
    #[serde(
        default,
        deserialize_with = "crate::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub metadata: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
document!(CapabilityIndex);

/// `{name, version?}` of a site's package.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SitePackage {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// An MCP endpoint a site advertises.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SiteMcp {
    pub transport: String,
    /// Checked only for the stdio transport.
    #[serde(
        default,
        deserialize_with = "crate::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub command: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    /// Checked only for the http transport.
    #[serde(
        default,
        deserialize_with = "crate::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub url: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The `/.well-known/capabilities` document (`capabilityDiscoveryVersion: "0.1"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SiteDocument {
    pub capability_discovery_version: String,
    pub indexes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<SitePackage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<Vec<SiteMcp>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documentation: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    #[serde(
        default,
        deserialize_with = "crate::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub metadata: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
document!(SiteDocument);

/// The npm CLI a bridge wraps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BridgeTarget {
    pub kind: String,
    pub package: String,
    pub version: String,
    pub bin: String,
    pub bin_path: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Whether the effect surface is fully known.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BridgeAuthority {
    pub complete: bool,
    /// Not checked by the format.
    #[serde(
        default,
        deserialize_with = "crate::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub note: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A `capability.bridge.json` document (`bridgeVersion: "0.1"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BridgeDocument {
    pub bridge_version: String,
    pub manifest: Manifest,
    pub target: BridgeTarget,
    pub authority: BridgeAuthority,
    #[serde(
        default,
        deserialize_with = "crate::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub source: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
document!(BridgeDocument);

/// The authority of a metabolic binding.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BindingAuthority {
    pub complete: bool,
    pub effects: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A `MetabolicBinding` 1.0: exact artifact identity, authority and evidence.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetabolicBinding {
    pub binding_version: String,
    pub binder_id: String,
    pub substrate: String,
    pub locator: String,
    pub immutable_artifact: String,
    pub created_at: String,
    pub authority: BindingAuthority,
    pub evidence: Vec<String>,
    #[serde(
        default,
        deserialize_with = "crate::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub metadata: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
document!(MetabolicBinding);

/// `{complete, effects}` as an execution receipt records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReceiptAuthority {
    pub complete: bool,
    pub effects: Vec<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A `MetabolicExecutionReceipt` 1.0.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetabolicExecutionReceipt {
    pub receipt_version: String,
    pub binder_id: String,
    pub substrate: String,
    pub locator: String,
    pub immutable_artifact: String,
    pub status: String,
    pub started_at: String,
    pub ended_at: String,
    pub authority: ReceiptAuthority,
    pub evidence: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<String>,
    #[serde(
        default,
        deserialize_with = "crate::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub upstream_receipt: Option<Value>,
    #[serde(
        default,
        deserialize_with = "crate::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub metadata: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
document!(MetabolicExecutionReceipt);

/// What a gap requires of the missing capability.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GapRequired {
    #[serde(
        default,
        deserialize_with = "crate::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub input: Option<Value>,
    #[serde(
        default,
        deserialize_with = "crate::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub output: Option<Value>,
    pub effects_ceiling: Vec<String>,
    pub verification: Vec<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// What was searched before the gap was declared.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GapEvidence {
    pub native_candidates: Vec<Value>,
    pub external_candidates: Vec<Value>,
    pub composition_attempts: Vec<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A capability gap (`gapVersion: "0.1"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityGap {
    pub gap_version: String,
    pub id: String,
    pub intent: String,
    pub created_at: String,
    pub required: GapRequired,
    pub searched: Vec<String>,
    pub evidence: GapEvidence,
    pub status: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
document!(CapabilityGap);

/// The pinned index of a lockfile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LockIndex {
    pub url: String,
    pub digest: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The pinned package of a lockfile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LockPackage {
    pub name: String,
    pub version: String,
    #[serde(
        default,
        deserialize_with = "crate::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub integrity: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The pinned capability of a lockfile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LockCapability {
    pub id: String,
    pub version: String,
    pub module: String,
    #[serde(
        default,
        deserialize_with = "crate::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub integrity: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A `capability.lock.json` (`lockVersion: "1"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityLock {
    pub lock_version: String,
    pub generated_at: String,
    pub index: LockIndex,
    pub package: LockPackage,
    pub capability: LockCapability,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
document!(CapabilityLock);

/// The protocol inventory (`capabilityProtocolInfo()`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProtocolInfo {
    pub protocol_version: String,
    pub stability_line: String,
    pub formats: indexmap_like::OrderedMap<String>,
    pub guarantees: Vec<String>,
}
document!(ProtocolInfo);
