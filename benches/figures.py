#!/usr/bin/env python3
"""Turns the logs of `benches/run.sh` into the side-by-side figures, in Markdown.

    python3 benches/figures.py [--dir target/figures] [--out docs/figures.md]
    python3 benches/figures.py --splice README.md      # between the markers, see below
    python3 benches/figures.py --record start|end --groups core,runtime   # used by run.sh

Reads `<dir>/*.log` (one per group, the raw output of the group's commands with run.sh's
`== figures: ...` marker lines) and `<dir>/machine.json` (what run.sh recorded at the start
and end of the run), and writes, in this order:

* the machine: date (UTC), commit and whether the tree was dirty, nproc, CPU model, memory,
  kernel, rustc, the load average at the start and at the end of the run;
* the groups and their status (a failed group says which step failed and shows the end of its
  output; a skipped one says why);
* per group, one table of every line printed by `capability_test_support::measure`
  (`<label>: p50 <x> µs, p99 <y> µs`) that is not a curve point, criterion's estimates
  (`<id>  time: [lo mid hi]`), and other figure lines the benches print (throughputs, sizes);
* per curve axis (labels `<axis>/<shape>/<size>`, e.g. `policies/named-other/1000`), a table
  with the sizes as rows and the shapes as columns, each cell `p50 / p99`;
* the peer tables as the peer scripts print them (Markdown tables, verbatim), and their JSON
  lines as tables;
* the whole-process lines (`[<label>: ]median X ms (min .., max ..) over N runs`).

`--splice FILE` writes the same figures (headings one level down, no title) into FILE between
the lines `<!-- figures:begin -->` and `<!-- figures:end -->`, replacing what was there; FILE
is left alone, and the exit status is 1, unless both markers are present (begin before end).
Nothing here adds the markers: put them in the README's `## Figures` section by hand.

Standard library only (Python 3.11).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- figures:begin -->", "<!-- figures:end -->"

# The order in which run.sh runs the groups; other logs follow in name order.
GROUP_ORDER = ["core", "runtime", "policy", "host", "mcp", "openapi", "sandbox", "wasm", "server",
               "main-command", "peers", "install", "binders", "python"]

UNIT = r"(?:ns|µs|μs|us|ms|s)"
MEASURE_RE = re.compile(
    r"^(?P<label>.*?):\s+p50\s+(?P<p50>-?[\d.]+)\s*(?P<u50>" + UNIT + r"),\s+p99\s+(?P<p99>-?[\d.]+)\s*(?P<u99>"
    + UNIT + r")\s*$")
CURVE_RE = re.compile(
    r"^(?P<axis>[^/\s]+)/(?P<shape>.+)/(?P<size>\d+(?:\.\d+)?[kKmMgG]?)(?::\s+(?P<variant>.+))?$")
WHOLE_RE = re.compile(
    r"^(?:(?:whole-process:\s+)?(?P<label>.+?):\s+)?median\s+(?P<median>[\d.]+)\s*ms\s+\(min\s+(?P<min>[\d.]+),"
    r"\s+max\s+(?P<max>[\d.]+)\)\s+over\s+(?P<n>\d+)\s+runs\s*$")
CRITERION_RE = re.compile(
    r"^(?P<name>\S.*?)?\s+time:\s+\[(?P<lo>\S+\s\S+)\s+(?P<mid>\S+\s\S+)\s+(?P<hi>\S+\s\S+)\]")
MARKER_RE = re.compile(r"^== figures: (?P<kind>\S+)\s*(?P<rest>.*)$")
GROUP_START_RE = re.compile(r"^(?P<group>\S+) started (?P<at>\S+)")
GROUP_END_RE = re.compile(r"^(?P<group>\S+) (?P<status>ok|failed|skipped|interrupted) \((?P<secs>\d+) s\)(?::\s*(?P<why>.*))?$")
STEP_START_RE = re.compile(r"^(?P<step>\S+): (?P<cmd>.*)$")
STEP_END_RE = re.compile(r"^(?P<step>\S+) (?:exit (?P<rc>-?\d+) \((?P<secs>\d+) s\)|skipped: (?P<why>.*))$")
ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
OTHER_RE = re.compile(r"^[^\s|{=#>\[(].*?: .*")
NOISE = ("warning", "error", "note:", "help:", "Benchmarking", "Warning", "Found ", "Gnuplot",
         "thread '", "test result", "running ", "Compiling", "Finished", "Running", "Blocking",
         "Downloaded", "Downloading", "Updating", "Locking", "Adding", "Installing", "Successfully",
         "Requirement", "WARNING", "DEPRECATION", "Collecting", "Building", "Fresh", "Checking",
         "Executable", "Caused by", "stack backtrace", "Traceback", "  File", "timing ", "building ",
         "installing ", "change:", "ratio = ", "Processing", "Preparing", "Created wheel",
         "Stored in", "Using cached", "Attempting", "Uninstalling", "Obtaining", "📦", "🔗", "🍹",
         "⚠", "💻", "🐍")


# --- parsing ---------------------------------------------------------------------------------

@dataclass
class Measure:
    label: str
    p50: str
    u50: str
    p99: str
    u99: str


@dataclass
class Curve:
    axis: str
    shape: str
    size: str
    p50: str
    u50: str
    p99: str
    u99: str
    group: str = ""


@dataclass
class Whole:
    label: str
    median: str
    min: str
    max: str
    runs: str
    group: str = ""


@dataclass
class Step:
    name: str
    command: str = ""
    status: str = "running"  # ok | failed | skipped | running (no end marker)
    rc: int | None = None
    seconds: int | None = None
    why: str = ""
    tail: list[str] = field(default_factory=list)


@dataclass
class Group:
    name: str
    # ok | failed | skipped | interrupted; incomplete: a start marker and no end marker;
    # unknown: no run.sh markers at all
    status: str = ""
    started: str = ""
    seconds: int | None = None
    why: str = ""
    notes: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    measures: list[Measure] = field(default_factory=list)
    curves: list[Curve] = field(default_factory=list)
    criterion: list[tuple[str, str, str, str]] = field(default_factory=list)
    tables: list[tuple[list[str], list[str]]] = field(default_factory=list)  # (rows, notes after)
    json_rows: list[dict] = field(default_factory=list)
    whole: list[Whole] = field(default_factory=list)
    other: list[str] = field(default_factory=list)


def _context_head(line: str) -> str:
    return line.rsplit(": ", 1)[0] if ": " in line else line


def parse_log(text: str, name: str) -> Group:
    """One group's log: its status, steps and every figure line in it."""
    g = Group(name)
    step: Step | None = None
    context = ""  # the last unindented line, for labels printed indented under it
    prev = ""  # the previous non-empty line, for criterion ids printed on a line of their own
    table: list[str] | None = None
    for raw in text.splitlines():
        line = ANSI_RE.sub("", raw).rstrip().replace("\r", "")
        stripped = line.strip()
        if table is not None:
            if stripped.startswith("|"):
                table.append(stripped)
                continue
            g.tables.append((table, []))
            table = None
        if not stripped:
            continue
        if stripped.startswith("ratio = ") and g.tables:
            g.tables[-1][1].append(stripped)
            continue
        m = MARKER_RE.match(line)
        if m:
            kind, rest = m.group("kind"), m.group("rest")
            if kind == "group":
                if s := GROUP_START_RE.match(rest):
                    g.started = s.group("at")
                elif e := GROUP_END_RE.match(rest):
                    g.status, g.seconds = e.group("status"), int(e.group("secs"))
                    g.why = e.group("why") or ""
            elif kind == "step":
                if e := STEP_END_RE.match(rest):
                    st = step if step is not None and step.name == e.group("step") else Step(e.group("step"))
                    if st is not step:
                        g.steps.append(st)
                    if e.group("why") is not None:
                        st.status, st.why = "skipped", e.group("why")
                    else:
                        st.rc, st.seconds = int(e.group("rc")), int(e.group("secs"))
                        st.status = "ok" if st.rc == 0 else "failed"
                    step = None
                elif s := STEP_START_RE.match(rest):
                    step = Step(s.group("step"), s.group("cmd"))
                    g.steps.append(step)
            elif kind == "note":
                g.notes.append(rest)
            prev = ""
            continue
        if step is not None:
            step.tail = (step.tail + [stripped])[-15:]
        if stripped.startswith("|"):
            table = [stripped]
            continue
        if stripped.startswith("{") and stripped.endswith("}"):
            try:
                obj = json.loads(stripped)
            except ValueError:
                obj = None
            if isinstance(obj, dict):
                g.json_rows.append(obj)
                continue
        if w := WHOLE_RE.match(stripped):
            g.whole.append(Whole(w.group("label") or "", w.group("median"), w.group("min"), w.group("max"),
                                 w.group("n"), name))
            continue
        if m := MEASURE_RE.match(line):
            label = m.group("label")
            if label[:1].isspace() and context:
                label = "%s — %s" % (context, label.strip())
            label = label.strip()
            vals = (m.group("p50"), _unit(m.group("u50")), m.group("p99"), _unit(m.group("u99")))
            c = CURVE_RE.match(label)
            if c:
                shape = c.group("shape") + (": " + c.group("variant") if c.group("variant") else "")
                g.curves.append(Curve(c.group("axis"), shape, c.group("size"), *vals, group=name))
            else:
                g.measures.append(Measure(label, *vals))
            prev = ""
            continue
        if c := CRITERION_RE.match(line):
            crit = (c.group("name") or "").strip() or prev
            if crit:
                g.criterion.append((crit, c.group("lo"), c.group("mid"), c.group("hi")))
            prev = ""
            continue
        if not line[:1].isspace():
            if OTHER_RE.match(stripped) and not stripped.startswith(NOISE) and (
                    re.search(r"\d", stripped) or "skipped" in stripped):
                g.other.append(stripped)
            if not stripped.startswith("Benchmarking"):
                context = _context_head(stripped)
        if not stripped.startswith(("Benchmarking", "Warning", "Found ", "change:", "thrpt:")):
            prev = stripped
    if table is not None:
        g.tables.append((table, []))
    if not g.status:
        g.status = "incomplete" if g.started or g.steps else "unknown"
    return g


