"""A student's notebook running in a sandboxed kernel, and the grader's calls into it.

:class:`~companion.grading.sandbox.Sandbox` decides how kernels are confined on this machine
(bubblewrap; see :mod:`companion.grading.sandbox`). :class:`Kernel` is one kernel process in its
sandbox and the client that drives it (ZeroMQ over Unix sockets in a folder made for that kernel
alone). :class:`StudentKernel` runs a notebook's cells in order within the time limits, and
restarts and replays it when a cell or a call kills the kernel or cannot be interrupted; the cell
to blame is then skipped. One time budget covers the notebook's first run and every replay.

The files the grader shares with a kernel: its requests, in a folder the kernel can only read;
the kernel's replies, in a folder the kernel can write, which the grader reads without following
links (:func:`companion.grading.wire.read_bytes`), and never writes or changes.
"""
from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import zmq
from jupyter_client import BlockingKernelClient
from jupyter_client.connect import write_connection_file

from companion.grading import wire
from companion.grading.sandbox import (HOME, IN, OUT, WORK, Cgroup, Sandbox, kernels_folder,  # noqa: F401
                                      python_executable, release)

_GRACE = 5.0  # seconds a kernel gets to answer an interrupt before it is killed
LOG_TAIL = 64 * 1024  # bytes of a kernel's output (stdout, stderr) the grader keeps


class KernelDied(BaseException):
    """The kernel ended (``exit()``, ``os._exit``, a crash, or it was killed after a time-out).

    A ``BaseException``, so that a checker's ``except Exception`` cannot swallow it. ``ename`` and
    ``evalue``: the error the code reported before the kernel was stopped (its disk quota filled)."""

    def __init__(self, message: str = "", ename: str = "", evalue: str = ""):
        super().__init__(message)
        self.ename, self.evalue = ename, evalue


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


# ----------------------------------------------------------------------------------- kernel
@dataclass
class Reply:
    """An ``execute_reply``: status "ok" or "error" (with the exception's name and value)."""

    status: str
    ename: str = ""
    evalue: str = ""
    seconds: float = 0.0
    exit_requested: bool = False  # the code called exit() or quit(): the kernel is about to stop
    cpu: float = 0.0  # CPU seconds the kernel (and its children) spent on it


class Timeout(Exception):
    """Past its budget: ``seconds`` of the kernel's CPU time (or, ``wall`` True, a hang past the
    wall-clock limit)."""

    def __init__(self, seconds: float, killed: bool, wall: bool = False):
        super().__init__(seconds, killed)
        self.seconds, self.killed, self.wall = seconds, killed, wall


def wall_limit(cpu_budget: float, limits: "Limits | None" = None) -> float:
    """The wall-clock limit that goes with a budget of CPU seconds: generous, only against a hang
    (a kernel that sleeps or waits uses no CPU time); load on the machine never comes near it."""
    factor = limits.wall_factor if limits is not None else 4.0
    return cpu_budget * factor + 30.0


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU seconds of process ``root`` and every process below it (those that ended
    are counted in their parent's children times), from ``/proc``."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0.0
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2:].split()
        try:
            parents[int(name)] = int(fields[1])
            times[int(name)] = sum(int(x) for x in fields[11:15]) / _CLOCK_TICKS
        except (IndexError, ValueError):
            continue
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    total, stack, seen = 0.0, [root], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += times.get(pid, 0.0)
        stack.extend(children.get(pid, ()))
    return total


