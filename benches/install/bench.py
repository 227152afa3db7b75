"""`cap install` against `npm install` of the same package from the same loopback registry.

Whole processes, timed one by one, medians printed as JSON lines and a summary:

* the registry: verdaccio 6.8.0 from tools/registry (no uplinks), on 127.0.0.1, with the
  fixture package `@fixture/capabilities@1.0.0` (crates/cap/tests/fixtures/add-package)
  published into it by npm;
* the index `cap install` resolves against: one document naming that package, served on
  127.0.0.1 by Python's http.server;
* cold: `cap install` into a new home; `npm install` into a new prefix with a new cache;
* warm: `cap install` into a home that already holds the package (the packument and
  tarball are fetched and checked again, the unpack is skipped); `npm install` into a new
  prefix with a cache that already holds the package.

Usage: python3 benches/install/bench.py <path to the release cap binary> [runs=15]
"""

import functools
import http.server
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
REGISTRY_TOOLS = os.path.join(ROOT, "tools", "registry")
FIXTURE = os.path.join(ROOT, "crates", "cap", "tests", "fixtures", "add-package")
PACKAGE = "@fixture/capabilities"
VERSION = "1.0.0"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_verdaccio(work):
    port = free_port()
    config = open(os.path.join(REGISTRY_TOOLS, "config.yaml")).read()
    config = config.replace("@STORAGE@", os.path.join(work, "storage"))
    config = config.replace("@LISTEN@", f"127.0.0.1:{port}")
    path = os.path.join(work, "config.yaml")
    open(path, "w").write(config)
    child = subprocess.Popen(
        [os.path.join(REGISTRY_TOOLS, "node_modules", ".bin", "verdaccio"), "--config", path],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.time() > deadline:
                child.kill()
                sys.exit("verdaccio did not start")
            time.sleep(0.1)
    url = f"http://127.0.0.1:{port}/"
    request = urllib.request.Request(
        f"{url}-/user/org.couchdb.user:bench",
        data=json.dumps({"name": "bench", "password": "bench-pass-123"}).encode(),
        headers={"content-type": "application/json"},
        method="PUT",
    )
    token = json.load(urllib.request.urlopen(request))["token"]
    npmrc = os.path.join(work, "npmrc")
    open(npmrc, "w").write(f"registry={url}\n//127.0.0.1:{port}/:_authToken={token}\n")
    return child, url, npmrc


def publish(work, url, npmrc):
    pkg = os.path.join(work, "pkg")
    os.makedirs(pkg)
    for f in ("package.json", "add.mjs"):
        shutil.copy(os.path.join(FIXTURE, f), pkg)
    npm(["publish"], url, npmrc, cwd=pkg)
    out = npm(["view", f"{PACKAGE}@{VERSION}", "dist.integrity"], url, npmrc, cwd=pkg)
    return out.strip()


def npm(args, url, npmrc, cwd):
    done = subprocess.run(
        ["npm", *args, "--userconfig", npmrc, "--registry", url],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        sys.exit(f"npm {args}: {done.stderr}")
    return done.stdout


def serve_index(work, integrity):
    manifest = json.load(open(os.path.join(FIXTURE, "package.json")))["capability"]["exports"][
        "fixture/add"
    ]["manifest"]
    doc = {
        "indexVersion": "0.1",
        "generatedAt": "2026-01-01T00:00:00.000Z",
        "packages": [
            {
                "name": PACKAGE,
                "version": VERSION,
                "source": "npm",
                "integrity": integrity,
                "capabilities": [{"manifest": manifest, "module": "./add.mjs"}],
            }
        ],
    }
    site = os.path.join(work, "site")
    os.makedirs(site)
    json.dump(doc, open(os.path.join(site, "index.json"), "w"))
    handler = functools.partial(QuietHandler, directory=site)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/index.json"


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def timed(argv, env=None):
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{argv[0]} failed: {done.stdout} {done.stderr}")
    return elapsed * 1000


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cap = os.path.abspath(sys.argv[1])
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    work = tempfile.mkdtemp(prefix="cap-install-bench-")
    child = None
    try:
        child, url, npmrc = start_verdaccio(work)
        integrity = publish(work, url, npmrc)
        server, index = serve_index(work, integrity)
        env = {k: v for k, v in os.environ.items() if k not in ("CAP_HOME", "CAPABILITY_INDEX")}

        def cap_install(home):
            return timed(
                [cap, "install", "fixture/add", "--index", index, "--registry", url,
                 "--home", home, "--lock", os.path.join(home, "capability.lock.json")],
                env,
            )

        def npm_install(prefix, cache):
            return timed(
                ["npm", "install", f"{PACKAGE}@{VERSION}", "--prefix", prefix, "--cache", cache,
                 "--registry", url, "--userconfig", npmrc, "--ignore-scripts", "--no-audit",
                 "--no-fund", "--save-exact", "--loglevel=error", "--update-notifier=false"],
                env,
            )

        fresh = lambda name: tempfile.mkdtemp(prefix=f"{name}-", dir=work)  # noqa: E731
        results = {"cap_cold": [], "cap_warm": [], "npm_cold": [], "npm_warm": []}
        warm_home = fresh("cap-warm")
        cap_install(warm_home)
        warm_cache = fresh("npm-cache")
        npm_install(fresh("npm-prefix"), warm_cache)
        for _ in range(runs):
            results["cap_cold"].append(cap_install(fresh("cap-home")))
            results["cap_warm"].append(cap_install(warm_home))
            results["npm_cold"].append(npm_install(fresh("npm-prefix"), fresh("npm-cache")))
            results["npm_warm"].append(npm_install(fresh("npm-prefix"), warm_cache))
        medians = {k: statistics.median(v) for k, v in results.items()}
        for k, v in results.items():
            print(json.dumps({"workload": k, "runs": len(v), "median_ms": round(medians[k], 1),
                              "min_ms": round(min(v), 1), "max_ms": round(max(v), 1)}))
        for mode in ("cold", "warm"):
            ratio = medians[f"npm_{mode}"] / medians[f"cap_{mode}"]
            print(json.dumps({"compare": mode, "cap_ms": round(medians[f"cap_{mode}"], 1),
                              "npm_ms": round(medians[f"npm_{mode}"], 1),
                              "cap_faster_x": round(ratio, 1), "target_x": 5,
                              "met": ratio >= 5}))
        server.shutdown()
    finally:
        if child is not None:
            child.kill()
            child.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
