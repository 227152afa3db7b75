#!/usr/bin/env bash
# One command for the side-by-side figures: runs the benches group by group, keeps each
# group's raw output, and writes the figures as Markdown (benches/figures.py).
#
#   benches/run.sh [--quick] [--only <group,...>] [--out docs/figures.md]
#
# Groups, in the order they run (--only picks some, in this order whatever the order given):
#
#   core          cargo bench -p capability-core --bench canonical
#   runtime       cargo bench -p capability-runtime --bench invoke, --bench governed
#   policy        cargo bench -p capability-policy --bench decision, --bench policy_scale
#   host          cargo bench -p capability-host --bench host, --bench history
#   mcp           cargo bench -p capability-mcp --bench tools, --bench latency, --bench mcp
#                 (mcp drives the release `cap`, built here unless $CAP_BIN names one; its
#                 gateway rows need server-everything from tools/mcp (`cd tools/mcp && npm
#                 ci`, see .ci/run): without it the bench prints "gateway: skipped" and the
#                 group notes it; without a `cap` the mcp bench is skipped with a note)
#   openapi       cargo bench -p capability-openapi --bench openapi_scale, --bench openapi
#   sandbox       cargo bench -p capability-sandbox --bench sandbox (node, python3, gcc)
#   wasm          cargo bench -p capability-wasm --bench wasm
#   server        cargo bench -p capability-server --bench console, --bench actions
#                 (actions drives the release `cap`, as mcp)
#   main-command  cargo build --release -p cap; in a new temporary home ($CAP_HOME), through
#                 benches/whole_process.sh: the README's main command
#                 `cap exec text/slugify '{"text":"Hello Capability World"}'`, `cap hash`
#                 alone, `cap hash --lines` of 100,000 generated JSON lines (~14 MB), and
#                 `cap run` of the sandbox's node fixture module
#   peers         benches/peers/run.sh   (brane-core from PyPI into benches/peers/.venv)
#   install       benches/install/run.sh (needs tools/registry installed: npm ci there)
#   binders       benches/binders/run.sh (needs tools/pypi/.venv: see .ci/run)
#   python        benches/python/run.sh  (brane-core and maturin from PyPI; a release build of
#                 the Python package, several minutes; CAP_PY_WHEEL=<wheel> skips it)
#
# --quick: criterion gets `--quick --warm-up-time 1 --measurement-time 2` (it stops once its
#   estimate is stable; every criterion bench also gets `--noplot`, quick or not);
#   CAP_BENCH_SIZES=1,10 (tools: 100 and 1,000 tools, not 10,000); CAP_BENCH_CALLS=2000 (mcp,
#   default 20,000) and 500 (latency, default 3,000); PEERS_SAMPLES=1000 PEERS_WARMUP=100
#   (peers, python; default 5000/500); 5 runs instead of 15 (install, binders); 11 runs instead
#   of 21 (whole process). The p50/p99 loops of the other benches have fixed counts.
#
# Outputs (the target directory is $CARGO_TARGET_DIR or target/):
#   target/figures/<group>.log   the raw output (stdout and stderr) of the group's commands,
#                                with `== figures: ...` marker lines around each step
#   target/figures/machine.json  the machine, commit, rustc and the load average at the start
#                                and end of the run
#   docs/figures.md (or --out)   the Markdown: benches/figures.py reads every
#                                target/figures/*.log (logs of groups not run this time are
#                                kept and marked "from an earlier run"; a run without --only
#                                removes them first). `python3 benches/figures.py --splice
#                                README.md` puts the same between the README's
#                                `<!-- figures:begin -->` / `<!-- figures:end -->` markers.
#
# A failing step (a bench that panics, a script that exits non-zero) marks its group failed in
# the figures and on the terminal, with the end of its output; the other steps and groups still
# run. The exit status is 1 when a group failed, 130 when interrupted, else 0.
#
# Time (2-core VM; estimates, no full run of this script has been timed yet): building the
# release benches, `cap` and their dependencies from nothing takes 15-25 minutes (much less
# when target/release is warm: they share one build). The runs themselves with --quick: about
# 15-20 minutes, most of it data the benches generate (host's history fills homes of 1 M audit
# events and 1 M receipts on its first run and keeps them under target/bench-data/; server's
# console writes 1 M audit events every run) and, in the python group, the release build of the
# Python package (CAP_PY_WHEEL skips it). A full run: about an hour (sandbox alone ~5 minutes).
# --out and relative paths are taken from the repository root.
set -uo pipefail
# The whole script is one block, read before it runs: editing this file during a run is safe.
{

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
ALL=(core runtime policy host mcp openapi sandbox wasm server main-command peers install binders python)

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

quick=0
only=""
out="docs/figures.md"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --only) only="${2:?--only needs a comma-separated list of groups}"; shift ;;
    --only=*) only="${1#--only=}" ;;
    --out) out="${2:?--out needs a file}"; shift ;;
    --out=*) out="${1#--out=}" ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown argument: $1 (see benches/run.sh --help)" >&2; exit 2 ;;
  esac
  shift
