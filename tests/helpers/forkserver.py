"""Python processes for the tests, forked from a server that has already imported torch.

``import torch`` costs about 3 s of CPU here, more than most of the scripts the tests start do (a worker of a
two-process job, a run killed with SIGKILL, an example). The server pays it once per test session: it starts with
the tests' base environment (one thread per process, the repo importable), imports torch and nothing else (a second
server also imports ``pytorch_lightning``, for the reference runs under Lightning: ``preload``), and forks
one child per request. The child becomes what ``python script.py args`` or ``python -c code args`` would be: its own
session, the requested environment, working directory, ``sys.argv``, ``sys.path`` and ``__main__``, fresh random
states, standard output and error in files, standard input empty; the script's end (or ``sys.exit``) is the
interpreter's normal exit, with ``atexit`` handlers and the threading shutdown.

What a child does not get fresh: the environment torch read while it was imported and the interpreter read at its
start (``PYTHON*`` variables other than ``PYTHONPATH`` and ``PYTHONUNBUFFERED``), both the server's, which is
:func:`tests.helpers.dist_spawn.base_env`'s; and torch's modules already in ``sys.modules`` (``tqdm`` among them:
torch's hub imports it). A check of what importing stoker loads may fork when it asks about modules torch does not
load (stoker's own, ``rich``, ``tensorboard``, ``jsonargparse``, ``wandb``, ``mlflow``); tests of what comes with
``import torch``, or of a fresh interpreter's exit, start real interpreters instead.

:func:`popen_python` returns an object with ``Popen``'s methods the tests use (``pid``, ``poll``, ``wait``,
``communicate``, ``send_signal``, ``kill``, ``terminate``, ``returncode``: negative for a signal); :func:`run_python`
is ``subprocess.run(..., capture_output=True, text=True)``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

_SERVER = r'''
import builtins, json, os, select, sys, types

BASE_PATH = [p for p in sys.path[1:] if p not in os.environ.get("PYTHONPATH", "").split(os.pathsep)]
import torch  # noqa: F401  the cost every child would pay again
import contextlib
with contextlib.redirect_stdout(sys.stderr):  # standard output is the protocol's: a word printed at import would break it
    for name in sys.argv[1:]:  # more modules a kind of script always imports (a peer's package for its reference runs)
        __import__(name)


def child(req):
    os.setsid()
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, req["stdout"], os.O_WRONLY | os.O_APPEND),
                            (2, req["stderr"], os.O_WRONLY | os.O_APPEND)):
        new = os.open(path, flags)
        os.dup2(new, fd)
        os.close(new)
    sys.stdin = sys.__stdin__ = open(0, closefd=False)
    buffering = 1 if req["env"].get("PYTHONUNBUFFERED") else -1
    sys.stdout = sys.__stdout__ = open(1, "w", buffering=buffering, closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", buffering=1, closefd=False)
    # The signal dispositions are the server's, which are a fresh interpreter's (it changes none).
    os.environ.clear()
    os.environ.update(req["env"])
    os.chdir(req["cwd"])
    argv = req["argv"]
    if argv[0] == "-c":
        first, source, filename = "", argv[1], "<string>"
        sys.argv = ["-c", *argv[2:]]
    else:
        filename = os.path.abspath(argv[0])
        first, source = os.path.dirname(filename), open(filename, encoding="utf-8").read()
        sys.argv = list(argv)
    extra = [p for p in req["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [first, *extra, *BASE_PATH]
    import random
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if req["env"].get("OMP_NUM_THREADS", "").isdigit():
        torch.set_num_threads(int(req["env"]["OMP_NUM_THREADS"]))
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    if argv[0] != "-c":
        main.__file__ = filename
    sys.modules["__main__"] = main
    exec(compile(source, filename, "exec"), main.__dict__)
    sys.exit(0)


running = {}


def reap():
    while running:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        path = running.pop(pid)
        with open(path + ".part", "w") as f:
            f.write(str(code))
        os.replace(path + ".part", path)


pending = b""
os.write(1, b"ready\n")
while True:
    readable = select.select([0], [], [], 0.02)[0]
    reap()
    if not readable:
        continue
    chunk = os.read(0, 1 << 16)
    if not chunk:
        break  # the test session is over
    pending += chunk
    while b"\n" in pending:
        line, pending = pending.split(b"\n", 1)
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            child(req)  # never returns here: the child's exit unwinds from inside it
        running[pid] = req["status"]
        os.write(1, b"%d\n" % pid)
'''

# STOKER_TESTS_FORK=0: every process is a fresh interpreter (subprocess.Popen), to compare or to rule the server out
FORKED = os.environ.get("STOKER_TESTS_FORK", "1") != "0"
_servers: dict[tuple[str, ...], subprocess.Popen] = {}  # one per set of preloaded modules
_lock = threading.Lock()  # one request at a time (the session's background launches start from threads)


def _start_server(preload: tuple[str, ...] = ()) -> subprocess.Popen:
    server = _servers.get(preload)
    if server is None or server.poll() is not None:
        from tests.helpers.dist_spawn import REPO, base_env

        server = _servers[preload] = subprocess.Popen([sys.executable, "-c", _SERVER, *preload],
                                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=base_env(),
                                                      cwd=str(REPO))
        assert server.stdout.readline() == b"ready\n", f"the fork server (preloading {preload}) did not start"
    return server


class ForkedProcess:
    """A child of the fork server, with the ``subprocess.Popen`` methods the tests use."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], cwd: str | os.PathLike, merge: bool,
                 preload: tuple[str, ...] = ()) -> None:
        self.args = list(argv)
        folder = tempfile.mkdtemp(prefix="stoker-forked-")
        weakref.finalize(self, shutil.rmtree, folder, True)  # the output files go with this object
        self._stdout, self._stderr, self._status = (os.path.join(folder, n) for n in ("out", "err", "status"))
        self._merged = merge
        if merge:  # stderr=subprocess.STDOUT
            self._stderr = self._stdout
        for path in (self._stdout, self._stderr):
            open(path, "w").close()
        request = {"argv": self.args, "env": dict(env), "cwd": os.fspath(cwd), "stdout": self._stdout,
                   "stderr": self._stderr, "status": self._status}
        with _lock:
            server = _start_server(preload)
            server.stdin.write(json.dumps(request).encode() + b"\n")
            server.stdin.flush()
            self.pid = int(server.stdout.readline())
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and os.path.exists(self._status):
            self.returncode = int(Path(self._status).read_text())
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.02)
        return self.returncode

    def output(self) -> tuple[str, str | None]:
        err = None if self._merged else Path(self._stderr).read_text(errors="replace")
        return Path(self._stdout).read_text(errors="replace"), err

    def communicate(self, timeout: float | None = None) -> tuple[str, str | None]:
        self.wait(timeout)
        return self.output()

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