def _unit(u: str) -> str:
    return {"us": "µs", "μs": "µs"}.get(u, u)


def size_key(size: str) -> float:
    m = re.match(r"^([\d.]+)([kKmMgG]?)$", size)
    if not m:
        return float("inf")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2).lower()]


# --- the machine -----------------------------------------------------------------------------

def _run(*argv: str) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def loadavg() -> str:
    return " ".join(_read("/proc/loadavg").split()[:3]) or "?"


def machine_now() -> dict:
    """What this machine and tree are now (run.sh records it at the start of a run)."""
    head = _run("git", "rev-parse", "--short", "HEAD") or "?"
    porcelain = [l for l in _run("git", "status", "--porcelain").splitlines() if l.strip()]
    modified = sum(1 for l in porcelain if not l.startswith("??"))
    untracked = sum(1 for l in porcelain if l.startswith("??"))
    cpu = ""
    for l in _read("/proc/cpuinfo").splitlines():
        if l.lower().startswith("model name"):
            cpu = l.split(":", 1)[1].strip()
            break
    mem = ""
    for l in _read("/proc/meminfo").splitlines():
        if l.startswith("MemTotal:"):
            mem = "%.1f GiB" % (int(l.split()[1]) / 1024 / 1024)
            break
    os_name = ""
    for l in _read("/etc/os-release").splitlines():
        if l.startswith("PRETTY_NAME="):
            os_name = l.split("=", 1)[1].strip().strip('"')
    try:
        nproc = _run("nproc") or str(len(os.sched_getaffinity(0)))
    except AttributeError:
        nproc = str(os.cpu_count())
    return {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": head,
        "dirty": bool(porcelain),
        "modified": modified,
        "untracked": untracked,
        "nproc": nproc,
        "cpu": cpu or platform.processor() or "?",
        "memory": mem or "?",
        "kernel": platform.release(),
        "os": os_name,
        "rustc": _run("rustc", "--version") or "?",
        "python": platform.python_version(),
        "load_start": loadavg(),
    }


