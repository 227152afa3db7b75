"""Pairs brane-core's and our JSON lines by workload and prints them with their ratios."""

import json
import platform
import sys


def load(path):
    rows = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                row = json.loads(line)
                rows[row["workload"]] = row
    return rows


LABELS = {
    "1_policy": "1 policy, memory",
    "100_policies": "100 policies, memory",
    "1_policy_jsonl": "1 policy, JSONL audit",
}


def main():
    brane, ours = load(sys.argv[1]), load(sys.argv[2])
    print("| workload | brane-core p50 | ours p50 | ratio p50 | brane-core p99 | ours p99 | ratio p99 |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for key, label in LABELS.items():
        b, o = brane.get(key), ours.get(key)
        if not b or not o:
            print("| %s | %s | %s | — | | | |" % (label, "missing" if not b else "", "missing" if not o else ""))
            continue
        print("| %s | %.1f µs | %.1f µs | %.1f× | %.1f µs | %.1f µs | %.1f× |" % (
            label, b["p50_us"], o["p50_us"], b["p50_us"] / o["p50_us"],
            b["p99_us"], o["p99_us"], b["p99_us"] / o["p99_us"]))
    print()
    print("ratio = brane-core time / our time (higher is faster for us); %s, %s; absolute times "
          "vary from machine to machine." % (platform.machine(), platform.python_version()))


if __name__ == "__main__":
    main()
