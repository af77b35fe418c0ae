"""A student's notebook running in a sandboxed kernel, and the grader's calls into it.

:class:`Sandbox` decides how kernels are confined on this machine (checked once, at start):

* as root: each kernel runs as its own unprivileged user (uid ``61000 + slot``, no groups, no
  new privileges) in an empty network namespace (``unshare -n``), with limits on processes,
  memory and file size; it cannot write the course's files, another kernel's files or the
  grader's, and has no network at all;
* otherwise, where ``unshare -rn`` works: an empty network namespace;
* everywhere: internet sockets are refused inside the kernel before the student's code runs,
  the kernel starts in a fresh private folder with its own HOME, and it dies with the grader.

:class:`Kernel` is one kernel process and its client (ZeroMQ over Unix sockets, which work
inside an empty network namespace). :class:`StudentKernel` runs a notebook's cells in order
within the time limits, and restarts and replays it when a cell or a call kills the kernel or
cannot be interrupted; the cell to blame is then skipped.
"""
from __future__ import annotations

import itertools
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import zmq
from jupyter_client import BlockingKernelClient
from jupyter_client.connect import write_connection_file

from companion.grading import wire

UID_BASE = 61000
UID_COUNT = 1000  # the kernels' users are UID_BASE .. UID_BASE + UID_COUNT - 1
_held_locks: dict[int, Any] = {}  # uid -> lock file of the users this process reserved (see Sandbox.reserve)
_GRACE = 5.0  # seconds a kernel gets to answer an interrupt before it is killed


class KernelDied(BaseException):
    """The kernel ended (``exit()``, ``os._exit``, a crash, or it was killed after a time-out).

    A ``BaseException``, so that a checker's ``except Exception`` cannot swallow it."""


class NoKernel(KernelDied):
    """The kernel was lost more often than the limit allows: nothing more can be checked."""


class CallTimedOut(BaseException):
    """A call into the student's kernel ran past its time limit (then the kernel was interrupted)."""

    def __init__(self, seconds: float, killed: bool):
        super().__init__(seconds, killed)
        self.seconds, self.killed = seconds, killed


class HelperFailed(BaseException):
    """The grader's helper inside the kernel failed (the student's code broke something it needs).

    A ``BaseException``, so that a checker does not report it as the student's exception."""


class SendFailed(HelperFailed):
    """The grader could not send a checker's arguments to the kernel (a bug of the grader's)."""


