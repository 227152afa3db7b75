# capability-binders PyPI runner: runs as a module inside the process sandbox (no network, no
# process.spawn, no environment). The host unpacked the bound wheels read-only into
# ./_wheels/<n>/ next to this file and calls execute({module, symbol, kind, script, args,
# kwargs, paths}) through the sandbox's Python shim.
#
# Before the wheel is imported it installs an audit hook (sys.addaudithook) and wraps
# os.environ and a few functions to learn the outcome of what the guest attempts. Everything
# it records is an observation made inside the guest's own interpreter: a native extension can
# act without passing through it. The sandbox enforces the boundary regardless.
#
# The answer is always an output (never a guest error), so that what the guest attempted is
# reported even when the call raised: {ok, result?, exitCode?, error?, stdout,
# observedEffects, observedEffectsTruncated}.
import builtins
import io
import json
import os
import sys
import traceback

_HERE = os.path.dirname(os.path.abspath(__file__))
_OBSERVER = "python-audit-hook"
_MAX_RAW = 20000
_MAX_STDOUT = 64 * 1024

_effects = []
_state = {"truncated": False, "socket": None, "addr": None, "active": False}
_own = [_HERE + os.sep]
for _p in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
           os.path.dirname(os.__file__)}:
    if _p:
        _own.append(os.path.join(_p, ""))

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_FILE_WRITE_EVENTS = {
    "os.remove", "os.rename", "os.mkdir", "os.rmdir", "os.chmod", "os.chown", "os.symlink",
    "os.link", "os.truncate", "os.utime", "shutil.rmtree", "os.mkfifo", "os.mknod",
}
_SPAWN_EVENTS = {
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
    "os.forkpty", "pty.spawn", "os.startfile",
}


def _record(kind, target, allowed=True):
    if not _state["active"]:
        return
    if len(_effects) >= _MAX_RAW:
        _state["truncated"] = True
        return
    entry = {"kind": kind, "target": target, "allowed": allowed, "observer": _OBSERVER}
    if kind.startswith("file.") and (target == "/tmp" or target.startswith("/tmp/")):
        entry["scratch"] = True
    _effects.append(entry)


def _path(value):
    if isinstance(value, int):
        return None
    try:
        value = os.fsdecode(value)
    except Exception:
        return str(value)
    try:
        return os.path.abspath(value)
    except Exception:
        return value


def _internal(path):
    return path is None or any(path.startswith(p) or path + os.sep == p for p in _own)


def _format_address(address):
    if isinstance(address, tuple) and len(address) >= 2:
        host = address[0]
        return "[%s]:%s" % (host, address[1]) if ":" in str(host) else "%s:%s" % (host, address[1])
    if isinstance(address, (bytes, bytearray)):
        return "unix:" + os.fsdecode(bytes(address))
    return "unix:%s" % (address,) if isinstance(address, str) else repr(address)


def _spawn_target(event, args):
    try:
        if event == "subprocess.Popen":
            executable, argv = args[0], args[1]
            if isinstance(argv, (list, tuple)):
                return " ".join(os.fsdecode(a) if isinstance(a, (bytes, str)) else str(a) for a in argv)
            return os.fsdecode(argv) if isinstance(argv, (bytes, str)) else str(executable)
        if event == "os.system":
            return os.fsdecode(args[0])
        if event in ("os.exec", "os.posix_spawn", "os.spawn"):
            return os.fsdecode(args[0]) if event != "os.spawn" else os.fsdecode(args[1])
    except Exception:
        pass
    return event