def record(directory: Path, when: str, groups: str, quick: bool) -> None:
    path = directory / "machine.json"
    directory.mkdir(parents=True, exist_ok=True)
    if when == "start":
        info = machine_now()
        info["groups"] = [g for g in groups.split(",") if g]
        info["quick"] = quick
        info["started"] = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    else:
        try:
            info = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            info = machine_now()
        info["load_end"] = loadavg()
        info["ended"] = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    path.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")


# --- rendering -------------------------------------------------------------------------------

def cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def pair(p50: str, u50: str, p99: str, u99: str) -> str:
    if u50 == u99:
        return "%s / %s %s" % (p50, p99, u50)
    return "%s %s / %s %s" % (p50, u50, p99, u99)


def machine_section(info: dict, h: str) -> list[str]:
    dirty = ""
    if info.get("dirty"):
        dirty = " (dirty: %s modified, %s untracked)" % (info.get("modified", "?"), info.get("untracked", "?"))
    started, ended = info.get("started", ""), info.get("ended", "")
    span = ""
    if started and ended:
        try:
            a = dt.datetime.strptime(started, "%Y-%m-%dT%H:%M:%SZ")
            b = dt.datetime.strptime(ended, "%Y-%m-%dT%H:%M:%SZ")
            span = " (%d min)" % round((b - a).total_seconds() / 60)
        except ValueError:
            pass
    rows = [
        ("Date", info.get("date", "?") + (", ended %s%s" % (ended.replace("T", " ").replace("Z", " UTC"), span)
                                          if ended else "")),
        ("Commit", "`%s`%s" % (info.get("commit", "?"), dirty)),
        ("CPUs (nproc)", info.get("nproc", "?")),
        ("CPU", info.get("cpu", "?")),
        ("Memory", info.get("memory", "?")),
        ("Kernel", info.get("kernel", "?") + ((" (%s)" % info["os"]) if info.get("os") else "")),
        ("rustc", info.get("rustc", "?")),
        ("Load average (1, 5, 15 min)", "start %s, end %s" % (info.get("load_start", "?"),
                                                            info.get("load_end", "not recorded"))),
    ]
    if "quick" in info:
        rows.append(("Mode", "`--quick` (fewer samples)" if info["quick"] else "full"))
    out = [h + " Machine", "", "| | |", "| --- | --- |"]
    out += ["| %s | %s |" % (cell(k), cell(v)) for k, v in rows]
    return out + [""]