# ---------------------------------------------------------------------------------- sandbox
@dataclass(frozen=True)
class Sandbox:
    """How kernels are confined here; see the module docstring."""

    network: str  # "namespace" or "sockets refused"
    separate_users: bool
    unshare: tuple[str, ...] = ()
    memory_bytes: int | None = None
    uids: tuple[int, ...] = ()  # one user per job slot, reserved by this run (see reserve)

    @classmethod
    def detect(cls, enabled: bool = True, memory_gib: float | None = 8.0) -> "Sandbox":
        memory = int(memory_gib * 2**30) if memory_gib else None
        if not enabled:
            return cls("sockets refused", False, (), memory)
        unshare, setpriv = shutil.which("unshare"), shutil.which("setpriv")
        root = hasattr(os, "geteuid") and os.geteuid() == 0

        def works(cmd: list[str]) -> bool:
            try:
                return subprocess.run(cmd + ["true"], capture_output=True, timeout=20).returncode == 0
            except (OSError, subprocess.SubprocessError):
                return False

        prefix: tuple[str, ...] = ()
        if unshare and root and works([unshare, "-n"]):
            prefix = (unshare, "-n")
        elif unshare and works([unshare, "-rn"]):
            prefix = (unshare, "-rn")
        users = bool(root and setpriv and works([setpriv, f"--reuid={UID_BASE}", f"--regid={UID_BASE}", "--clear-groups"]))
        return cls("namespace" if prefix else "sockets refused", users, prefix, memory)

    def describe(self) -> str:
        network = "an empty network namespace" if self.network == "namespace" else "internet sockets refused in the kernel"
        users = "each kernel as its own unprivileged user" if self.separate_users else "kernels run as the grading user"
        return f"{network}; {users}"

    def reserve(self, slots: int) -> "Sandbox":
        """This sandbox with ``slots`` users reserved for this run alone.

        Two grading runs on one machine must never share a user: cleaning up after a submission
        kills every process of its user. Each user is held through an exclusive lock on
        ``/tmp/course-grade-uid-<uid>.lock`` until this process ends (or :func:`release`)."""
        if not self.separate_users:
            return self
        import fcntl

        uids: list[int] = []
        for uid in range(UID_BASE, UID_BASE + UID_COUNT):
            if len(uids) == slots:
                break
            try:
                handle = open(f"/tmp/course-grade-uid-{uid}.lock", "a")
            except OSError:
                continue
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                continue
            _held_locks[uid] = handle
            uids.append(uid)
        if len(uids) < slots:
            raise RuntimeError(f"only {len(uids)} of {slots} sandbox users are free (other grading runs hold the rest)")
        return Sandbox(self.network, True, self.unshare, self.memory_bytes, tuple(uids))

    def uid(self, slot: int) -> int | None:
        if not self.separate_users:
            return None
        if slot >= len(self.uids):
            raise RuntimeError("no sandbox user reserved for this job slot (call Sandbox.reserve first)")
        return self.uids[slot]

    def command(self, argv: list[str], slot: int) -> list[str]:
        cmd = list(self.unshare)
        uid = self.uid(slot)
        if uid is not None:
            cmd += [shutil.which("setpriv") or "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                    "--no-new-privs"]
        return cmd + argv

    def limits(self, slot: int) -> Callable[[], None]:
        memory, separate = self.memory_bytes, self.separate_users

        def apply() -> None:  # runs in the child, before exec
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            resource.setrlimit(resource.RLIMIT_FSIZE, (2**30, 2**30))
            if memory:
                resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
            if separate:  # counts the processes and threads of the kernel's own user only
                resource.setrlimit(resource.RLIMIT_NPROC, (256, 256))
            try:  # die with the grader (kept across exec when the user does not change)
                import ctypes

                ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))
            except Exception:
                pass

        return apply

    def kill_all(self, slot: int) -> None:
        """SIGKILL every process of the slot's user (a kernel's children that left its group)."""
        uid = self.uid(slot)
        if uid is None:
            return
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if entry.stat().st_uid == uid:
                    os.kill(int(entry.name), signal.SIGKILL)
            except (OSError, ValueError):
                pass


def release(sandbox: Sandbox | None = None) -> None:
    """Give back the users ``sandbox`` reserved (all that this process reserved, by default)."""
    for uid in list(sandbox.uids if sandbox is not None else _held_locks):
        handle = _held_locks.pop(uid, None)
        if handle is not None:
            handle.close()


# ----------------------------------------------------------------------------------- kernel
@dataclass
class Reply:
    """An ``execute_reply``: status "ok" or "error" (with the exception's name and value)."""

    status: str
    ename: str = ""
    evalue: str = ""
    seconds: float = 0.0
    exit_requested: bool = False  # the code called exit() or quit(): the kernel is about to stop


class Timeout(Exception):
    def __init__(self, seconds: float, killed: bool):
        super().__init__(seconds, killed)
        self.seconds, self.killed = seconds, killed


