# capability-sandbox python shim: speaks the native protocol for a Python module.
# argv[1] is the module path inside the sandbox. stdin: line 1 = request envelope; after the
# shim answers {"manifest": ..., "hooks": [...]} the host sends {"proceed": true} and closes
# stdin. In a session (line 1 has "session": true) stdin stays open: each further line is one
# more envelope, answered by one response line, until the host closes stdin.
import sys, os, json
# Loaded before the request is read: in a pre-started sandbox this is done ahead of the run.
import importlib.util, inspect

_out = sys.stdout.buffer
sys.stdout = sys.stderr
# Only the shim's own process speaks the protocol; children the guest forks leave quietly.
_PID = os.getpid()


def _send(obj):
    if os.getpid() != _PID:
        os._exit(0)
    try:
        text = json.dumps(obj, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as e:
        text = json.dumps({"error": {"message": "output is not JSON-serializable: %s" % e, "code": "INVALID_OUTPUT"}})
    _out.write(text.encode("utf-8") + b"\n")
    _out.flush()


def _error(e):
    message = "%s: %s" % (type(e).__name__, e)
    code = None
    if isinstance(e, MemoryError):
        code = "ENOMEM"
    elif isinstance(e, OSError) and e.errno is not None:
        import errno
        code = errno.errorcode.get(e.errno, str(e.errno))
    else:
        c = getattr(e, "code", None)
        code = c if isinstance(c, str) else type(e).__name__
    return {"error": {"message": message, "code": code}}


def _finish(value):
    if inspect.isawaitable(value):
        import asyncio

        async def _wait():
            return await value

        return asyncio.run(_wait())
    return value


def _main():
    path = sys.argv[1]
    line = sys.stdin.buffer.readline()
    try:
        envelope = json.loads(line)
        if not isinstance(envelope, dict):
            raise ValueError("missing request envelope")
    except Exception as e:
        _send({"error": {"message": "shim: bad request envelope: %s" % e, "code": "PROTOCOL"}})
        return
    try:
        sys.path.insert(0, os.path.dirname(path))
        spec = importlib.util.spec_from_file_location("capability_module", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["capability_module"] = mod
        spec.loader.exec_module(mod)
    except BaseException as e:
        _send(_error(e))
        return
    execute = getattr(mod, "execute", None)
    if not callable(execute):
        _send({"error": {"message": "module does not define execute(input, context)", "code": "NOT_A_CAPABILITY"}})
        return
    hooks = [h for h in ("plan", "verify", "rollback") if callable(getattr(mod, h, None))]
    _send({"manifest": getattr(mod, "MANIFEST", None), "hooks": hooks})
    try:
        go = json.loads(sys.stdin.buffer.readline() or b"null")
    except Exception:
        go = None
    if not isinstance(go, dict) or go.get("proceed") is not True:
        os._exit(3)
    _run_op(mod, execute, envelope)
    # A session: the host sends one envelope per line and closes stdin when it is done.
    if envelope.get("session") is True:
        while True:
            line = sys.stdin.buffer.readline()
            if not line:
                break
            try:
                nxt = json.loads(line)
            except Exception as e:
                _send({"error": {"message": "shim: bad request envelope: %s" % e, "code": "PROTOCOL"}})
                break
            if not isinstance(nxt, dict):
                break
            _run_op(mod, execute, nxt)


def _run_op(mod, execute, envelope):
    context = {
        "manifest": envelope.get("manifest"),
        "plan": envelope.get("plan"),
        "effects": envelope.get("effects") or [],
        "secrets": envelope.get("secrets") or {},
    }
    op = envelope.get("op")
    try:
        hook = True
        if op == "execute":
            result = _finish(execute(envelope.get("input"), context))
        elif op == "plan":
            fn = getattr(mod, "plan", None)
            if callable(fn):
                result = _finish(fn(envelope.get("input"), context))
            else:
                hook, result = False, {}
        elif op == "verify":
            fn = getattr(mod, "verify", None)
            if callable(fn):
                result = _finish(fn(envelope.get("input"), envelope.get("output"), context))
            else:
                hook, result = False, None
        elif op == "rollback":
            fn = getattr(mod, "rollback", None)
            if not callable(fn):
                mid = (context["manifest"] or {}).get("id")
                _send({"error": {"message": "Capability does not provide rollback(): %s" % mid, "code": "ROLLBACK_UNSUPPORTED"}})
                return
            result = _finish(fn(envelope.get("receipt"), context))
        else:
            _send({"error": {"message": "unknown op %r" % (op,), "code": "PROTOCOL"}})
            return
        _send({"output": result, "hook": hook})
    except BaseException as e:
        _send(_error(e))


try:
    _main()
except BaseException as e:
    try:
        _send(_error(e))
    except BaseException:
        pass
os._exit(0)