def _hook(event, args):
    if not _state["active"]:
        return
    try:
        if event == "open":
            path = _path(args[0])
            if _internal(path):
                return
            mode, flags = args[1], args[2] if len(args) > 2 else 0
            write = (isinstance(flags, int) and flags & _WRITE_FLAGS) or (
                isinstance(mode, str) and any(c in mode for c in "wax+"))
            _record("file.write" if write else "file.read", path)
        elif event in ("os.listdir", "os.scandir"):
            path = _path(args[0] if args and args[0] is not None else ".")
            if not _internal(path):
                _record("file.read", path)
        elif event in _FILE_WRITE_EVENTS:
            path = _path(args[0])
            if not _internal(path):
                _record("file.write", path)
        elif event == "socket.getaddrinfo":
            _state["addr"] = "%s:%s" % (args[0], args[1])
        elif event == "socket.__new__":
            _state["socket"] = (args[1], args[2])
        elif event in ("socket.connect", "socket.sendto", "socket.sendmsg"):
            if len(args) > 1 and args[1] is not None:
                _record("network.connect", _format_address(args[1]))
        elif event in _SPAWN_EVENTS:
            _record("process.spawn", _spawn_target(event, args))
    except Exception:
        pass


def _mark_refused(start, kinds):
    """The attempt recorded last since `start` with one of `kinds` did not happen."""
    for entry in reversed(_effects[start:]):
        if entry["kind"] in kinds:
            entry["allowed"] = False
            return True
    return False


def _watch(fn, kinds, on_refused=None):
    def wrapper(*args, **kwargs):
        start = len(_effects)
        try:
            return fn(*args, **kwargs)
        except OSError:
            if not _mark_refused(start, kinds) and on_refused is not None:
                on_refused(args, kwargs)
            raise
    wrapper.__wrapped__ = fn
    wrapper.__name__ = getattr(fn, "__name__", "wrapper")
    wrapper.__qualname__ = getattr(fn, "__qualname__", wrapper.__name__)
    wrapper.__doc__ = getattr(fn, "__doc__", None)
    return wrapper


def _replace_os(name, wrapper):
    """Replaces os.<name>, keeping os.supports_* truthful (shutil.rmtree checks them)."""
    original = getattr(os, name)
    setattr(os, name, wrapper)
    for group in ("supports_dir_fd", "supports_fd", "supports_follow_symlinks",
                  "supports_effective_ids"):
        members = getattr(os, group, None)
        if isinstance(members, set) and original in members:
            members.add(wrapper)


def _install():
    import socket
    import subprocess

    file_kinds = ("file.read", "file.write")
    watched_open = _watch(io.open, file_kinds)
    builtins.open = watched_open
    io.open = watched_open
    _replace_os("open", _watch(os.open, file_kinds))
    for name in ("listdir", "scandir", "remove", "unlink", "rename", "replace", "mkdir",
                 "makedirs", "rmdir", "chmod", "truncate"):
        if hasattr(os, name):
            _replace_os(name, _watch(getattr(os, name), file_kinds))

    def socket_refused(args, kwargs):
        family = args[1] if len(args) > 1 else kwargs.get("family", -1)
        label, _state["addr"] = _state["addr"] or "socket", None
        try:
            family = socket.AddressFamily(family).name
        except Exception:
            family = str(family)
        _record("network.connect", "%s (%s socket refused)" % (label, family), False)

    socket.socket.__init__ = _watch(socket.socket.__init__, ("network.connect",), socket_refused)
    socket.socket.connect = _watch(socket.socket.connect, ("network.connect",))
    original_connect_ex = socket.socket.connect_ex

    def connect_ex(self, address):
        start = len(_effects)
        code = original_connect_ex(self, address)
        if code:
            _mark_refused(start, ("network.connect",))
        return code

    socket.socket.connect_ex = connect_ex

    spawn = ("process.spawn",)
    subprocess.Popen.__init__ = _watch(subprocess.Popen.__init__, spawn)
    original_system = os.system

    def system(command):
        start = len(_effects)
        code = original_system(command)
        if code == -1 or code == 127 << 8:
            _mark_refused(start, spawn)
        return code

    _replace_os("system", system)
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "execv", "execve", "execl",
                 "execle", "execlp", "execlpe", "execvp", "execvpe", "spawnv", "spawnve",
                 "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnvp", "spawnvpe"):
        if hasattr(os, name):
            _replace_os(name, _watch(getattr(os, name), spawn))

    environ = os.environ

    class _RecordingEnviron(type(environ)):
        """os.environ that records every read (the sandbox passes no environment)."""

        def __getitem__(self, key):
            try:
                value = super().__getitem__(key)
            except KeyError:
                _record("environment.read", str(key), False)
                raise
            _record("environment.read", str(key), True)
            return value

        def __iter__(self):
            _record("environment.read", "*", bool(len(self)))
            return super().__iter__()

        def copy(self):
            _record("environment.read", "*", bool(len(self)))
            return dict(super().items())

    recording = _RecordingEnviron(environ._data, environ.encodekey, environ.decodekey,
                                  environ.encodevalue, environ.decodevalue)
    os.environ = recording
    sys.addaudithook(_hook)


