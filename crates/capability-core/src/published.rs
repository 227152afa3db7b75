//! Validation against the published JSON Schemas (`schemas/*.schema.json`).
