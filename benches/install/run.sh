#!/usr/bin/env bash
# `cap install` against `npm install` of the same package from the same loopback registry
# (verdaccio from tools/registry): whole processes, cold and warm, medians. Builds the
# release `cap` only. Usage: benches/install/run.sh [runs=15]
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -p cap
target="${CARGO_TARGET_DIR:-target}"
exec python3 benches/install/bench.py "$target/release/cap" "${1:-15}"