def _resolve(obj, dotted):
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _exit_code(code):
    if code is None:
        return 0
    if isinstance(code, bool):
        return int(code)
    if isinstance(code, int):
        return code
    if code is not None:
        try:
            print(code, file=sys.stderr)
        except Exception:
            pass
    return 1


def _describe(error):
    return {
        "type": type(error).__name__,
        "message": "%s: %s" % (type(error).__name__, error),
        "traceback": "".join(traceback.format_exception(type(error), error, error.__traceback__))[-8000:],
    }


def _call(request):
    import asyncio
    import importlib
    import inspect
    import runpy

    module, symbol, kind = request["module"], request["symbol"], request["kind"]
    args, kwargs = request.get("args") or [], request.get("kwargs") or {}
    if kind == "console-script":
        sys.argv = [request.get("script") or symbol] + [str(a) for a in args]
        try:
            if symbol == "__main__":
                runpy.run_module(module, run_name="__main__", alter_sys=True)
                value = None
            else:
                value = _resolve(importlib.import_module(module), symbol)()
                if inspect.isawaitable(value):
                    value = asyncio.run(value)
            code = _exit_code(value)
        except SystemExit as e:
            code = _exit_code(e.code)
        return {"exitCode": code}
    fn = _resolve(importlib.import_module(module), symbol)
    if not callable(fn):
        raise TypeError("%s:%s is not callable" % (module, symbol))
    value = fn(*args, **kwargs)
    if inspect.isawaitable(value):
        value = asyncio.run(value)
    return {"result": value}


def execute(input, context):
    for rel in input.get("paths") or []:
        sys.path.append(os.path.join(_HERE, rel))
    _install()
    captured = io.StringIO()
    answer = {}
    saved_fd = None
    saved_stdout = sys.stdout
    try:
        # Native writes to fd 1 go to stderr while the guest runs: fd 1 is the protocol.
        sys.stdout.flush()
        saved_fd = os.dup(1)
        os.dup2(2, 1)
    except OSError:
        saved_fd = None
    sys.stdout = captured
    _state["active"] = True
    try:
        answer = _call(input)
        answer["ok"] = True
    except SystemExit as e:
        answer = {"ok": False, "error": {
            "type": "SystemExit", "message": "the function called sys.exit(%r)" % (e.code,),
            "traceback": ""}}
    except BaseException as e:
        answer = {"ok": False, "error": _describe(e)}
    finally:
        _state["active"] = False
        sys.stdout = saved_stdout
        if saved_fd is not None:
            try:
                os.dup2(saved_fd, 1)
                os.close(saved_fd)
            except OSError:
                pass
    if "result" in answer:
        try:
            json.dumps(answer["result"], allow_nan=False)
        except (TypeError, ValueError) as e:
            answer = {"ok": False, "error": {
                "type": "TypeError",
                "message": "the result is not JSON-serializable: %s" % e, "traceback": ""}}
    text = captured.getvalue()
    answer["stdout"] = text[:_MAX_STDOUT]
    answer["stdoutTruncated"] = len(text) > _MAX_STDOUT
    seen, effects = set(), []
    for entry in _effects:
        key = (entry["kind"], entry["target"], entry["allowed"])
        if key not in seen:
            seen.add(key)
            effects.append(entry)
    answer["observedEffects"] = effects
    answer["observedEffectsTruncated"] = _state["truncated"]
    return answer
