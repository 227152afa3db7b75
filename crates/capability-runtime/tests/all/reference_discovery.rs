//! The reference's discovery behaviours: lexical discovery finds `math/add` for "arithmetic
//! add", the embedding ranker with a caller-supplied embedder ranks it first, and a created
//! index validates and is discoverable.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capability_core::discovery::DiscoveryQuery;
use capability_core::index::{create_index, discover_index, index_entries, resolve};
use capability_runtime::{Capability, CapabilityRuntime, Embedder, EmbeddingRanker};
use serde_json::{Value, json};

fn manifest(id: &str, name: &str, description: &str, tags: &[&str]) -> Value {
    json!({"specVersion": "0.1", "id": id, "version": "1.0.0", "name": name, "description": description, "effects": [], "tags": tags})
}

fn runtime() -> CapabilityRuntime {
    let rt = CapabilityRuntime::default();
    for m in [
        manifest(
            "math/add",
            "Add",
            "Adds two numbers.",
            &["math", "arithmetic"],
        ),
        manifest("text/upper", "Upper", "Uppercases text.", &["text"]),
        manifest(
            "math/multiply",
            "Multiply",
            "Multiplies two numbers.",
            &["math"],
        ),
    ] {
        rt.register(Capability::inert(&m).unwrap()).unwrap();
    }
    rt
}

/// Bag-of-words over a tiny vocabulary: enough to make cosine similarity meaningful.
struct WordCounts;

impl Embedder for WordCounts {
    fn embed(&self, text: &str) -> Vec<f64> {
        let text = text.to_lowercase();
        [
            "add",
            "arithmetic",
            "sum",
            "text",
            "upper",
            "multiply",
            "numbers",
        ]
        .iter()
        .map(|w| text.matches(w).count() as f64)
        .collect()
    }
}

#[test]
fn lexical_discovery_finds_math_add_first() {
    let hits = runtime().discover(&DiscoveryQuery::text("arithmetic add"));
    assert_eq!(hits[0].capability.id(), "math/add");
    assert!(hits[0].score > hits.get(1).map_or(0.0, |h| h.score));
    assert!(hits.iter().all(|h| h.capability.id() != "text/upper"));
}

#[test]
fn the_embedding_ranker_ranks_math_add_first() {
    let rt = runtime();
    let ranker = EmbeddingRanker {
        embedder: WordCounts,
    };
    let hits = rt
        .discover_with(&DiscoveryQuery::text("sum numbers add"), &ranker)
        .unwrap();
    assert_eq!(hits[0].capability.id(), "math/add");
    assert_eq!(hits[0].reasons, ["ranker"]);
    assert_eq!(
        hits.len(),
        3,
        "every candidate passing the filters is ranked"
    );
    let filtered = DiscoveryQuery {
        text: "upper".into(),
        tags: vec!["text".into()],
        ..Default::default()
    };
    assert_eq!(rt.discover_with(&filtered, &ranker).unwrap().len(), 1);
}

#[test]
fn a_created_index_validates_and_is_discoverable() {
    let package = json!({
        "name": "@fixture/math", "version": "1.0.0", "source": "npm",
        "capabilities": [
            {"manifest": manifest("math/add", "Add", "Adds two numbers.", &["math"]), "module": "./add.js"},
            {"manifest": manifest("math/multiply", "Multiply", "Multiplies two numbers.", &["math"]), "module": "./mul.js"},
        ]
    });
    let index = create_index(
        vec![package],
        "2026-01-01T00:00:00.000Z",
        &["https://index.test/leaf.json".into()],
        None,
    )
    .unwrap();
    assert!(capability_core::validate::validate_index(&index).is_empty());
    let entries = index_entries(&index);
    let hits = discover_index(&entries, &DiscoveryQuery::text("math add"));
    assert_eq!(hits[0].item.manifest.id, "math/add");
    let exact = resolve(&entries, "math/multiply").unwrap();
    assert_eq!(exact.reasons, ["exact-id"]);
    assert!(resolve(&entries, "zzz").is_err());
    let bad = json!({"name": "", "version": "1", "source": "s", "capabilities": []});
    assert!(create_index(vec![bad], "2026-01-01T00:00:00.000Z", &[], None).is_err());
}