# The environment of the session's start, for runs started in background threads (``launches.py``): an in-process
# test that changes os.environ meanwhile (monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", ...)) must
# not reach their processes. None in other threads, which pass on os.environ as it is.
_background = threading.local()


def run_with_environ(environ: dict[str, str], fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, with every process this thread starts given ``environ`` as the parent's environment."""
    _background.environ = environ
    try:
        return fn(*args)
    finally:
        _background.environ = None


def parent_environ() -> dict[str, str]:
    """A copy of the environment this thread's child processes inherit (see :func:`run_with_environ`)."""
    environ = getattr(_background, "environ", None)
    return dict(os.environ if environ is None else environ)


def popen_python(argv: Sequence[str], env: dict[str, str] | None = None, cwd: str | os.PathLike | None = None,
                 merge_stderr: bool = False, preload: tuple[str, ...] = ()) -> ForkedProcess | subprocess.Popen:
    """``subprocess.Popen([sys.executable, *argv], env=env, cwd=cwd, start_new_session=True)``, forked: ``argv`` is a
    script and its arguments, or ``-c``, the code and its arguments. ``env`` is the whole environment (default:
    this process's); ``merge_stderr``: standard error goes with standard output (``stderr=subprocess.STDOUT``);
    ``preload``: modules the script imports anyway, imported once by the server it is forked from (e.g.
    ``pytorch_lightning``, seconds of imports, for a reference run under Lightning; never for a stoker run, whose
    process must not hold the peer)."""
    env = parent_environ() if env is None else env
    if not FORKED:
        return subprocess.Popen([sys.executable, *map(os.fspath, argv)], env=env, cwd=cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE, text=True,
                                start_new_session=True)
    return ForkedProcess([os.fspath(a) for a in argv], env,
                         os.getcwd() if cwd is None else cwd, merge_stderr, tuple(preload))


def run_python(argv: Sequence[str], env: dict[str, str] | None = None, cwd: str | os.PathLike | None = None,
               timeout: float | None = None, preload: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """``subprocess.run([sys.executable, *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=...)``,
    forked (the child is killed when the timeout expires); ``preload`` as in :func:`popen_python`."""
    proc = popen_python(argv, env, cwd, preload=preload)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
