"""Tests of benches/figures.py on sample logs: `python3 -m unittest benches/test_figures.py`
(from the repository root; also works as `python3 benches/test_figures.py`)."""

import importlib.util
import json
import sys
import tempfile
import unittest
from pathlib import Path

_spec = importlib.util.spec_from_file_location("figures", Path(__file__).resolve().parent / "figures.py")
figures = importlib.util.module_from_spec(_spec)
sys.modules["figures"] = figures
_spec.loader.exec_module(figures)

INFO = {
    "date": "2026-05-01 10:00 UTC", "commit": "abc1234", "dirty": True, "modified": 2, "untracked": 1,
    "nproc": "2", "cpu": "AMD EPYC", "memory": "23.5 GiB", "kernel": "6.18.0", "os": "Debian 12",
    "rustc": "rustc 1.95.0", "load_start": "0.50 0.40 0.30", "load_end": "1.50 1.00 0.80",
    "started": "2026-05-01T10:00:00Z", "ended": "2026-05-01T10:25:00Z", "quick": True,
    "groups": ["core", "runtime", "policy", "mcp", "main-command", "peers", "install", "binders"],
}

CORE = """\
== figures: group core started 2026-05-01T10:00:05Z
== figures: step canonical: cargo bench -p capability-core --bench canonical -- --noplot
   Compiling capability-core v0.1.0 (/work/main/crates/capability-core)
    Finished `bench` profile [optimized] target(s) in 1m 02s
     Running benches/canonical.rs (target/release/deps/canonical-0123456789abcdef)
documents: small 210 bytes, large 20480 bytes (canonical)
Benchmarking canonical_hash/200B
Benchmarking canonical_hash/200B: Warming up for 1.0000 s
canonical_hash/200B     time:   [795.12 ns 800.45 ns 806.33 ns]
Found 3 outliers among 100 measurements (3.00%)
Benchmarking parse_and_canonicalize/20KB: Analyzing
parse_and_canonicalize/20KB
                        time:   [215.01 µs 217.20 µs 219.90 µs]
                        change: [-1.2% +0.3% +1.5%] (p = 0.61 > 0.05)
canonical_hash/200B: p50 1.18 µs, p99 1.42 µs
canonical_hash/20KB: p50 71.00 µs, p99 129.00 µs
plan/create: p50 1.16 µs, p99 2.08 µs
== figures: step canonical exit 0 (75 s)
== figures: group core ok (75 s)
"""

RUNTIME_FAILED = """\
== figures: group runtime started 2026-05-01T10:01:20Z
== figures: step invoke: cargo bench -p capability-runtime --bench invoke -- --noplot
invoke/add/memory: p50 3770 ns, p99 7390 ns
invoke/slugify/sqlite: p50 4.15 us, p99 9.50 us
== figures: step invoke exit 0 (40 s)
== figures: step governed: cargo bench -p capability-runtime --bench governed -- --noplot
thread 'main' panicked at crates/capability-runtime/benches/governed.rs:42:9:
the store is locked
error: bench failed, to rerun pass `-p capability-runtime --bench governed`
== figures: step governed exit 101 (3 s)
== figures: group runtime failed (43 s)
"""

POLICY = """\
== figures: group policy started 2026-05-01T10:02:03Z
== figures: step decision: cargo bench -p capability-policy --bench decision -- --noplot
decision, 100 cedar policies (PolicyEngine::evaluate): p50 3.08 µs, p99 4.45 µs
decision_100_cedar_policies
                        time:   [2.9012 µs 2.9500 µs 3.0011 µs]
== figures: step decision exit 0 (20 s)
== figures: step policy_scale: cargo bench -p capability-policy --bench policy_scale
policies/named-other/10: p50 2.90 µs, p99 3.80 µs
policies/cedar/named-other/10: p50 5.00 µs, p99 6.10 µs
policies/named-other/1000: p50 3.10 µs, p99 4.20 µs
policies/cedar/named-other/1000: p50 250.00 µs, p99 1.20 ms
policies/named-other/100: p50 3.00 µs, p99 4.00 µs
policies/all-apply/100: p50 40.00 µs, p99 52.00 µs
== figures: step policy_scale exit 0 (200 s)
== figures: group policy ok (220 s)
"""

