#!/usr/bin/env bash
# Brane's three workloads from Python, in one run: brane-core 0.1.0a2 against the capability
# package (capability.brane, the native API with Python policies, the native API with Cedar),
# with p50/p99 and the ratios to brane-core. One command on a fresh machine (needs python3 with
# venv, and cargo):
#
#   benches/python/run.sh [--jsonl results.jsonl]
#
# It creates benches/python/.venv, installs brane-core and maturin pinned by hash
# (requirements.lock: brane-core's line is benches/peers/requirements.lock's, maturin's is
# python/requirements.lock's), then the capability package with `pip install ./python`: a
# RELEASE build of the native module through maturin, which takes several minutes on 2 cores
# (it shares the workspace's target/ directory). To skip the build, point CAP_PY_WHEEL at a
# wheel built beforehand (`maturin build --release -m python/Cargo.toml`):
#
#   CAP_PY_WHEEL=target/wheels/capability-0.1.0-cp311-abi3-manylinux_2_34_x86_64.whl benches/python/run.sh
#
# PEERS_SAMPLES and PEERS_WARMUP (default 5000 and 500, as benches/peers) change the number of
# timed calls. Absolute times vary from machine to machine (and with the load); compare the
# ratios. Never run it against a debug build: its figures mean nothing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$here/.venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
pip=("$venv/bin/pip" --quiet --disable-pip-version-check)
"${pip[@]}" install --require-hashes -r "$here/requirements.lock"
if [ -n "${CAP_PY_WHEEL:-}" ]; then
  echo "installing the capability package from $CAP_PY_WHEEL ..." >&2
  "${pip[@]}" install --force-reinstall --no-deps "$CAP_PY_WHEEL"
else
  echo "building and installing the capability package (pip install ./python: a release build, minutes) ..." >&2
  PATH="$venv/bin:$PATH" "${pip[@]}" install --force-reinstall --no-deps --no-build-isolation "$root/python"
fi
# Run from here so that `capability` is the installed package, not the source tree.
cd "$here"
"$venv/bin/python" "$here/bench.py" "$@"