def status_text(g: Group) -> str:
    if g.status == "ok":
        return "ok"
    if g.status == "skipped":
        return "skipped"
    if g.status == "unknown":
        return "— (no run.sh markers)"
    return "**%s**" % g.status


def groups_section(groups: list[Group], info: dict, h: str) -> list[str]:
    out = [h + " Groups", "", "| Group | Status | Time | Notes |", "| --- | --- | --- | --- |"]
    for g in groups:
        notes = []
        if g.why:
            notes.append(g.why)
        for s in g.steps:
            if s.status == "failed":
                notes.append("`%s` failed (exit %s)" % (s.name, s.rc))
            elif s.status == "skipped":
                notes.append("`%s` skipped: %s" % (s.name, s.why))
            elif s.status == "running":
                notes.append("`%s` did not finish" % s.name)
        notes += g.notes
        if g.started and info.get("started") and g.started < info["started"]:
            notes.append("from an earlier run (%s)" % g.started)
        secs = "%d min %02d s" % divmod(g.seconds, 60) if g.seconds is not None else "—"
        out.append("| %s | %s | %s | %s |" % (g.name, status_text(g), secs, cell("; ".join(notes)) or ""))
    for name in info.get("groups", []):
        if name not in {g.name for g in groups}:
            out.append("| %s | **not run** (no log) | — | |" % name)
    return out + [""]