MCP = """\
== figures: group mcp started 2026-05-01T10:06:00Z
== figures: step tools: cargo bench -p capability-mcp --bench tools
tools/list/gateway-list/100: p50 50.00 µs, p99 70.00 µs
tools/list/gateway-list/1000: p50 400.00 µs, p99 600.00 µs
== figures: step tools exit 0 (60 s)
== figures: step latency: cargo bench -p capability-mcp --bench latency
latency/gateway-http/1: direct: p50 480.00 µs, p99 900.00 µs
latency/gateway-http/1: through: p50 1100.00 µs, p99 2.10 ms
latency/gateway-http/1: added p50 620.0 µs (difference of the medians), 600.0 µs (median of the paired differences)
== figures: step latency exit 0 (30 s)
== figures: step build-cap: cargo build --release -p cap
== figures: step build-cap exit 0 (2 s)
== figures: note tools/mcp is not installed (cd tools/mcp && npm ci, see .ci/run): the mcp bench skips its cap mcp-gateway rows
== figures: step mcp: cargo bench -p capability-mcp --bench mcp
cap mcp-serve: tools/call text/slugify over stdio: p50 66.00 µs, p99 133.00 µs
cap mcp-serve: tools/call text/slugify over HTTP, 64 concurrent clients: 4013 calls/s, 4013 ok, 0 failed
  latency under load: p50 14.00 ms, p99 40.00 ms
gateway: skipped (install tools/mcp: see .ci/run)
== figures: step mcp exit 0 (50 s)
== figures: group mcp ok (142 s)
"""

MAIN = """\
== figures: group main-command started 2026-05-01T10:10:00Z
== figures: step build-cap: cargo build --release -p cap
== figures: step build-cap exit 0 (1 s)
== figures: step exec: benches/whole_process.sh -n 11 -- /w/target/release/cap exec text/slugify {"text":"Hello Capability World"}
whole-process: cap exec text/slugify (the README's main command): median 11.0 ms (min 9.6, max 12.9) over 11 runs
== figures: step exec exit 0 (1 s)
median 3.8 ms (min 3.1, max 4.4) over 21 runs
== figures: group main-command ok (3 s)
"""

PEERS = """\
== figures: group peers started 2026-05-01T10:12:00Z
== figures: step peers: benches/peers/run.sh
building ours (cargo bench -p capability-runtime --bench peers, release)...
timing brane-core 0.1.0a2 ...
timing ours ...
| workload | brane-core p50 | ours p50 | ratio p50 | brane-core p99 | ours p99 | ratio p99 |
| --- | --- | --- | --- | --- | --- | --- |
| 1 policy, memory | 31.9 µs | 13.1 µs | 2.4× | 74.1 µs | 30.5 µs | 2.4× |

ratio = brane-core time / our time (higher is faster for us); x86_64, 3.11.7; absolute times vary from machine to machine.
== figures: step peers exit 0 (300 s)
== figures: group peers ok (300 s)
"""

INSTALL = """\
== figures: group install started 2026-05-01T10:17:00Z
== figures: step install: benches/install/run.sh 5
{"workload": "cap_cold", "runs": 5, "median_ms": 12.4, "min_ms": 11.0, "max_ms": 14.0}
{"workload": "npm_cold", "runs": 5, "median_ms": 452.0, "min_ms": 430.1, "max_ms": 470.2}
{"compare": "cold", "cap_ms": 12.4, "npm_ms": 452.0, "cap_faster_x": 36.5, "target_x": 5, "met": true}
== figures: step install exit 0 (20 s)
== figures: group install ok (20 s)
"""

BINDERS_SKIPPED = """\
== figures: group binders started 2026-05-01T10:18:00Z
== figures: step binders skipped: pypiserver is not installed (see .ci/run)
== figures: group binders skipped (0 s)
"""