class Kernel:
    """One sandboxed IPython kernel in a private folder, and the client that drives it."""

    def __init__(self, sandbox: Sandbox, slot: int, env: dict[str, str], startup_timeout: float = 120.0):
        self.sandbox, self.slot = sandbox, slot
        self.dir = Path(tempfile.mkdtemp(prefix="course-grade-"))
        self.transfer = self.dir / "transfer"
        for sub in ("transfer", "tmp", "home", "work", "home/.ipython", "home/.ipython/profile_default"):
            (self.dir / sub).mkdir()
        # Figures are drawn but never rendered to PNG: nobody looks at them, and that saves time.
        (self.dir / "home/.ipython/profile_default/ipython_kernel_config.py").write_text(
            "c.InlineBackend.figure_formats = set()\n")
        uid = sandbox.uid(slot)
        conn = self.dir / "kernel.json"
        write_connection_file(str(conn), transport="ipc", ip=str(self.dir / "ipc"), key=os.urandom(32).hex().encode())
        if uid is not None:
            for path in [self.dir, *self.dir.rglob("*")]:
                os.chown(path, uid, uid)
        os.chmod(self.dir, 0o700)
        kernel_env = dict(env)
        kernel_env.update(
            HOME=str(self.dir / "home"), TMPDIR=str(self.dir / "tmp"), MPLCONFIGDIR=str(self.dir / "home"),
            IPYTHONDIR=str(self.dir / "home" / ".ipython"), JUPYTER_RUNTIME_DIR=str(self.dir / "tmp"),
            XDG_CACHE_HOME=str(self.dir / "home" / ".cache"),
        )
        argv = [sys.executable, "-m", "ipykernel_launcher", "-f", str(conn), "--HistoryManager.enabled=False"]
        self.log = open(self.dir / "kernel.log", "wb")
        self.proc = subprocess.Popen(
            sandbox.command(argv, slot), cwd=self.dir / "work", env=kernel_env, stdin=subprocess.DEVNULL,
            stdout=self.log, stderr=self.log, start_new_session=True, preexec_fn=sandbox.limits(slot),
        )
        self.client = BlockingKernelClient()
        self.client.load_connection_file(str(conn))
        self.client.start_channels(shell=True, iopub=False, stdin=True, hb=False, control=False)
        self.poller = zmq.Poller()
        self.poller.register(self.client.shell_channel.socket, zmq.POLLIN)
        self.poller.register(self.client.stdin_channel.socket, zmq.POLLIN)
        self._counter = itertools.count(1)
        try:
            self._wait_ready(startup_timeout)
        except BaseException:
            self.close()
            raise

    # -- life and death
    def alive(self) -> bool:
        return self.proc.poll() is None

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        msg_id = self.client.kernel_info()
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"the kernel did not start:\n{self.log_tail()}")
            if self.client.shell_channel.msg_ready() or self.poller.poll(200):
                while self.client.shell_channel.msg_ready():
                    msg = self.client.shell_channel.get_msg(timeout=0)
                    if msg["parent_header"].get("msg_id") == msg_id:
                        return
                self._drain_stdin()
        raise RuntimeError(f"the kernel did not answer within {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, n: int = 2000) -> str:
        try:
            self.log.flush()
            return (self.dir / "kernel.log").read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def interrupt(self) -> None:
        try:
            os.kill(self.proc.pid, signal.SIGINT)
        except OSError:
            pass

    def kill(self) -> None:
        for action in (lambda: os.killpg(self.proc.pid, signal.SIGKILL), lambda: self.sandbox.kill_all(self.slot)):
            try:
                action()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        self.kill()
        try:
            self.client.stop_channels()
        except Exception:
            pass
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- execution
    def _drain_stdin(self, on_input: Callable[[str], str] | None = None) -> None:
        while self.client.stdin_channel.msg_ready():
            msg = self.client.stdin_channel.get_msg(timeout=0)
            if msg["header"]["msg_type"] == "input_request":
                prompt = str(msg["content"].get("prompt", ""))
                self.client.input(on_input(prompt) if on_input else "")

    def execute(self, code: str, timeout: float, on_input: Callable[[str], str] | None = None) -> Reply:
        """Run ``code``; raise :class:`Timeout` past ``timeout`` s, :class:`KernelDied` if it ends."""
        if not self.alive():
            raise KernelDied("the kernel is not running")
        start = time.monotonic()
        deadline = start + max(timeout, 0.0)
        msg_id = self.client.execute(code, silent=False, store_history=False, allow_stdin=on_input is not None,
                                     stop_on_error=False)
        interrupted_at: float | None = None
        while True:
            now = time.monotonic()
            if interrupted_at is None and now >= deadline:
                self.interrupt()
                interrupted_at = now
            if interrupted_at is not None and now >= interrupted_at + _GRACE:
                self.kill()
                raise Timeout(now - start, killed=True)
            wait = (interrupted_at + _GRACE if interrupted_at is not None else deadline) - now
            self.poller.poll(max(1, int(min(wait, 0.25) * 1000)))
            self._drain_stdin(on_input)
            while self.client.shell_channel.msg_ready():
                msg = self.client.shell_channel.get_msg(timeout=0)
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                if interrupted_at is not None:
                    raise Timeout(time.monotonic() - start, killed=False)
                content = msg["content"]
                payload = content.get("payload") or []
                leaving = any(isinstance(p, dict) and p.get("source") == "ask_exit" for p in payload)
                return Reply(content.get("status", "error"), str(content.get("ename", "")),
                             str(content.get("evalue", ""))[:2000], time.monotonic() - start, leaving)
            if not self.alive():
                raise KernelDied(f"the kernel stopped (exit code {self.proc.returncode})")


# ----------------------------------------------------------------------- the student's notebook
@dataclass
class Limits:
    """Time limits, in seconds."""

    notebook: float = 600.0  # all of a notebook's cells together
    cell: float = 300.0  # one cell
    call: float = 30.0  # one call of a student's function by a checker
    exercise: float = 120.0  # all calls of one exercise's check together
    restarts: int = 3  # kernel restarts (and notebook replays) per submission


@dataclass
class CellRun:
    index: int  # position among the notebook's cells
    status: str  # "ok", "error", "timed out", "killed the kernel", "skipped"
    ename: str = ""
    evalue: str = ""
    seconds: float = 0.0


@dataclass
class StudentKernel:
    """The submission's code cells run in a kernel; restarts and replays it when needed."""

    cells: list[tuple[int, str]]  # (index in the notebook, source) of the code cells to run
    sandbox: Sandbox
    slot: int
    env: dict[str, str]
    limits: Limits = field(default_factory=Limits)
    runs: dict[int, CellRun] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    kernel: Kernel | None = None
    generation: int = 0
    restarts: int = 0
    raised: list[dict] = field(default_factory=list)  # the student's exceptions seen by the proxies
    exercise_deadline: float = float("inf")
    seconds_start: float = 0.0  # starting the first kernel (not counted in the notebook's limit)

    def __post_init__(self) -> None:
        self.poison: set[int] = set()
        self.done: list[int] = []  # cells run to completion (ok or error), in order
        self.refs: dict[int, Any] = {}
        self._ref_ids = itertools.count(1)
        self._requests = itertools.count(1)
        self._in_callback = False
        self.pickle_module = wire.make_pickle_module(self._refer, self._remote_reduce)

    # -- kernel life
    def _start(self) -> None:
        self.kernel = Kernel(self.sandbox, self.slot, self.env)
        self.generation += 1
        prelude = f"__import__('companion.grading.kernel', fromlist=['prelude']).prelude({str(self.kernel.transfer)!r})"
        reply = self.kernel.execute(prelude, timeout=60)
        if reply.status != "ok":
            raise RuntimeError(f"the grader's set-up failed in the kernel: {reply.ename}: {reply.evalue}")

    def _stop(self) -> None:
        if self.kernel is not None:
            self.kernel.close()
            self.kernel = None

    def close(self) -> None:
        self._stop()

    def run(self) -> None:
        """Run every cell in order, within the limits (restarting where a cell kills the kernel)."""
        started = time.monotonic()
        self._start()
        self.seconds_start = time.monotonic() - started
        deadline = time.monotonic() + self.limits.notebook  # the kernel's start does not count
        position = 0
        while position < len(self.cells):
            index, source = self.cells[position]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                for i, _ in self.cells[position:]:
                    self.runs[i] = CellRun(i, "skipped")
                self.notes.append(f"the notebook ran past its {self.limits.notebook:.0f} s limit: "
                                  f"cells from {index} on were not run")
                return
            if not self._run_cell(index, source, min(self.limits.cell, remaining)):
                if not self._restart(deadline):
                    for i, _ in self.cells[position + 1:]:
                        self.runs[i] = CellRun(i, "skipped")
                    return
            position += 1

    def _run_cell(self, index: int, source: str, timeout: float) -> bool:
        """Run one cell; False when the kernel is lost (the cell is then skipped from now on)."""
        assert self.kernel is not None
        start = time.monotonic()
        try:
            reply = self.kernel.execute(source, timeout)
        except Timeout as exc:
            limit = "cell" if timeout >= self.limits.cell else "notebook"
            self.runs[index] = CellRun(index, "timed out", seconds=exc.seconds)
            self.notes.append(f"cell {index} ran past the {timeout:.0f} s {limit} time limit and was stopped"
                              + (" (it did not respond to an interrupt: the kernel was restarted without it)" if exc.killed else ""))
            if exc.killed:
                self.poison.add(index)
                return False
            self.done.append(index)
            return True
        except KernelDied:
            self.runs[index] = CellRun(index, "killed the kernel", seconds=time.monotonic() - start)
            self.notes.append(f"cell {index} ended the kernel (exit(), os._exit() or a crash): "
                              "the kernel was restarted without it")
            self.poison.add(index)
            return False
        self.runs[index] = CellRun(index, reply.status, reply.ename, reply.evalue, reply.seconds)
        if reply.exit_requested:
            self.runs[index].status = "killed the kernel"
            self.notes.append(f"cell {index} called exit(): the kernel was restarted without it")
            self.poison.add(index)
            return False
        self.done.append(index)
        return True

    def _restart(self, deadline: float | None = None) -> bool:
        """A fresh kernel with every cell run so far replayed (except the ones to blame)."""
        while True:
            self._stop()
            if self.restarts >= self.limits.restarts:
                self.notes.append(f"the kernel was lost more than {self.limits.restarts} times: "
                                  "the rest of the notebook was not run")
                return False
            self.restarts += 1
            try:
                self._start()
            except Exception as exc:  # the machine is out of memory or processes, ...
                self._stop()
                self.notes.append(f"a new kernel could not be started: {str(exc)[:300]}")
                return False
            replay_deadline = time.monotonic() + self.limits.notebook
            sources = dict(self.cells)
            ok = True
            for index in [i for i in self.done if i not in self.poison]:
                remaining = replay_deadline - time.monotonic()
                try:
                    assert self.kernel is not None
                    if self.kernel.execute(sources[index], min(self.limits.cell, max(remaining, 0.1))).exit_requested:
                        self.poison.add(index)
                        ok = False
                        break
                except Timeout as exc:
                    if exc.killed:
                        self.poison.add(index)
                        ok = False
                        break
                except KernelDied:
                    self.poison.add(index)
                    ok = False
                    break
            if ok:
                return True

    def ensure_running(self) -> None:
        """Restart and replay if the kernel was lost (by a call that killed it); else raise."""
        if self.kernel is not None and self.kernel.alive():
            return
        if not self._restart():
            raise NoKernel("the kernel could not be restarted")

    # -- requests from the checkers
    def _refer(self, obj: Any) -> tuple:
        from companion.grading import kernel as kside

        n = next(self._ref_ids)
        self.refs[n] = obj
        return (kside._grader_ref, (n, type(obj).__name__, callable(obj)))

    def _remote_reduce(self, obj: wire.Remote) -> tuple:
        from companion.grading import kernel as kside

        session = object.__getattribute__(obj, "_remote_session")
        info = object.__getattribute__(obj, "_remote_info")
        if session is not self or info.get("generation") != self.generation or "id" not in info:
            raise pickle_error(f"a {info.get('type')} object from an earlier run of the kernel")
        return (kside._handle, (info["id"],))

    def lookup(self, name: str) -> Any:
        """The value of ``name`` in the student's namespace, or :data:`MISSING`."""
        try:
            reply = self._request("get", name=name)
        except KernelDied:  # it was dying already (exit() at the end of a call): once more
            reply = self._request("get", name=name)
        if reply.get("missing"):
            return MISSING
        return self._result(reply, [], {})

    def remote(self, obj: wire.Remote, op: str, **payload: Any) -> Any:
        """Called by a :class:`~companion.grading.wire.Remote` placeholder: do ``op`` in the kernel."""
        if self._in_callback:
            raise TypeError("the grader cannot call the student's code while the student's code calls the grader")
        info = object.__getattribute__(obj, "_remote_info")
        if info.get("generation") != self.generation:
            raise KernelDied("the kernel was restarted after this object was made")
        args, kwargs = payload.pop("args", ()), payload.pop("kwargs", {})
        reply = self._request(op, target=obj, args=args, kwargs=kwargs, **payload)
        return self._result(reply, args, kwargs)

    def _request(self, op: str, **payload: Any) -> dict:
        started = time.monotonic()
        self.ensure_running()
        self.exercise_deadline += time.monotonic() - started  # a restart is not the student's time
        kernel = self.kernel
        assert kernel is not None
        n = next(self._requests)
        request, reply_path = kernel.transfer / f"req-{n}.pt", kernel.transfer / f"rep-{n}.st"
        try:
            wire.write_pickle(request, {"op": op, "reply": str(reply_path), **payload}, self.pickle_module)
        except Exception as exc:
            request.unlink(missing_ok=True)
            raise SendFailed(f"{type(exc).__name__}: {exc}") from None
        os.chmod(request, 0o644)
        timeout = min(self.limits.call, self.exercise_deadline - time.monotonic())
        if timeout <= 0:
            raise CallTimedOut(self.limits.exercise, killed=False)
        code = f"__import__('companion.grading.kernel', fromlist=['handle']).handle({str(request)!r})"
        try:
            reply = kernel.execute(code, timeout, on_input=self._callback)
        except Timeout as exc:
            reply_path.unlink(missing_ok=True)
            if exc.killed:
                self._stop()
            raise CallTimedOut(exc.seconds, exc.killed) from None
        except KernelDied:
            self._stop()
            raise
        finally:
            request.unlink(missing_ok=True)
        if reply.exit_requested:
            self._stop()
            raise KernelDied("your code called exit() or quit()")
        if reply.status != "ok":
            reply_path.unlink(missing_ok=True)
            raise HelperFailed(f"{reply.ename}: {reply.evalue}")
        try:
            out = wire.read_safe(reply_path, session=self)
        except wire.WireError as exc:
            raise HelperFailed(str(exc)) from None
        finally:
            reply_path.unlink(missing_ok=True)
        if not isinstance(out, dict):
            raise HelperFailed("the reply is not a dict")
        self._stamp(out)
        return out

    def _stamp(self, value: Any, depth: int = 0) -> None:
        """Mark every placeholder in a reply with the kernel run it belongs to."""
        if depth > 70:
            return
        if isinstance(value, wire.Remote):
            object.__getattribute__(value, "_remote_info")["generation"] = self.generation
        elif isinstance(value, (list, tuple, set, frozenset)):
            for v in value:
                self._stamp(v, depth + 1)
        elif isinstance(value, dict):
            for k, v in value.items():
                self._stamp(k, depth + 1)
                self._stamp(v, depth + 1)

    def _result(self, reply: dict, args: tuple, kwargs: dict) -> Any:
        if reply.get("ok") is True:
            sync = reply.get("sync") or []
            if sync:
                apply_sync(sync, args, kwargs)
            return reply.get("value")
        error = reply.get("error")
        if not isinstance(error, dict):
            raise HelperFailed("a malformed reply")
        self.raised.append(error)
        raise rebuild_exception(error)

    def _callback(self, prompt: str) -> str:
        """Answer an ``input_request``: a call back into the grader, or (anything else) nothing."""
        from companion.grading.kernel import CALLBACK_PROMPT

        if not prompt.startswith(CALLBACK_PROMPT + " ") or self.kernel is None:
            return ""
        n = prompt[len(CALLBACK_PROMPT) + 1:]
        if not n.isdigit():
            return ""
        request, reply = self.kernel.transfer / f"cb-{n}.st", self.kernel.transfer / f"cbr-{n}.pt"
        self._in_callback = True
        try:
            message = wire.read_safe(request, session=self)
            self._stamp(message)
            target = self.refs[message["ref"]]
            if message["op"] == "call":
                value = target(*message.get("args", ()), **message.get("kwargs", {}))
            elif message["op"] == "getattr":
                value = getattr(target, str(message["name"]))
            else:
                raise ValueError(f"unknown operation {message['op']!r}")
            answer: dict = {"ok": True, "value": value}
        except Exception as exc:
            answer = {"ok": False, "error": (type(exc).__name__, str(exc)[:2000])}
        finally:
            self._in_callback = False
        try:
            wire.write_pickle(reply, answer, self.pickle_module)
        except Exception as exc:
            wire.write_pickle(reply, {"ok": False, "error": (type(exc).__name__, str(exc)[:2000])}, self.pickle_module)
        os.chmod(reply, 0o644)
        return "ok"


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


#: What :meth:`StudentKernel.lookup` returns for a name the student's namespace does not have.
MISSING = _Missing()


def pickle_error(message: str) -> Exception:
    import pickle

    return pickle.PicklingError(message)


# --------------------------------------------------------------------- exceptions and syncing
_EXCEPTIONS: dict[tuple[str, str], type] = {}


def rebuild_exception(error: dict) -> Exception:
    """An exception in the grader that reads like the student's: same class name, same message,
    a builtin base (so a checker's ``except ValueError`` works), and the student's line number
    where the checkers look for it (a frame of a file named ``<IPY-INPUT>``)."""
    import builtins

    name = str(error.get("type", "Exception"))[:100]
    message = str(error.get("message", ""))
    base: type = Exception
    for qualified in error.get("mro") or []:
        module, _, qualname = str(qualified).rpartition(".")
        candidate = getattr(builtins, qualname, None) if module == "builtins" else None
        if isinstance(candidate, type) and issubclass(candidate, BaseException):
            base = candidate
            break
    if not issubclass(base, Exception) or base in (StopIteration, StopAsyncIteration):
        base = Exception  # SystemExit, KeyboardInterrupt, ... must not stop the grader
    key = (name, base.__name__)
    if key not in _EXCEPTIONS:
        _EXCEPTIONS[key] = type(name if name.isidentifier() else "StudentError", (base,),
                                {"__str__": lambda self: self.args[0] if self.args else "", "__module__": "student"})
    exc = _EXCEPTIONS[key](message)
    line = error.get("line")
    if isinstance(line, int) and 0 < line < 100_000:
        try:
            exec(compile("\n" * (line - 1) + "raise __exc__", "<IPY-INPUT>", "exec"), {"__exc__": exc})
        except BaseException as raised:
            exc = raised  # type: ignore[assignment]
            exc.__traceback__ = exc.__traceback__.tb_next if exc.__traceback__ else None  # type: ignore[union-attr]
    return exc


def apply_sync(sync: list, args: tuple, kwargs: dict) -> None:
    """Copy the in-place changes a student's function made to its arguments onto the grader's."""
    import torch

    for entry in sync:
        if not isinstance(entry, list) or len(entry) != 3:
            raise TypeError("the grader could not copy back the changes made to the arguments")
        key, kind, payload = entry
        try:
            target = args[key] if isinstance(key, int) else kwargs[key]
        except (IndexError, KeyError, TypeError):
            continue
        where = f"argument {key + 1}" if isinstance(key, int) else f"argument {key}"
        try:
            if kind == "tensor" and isinstance(target, torch.Tensor):
                value, grad = payload["value"], payload["grad"]
                with torch.no_grad():
                    if value.shape == target.shape and value.dtype == target.dtype:
                        target.copy_(value)
                    else:
                        target.data = value
                if target.is_leaf and (grad is None or isinstance(grad, torch.Tensor)):
                    target.grad = grad
            elif kind == "module" and isinstance(target, torch.nn.Module):
                target.load_state_dict(payload["state"])
                grads = payload["grads"]
                for name, p in target.named_parameters():
                    p.grad = grads.get(name)
                modes = dict(payload["training"])
                for name, m in target.named_modules():
                    if name in modes:
                        m.training = bool(modes[name])
            elif kind == "state":
                target.load_state_dict(payload)
            elif kind == "list" and isinstance(target, list):
                target[:] = payload
            elif kind == "dict" and isinstance(target, dict):
                target.clear()
                target.update(payload)
            elif kind == "set" and isinstance(target, set):
                target.clear()
                target.update(payload)
            elif kind == "bytearray" and isinstance(target, bytearray):
                target[:] = payload
        except Exception as exc:
            raise TypeError(f"your function changed {where} ({type(target).__name__}) in a way the grader "
                            f"cannot copy back: {type(exc).__name__}: {exc}") from None


def kernel_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a student's kernel: the grader's, made reproducible and offline."""
    import companion

    env = {k: v for k, v in os.environ.items() if not k.startswith(("JPY_", "JUPYTER_", "PYTEST_", "COV_"))}
    root = str(Path(companion.__file__).resolve().parents[1])
    paths = [root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]
    env.update(
        PYTHONPATH=os.pathsep.join(paths), PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1", MPLBACKEND="Agg",
        IPYKERNEL_CELL_NAME="<IPY-INPUT>", OMP_WAIT_POLICY="PASSIVE", PIP_NO_INDEX="1",
        http_proxy="http://0.0.0.0:9", https_proxy="http://0.0.0.0:9", HF_HUB_OFFLINE="1",
    )
    env.update(extra or {})
    return env