def group_section(g: Group, h: str) -> list[str]:
    elsewhere = g.curves or g.tables or g.json_rows or g.whole
    if g.status in ("ok", "unknown") and elsewhere and not (g.measures or g.criterion or g.other):
        return []  # its figures are in the curve, peer or whole-process sections
    out = ["%s %s" % (h, g.name), ""]
    if g.status not in ("ok", "unknown"):
        out += ["Status: %s%s." % (status_text(g), (": " + g.why) if g.why else ""), ""]
    for s in g.steps:
        if s.status in ("failed", "running") and s.tail:
            out += ["<details><summary>end of <code>%s</code>'s output (%s)</summary>" % (
                s.name, "exit %s" % s.rc if s.rc is not None else "did not finish"), "", "```text"]
            out += s.tail + ["```", "", "</details>", ""]
    if g.measures:
        out += ["| Benchmark | p50 | p99 |", "| --- | --- | --- |"]
        out += ["| %s | %s %s | %s %s |" % (cell(m.label), m.p50, m.u50, m.p99, m.u99) for m in g.measures]
        out.append("")
    if g.criterion:
        out += ["Criterion's estimates:", "", "| Benchmark | estimate | 95% interval |", "| --- | --- | --- |"]
        out += ["| %s | %s | %s – %s |" % (cell(n), mid, lo, hi) for n, lo, mid, hi in g.criterion]
        out.append("")
    if g.other:
        out += ["Other lines:", "", "```text"] + g.other + ["```", ""]
    if not (g.measures or g.criterion or g.other or elsewhere):
        out += ["No figures in the log.", ""]
    return out


def curve_sections(groups: list[Group], h: str) -> list[str]:
    axes: dict[str, list[Curve]] = {}
    for g in groups:
        for c in g.curves:
            axes.setdefault(c.axis, []).append(c)
    if not axes:
        return []
    out = [h + " Curves", "", "Each cell is p50 / p99 at that size (rows) and shape (columns).", ""]
    for axis, points in axes.items():
        shapes: list[str] = []
        sizes: list[str] = []
        cells: dict[tuple[str, str], str] = {}
        for c in points:
            if c.shape not in shapes:
                shapes.append(c.shape)
            if c.size not in sizes:
                sizes.append(c.size)
            cells[(c.size, c.shape)] = pair(c.p50, c.u50, c.p99, c.u99)
        sizes.sort(key=size_key)
        groups_of = sorted({c.group for c in points})
        out += ["%s# `%s` (%s)" % (h, axis, ", ".join(groups_of)), ""]
        out.append("| size | " + " | ".join(cell(s) for s in shapes) + " |")
        out.append("| --- |" + " --- |" * len(shapes))
        for size in sizes:
            out.append("| %s | " % size + " | ".join(cells.get((size, s), "—") for s in shapes) + " |")
        out.append("")
    return out


def json_tables(rows: list[dict]) -> list[str]:
    """JSON lines as tables: one per set of keys; a set with one row as field / value."""
    by_keys: dict[tuple, list[dict]] = {}
    for r in rows:
        by_keys.setdefault(tuple(r.keys()), []).append(r)
    out = []
    for keys, rs in by_keys.items():
        if len(rs) == 1:
            out += ["| field | value |", "| --- | --- |"]
            out += ["| %s | %s |" % (cell(k), cell(json.dumps(v) if not isinstance(v, str) else v))
                    for k, v in rs[0].items()]
        else:
            out += ["| " + " | ".join(cell(k) for k in keys) + " |", "| --- |" + " --- |" * (len(keys) - 1)]
            for r in rs:
                out.append("| " + " | ".join(cell(r[k] if isinstance(r[k], str) else json.dumps(r[k]))
                                             for k in keys) + " |")
        out.append("")
    return out


