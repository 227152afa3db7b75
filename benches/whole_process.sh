#!/usr/bin/env bash
# Times a whole command N times (default 21) with date +%s%N and prints the median, min and
# max in ms. Usage: benches/whole_process.sh [-n N] -- command args...
set -euo pipefail
n=21
if [[ "${1:-}" == "-n" ]]; then n=$2; shift 2; fi
[[ "${1:-}" == "--" ]] && shift
"$@" >/dev/null 2>&1 || { echo "the command failed: $*" >&2; exit 1; }
times=()
for _ in $(seq "$n"); do
  t0=$(date +%s%N)
  "$@" >/dev/null 2>&1
  t1=$(date +%s%N)
  times+=($(( (t1 - t0) / 1000 )))
done
printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {printf "median %.1f ms (min %.1f, max %.1f) over %d runs\n", a[int((NR+1)/2)]/1000, a[1]/1000, a[NR]/1000, NR}'