class ParseTest(unittest.TestCase):
    def test_measure_lines_and_criterion(self):
        g = figures.parse_log(CORE, "core")
        self.assertEqual(g.status, "ok")
        self.assertEqual([(m.label, m.p50, m.u50, m.p99, m.u99) for m in g.measures], [
            ("canonical_hash/200B", "1.18", "µs", "1.42", "µs"),
            ("canonical_hash/20KB", "71.00", "µs", "129.00", "µs"),
            ("plan/create", "1.16", "µs", "2.08", "µs"),
        ])
        self.assertEqual(g.criterion, [
            ("canonical_hash/200B", "795.12 ns", "800.45 ns", "806.33 ns"),
            ("parse_and_canonicalize/20KB", "215.01 µs", "217.20 µs", "219.90 µs"),
        ])
        self.assertEqual(g.other, ["documents: small 210 bytes, large 20480 bytes (canonical)"])
        self.assertEqual(g.curves, [])

    def test_units_and_labels_with_colons(self):
        g = figures.parse_log(RUNTIME_FAILED + POLICY, "x")
        labels = {m.label: (m.p50, m.u50, m.p99, m.u99) for m in g.measures}
        self.assertEqual(labels["invoke/add/memory"], ("3770", "ns", "7390", "ns"))
        self.assertEqual(labels["invoke/slugify/sqlite"], ("4.15", "µs", "9.50", "µs"))
        self.assertEqual(labels["decision, 100 cedar policies (PolicyEngine::evaluate)"],
                         ("3.08", "µs", "4.45", "µs"))

    def test_curve_lines(self):
        g = figures.parse_log(POLICY, "policy")
        self.assertEqual(len(g.measures), 1)
        pts = {(c.axis, c.shape, c.size): (c.p50, c.u50, c.p99, c.u99) for c in g.curves}
        self.assertEqual(pts[("policies", "named-other", "1000")], ("3.10", "µs", "4.20", "µs"))
        self.assertEqual(pts[("policies", "cedar/named-other", "1000")], ("250.00", "µs", "1.20", "ms"))
        g = figures.parse_log(MCP, "mcp")
        pts = {(c.axis, c.shape, c.size) for c in g.curves}
        self.assertIn(("latency", "gateway-http: direct", "1"), pts)
        self.assertIn(("tools", "list/gateway-list", "1000"), pts)

    def test_indented_label_takes_the_line_above(self):
        g = figures.parse_log(MCP, "mcp")
        labels = [m.label for m in g.measures]
        self.assertIn("cap mcp-serve: tools/call text/slugify over stdio", labels)
        self.assertIn("cap mcp-serve: tools/call text/slugify over HTTP, 64 concurrent clients — latency under load",
                      labels)
        self.assertIn("gateway: skipped (install tools/mcp: see .ci/run)", g.other)
        self.assertIn("cap mcp-serve: tools/call text/slugify over HTTP, 64 concurrent clients: 4013 calls/s, "
                      "4013 ok, 0 failed", g.other)
        self.assertEqual(g.notes, ["tools/mcp is not installed (cd tools/mcp && npm ci, see .ci/run): the mcp bench "
                                   "skips its cap mcp-gateway rows"])

    def test_whole_process_lines(self):
        g = figures.parse_log(MAIN, "main-command")
        self.assertEqual([(w.label, w.median, w.min, w.max, w.runs) for w in g.whole], [
            ("cap exec text/slugify (the README's main command)", "11.0", "9.6", "12.9", "11"),
            ("", "3.8", "3.1", "4.4", "21"),
        ])

    def test_failed_group(self):
        g = figures.parse_log(RUNTIME_FAILED, "runtime")
        self.assertEqual(g.status, "failed")
        self.assertEqual([(s.name, s.status, s.rc) for s in g.steps],
                         [("invoke", "ok", 0), ("governed", "failed", 101)])
        self.assertEqual(g.steps[1].tail[-1],
                         "error: bench failed, to rerun pass `-p capability-runtime --bench governed`")

    def test_skipped_and_unterminated(self):
        g = figures.parse_log(BINDERS_SKIPPED, "binders")
        self.assertEqual(g.status, "skipped")
        self.assertEqual((g.steps[0].status, g.steps[0].why), ("skipped", "pypiserver is not installed (see .ci/run)"))
        g = figures.parse_log("== figures: group core started 2026-05-01T10:00:05Z\n"
                              "== figures: step canonical: cargo bench\nplan/create: p50 1.00 µs, p99 2.00 µs\n", "core")
        self.assertEqual((g.status, g.steps[0].status), ("incomplete", "running"))
        self.assertEqual(figures.parse_log("plan/create: p50 1.00 µs, p99 2.00 µs\n", "core").status, "unknown")

    def test_peer_table_and_json_lines(self):
        g = figures.parse_log(PEERS, "peers")
        self.assertEqual(len(g.tables), 1)
        rows, notes = g.tables[0]
        self.assertEqual(rows[2], "| 1 policy, memory | 31.9 µs | 13.1 µs | 2.4× | 74.1 µs | 30.5 µs | 2.4× |")
        self.assertTrue(notes[0].startswith("ratio = brane-core time / our time"))
        self.assertEqual(g.other, [])
        g = figures.parse_log(INSTALL, "install")
        self.assertEqual(len(g.json_rows), 3)