def peer_sections(groups: list[Group], h: str) -> list[str]:
    with_tables = [g for g in groups if g.tables or g.json_rows]
    if not with_tables:
        return []
    out = [h + " Peers", ""]
    for g in with_tables:
        out += ["%s# %s" % (h, g.name), ""]
        for rows, notes in g.tables:
            out += rows + [""]
            out += [n + "" for n in notes]
            if notes:
                out.append("")
        out += json_tables(g.json_rows)
    return out


def whole_section(groups: list[Group], h: str) -> list[str]:
    rows = [w for g in groups for w in g.whole]
    if not rows:
        return []
    out = [h + " Whole process", "", "| Command | median | min | max | runs |", "| --- | --- | --- | --- | --- |"]
    out += ["| %s | %s ms | %s ms | %s ms | %s |" % (cell(w.label or w.group), w.median, w.min, w.max, w.runs)
            for w in rows]
    return out + [""]


def render(groups: list[Group], info: dict, level: int = 1) -> str:
    """The Markdown: a title at `level` (none when splicing), sections one level below."""
    h = "#" * (level + 1)
    out: list[str] = []
    if level == 1:
        out += ["# Figures", "",
                "Generated by `benches/run.sh` (`benches/figures.py`); absolute times vary from machine to "
                "machine and with the load, compare figures of one run.", ""]
    out += machine_section(info, h)
    out += groups_section(groups, info, h)
    out += [h + " Measurements", "",
            "p50 / p99 over individually timed calls (`capability_test_support::measure`); criterion's "
            "estimates beside them where the bench runs criterion.", ""]
    for g in groups:
        out += group_section(g, h + "#")
    out += curve_sections(groups, h)
    out += peer_sections(groups, h)
    out += whole_section(groups, h)
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n"


def load(directory: Path) -> tuple[list[Group], dict]:
    logs = {p.stem: p for p in directory.glob("*.log")}
    order = [n for n in GROUP_ORDER if n in logs] + sorted(n for n in logs if n not in GROUP_ORDER)
    groups = [parse_log(logs[n].read_text(encoding="utf-8", errors="replace"), n) for n in order]
    try:
        info = json.loads((directory / "machine.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        info = machine_now()
        info["load_start"] = "not recorded (now: %s)" % info["load_start"]
    return groups, info


def splice(path: Path, body: str) -> bool:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    begin = next((i for i, l in enumerate(lines) if l.strip() == BEGIN), None)
    end = next((i for i, l in enumerate(lines) if l.strip() == END), None)
    if begin is None or end is None or end < begin:
        return False
    new = "".join(lines[:begin + 1]) + "\n" + body + "\n" + "".join(lines[end:])
    path.write_text(new, encoding="utf-8")
    return True


def default_dir() -> Path:
    target = os.environ.get("CARGO_TARGET_DIR")
    return (Path(target) if target else ROOT / "target") / "figures"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dir", type=Path, default=None, help="the logs (default target/figures)")
    p.add_argument("--out", help="write the Markdown here (default: standard output)")
    p.add_argument("--splice", type=Path, help="replace the text between the figures markers of this file")
    p.add_argument("--record", choices=["start", "end"], help="record the machine and load in machine.json")
    p.add_argument("--groups", default="", help="with --record start: the groups of the run")
    p.add_argument("--quick", action="store_true", help="with --record start: the run is a --quick one")
    args = p.parse_args(argv)
    directory = args.dir or default_dir()
    if args.record:
        record(directory, args.record, args.groups, args.quick)
        return 0
    groups, info = load(directory)
    if args.splice:
        if not splice(args.splice, render(groups, info, level=2)):
            print("%s: no %s ... %s lines (in that order); left unchanged" % (args.splice, BEGIN, END),
                  file=sys.stderr)
            return 1
        print("figures spliced into %s" % args.splice, file=sys.stderr)
    text = render(groups, info)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text, encoding="utf-8")
        print("figures written to %s" % args.out, file=sys.stderr)
    elif not args.splice:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
