//! Built-in text capabilities on a short input, through the public dispatch (`execute`) as
//! the runtime calls them, and through the typed functions.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc; // as `cap` and the Python package allocate

use std::hint::black_box;

use capability_runtime::builtins::{self, text_normalize, text_slugify};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

const SHORT: &str = "  Héllo,   Wörld — Ça va?  ";

fn text_builtins(c: &mut Criterion) {
    let slug_input = json!({ "text": SHORT });
    let normalize_input = json!({ "text": SHORT, "case": "lower" });

    c.bench_function("text/slugify execute (short)", |b| {
        b.iter(|| builtins::execute(black_box("text/slugify"), black_box(&slug_input)))
    });
    c.bench_function("text/slugify fn (short)", |b| {
        b.iter(|| text_slugify::slugify(black_box(SHORT), "-", true))
    });
    c.bench_function("text/slugify fn (short ASCII)", |b| {
        b.iter(|| text_slugify::slugify(black_box("  Hello,   World! Ca va?  "), "-", true))
    });
    c.bench_function("text/normalize execute (short)", |b| {
        b.iter(|| builtins::execute(black_box("text/normalize"), black_box(&normalize_input)))
    });
    let options = text_normalize::NormalizeOptions {
        case: text_normalize::Case::Lower,
        ..Default::default()
    };
    c.bench_function("text/normalize fn (short)", |b| {
        b.iter(|| text_normalize::normalize(black_box(SHORT), &options))
    });
}

criterion_group!(benches, text_builtins);
criterion_main!(benches);