class RenderTest(unittest.TestCase):
    def setUp(self):
        self.groups = [figures.parse_log(t, n) for t, n in (
            (CORE, "core"), (RUNTIME_FAILED, "runtime"), (POLICY, "policy"), (MCP, "mcp"),
            (MAIN, "main-command"), (PEERS, "peers"), (INSTALL, "install"), (BINDERS_SKIPPED, "binders"))]
        self.md = figures.render(self.groups, INFO)

    def test_machine(self):
        self.assertTrue(self.md.startswith("# Figures\n"))
        for line in ("| Date | 2026-05-01 10:00 UTC, ended 2026-05-01 10:25:00 UTC (25 min) |",
                     "| Commit | `abc1234` (dirty: 2 modified, 1 untracked) |",
                     "| CPUs (nproc) | 2 |", "| CPU | AMD EPYC |", "| Memory | 23.5 GiB |",
                     "| Kernel | 6.18.0 (Debian 12) |", "| rustc | rustc 1.95.0 |",
                     "| Load average (1, 5, 15 min) | start 0.50 0.40 0.30, end 1.50 1.00 0.80 |",
                     "| Mode | `--quick` (fewer samples) |"):
            self.assertIn(line + "\n", self.md)

    def test_groups_table(self):
        self.assertIn("| core | ok | 1 min 15 s |  |\n", self.md)
        self.assertIn("| runtime | **failed** | 0 min 43 s | `governed` failed (exit 101) |\n", self.md)
        self.assertIn("| binders | skipped | 0 min 00 s | `binders` skipped: pypiserver is not installed "
                      "(see .ci/run) |\n", self.md)
        self.assertIn("| mcp | ok | 2 min 22 s | tools/mcp is not installed (cd tools/mcp && npm ci, see .ci/run): "
                      "the mcp bench skips its cap mcp-gateway rows |\n", self.md)

    def test_measure_table(self):
        self.assertIn("### core\n\n"
                      "| Benchmark | p50 | p99 |\n| --- | --- | --- |\n"
                      "| canonical_hash/200B | 1.18 µs | 1.42 µs |\n"
                      "| canonical_hash/20KB | 71.00 µs | 129.00 µs |\n"
                      "| plan/create | 1.16 µs | 2.08 µs |\n\n"
                      "Criterion's estimates:\n\n"
                      "| Benchmark | estimate | 95% interval |\n| --- | --- | --- |\n"
                      "| canonical_hash/200B | 800.45 ns | 795.12 ns – 806.33 ns |\n"
                      "| parse_and_canonicalize/20KB | 217.20 µs | 215.01 µs – 219.90 µs |\n\n"
                      "Other lines:\n\n```text\ndocuments: small 210 bytes, large 20480 bytes (canonical)\n```\n",
                      self.md)
        self.assertIn("| invoke/add/memory | 3770 ns | 7390 ns |\n", self.md)

    def test_failed_group_section(self):
        self.assertIn("### runtime\n\nStatus: **failed**.\n\n"
                      "<details><summary>end of <code>governed</code>'s output (exit 101)</summary>\n\n```text\n"
                      "thread 'main' panicked at crates/capability-runtime/benches/governed.rs:42:9:\n"
                      "the store is locked\n", self.md)

    def test_curve_tables(self):
        self.assertIn("### `policies` (policy)\n\n"
                      "| size | named-other | cedar/named-other | all-apply |\n| --- | --- | --- | --- |\n"
                      "| 10 | 2.90 / 3.80 µs | 5.00 / 6.10 µs | — |\n"
                      "| 100 | 3.00 / 4.00 µs | — | 40.00 / 52.00 µs |\n"
                      "| 1000 | 3.10 / 4.20 µs | 250.00 µs / 1.20 ms | — |\n", self.md)
        self.assertIn("| size | gateway-http: direct | gateway-http: through |\n| --- | --- | --- |\n"
                      "| 1 | 480.00 / 900.00 µs | 1100.00 µs / 2.10 ms |\n", self.md)
        self.assertIn("| size | list/gateway-list |\n| --- | --- |\n| 100 | 50.00 / 70.00 µs |\n"
                      "| 1000 | 400.00 / 600.00 µs |\n", self.md)

    def test_peers_verbatim_and_json(self):
        self.assertIn("### peers\n\n"
                      "| workload | brane-core p50 | ours p50 | ratio p50 | brane-core p99 | ours p99 | ratio p99 |\n"
                      "| --- | --- | --- | --- | --- | --- | --- |\n"
                      "| 1 policy, memory | 31.9 µs | 13.1 µs | 2.4× | 74.1 µs | 30.5 µs | 2.4× |\n\n"
                      "ratio = brane-core time / our time", self.md)
        self.assertIn("### install\n\n| workload | runs | median_ms | min_ms | max_ms |\n"
                      "| --- | --- | --- | --- | --- |\n| cap_cold | 5 | 12.4 | 11.0 | 14.0 |\n"
                      "| npm_cold | 5 | 452.0 | 430.1 | 470.2 |\n\n| field | value |\n| --- | --- |\n"
                      "| compare | cold |\n", self.md)
        self.assertIn("| met | true |\n", self.md)

    def test_whole_process_table(self):
        self.assertIn("## Whole process\n\n| Command | median | min | max | runs |\n| --- | --- | --- | --- | --- |\n"
                      "| cap exec text/slugify (the README's main command) | 11.0 ms | 9.6 ms | 12.9 ms | 11 |\n"
                      "| main-command | 3.8 ms | 3.1 ms | 4.4 ms | 21 |\n", self.md)

    def test_groups_with_figures_elsewhere_only_are_not_in_measurements(self):
        self.assertNotIn("### main-command\n", self.md)
        self.assertNotIn("### peers\n\n## ", self.md)
        self.assertIn("### binders\n\nStatus: skipped.\n\nNo figures in the log.\n", self.md)

    def test_section_order(self):
        heads = [self.md.index(h) for h in ("## Machine", "## Groups", "## Measurements", "## Curves", "## Peers",
                                             "## Whole process")]
        self.assertEqual(heads, sorted(heads))

    def test_group_not_run(self):
        md = figures.render(self.groups[:1], {**INFO, "groups": ["core", "host"]})
        self.assertIn("| host | **not run** (no log) | — | |\n", md)


