#!/usr/bin/env bash
# Side by side in one run: brane-core's workloads and ours on the same inputs, each pair with
# its ratio. One command on a fresh machine (needs python3 with venv, and cargo):
#
#   benches/peers/run.sh
#
# It creates benches/peers/.venv, installs brane-core==0.1.0a2 from PyPI (pinned with its hash
# in requirements.lock), times brane-core's workloads with brane_bench.py, builds and times
# ours with `cargo bench -p capability-runtime --bench peers`, and prints the table.
# PEERS_SAMPLES and PEERS_WARMUP change the number of timed calls. Absolute times vary from
# machine to machine (and with the load); compare the ratios.
#
# The TypeScript Capability reference (npm @wheresmycoleslaw/capability) is not published in
# any registry this project can reach, so it is not compared here.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$here/.venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check --require-hashes -r "$here/requirements.lock"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
echo "building ours (cargo bench -p capability-runtime --bench peers, release)..." >&2
(cd "$root" && cargo bench --quiet -p capability-runtime --bench peers --no-run) >&2
echo "timing brane-core $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("brane-core"))') ..." >&2
"$venv/bin/python" "$here/brane_bench.py" > "$out/brane.jsonl"
echo "timing ours ..." >&2
(cd "$root" && cargo bench --quiet -p capability-runtime --bench peers) > "$out/ours.jsonl"
python3 "$here/compare.py" "$out/brane.jsonl" "$out/ours.jsonl"
