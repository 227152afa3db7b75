#!/usr/bin/env bash
# `cap pypi-forge --execute` of a small function from a loopback pypiserver (tools/pypi):
# whole processes, cold (new home: index, download, verify, mine, forge, sandboxed run) and
# warm (the wheel already verified in the home), and the execution alone (from the execution
# receipt). Builds the release `cap` only. Usage: benches/binders/run.sh [runs=15]
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -p cap
target="${CARGO_TARGET_DIR:-target}"
exec python3 benches/binders/bench.py "$target/release/cap" "${1:-15}"