done

groups=()
if [ -n "$only" ]; then
  IFS=',' read -r -a wanted <<<"$only"
  for w in "${wanted[@]}"; do
    ok=0
    for g in "${ALL[@]}"; do [ "$g" = "$w" ] && ok=1; done
    [ "$ok" = 1 ] || { echo "unknown group: $w (groups: ${ALL[*]})" >&2; exit 2; }
  done
  for g in "${ALL[@]}"; do
    for w in "${wanted[@]}"; do [ "$g" = "$w" ] && groups+=("$g"); done
  done
else
  groups=("${ALL[@]}")
fi

export CARGO_TERM_COLOR=never NO_COLOR=1
target="${CARGO_TARGET_DIR:-target}"
figdir="$target/figures"
mkdir -p "$figdir"
if [ -z "$only" ]; then rm -f "$figdir"/*.log; fi

crit=(--noplot)
runs=15
wp_runs=21
if [ "$quick" = 1 ]; then
  crit=(--noplot --quick --warm-up-time 1 --measurement-time 2)
  runs=5
  wp_runs=11
fi

log=""            # the current group's log
group_failed=0    # whether a step of the current group failed
interrupted=0
trap 'interrupted=1' INT

mark() { echo "== figures: $*" >>"$log"; }

# step <name> <command...>: runs the command into the log; a non-zero exit fails the group.
step() {
  local name="$1"; shift
  mark "step $name: $*"
  local t0=$SECONDS rc
  "$@" >>"$log" 2>&1
  rc=$?
  mark "step $name exit $rc ($((SECONDS - t0)) s)"
  if [ "$rc" != 0 ]; then
    group_failed=1
    echo "    $name failed (exit $rc); see $log" >&2
  fi
  return 0
}

skip() { mark "step $1 skipped: $2"; echo "    $1 skipped: $2" >&2; }
note() { mark "note $*"; echo "    note: $*" >&2; }

# cargo bench of one bench target; criterion ones get the criterion arguments.
bench() {  # bench <crate> <bench> [criterion]
  local args=()
  [ "${3:-}" = criterion ] && args=(-- "${crit[@]}")
  step "$2" cargo bench -p "$1" --bench "$2" "${args[@]}"
}

# The release `cap`, built once per run (or $CAP_BIN); cap_bin is empty when there is none.
cap_bin=""
cap_tried=0
ensure_cap() {
  if [ -n "${CAP_BIN:-}" ]; then
    cap_bin="$CAP_BIN"
    [ -x "$cap_bin" ] || { note "CAP_BIN=$CAP_BIN is not executable"; cap_bin=""; }
    return
  fi
  if [ "$cap_tried" = 0 ]; then
    cap_tried=1
    step build-cap cargo build --release -p cap
  fi
  cap_bin=""
  [ -x "$target/release/cap" ] && cap_bin="$(cd "$(dirname "$target/release/cap")" && pwd)/cap"
  return 0
}

# whole <name> <label> <command...>: benches/whole_process.sh, its line labelled in the log.
whole() {
  local name="$1" label="$2"; shift 2
  mark "step $name: benches/whole_process.sh -n $wp_runs -- $*"
  local t0=$SECONDS rc line
  line="$(benches/whole_process.sh -n "$wp_runs" -- "$@" 2>>"$log")"
  rc=$?
  [ -n "$line" ] && echo "whole-process: $label: $line" >>"$log"
  if [ "$rc" != 0 ]; then
    echo "once more, with its output:" >>"$log"
    "$@" >>"$log" 2>&1 </dev/null
    echo "(exit $?)" >>"$log"
  fi
  mark "step $name exit $rc ($((SECONDS - t0)) s)"
  if [ "$rc" != 0 ]; then
    group_failed=1
    echo "    $name failed (exit $rc); see $log" >&2
  fi
  return 0
}

# 100,000 JSON lines of ~150 bytes (the README's `cap hash --lines` figure used 14 MB).
json_lines() {
  python3 -c '
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(100_000):
        f.write(json.dumps({"id": i, "name": "item-%d" % i, "tags": ["a", "b", "c"], "score": i * 0.5,
                            "text": "Hello Capability World", "nested": {"z": i, "a": [1, 2, 3]}}) + "\n")
' "$1"
}

run_core() { bench capability-core canonical criterion; }
run_runtime() {
  bench capability-runtime invoke criterion
  bench capability-runtime governed criterion
}
run_policy() {
  bench capability-policy decision criterion
  bench capability-policy policy_scale
}
run_host() {
  bench capability-host host criterion
  bench capability-host history
}
run_mcp() {
  if [ "$quick" = 1 ]; then
    CAP_BENCH_SIZES=1,10 bench capability-mcp tools
    CAP_BENCH_CALLS=500 bench capability-mcp latency
  else
    bench capability-mcp tools
    bench capability-mcp latency
  fi
  ensure_cap
  if [ -z "$cap_bin" ]; then
    skip mcp "no release cap (cargo build --release -p cap failed, or CAP_BIN is wrong): the mcp bench drives the real binary"
    return
  fi
  if [ ! -f tools/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js ]; then
    note "tools/mcp is not installed (cd tools/mcp && npm ci, see .ci/run): the mcp bench skips its cap mcp-gateway rows"
  fi
  if [ "$quick" = 1 ]; then
    CAP_BIN="$cap_bin" CAP_BENCH_CALLS=2000 bench capability-mcp mcp
  else
    CAP_BIN="$cap_bin" bench capability-mcp mcp
  fi
}
run_openapi() {
  bench capability-openapi openapi_scale
  bench capability-openapi openapi
}
run_sandbox() { bench capability-sandbox sandbox criterion; }
run_wasm() { bench capability-wasm wasm criterion; }
run_server() {
  bench capability-server console criterion
  ensure_cap
  if [ -z "$cap_bin" ]; then
    skip actions "no release cap (cargo build --release -p cap failed, or CAP_BIN is wrong): the actions bench drives a real cap serve"
    return
  fi
  CAP_BIN="$cap_bin" bench capability-server actions
}
run_main_command() {
  ensure_cap
  if [ -z "$cap_bin" ]; then
    skip whole-process "no release cap (cargo build --release -p cap failed, or CAP_BIN is wrong)"
    return
  fi
  local tmp
  tmp="$(mktemp -d "${TMPDIR:-/tmp}/cap-figures-XXXXXX")"
  # A new home for each command; the first (untimed) run of whole_process.sh creates it, so
  # the timed runs see an existing home, as the README's figure. No index or witness from the
  # caller's environment.
  (
    unset CAPABILITY_INDEX CAP_AUDIT_WITNESS
    export CAP_HOME="$tmp/home-exec"
    whole exec "cap exec text/slugify '{\"text\":\"Hello Capability World\"}' (the README's main command, existing home)" \
      "$cap_bin" exec text/slugify '{"text":"Hello Capability World"}'
    echo "group_failed=$group_failed" >"$tmp/status"
  )
  [ "$(cat "$tmp/status" 2>/dev/null)" = "group_failed=0" ] || group_failed=1
  whole hash "cap hash '{\"text\":\"Hello Capability World\"}' (no home)" \
    "$cap_bin" hash '{"text":"Hello Capability World"}'
  step lines-file json_lines "$tmp/lines.jsonl"
  if [ -s "$tmp/lines.jsonl" ]; then
    wp_runs_saved=$wp_runs; wp_runs=5
    whole hash-lines "cap hash --lines < lines.jsonl, 100,000 lines ($(($(stat -c %s "$tmp/lines.jsonl") / 1000000)) MB; with a bash start)" \
      bash -c '"$0" hash --lines < "$1"' "$cap_bin" "$tmp/lines.jsonl"
    wp_runs=$wp_runs_saved
  fi
  (
    unset CAPABILITY_INDEX CAP_AUDIT_WITNESS
    export CAP_HOME="$tmp/home-run"
    whole run-node "cap run of the sandbox's node fixture (fixtures/add, existing home)" \
      "$cap_bin" run crates/capability-sandbox/tests/fixtures/add-package/package.json fixtures/add '{"a":1,"b":2}'
    echo "group_failed=$group_failed" >"$tmp/status"
  )
  [ "$(cat "$tmp/status" 2>/dev/null)" = "group_failed=0" ] || group_failed=1
  rm -rf "$tmp"
}
run_peers() {
  if [ "$quick" = 1 ]; then
    PEERS_SAMPLES=1000 PEERS_WARMUP=100 step peers benches/peers/run.sh
  else
    step peers benches/peers/run.sh
  fi
}
run_install() {
  if [ ! -x tools/registry/node_modules/.bin/verdaccio ] || ! command -v npm >/dev/null; then
    skip install "verdaccio is not installed (cd tools/registry && npm ci, see .ci/run) or npm is missing"
    return
  fi
  step install benches/install/run.sh "$runs"
}
run_binders() {
  if [ ! -x tools/pypi/.venv/bin/pypi-server ]; then
    skip binders "pypiserver is not installed (python3 -m venv tools/pypi/.venv && tools/pypi/.venv/bin/pip install --require-hashes -r tools/pypi/requirements.lock, see .ci/run)"
    return
  fi
  step binders benches/binders/run.sh "$runs"
}
run_python() {
  if [ "$quick" = 1 ]; then
    PEERS_SAMPLES=1000 PEERS_WARMUP=100 step python benches/python/run.sh
  else
    step python benches/python/run.sh
  fi
}

python3 benches/figures.py --dir "$figdir" --record start --groups "$(IFS=,; echo "${groups[*]}")" \
  $([ "$quick" = 1 ] && echo --quick)
echo "figures: groups ${groups[*]}$([ "$quick" = 1 ] && echo ' (--quick)'); logs in $figdir" >&2

failed=()
i=0
for g in "${groups[@]}"; do
  i=$((i + 1))
  if [ "$interrupted" = 1 ]; then break; fi
  log="$figdir/$g.log"
  : >"$log"
  group_failed=0
  mark "group $g started $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "[$i/${#groups[@]}] $g ..." >&2
  t0=$SECONDS
  "run_${g//-/_}"
  secs=$((SECONDS - t0))
  if [ "$interrupted" = 1 ]; then
    status=interrupted
  elif [ "$group_failed" = 1 ]; then
    status=failed
  elif grep -q '^== figures: step .* skipped: ' "$log" && ! grep -q '^== figures: step .* exit ' "$log"; then
    status=skipped
  else
    status=ok
  fi
  mark "group $g $status ($secs s)"
  [ "$status" = failed ] || [ "$status" = interrupted ] && failed+=("$g")
  echo "[$i/${#groups[@]}] $g $status ($secs s)" >&2
done

python3 benches/figures.py --dir "$figdir" --record end
python3 benches/figures.py --dir "$figdir" --out "$out"
if [ "$interrupted" = 1 ]; then echo "interrupted" >&2; exit 130; fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed groups: ${failed[*]} (see $figdir/<group>.log and $out)" >&2
  exit 1
fi
echo "all groups done" >&2
exit 0
}