class FilesTest(unittest.TestCase):
    def test_load_order_and_splice(self):
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            (d / "policy.log").write_text(POLICY, encoding="utf-8")
            (d / "core.log").write_text(CORE, encoding="utf-8")
            (d / "zzz-extra.log").write_text("x/y: p50 1.00 µs, p99 2.00 µs\n", encoding="utf-8")
            (d / "machine.json").write_text(json.dumps(INFO), encoding="utf-8")
            groups, info = figures.load(d)
            self.assertEqual([g.name for g in groups], ["core", "policy", "zzz-extra"])
            self.assertEqual(info["commit"], "abc1234")

            readme = d / "README.md"
            readme.write_text("# T\n\n## Figures\n\nintro\n\n" + figures.BEGIN + "\nold table\n" + figures.END +
                              "\n\nafter\n", encoding="utf-8")
            self.assertEqual(figures.main(["--dir", str(d), "--splice", str(readme)]), 0)
            text = readme.read_text(encoding="utf-8")
            self.assertNotIn("old table", text)
            self.assertTrue(text.startswith("# T\n\n## Figures\n\nintro\n\n" + figures.BEGIN + "\n\n### Machine\n"))
            self.assertTrue(text.endswith("\n" + figures.END + "\n\nafter\n"))
            self.assertNotIn("\n# Figures\n", text)
            self.assertIn("#### core\n", text)
            self.assertIn("#### `policies` (policy)\n", text)
            # Again: idempotent.
            self.assertEqual(figures.main(["--dir", str(d), "--splice", str(readme)]), 0)
            self.assertEqual(readme.read_text(encoding="utf-8"), text)

            plain = d / "plain.md"
            plain.write_text("no markers\n", encoding="utf-8")
            self.assertEqual(figures.main(["--dir", str(d), "--splice", str(plain)]), 1)
            self.assertEqual(plain.read_text(encoding="utf-8"), "no markers\n")

            out = d / "out" / "figures.md"
            self.assertEqual(figures.main(["--dir", str(d), "--out", str(out)]), 0)
            self.assertTrue(out.read_text(encoding="utf-8").startswith("# Figures\n"))

    def test_record(self):
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            figures.main(["--dir", str(d), "--record", "start", "--groups", "core,host", "--quick"])
            info = json.loads((d / "machine.json").read_text(encoding="utf-8"))
            self.assertEqual((info["groups"], info["quick"]), (["core", "host"], True))
            self.assertRegex(info["load_start"], r"^[\d.]+ [\d.]+ [\d.]+$")
            figures.main(["--dir", str(d), "--record", "end"])
            info = json.loads((d / "machine.json").read_text(encoding="utf-8"))
            self.assertIn("load_end", info)
            self.assertIn("ended", info)


if __name__ == "__main__":
    unittest.main()