class Kernel:
    """One sandboxed IPython kernel, and the client that drives it.

    Its folder on the host (``self.dir``, which the kernel cannot write): ``in/`` (requests, the
    connection file and the notebook's copy: read-only inside). In the bubblewrap sandbox nothing
    the kernel writes is on the host's disk: its replies and ZeroMQ socket files are in
    ``/grader/out``, an in-memory file system of :attr:`Sandbox.disk_bytes` inside its sandbox,
    which the grader reaches through ``/proc/<pid>/root`` (one folder descriptor, opened before any
    of the student's code runs; every reply is opened relative to it, never following a link), and
    which vanishes with the sandbox; the quota is the file system's size, counted in blocks, so
    files deleted while held open and folders made unlistable count like any other. Its output
    (stdout, stderr) comes through a pipe, of which the grader keeps the tail. Without bubblewrap,
    ``out/`` and ``ipc/`` are folders of the host, watched by listing (see :meth:`disk_used`)."""

    _run_ids = itertools.count(1)

    def __init__(self, sandbox: Sandbox, slot: int, env: dict[str, str], notebook: "str | bytes | None" = None,
                 startup_timeout: float = 120.0):
        self.sandbox, self.slot = sandbox, slot
        self.cgroup: Cgroup | None = None
        bwrap = sandbox.kind == "bwrap"
        # Without bwrap, as root: a mount namespace whose in-memory file systems cover /tmp and the
        # kernel's folder, which therefore is not under /tmp (see Sandbox.mountns).
        mountns = not bwrap and sandbox.mountns and sandbox.uid(slot) is not None
        self.dir = Path(tempfile.mkdtemp(prefix="course-grade-", dir=kernels_folder() if mountns else None))
        os.chmod(self.dir, 0o711)
        self.inbox, self.outbox, ipc = self.dir / "in", self.dir / "out", self.dir / "ipc"
        self.out_fd: int | None = None  # the kernel's reply folder, opened once (see the class docstring)
        self._bounded = bwrap or mountns  # the kernel's writable folders: file systems of bounded size
        uid = sandbox.uid(slot)
        if mountns:  # the kernel's folders, made in its mount namespace on a file system of the quota's size
            writable = self.dir / "w"
            self.outbox, ipc = writable / "out", writable / "ipc"
            writable.mkdir(mode=0o700)
        for folder in (self.inbox,) if self._bounded else (self.inbox, self.outbox, ipc):
            folder.mkdir(mode=0o755 if folder is self.inbox else 0o700)
            if uid is not None and folder is not self.inbox:
                os.chown(folder, uid, uid)
        os.chmod(self.inbox, 0o755)
        # Figures are drawn but never rendered to PNG: nobody looks at them, and that saves time.
        config = self.inbox / "ipython_kernel_config.py"
        config.write_text("c.InlineBackend.figure_formats = set()\n")
        os.chmod(config, 0o644)
        conn = self.inbox / "kernel.json"
        key = os.urandom(32).hex().encode()
        write_connection_file(str(conn), transport="ipc", ip=f"{OUT}/k" if bwrap else str(ipc / "k"), key=key)
        if uid is not None:
            os.chown(conn, uid, uid)
        os.chmod(conn, 0o600)
        kernel_env = dict(env)
        binds: list[tuple[str, str, str]] = []
        if bwrap:
            home, tmp = HOME, "/tmp"
            inbox, outbox = IN, OUT
            binds += [("--ro-bind", str(self.inbox), IN), ("--quota", "", OUT), ("--dir", "", WORK),
                      ("--ro-bind", str(config), f"{HOME}/.ipython/profile_default/ipython_kernel_config.py")]
            cwd_host = None
            if notebook is not None:  # the kernel's own notebook, and no other
                copy = self.inbox / "submission.ipynb"
                if isinstance(notebook, bytes):  # the bytes the grader read from the file, once
                    copy.write_bytes(notebook)
                else:
                    shutil.copyfile(notebook, copy, follow_symlinks=False)
                os.chmod(copy, 0o644)
                binds.append(("--ro-bind", str(copy), f"{WORK}/submission.ipynb"))
        elif mountns:  # made by the mount script (Sandbox.wrap), on the bounded file system
            private = self.dir / "w"
            home, tmp = str(private / "home"), str(private / "tmp")
            inbox, outbox = str(self.inbox), str(self.outbox)
            cwd_host = None
        else:  # no sandbox: a private folder on the host
            private = self.dir / "private"
            for sub in ("tmp", "home", "work", "home/.ipython", "home/.ipython/profile_default"):
                (private / sub).mkdir(parents=True)
            shutil.copy(config, private / "home/.ipython/profile_default/ipython_kernel_config.py")
            if uid is not None:
                for path in [private, *private.rglob("*")]:
                    os.chown(path, uid, uid)
            home, tmp = str(private / "home"), str(private / "tmp")
            inbox, outbox = str(self.inbox), str(self.outbox)
            cwd_host = str(private / "work")
        self.inside = (inbox, outbox)
        kernel_env.update(
            HOME=home, TMPDIR=tmp, MPLCONFIGDIR=f"{home}/.config/matplotlib", IPYTHONDIR=f"{home}/.ipython",
            JUPYTER_RUNTIME_DIR=tmp, XDG_CACHE_HOME=f"{home}/.cache", PATH="/usr/local/bin:/usr/bin:/bin",
        )
        argv = [python_executable() if bwrap else sys.executable, "-m", "companion.grading.launch",
                *sandbox.limits_argv(), "--", "-f", f"{inbox}/kernel.json", "--HistoryManager.enabled=False"]
        pass_fds: tuple[int, ...] = ()
        self._seccomp = None
        info_read = info_write = None
        if bwrap:  # bwrap reports the sandbox's first process (whose root is the sandbox's) here
            info_read, info_write = os.pipe()
            pass_fds += (info_write,)
        if bwrap and sandbox.root:
            from companion.grading.sandbox import no_userns_filter

            program = no_userns_filter()
            if program is not None:
                read, write = os.pipe()
                os.write(write, program)
                os.close(write)
                self._seccomp = read
                pass_fds += (read,)
        if bwrap:
            command = sandbox.wrap(argv, slot, binds, env=kernel_env, chdir=WORK, seccomp_fd=self._seccomp,
                                   info_fd=info_write)
            popen_env: dict[str, str] | None = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        else:
            command = sandbox.wrap(argv, slot, [], private=str(self.dir / "w") if mountns else None)
            popen_env = kernel_env
        if sandbox.cgroups and bwrap:
            self.cgroup = Cgroup(f"course-grade-{os.getpid()}-{next(self._run_ids)}", sandbox.memory_bytes,
                                 sandbox.processes).create()
        # The kernel's output: a pipe, of which the grader keeps the last LOG_TAIL bytes (nothing
        # on the disk); past disk_bytes in all, the kernel is stopped like one past its disk quota.
        log_read, log_write = os.pipe()
        self._log_tail = bytearray()
        self._log_bytes = 0
        self._log_lock = threading.Lock()
        try:
            self.proc = subprocess.Popen(
                command, cwd=cwd_host or "/", env=popen_env, stdin=subprocess.DEVNULL, stdout=log_write,
                stderr=log_write, start_new_session=True, preexec_fn=sandbox.preexec(self.cgroup), close_fds=True,
                pass_fds=pass_fds,
            )
        except BaseException:
            os.close(log_read)
            if info_read is not None:
                os.close(info_read)
            raise
        finally:
            os.close(log_write)
            for fd in (self._seccomp, info_write):
                if fd is not None:
                    os.close(fd)
        self.over_quota = ""  # why the disk watchdog killed the kernel, once it has
        threading.Thread(target=self._read_log, args=(log_read,), name="course-grade-log", daemon=True).start()
        self._tree_pids: list[int] = []
        self._tree_at = 0.0
        self._cpu_seen = 0.0
        self.client = BlockingKernelClient()
        self.client.load_connection_file(str(conn))
        try:
            if bwrap:
                info, info_read = info_read, None
                self._open_outbox(self._sandbox_pid(info, startup_timeout), OUT, startup_timeout)
                self.client.ip = f"{self.outbox}/k"  # the same socket files, as the grader reaches them
            elif mountns:
                self._open_outbox(self.proc.pid, str(self.outbox), startup_timeout)
                ipc = self.outbox.parent / "ipc"
                self.client.ip = f"{ipc}/k"
            if not self._bounded:  # a host folder, watched; elsewhere the file system's size is the limit
                threading.Thread(target=self._watch_disk, name="course-grade-disk", daemon=True).start()
            self._wait_sockets(self.outbox if bwrap else ipc, uid, startup_timeout)
            # Connect once the kernel made its socket files, and never reconnect: a socket file the
            # kernel replaced later (by a link to a socket of the host, say) is never followed.
            self.client.context.setsockopt(zmq.RECONNECT_IVL, -1)
            self.client.start_channels(shell=True, iopub=False, stdin=True, hb=False, control=True)
            self.poller = zmq.Poller()
            self.poller.register(self.client.shell_channel.socket, zmq.POLLIN)
            self.poller.register(self.client.stdin_channel.socket, zmq.POLLIN)
            self._wait_ready(startup_timeout)
        except BaseException:
            if info_read is not None:
                os.close(info_read)
            self.close()
            raise

    def _sandbox_pid(self, info: int, timeout: float) -> int:
        """The sandbox's first process, from bwrap's ``--info-fd``."""
        import json
        import select

        data, deadline, child = b"", time.monotonic() + timeout, None
        try:
            while child is None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([info], [], [], min(left, 0.5))[0]:
                    if not self.alive() or left <= 0:
                        raise RuntimeError(f"the sandbox did not start:\n{self.log_tail()}")
                    continue
                chunk = os.read(info, 4096)
                if not chunk:
                    raise RuntimeError(f"the sandbox did not start:\n{self.log_tail()}")
                data += chunk
                try:
                    child = int(json.loads(data.decode())["child-pid"])
                except (ValueError, KeyError, TypeError):
                    if len(data) > 65536:
                        raise RuntimeError("bwrap's report could not be read") from None
        finally:
            os.close(info)
        return child

    def _open_outbox(self, pid: int, inside: str, timeout: float) -> None:
        """Open the kernel's reply folder (``inside``, as process ``pid`` sees it) through that
        process's root, once, before any of the student's code runs: from then on replies are opened
        relative to this descriptor (a folder the kernel renames, or a link it plants, leads
        nowhere), and its size (blocks of a bounded file system) is the disk quota."""
        import stat

        deadline = time.monotonic() + timeout
        self.outbox = Path(f"/proc/{pid}/root{inside}")
        host = os.stat("/").st_dev
        while True:  # until bwrap has mounted it (the same size, another file system than the host's)
            try:
                fd = os.open(self.outbox, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
            except OSError:
                fd = None
            if fd is not None:
                fs, info_ = os.statvfs(fd), os.fstat(fd)
                if stat.S_ISDIR(info_.st_mode) and info_.st_dev != host and \
                        0 <= fs.f_blocks * fs.f_frsize - self.sandbox.disk_bytes < 2**16:
                    self.out_fd = fd
                    return
                os.close(fd)
            if not self.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the kernel's reply folder could not be opened:\n{self.log_tail()}")
            time.sleep(0.02)

    def _wait_sockets(self, ipc: Path, uid: int | None, timeout: float) -> None:
        """Wait until the kernel has made its five socket files (real sockets, not links)."""
        import stat

        info = self.client.get_connection_info()
        names = [f"k-{info[p]}" for p in ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"the kernel did not start:\n{self.log_tail()}")
            try:
                modes = [os.lstat(ipc / name) for name in names]
                if all(stat.S_ISSOCK(m.st_mode) and (uid is None or m.st_uid == uid) for m in modes):
                    return
                if any(not stat.S_ISSOCK(m.st_mode) for m in modes):
                    raise RuntimeError("the kernel's socket folder holds something that is not a socket")
            except FileNotFoundError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"the kernel did not start within {timeout:.0f} s:\n{self.log_tail()}")

    # -- life and death
    def alive(self) -> bool:
        return self.proc.poll() is None

    def _open_files(self) -> int:
        """Bytes of the files the kernel's processes hold open in its folder but that no folder lists
        any more (deleted while open: still on the disk), by blocks."""
        import stat as stat_module

        total, seen = 0, set()
        prefix = (str(self.dir) + "/", OUT + "/")  # as the host sees it, or as the sandbox does
        for pid in _tree(self.proc.pid):
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for fd in fds:
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if not (target.startswith(prefix) and target.endswith(" (deleted)")):
                        continue
                    info = os.stat(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if stat_module.S_ISREG(info.st_mode) and (info.st_dev, info.st_ino) not in seen:
                    seen.add((info.st_dev, info.st_ino))
                    total += max(info.st_size, info.st_blocks * 512)
        return total

    def disk_used(self) -> tuple[int, int]:
        """Bytes and entries the kernel holds of its quota. In the sandbox: the blocks and files of
        its bounded reply file system (``statvfs``: files deleted while open and folders it made
        unlistable included). Without it, by listing the host folder: everything in it but the
        grader's requests (links counted, never followed), files it deleted but holds open, and
        folders it made unlistable (the grader, their owner or root, opens them again): a kernel
        fast enough can write past the quota between two looks (no bounded file system there)."""
        if self._bounded:
            if self.out_fd is None:
                return 0, 0
            try:
                fs = os.statvfs(self.out_fd)
            except OSError:
                return 0, 0
            return (fs.f_blocks - fs.f_bfree) * fs.f_frsize, fs.f_files - fs.f_ffree
        now = time.monotonic()
        if now - getattr(self, "_open_at", 0.0) >= 2.0:  # a /proc walk: not at every look
            self._open_bytes, self._open_at = self._open_files(), now
        size, entries = getattr(self, "_open_bytes", 0), 0
        stack = [self.dir]
        while stack and entries <= self.sandbox.disk_entries:
            folder = stack.pop()
            try:
                os.chmod(folder, 0o700) if folder != self.dir and not os.access(folder, os.R_OK | os.X_OK) else None
            except OSError:
                pass
            try:
                with os.scandir(folder) as it:
                    for entry in it:
                        if entry.path == str(self.inbox):
                            continue
                        entries += 1
                        try:
                            info = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        size += max(info.st_size, info.st_blocks * 512)
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(Path(entry.path))
            except OSError:
                continue
        return size, entries

    def over_disk_quota(self) -> bool:
        """True (and the kernel killed, with the reason in :attr:`over_quota`) once it holds its
        disk quota: in the sandbox, a reply file system filled to its last MiB (its size is the
        hard limit: writes past it fail); without it, more than the quota by listing."""
        if self.over_quota:
            return True
        size, entries = self.disk_used()
        full = size >= self.sandbox.disk_bytes - 2**20 if self._bounded else size > self.sandbox.disk_bytes
        if full or entries > self.sandbox.disk_entries:
            self.over_quota = (f"the notebook filled its disk quota ({self.sandbox.disk_bytes / 2**20:.0f} MiB, "
                               f"{self.sandbox.disk_entries} files) in the grader's folders")
            self._signal_kill()
            return True
        return False

    def _watch_disk(self, every: float = 0.2) -> None:
        """Kill the kernel once it holds its quota of the disk (a thread)."""
        while self.proc.poll() is None and not self.over_disk_quota():
            time.sleep(every)

    def _read_log(self, fd: int) -> None:
        """Keep the last :data:`LOG_TAIL` bytes of the kernel's output; stop the kernel once it
        wrote more than its disk quota there (a thread)."""
        try:
            while True:
                try:
                    chunk = os.read(fd, 1 << 16)
                except OSError:
                    return
                if not chunk:
                    return
                with self._log_lock:
                    self._log_bytes += len(chunk)
                    self._log_tail += chunk
                    del self._log_tail[:-LOG_TAIL]
                if self._log_bytes > self.sandbox.disk_bytes and not self.over_quota:
                    self.over_quota = (f"the notebook wrote more than its disk quota "
                                       f"({self.sandbox.disk_bytes / 2**20:.0f} MiB) to its output log")
                    self._signal_kill()
        finally:
            os.close(fd)

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
        with self._log_lock:
            return bytes(self._log_tail[-n:]).decode(errors="replace")

    def interrupt(self) -> None:
        """Ask the kernel to interrupt its code (an ``interrupt_request``: the sandbox hides the
        kernel's process from signals sent by its number)."""
        try:
            msg = self.client.session.msg("interrupt_request", {})
            self.client.control_channel.send(msg)
        except Exception:
            pass
        if self.sandbox.kind != "bwrap":
            try:
                os.kill(self.proc.pid, signal.SIGINT)
            except OSError:
                pass

    def _signal_kill(self) -> None:
        """SIGKILL the kernel and every process it started (killing bwrap ends its PID namespace)."""
        for action in (lambda: os.killpg(self.proc.pid, signal.SIGKILL), lambda: self.proc.kill(),
                       lambda: self.sandbox.kill_all(self.slot)):
            try:
                action()
            except OSError:
                pass

    def kill(self) -> None:
        """End the kernel and every process it started, and wait for it; remove its cgroup."""
        self._signal_kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self.cgroup is not None:
            self.cgroup.remove()

    def close(self) -> None:
        self.kill()
        try:
            self.client.stop_channels()
        except Exception:
            pass
        try:
            self.client.context.destroy(linger=0)
        except Exception:
            pass
        if self.out_fd is not None:
            os.close(self.out_fd)
            self.out_fd = None
        _remove_tree(self.dir)

    # -- execution
    def _drain_stdin(self, on_input: Callable[[str], str] | None = None) -> None:
        while self.client.stdin_channel.msg_ready():
            msg = self.client.stdin_channel.get_msg(timeout=0)
            if msg["header"]["msg_type"] == "input_request":
                prompt = str(msg["content"].get("prompt", ""))
                self.client.input(on_input(prompt) if on_input else "")

    def cpu_seconds(self) -> float:
        """CPU seconds the kernel and every process it started have used so far (the process tree
        is found again every 2 s; in between only its processes' ``stat`` files are read)."""
        now = time.monotonic()
        if now - self._tree_at > 2.0 or not self._tree_pids:
            self._tree_pids, self._tree_at = _tree(self.proc.pid), now
        total = 0.0
        for pid in self._tree_pids:
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    data = f.read()
                total += sum(int(x) for x in data[data.rfind(b")") + 2:].split()[11:15]) / _CLOCK_TICKS
            except (OSError, ValueError):
                continue
        # a process that ended since: its time went to its parent's children times, or is gone
        self._cpu_seen = max(self._cpu_seen, total)
        return self._cpu_seen

    def execute(self, code: str, timeout: float, on_input: Callable[[str], str] | None = None,
                wall: float | None = None) -> Reply:
        """Run ``code``; raise :class:`Timeout` once it used ``timeout`` s of the kernel's CPU time
        (or ran ``wall`` s of wall-clock time: a hang), :class:`KernelDied` if it ends."""
        if not self.alive():
            raise KernelDied(self.over_quota or "the kernel is not running")
        start = time.monotonic()
        cpu0 = self.cpu_seconds()
        budget = max(timeout, 0.0)
        wall_deadline = start + (wall if wall is not None else wall_limit(budget))
        msg_id = self.client.execute(code, silent=False, store_history=False, allow_stdin=on_input is not None,
                                     stop_on_error=False)
        interrupted_at: float | None = None
        by_wall = False
        used = 0.0
        checked = start
        while True:
            now = time.monotonic()
            if interrupted_at is None and now - checked >= 0.25:
                checked = now
                used = self.cpu_seconds() - cpu0
            if interrupted_at is None and (used >= budget or now >= wall_deadline):
                by_wall = used < budget
                self.interrupt()
                interrupted_at = now
            if interrupted_at is not None and now >= interrupted_at + _GRACE:
                self.kill()
                raise Timeout(max(used, budget) if not by_wall else now - start, killed=True, wall=by_wall)
            wait = (interrupted_at + _GRACE - now) if interrupted_at is not None else 0.25
            self.poller.poll(max(1, int(min(wait, 0.25) * 1000)))
            self._drain_stdin(on_input)
            while self.client.shell_channel.msg_ready():
                msg = self.client.shell_channel.get_msg(timeout=0)
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                if interrupted_at is not None:
                    raise Timeout(max(used, budget) if not by_wall else time.monotonic() - start, killed=False,
                                  wall=by_wall)
                content = msg["content"]
                if self.over_disk_quota():  # the code that filled it is to blame, not the next one
                    raise KernelDied(self.over_quota, str(content.get("ename", "")),
                                     str(content.get("evalue", ""))[:2000])
                payload = content.get("payload") or []
                leaving = any(isinstance(p, dict) and p.get("source") == "ask_exit" for p in payload)
                return Reply(content.get("status", "error"), str(content.get("ename", "")),
                             str(content.get("evalue", ""))[:2000], time.monotonic() - start, leaving,
                             cpu=max(0.0, self.cpu_seconds() - cpu0))
            if not self.alive():
                raise KernelDied(self.over_quota or f"the kernel stopped (exit code {self.proc.returncode})")


# ----------------------------------------------------------------------- the student's notebook
@dataclass
class Limits:
    """Time limits, in seconds."""

    notebook: float = 600.0  # all of a notebook's cells together
    cell: float = 300.0  # one cell
    call: float = 30.0  # one call of a student's function by a checker
    exercise: float = 120.0  # all calls of one exercise's check together
    restarts: int = 3  # kernel restarts (and notebook replays) per submission
    #: Budgets are CPU seconds of the kernel (for a check, of the kernel and of the grader's checker
    #: together), so that a busy machine changes no grade; ``wall_factor`` times a budget (+30 s) of
    #: wall-clock time stops only a kernel that hangs without computing.
    wall_factor: float = 4.0


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
    notebook: "str | bytes | None" = None  # the submission's bytes (or file): a copy is all the kernel sees of it
    seed: int | None = 0  # random, NumPy and torch seeded in the kernel before the student's code

    def __post_init__(self) -> None:
        self.poison: set[int] = set()
        self.done: list[int] = []  # cells run to completion (ok or error), in order
        self.recorders: dict[int, Any] = {}  # number -> a checker's watched function (_core.recording)
        self._requests = itertools.count(1)
        self.pickle_module = wire.make_pickle_module(self._remote_reduce, self._recorder_reduce)
        self.deadline = float("inf")  # the notebook's wall-clock limit (against a hang only)
        self.cpu_spent = 0.0  # the kernel's CPU seconds on the notebook's cells, replays included
        self.exercise_cpu = 0.0  # the kernel's CPU seconds on the current exercise's calls
        self.exercise_start_cpu = 0.0  # the grader's own CPU time (its main thread) when the exercise began
        self.exercise_overhead = 0.0  # of which the wire's work (requests, replies): not the student's
        self.exercise_budget = float("inf")  # CPU seconds for the current exercise (kernel + checker)

    # -- kernel life
    def _start(self) -> None:
        self.kernel = Kernel(self.sandbox, self.slot, self.env, notebook=self.notebook)
        self.generation += 1
        inbox, outbox = self.kernel.inside
        prelude = (f"__import__('companion.grading.kernel', fromlist=['prelude']).prelude({inbox!r}, {outbox!r}, "
                   f"seed={self.seed!r})")
        reply = self.kernel.execute(prelude, timeout=60)
        if reply.status != "ok":
            raise RuntimeError(f"the grader's set-up failed in the kernel: {reply.ename}: {reply.evalue}")

    def _stop(self) -> None:
        if self.kernel is not None:
            self.kernel.close()
            self.kernel = None

    def close(self) -> None:
        self._stop()

    # -- the notebook's budget: CPU seconds of the kernel, first run and every replay together
    def _notebook_left(self) -> float:
        return self.limits.notebook - self.cpu_spent

    def _notebook_over(self) -> bool:
        return self._notebook_left() <= 0 or time.monotonic() >= self.deadline

    def _execute_cell(self, source: str) -> Reply:
        """One cell, within what is left of the cell's and the notebook's budgets."""
        assert self.kernel is not None
        budget = min(self.limits.cell, self._notebook_left())
        wall = min(wall_limit(budget, self.limits), max(self.deadline - time.monotonic(), 0.0))
        try:
            reply = self.kernel.execute(source, budget, wall=wall)
        except Timeout as exc:
            self.cpu_spent += exc.seconds if not exc.wall else 0.0
            raise
        self.cpu_spent += reply.cpu
        return reply

    def run(self) -> None:
        """Run every cell in order, within the limits (restarting where a cell kills the kernel)."""
        started = time.monotonic()
        self._start()
        self.seconds_start = time.monotonic() - started
        # the kernel's start does not count; the wall limit only stops a notebook that hangs
        self.deadline = time.monotonic() + wall_limit(self.limits.notebook, self.limits)
        position = 0
        while position < len(self.cells):
            index, source = self.cells[position]
            if self._notebook_over():
                for i, _ in self.cells[position:]:
                    self.runs[i] = CellRun(i, "skipped")
                self.notes.append(f"the notebook used up its {self.limits.notebook:.0f} s of CPU time "
                                  f"(or hung past its wall-clock limit): cells from {index} on were not run")
                return
            if not self._run_cell(index, source):
                if not self._restart():
                    for i, _ in self.cells[position + 1:]:
                        self.runs[i] = CellRun(i, "skipped")
                    return
            position += 1

    def _run_cell(self, index: int, source: str) -> bool:
        """Run one cell; False when the kernel is lost (the cell is then skipped from now on)."""
        assert self.kernel is not None
        start = time.monotonic()
        limit = "cell" if self._notebook_left() >= self.limits.cell else "notebook"
        try:
            reply = self._execute_cell(source)
        except Timeout as exc:
            self.runs[index] = CellRun(index, "timed out", seconds=exc.seconds)
            what = ("hung past its wall-clock limit" if exc.wall else
                    f"used more than the {limit}'s {min(self.limits.cell, self.limits.notebook) if limit == 'cell' else self.limits.notebook:.0f} s of CPU time")
            self.notes.append(f"cell {index} {what} and was stopped"
                              + (" (it did not respond to an interrupt: the kernel was restarted without it)" if exc.killed else ""))
            if exc.killed:
                self.poison.add(index)
                return False
            self.done.append(index)
            return True
        except KernelDied as exc:
            self.runs[index] = CellRun(index, "killed the kernel", getattr(exc, "ename", ""), getattr(exc, "evalue", ""),
                                       seconds=time.monotonic() - start)
            why = self.kernel.over_quota if self.kernel is not None else ""
            self.notes.append(f"cell {index} ended the kernel ({why or 'exit(), os._exit() or a crash'}): "
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

    def _restart(self) -> bool:
        """A fresh kernel with every cell run so far replayed (except the ones to blame), within
        what is left of the notebook's budget (replays get no fresh budget)."""
        while True:
            self._stop()
            if self.restarts >= self.limits.restarts:
                self.notes.append(f"the kernel was lost more than {self.limits.restarts} times: "
                                  "the rest of the notebook was not run")
                return False
            if self._notebook_over():
                self.notes.append(f"the kernel was lost after the notebook's {self.limits.notebook:.0f} s of CPU "
                                  "time were spent: no time was left to run it again")
                return False
            self.restarts += 1
            try:
                self._start()
            except Exception as exc:  # the machine is out of memory or processes, ...
                self._stop()
                self.notes.append(f"a new kernel could not be started: {str(exc)[:300]}")
                return False
            sources = dict(self.cells)
            ok = True
            for index in [i for i in self.done if i not in self.poison]:
                if self._notebook_over():
                    self.notes.append(f"the notebook's {self.limits.notebook:.0f} s of CPU time ran out while it "
                                      "was run again after a restart")
                    self._stop()
                    return False
                try:
                    if self._execute_cell(sources[index]).exit_requested:
                        self.poison.add(index)
                        ok = False
                        break
                except Timeout as exc:
                    if self._notebook_over():
                        self.notes.append(f"the notebook's {self.limits.notebook:.0f} s of CPU time ran out while "
                                          "it was run again after a restart")
                        self._stop()
                        return False
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

    def begin_exercise(self) -> None:
        """Start the budget of one exercise's check: CPU seconds of the kernel's calls and of the
        grader's checker together, and a generous wall-clock limit against a hang."""
        self.exercise_cpu = 0.0
        self.exercise_overhead = 0.0
        self.exercise_start_cpu = time.thread_time()
        self.exercise_budget = self.limits.exercise
        self.exercise_deadline = time.monotonic() + wall_limit(self.limits.exercise, self.limits)

    def end_exercise(self) -> None:
        self.exercise_budget = self.exercise_deadline = float("inf")

    def exercise_left(self) -> float:
        checker = time.thread_time() - self.exercise_start_cpu - self.exercise_overhead  # the checker's own work
        return self.exercise_budget - self.exercise_cpu - max(checker, 0.0)

    def ensure_running(self) -> None:
        """Restart and replay if the kernel was lost (by a call that killed it); else raise."""
        if self.kernel is not None and self.kernel.alive():
            return
        if not self._restart():
            raise NoKernel("the kernel could not be restarted")

    # -- requests from the checkers
    def _recorder_reduce(self, fn: Any) -> tuple:
        """A function the checker watches goes to the kernel as a number and the function it wraps."""
        from companion.grading import kernel as kside

        n = len(self.recorders) + 1
        self.recorders[n] = fn
        return (kside._recorder, (n, (fn.__kwdefaults__ or {}).get("__original")))

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
        value = self._result(reply, [], {})
        text = reply.get("source")
        origin = reply.get("origin")
        if isinstance(origin, str) and re.fullmatch(r"companion(\.\w+)+", origin) \
                and not origin.startswith(("companion.exercises", "companion.grading")):
            text = f"import {origin}\n" + (text if isinstance(text, str) else "")
        if isinstance(value, wire.Remote) and isinstance(text, str):
            object.__getattribute__(value, "__dict__")["__course_source__"] = text[:200_000]
        return value

    def remote(self, obj: wire.Remote, op: str, **payload: Any) -> Any:
        """Called by a :class:`~companion.grading.wire.Remote` placeholder: do ``op`` in the kernel.

        The grader's own work here (sending, reading, copying back) is hidden from the rule
        recorder of the checker's ``observe``: what the student's code did is what the kernel
        observed, and it is recorded from the reply (:func:`companion.exercises.rules.record`)."""
        info = object.__getattribute__(obj, "_remote_info")
        if info.get("generation") != self.generation:
            raise KernelDied("the kernel was restarted after this object was made")
        args, kwargs = payload.pop("args", ()), payload.pop("kwargs", {})
        profiler = sys.getprofile()  # the rules' module recorder must not see the grader's own work
        sys.setprofile(None)
        try:
            return self._remote_quietly(op, obj, args, kwargs, payload)
        finally:
            sys.setprofile(profiler)

    def _remote_quietly(self, op: str, obj: wire.Remote, args: tuple, kwargs: dict, payload: dict) -> Any:
        import torch

        from companion.exercises import rules

        with torch._C.DisableTorchFunction():
            if op == "call":  # one global random generator, as when the checker runs in the notebook
                payload["rng"] = torch.get_rng_state()
                # a module's gradients, which pickling leaves behind (a checker may hand over a model
                # whose .grad the student's function must leave alone)
                payload["grads"] = [[key, {n: q.grad for n, q in a.named_parameters() if q.grad is not None}]
                                    for key, a in [*enumerate(args), *kwargs.items()]
                                    if isinstance(a, torch.nn.Module) and any(q.grad is not None for q in a.parameters())]
            box = rules.wanted_graph() if op == "call" else None
            if box is not None:  # require_graph: the autograd facts, computed where the graph is
                payload["graph"] = list(box["grad"])
            relayed = _relay_inputs(args, kwargs) if op == "call" and torch.is_grad_enabled() else []
            if relayed:  # the result's graph stays in the kernel: its backward pass is relayed there
                payload["relay"] = [where for where, _ in relayed]
            reply = self._request(op, target=obj, args=args, kwargs=kwargs, **payload)
            if box is not None:
                box["facts"] = _graph_reply(reply.get("graph"))
            rng = reply.get("rng")
            if op == "call" and isinstance(rng, torch.Tensor) and rng.dtype == torch.uint8:
                try:
                    torch.set_rng_state(rng)
                except (RuntimeError, TypeError, ValueError):
                    raise HelperFailed("a malformed random-generator state") from None
            observation = reply.get("observation")
            if op == "call" and observation is not None:
                try:
                    rules.record(rules.Observation.from_json(observation))
                except ValueError as exc:
                    raise HelperFailed(f"a malformed observation: {exc}") from None
            for n in reply.get("recorders") or []:
                fn = self.recorders.get(n) if type(n) is int else None
                if fn is not None:  # note the call as the checker's own wrapper would have
                    label = (fn.__kwdefaults__ or {}).get("__label")
                    for cell in fn.__closure__ or ():
                        if type(cell.cell_contents) is list:
                            cell.cell_contents.append(label)
            value = self._result(reply, args, kwargs)
            relay = reply.get("relay")
            if relayed and type(relay) is int and isinstance(value, torch.Tensor) and value.is_floating_point() \
                    and value.requires_grad:
                value = _relay_function().apply(self, (self.generation, relay), value, *[t for _, t in relayed])
            elif relayed and type(relay) is list and type(value) in (tuple, list) and len(relay) == len(value):
                items = []  # a tuple or list result: each item with a graph is relayed on its own
                for item, number in zip(value, relay):
                    if type(number) is int and isinstance(item, torch.Tensor) and item.is_floating_point() \
                            and item.requires_grad:
                        item = _relay_function().apply(self, (self.generation, number), item,
                                                       *[t for _, t in relayed])
                    items.append(item)
                value = tuple(items) if type(value) is tuple else items
            return value

    def relay_backward(self, key: tuple[int, int], grad: Any, inputs: list) -> list:
        """The gradients of a relayed result (see :func:`_relay_function`) for its ``inputs``,
        computed in the kernel, where its graph is: each ``None`` or a tensor of its input's shape
        and dtype (else the grader's helper failed)."""
        import torch

        generation, relay = key
        if generation != self.generation:
            raise KernelDied("the kernel was restarted after this result was computed")
        profiler = sys.getprofile()  # the rules' module recorder must not see the grader's own work
        sys.setprofile(None)
        try:
            with torch._C.DisableTorchFunction():
                reply = self._request("backward", target=None, relay=relay, grad=grad.detach())
                grads = self._result(reply, (), {})
        finally:
            sys.setprofile(profiler)
        if not isinstance(grads, list) or len(grads) != len(inputs):
            raise HelperFailed("malformed gradients")
        for g, x in zip(grads, inputs):
            if g is not None and not (isinstance(g, torch.Tensor) and g.shape == x.shape and g.dtype == x.dtype):
                raise HelperFailed("malformed gradients")
        return grads

    def _request(self, op: str, **payload: Any) -> dict:
        started = time.monotonic()
        self.ensure_running()
        self.exercise_deadline += time.monotonic() - started  # a restart is not the student's time
        kernel = self.kernel
        assert kernel is not None
        n = next(self._requests)
        request, reply_path = kernel.inbox / f"req-{n}.pt", kernel.outbox / f"rep-{n}.st"
        try:
            wire.write_pickle(request, {"op": op, "reply": reply_path.name, **payload}, self.pickle_module)
        except Exception as exc:
            request.unlink(missing_ok=True)
            raise SendFailed(f"{type(exc).__name__}: {exc}") from None
        left = self.exercise_left()
        timeout = min(self.limits.call, left)
        wall = min(wall_limit(timeout, self.limits), self.exercise_deadline - time.monotonic())
        if timeout <= 0 or wall <= 0:
            request.unlink(missing_ok=True)
            raise CallTimedOut(self.limits.exercise, killed=False)
        code = f"__import__('companion.grading.kernel', fromlist=['handle']).handle({request.name!r})"
        overhead_start = time.thread_time()
        try:
            reply = kernel.execute(code, timeout, wall=wall)
        except Timeout as exc:
            _unlink(reply_path, kernel.out_fd)
            self.exercise_cpu += exc.seconds if not exc.wall else 0.0
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
            _unlink(reply_path, kernel.out_fd)
            raise HelperFailed(f"{reply.ename}: {reply.evalue}")
        try:
            out = wire.read_safe(reply_path.name if kernel.out_fd is not None else reply_path, session=self,
                                 dir_fd=kernel.out_fd)
        except wire.WireError as exc:
            raise HelperFailed(str(exc)) from None
        finally:
            _unlink(reply_path, kernel.out_fd)
        if not isinstance(out, dict):
            raise HelperFailed("the reply is not a dict")
        self._stamp(out)
        # The exercise's budget counts the student's function: the CPU time the kernel's helper
        # measured around it, if it is plausible (at most what the kernel used in all), else all
        # of it; the wire's own work, in the kernel and here, is the grader's.
        reported = out.get("cpu")
        spent = reply.cpu
        if type(reported) is float and 0.0 <= reported <= reply.cpu + 0.05:
            spent = reported
        self.exercise_cpu += spent
        self.exercise_overhead += time.thread_time() - overhead_start
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
            try:
                return wire.resolve_params(reply.get("value"), args, kwargs)
            except wire.WireError as exc:
                raise HelperFailed(str(exc)) from None
        error = reply.get("error")
        if not isinstance(error, dict):
            raise HelperFailed("a malformed reply")
        self.raised.append(error)
        raise rebuild_exception(error)



def _relay_inputs(args: tuple, kwargs: dict) -> list:
    """The grader's tensors a call's result may depend on, for a relayed backward pass: each as
    ``([argument, parameter name or None], tensor)``: the parameters of its module arguments and
    its tensor arguments that require a gradient."""
    import torch

    found, seen = [], set()
    for key, a in [*enumerate(args), *kwargs.items()]:
        if isinstance(a, torch.nn.Module):
            items = [(name, q) for name, q in a.named_parameters()]
        elif isinstance(a, torch.Tensor):
            items = [(None, a)]
        else:
            continue
        for name, t in items:
            if t.requires_grad and t.is_floating_point() and id(t) not in seen:
                seen.add(id(t))
                found.append(([key, name], t))
    return found


_RELAY: Any = None


def _relay_function() -> Any:
    """An autograd function whose forward pass is a result computed in the kernel and whose
    backward pass is computed there, through the student's own graph
    (:meth:`StudentKernel.relay_backward`): a checker's ``backward()`` gives the grader's tensors
    and parameters the gradients the student's code gives, as in the notebook."""
    global _RELAY
    if _RELAY is None:
        import torch

        class Relay(torch.autograd.Function):
            @staticmethod
            def forward(ctx, session, key, value, *inputs):  # type: ignore[override]
                ctx.session, ctx.key, ctx.inputs = session, key, [(i.shape, i.dtype) for i in inputs]
                return value.detach().clone()

            @staticmethod
            def backward(ctx, grad):  # type: ignore[override]
                shapes = [torch.empty(shape, dtype=dtype, device="meta") for shape, dtype in ctx.inputs]
                grads = ctx.session.relay_backward(ctx.key, grad, shapes)
                return (None, None, None, *grads)

        _RELAY = Relay
    return _RELAY


def _tree(root: int) -> list[int]:
    """``root`` and every process below it."""
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    data = f.read()
                parents.setdefault(int(data[data.rfind(b")") + 2:].split()[1]), []).append(int(name))
            except (OSError, IndexError, ValueError):
                continue
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.append(pid)
            stack.extend(parents.get(pid, ()))
    return found


def _remove_tree(path: Path) -> None:
    """Remove a kernel's folder entirely, folders it made unlistable or unwritable included."""
    def opened(function, name, excinfo):
        for target in (os.path.dirname(name), name):
            try:
                os.chmod(target, 0o700, follow_symlinks=False)
            except (OSError, NotImplementedError):
                pass
        try:
            if os.path.isdir(name) and not os.path.islink(name):
                shutil.rmtree(name, onerror=opened)
            else:
                os.unlink(name)
        except OSError:
            pass

    shutil.rmtree(path, onerror=opened)


def _graph_reply(facts: Any) -> dict | None:
    """The kernel's autograd facts, as plain checked data (None when malformed)."""
    if not isinstance(facts, dict) or type(facts.get("tensor")) is not bool:
        return None
    out: dict = {"tensor": facts["tensor"]}
    for key in ("requires_grad", "connected"):
        if key in facts:
            if type(facts[key]) is not bool:
                return None
            out[key] = facts[key]
    error = facts.get("backward_error")
    out["backward_error"] = error[:300] if isinstance(error, str) else None
    return out


def _unlink(path: Path, dir_fd: int | None = None) -> None:
    """Remove a file of the kernel's folder (``unlink`` never follows a link); with ``dir_fd``, the
    file of that name in the folder that descriptor holds."""
    try:
        if dir_fd is not None:
            os.unlink(path.name, dir_fd=dir_fd)
        else:
            os.unlink(path)
    except OSError:
        pass


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
    kind = _EXCEPTIONS.pop(key, None) or type(name if name.isidentifier() else "StudentError", (base,),
                                              {"__str__": lambda self: self.args[0] if self.args else "",
                                               "__module__": "student"})
    while len(_EXCEPTIONS) >= 256:  # a forged run of ever new names costs no lasting memory
        _EXCEPTIONS.pop(next(iter(_EXCEPTIONS)))
    _EXCEPTIONS[key] = kind
    exc = kind(message)
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
                # only attributes the grader's module already has, with a value of the same type
                for name, value in (payload.get("attributes") or {}).items():
                    if (isinstance(name, str) and name in vars(target) and type(vars(target)[name]) is type(value)
                            and type(value) in (int, float, bool, str)):
                        setattr(target, name, value)
            elif kind == "generator" and isinstance(target, torch.Generator):
                if not (isinstance(payload, torch.Tensor) and payload.dtype == torch.uint8):
                    raise TypeError("not a generator's state")
                target.set_state(payload)
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


#: The only variables of the grader's environment a kernel gets (how many threads, the locale).
PASSED_ON = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "LANG", "LC_ALL", "TZ")


def kernel_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a student's kernel, made from nothing: none of the grader's variables
    (tokens, paths, the command line) reaches it, except the few of :data:`PASSED_ON`."""
    env = {k: os.environ[k] for k in PASSED_ON if k in os.environ and len(os.environ[k]) < 100}
    env.setdefault("LANG", "C.UTF-8")
    env.update(
        PYTHONPATH=str(Path(__import__("companion").__file__).resolve().parents[1]), PYTHONHASHSEED="0",
        PYTHONDONTWRITEBYTECODE="1", MPLBACKEND="Agg", OMP_WAIT_POLICY="PASSIVE",
        PIP_NO_INDEX="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PATH="/usr/local/bin:/usr/bin:/bin",
    )
    env.update(extra or {})
    return env
