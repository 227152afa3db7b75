//! Capability gaps (`gapVersion` 0.1). The reference has no runtime validator for gaps, so
//! they are validated against the published schema only.

use serde_json::Value;

use crate::published::{PublishedSchema, validate_published};

/// Validates a capability gap against the published `capability-gap.schema.json` (see
/// [`crate::published`] for the schema rules, including `format` enforcement). Each issue is
/// `<JSON pointer>: <message>`, or just the message for the document root.
pub fn validate_gap(gap: &Value) -> Vec<String> {
    validate_published(PublishedSchema::Gap, gap)
        .into_iter()
        .map(|issue| issue.to_string())
        .collect()
}
