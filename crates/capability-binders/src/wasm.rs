//! `capability/wasm-module`: a WASM module pinned by sha256.
