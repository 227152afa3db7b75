"""`cap pypi-forge --execute` of a small function, whole process, cold and warm.

* the index: pypiserver 2.4.2 from tools/pypi on 127.0.0.1, serving one pure-Python wheel
  (`benchfix-add`, built here with zipfile) whose `add(a, b)` returns `a + b`;
* cold: `cap pypi-forge benchfix-add --execute '[2, 3]' --approve` into a new home and a new
  forge directory (index pages, download, sha256, forge, sandboxed run, receipt, audit);
* warm: the same into a home that already holds the verified wheel (the index is asked
  again, the download is skipped), a new forge directory;
* execution alone: the execution receipt's `endedAt - startedAt` (the binder's run: wheel
  re-hash, unpack, process sandbox, the function), in ms;
* the way without a binder, for scale: `pip install --no-deps --target <new dir>` of the same
  wheel from the same index, then `python3 -c "from benchfix_add import add; print(add(2, 3))"`
  (no isolation, no pinning, no receipt).

Usage: python3 benches/binders/bench.py <path to the release cap binary> [runs=15]
"""

import base64
import hashlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from datetime import datetime

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PYPI_SERVER = os.path.join(ROOT, "tools", "pypi", ".venv", "bin", "pypi-server")
NAME, VERSION = "benchfix-add", "1.0.0"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def build_wheel(directory):
    module = "benchfix_add"
    dist = f"{module}-{VERSION}.dist-info"
    files = {
        f"{module}/__init__.py": b'def add(a, b):\n    """Adds two numbers."""\n    return a + b\n',
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [record_line(p, d) for p, d in files.items()] + [f"{dist}/RECORD,,"]
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = os.path.join(directory, f"{module}-{VERSION}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w") as z:
        for p, d in files.items():
            z.writestr(p, d)
    return path


def start_index(work):
    packages = os.path.join(work, "packages")
    os.makedirs(packages)
    build_wheel(packages)
    port = free_port()
    proc = subprocess.Popen(
        [PYPI_SERVER, "run", "-i", "127.0.0.1", "-p", str(port), "-a", ".", "-P", ".",
         "--disable-fallback", packages],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/simple/"
    for _ in range(200):
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return proc, url
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("pypiserver did not start")


def millis(iso):
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000


def forge(cap, home, index, work, n):
    directory = os.path.join(work, f"forge-{n}")
    started = time.perf_counter()
    out = subprocess.run(
        [cap, "pypi-forge", NAME, "--execute", "[2, 3]", "--approve", "--index-url", index,
         "--directory", directory, "--home", home],
        capture_output=True, text=True)
    elapsed = (time.perf_counter() - started) * 1000
    if out.returncode != 0:
        raise SystemExit(f"cap pypi-forge failed: {out.stderr}{out.stdout}")
    receipt = json.loads(out.stdout)["receipt"]
    assert receipt["status"] == "succeeded", receipt
    assert json.loads(out.stdout)["output"]["result"] == 5
    return elapsed, millis(receipt["endedAt"]) - millis(receipt["startedAt"])


def pip_way(index, work, n):
    target = os.path.join(work, f"pip-{n}")
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--no-deps", "--no-cache-dir", "--index-url", index, "--target", target, NAME],
        check=True, capture_output=True)
    out = subprocess.run(
        [sys.executable, "-c", "from benchfix_add import add; print(add(2, 3))"],
        check=True, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": target})
    assert out.stdout.strip() == "5", out.stdout
    return (time.perf_counter() - started) * 1000


def main():
    cap = os.path.abspath(sys.argv[1])
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    with tempfile.TemporaryDirectory() as work:
        proc, index = start_index(work)
        try:
            cold, warm, run_cold, run_warm, pip = [], [], [], [], []
            warm_home = os.path.join(work, "warm-home")
            forge(cap, warm_home, index, work, "prime")
            for i in range(runs):
                t, r = forge(cap, os.path.join(work, f"home-{i}"), index, work, f"c{i}")
                cold.append(t)
                run_cold.append(r)
                t, r = forge(cap, warm_home, index, work, f"w{i}")
                warm.append(t)
                run_warm.append(r)
                pip.append(pip_way(index, work, i))
        finally:
            proc.kill()
    result = {
        "runs": runs,
        "cold_ms_p50": round(statistics.median(cold), 1),
        "cold_ms_min": round(min(cold), 1),
        "warm_ms_p50": round(statistics.median(warm), 1),
        "warm_ms_min": round(min(warm), 1),
        "execution_ms_p50": round(statistics.median(run_cold + run_warm), 1),
        "pip_install_and_call_ms_p50": round(statistics.median(pip), 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
