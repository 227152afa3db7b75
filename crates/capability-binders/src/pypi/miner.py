# capability-binders PyPI miner: runs as a module inside the process sandbox (no network, no
# grants), never imports the wheel. The host places the wheel at ./wheel.whl next to this file
# (read-only) and calls execute({"wheel": <name>, "maxFiles": n}). It returns raw facts only;
# the host scores, sorts and truncates.
import ast
import configparser
import os
import zipfile

_DOC_LIMIT = 2000


def _module_name(path):
    name = path[:-3].replace("/", ".")
    if name.endswith(".__init__"):
        name = name[: -len(".__init__")]
    return name


def _skipped(path):
    parts = path.split("/")
    if any(p.endswith(".dist-info") for p in parts[:-1]):
        return True
    return "tests" in parts[:-1]


def _console_scripts(zf, names):
    found = []
    for name in names:
        parts = name.split("/")
        if len(parts) != 2 or not parts[0].endswith(".dist-info") or parts[1] != "entry_points.txt":
            continue
        try:
            text = zf.read(name).decode("utf-8", "replace")
        except Exception as e:  # an unreadable member is a fact, not a failure
            found.append({"error": "%s: %s" % (name, e)})
            continue
        parser = configparser.ConfigParser(interpolation=None, delimiters=("=",))
        parser.optionxform = str
        try:
            parser.read_string(text)
        except configparser.Error as e:
            found.append({"error": "%s: %s" % (name, e)})
            continue
        if not parser.has_section("console_scripts"):
            continue
        for script, target in parser.items("console_scripts"):
            target = target.split("[", 1)[0].strip()
            module, _, attr = target.partition(":")
            found.append({
                "kind": "console-script",
                "script": script.strip(),
                "module": module.strip(),
                "symbol": attr.strip() or "__main__",
                "path": name,
                "entry": "%s = %s" % (script.strip(), target),
            })
    return found


def _functions(zf, names, max_files):
    found, analyzed, failures = [], 0, []
    for name in names:
        if analyzed >= max_files:
            break
        if not name.endswith(".py") or _skipped(name):
            continue
        analyzed += 1
        try:
            tree = ast.parse(zf.read(name), filename=name)
        except Exception as e:  # parse failures are skipped, as in the reference
            failures.append("%s: %s" % (name, type(e).__name__))
            continue
        module = _module_name(name)
        for node in tree.body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if node.name.startswith("_"):
                continue
            doc = ast.get_docstring(node) or ""
            found.append({
                "kind": "function",
                "module": module,
                "symbol": node.name,
                "lineno": node.lineno,
                "path": name,
                "docstring": doc[:_DOC_LIMIT],
                "async": isinstance(node, ast.AsyncFunctionDef),
            })
    return found, analyzed, failures


def execute(input, context):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), input["wheel"])
    max_files = int(input.get("maxFiles", 120))
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        scripts = _console_scripts(zf, names)
        functions, analyzed, failures = _functions(zf, names, max_files)
    return {
        "consoleScripts": [s for s in scripts if "error" not in s],
        "functions": functions,
        "filesAnalyzed": analyzed,
        "parseFailures": failures + [s["error"] for s in scripts if "error" in s],
    }
