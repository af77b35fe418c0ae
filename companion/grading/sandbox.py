"""Where a student's kernel runs: a bubblewrap (``bwrap``) sandbox, one per kernel.

What the sandbox gives each kernel (:meth:`Sandbox.command` builds the ``bwrap`` command line):

* **its own files only.** The kernel's root folder is an empty in-memory file system holding the
  system's programs and libraries (``/usr``, a few files of ``/etc``), the Python installation
  and the course's ``companion`` package, all **read-only**; its own notebook (a copy, read-only);
  a private ``/tmp``, ``/var/tmp``, ``/dev/shm`` and home folder, each an in-memory file system of
  a bounded size (:attr:`Sandbox.tmpfs_bytes`) that vanishes with the kernel; and two folders
  shared with the grader: ``/grader/in`` (the grader's requests, read-only) and ``/grader/out``
  (the kernel's replies, the only place it can write that the grader reads, always without
  following links). Its working folder is in memory too, of the same bounded size.
* **a disk quota, by blocks.** The kernel writes nothing to the host's disk: its replies and
  socket files go to ``/grader/out``, an in-memory file system of :attr:`Sandbox.disk_bytes`
  (writes past it fail with ENOSPC; files deleted while held open and folders made unlistable
  still hold their blocks), which the grader reads through the sandbox's root and which vanishes
  with the sandbox; its output goes through a pipe. Once that file system is full (or the output
  passes the same size) the grader stops the kernel and says why
  (:class:`companion.grading.session.Kernel`). The submissions folder, the gradebook, the
  course's other files, the grader's home and every other kernel's files do not exist inside.
* **no network and no host sockets.** Empty network, IPC and UTS namespaces: no interface but a
  loopback of its own, no abstract Unix sockets of the host, no socket files of the host (none is
  mounted inside). The kernel talks to the grader over ZeroMQ through socket files in a folder
  made for that kernel alone.
* **its own processes only.** A PID namespace: the kernel sees no other process (so neither the
  grader's command line nor its environment), and when the kernel ends, or the grader kills it,
  every process it started ends too (``--die-with-parent``; the namespace's first process is the
  last to go). A limit on processes (``RLIMIT_NPROC``, counted per sandbox).
* **a cleared environment** (``--clearenv``): only the variables the kernel needs
  (:func:`companion.grading.session.kernel_env`), none of the grader's.
* **memory.** ``RLIMIT_AS`` per process, in-memory file systems of bounded size (so that
  ``/dev/shm`` and ``/tmp`` cannot hold more than :attr:`Sandbox.tmpfs_bytes` each) and, as root
  where the memory and pids cgroups can be written, one cgroup per kernel whose limit counts
  every page of the kernel and its children, shared memory included, and a pids limit.
* **as root, an unprivileged user.** The grader starts ``bwrap`` as root (namespaces without a
  user namespace) and the kernel then drops to a user of its own (uid ``61000 + n``, no groups,
  no capabilities, ``no_new_privs``, no user namespaces: :func:`no_userns_filter`), reserved for
  this grading run (a uid with no account and no process, locked in :data:`LOCKS`). As an ordinary user,
  ``bwrap`` makes a user namespace in which the kernel keeps the instructor's uid, without any
  capability, and cannot make further user namespaces (``--disable-userns``).

Where ``bwrap`` cannot run (not installed, or user namespaces disabled), the grader says so at
the start and in the JSON file, and grades with what remains: a network namespace of its own
through ``unshare`` where the machine allows one (else it says plainly that there is no network
isolation), a private folder, limits, and as root a separate user, or a refusal where that user
could not run Python (see :meth:`Sandbox.describe`, :meth:`Sandbox.checked`).
"""
from __future__ import annotations

import dataclasses
import os
import resource
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

UID_BASE = 61000
UID_COUNT = 1000  # the kernels' users are UID_BASE .. UID_BASE + UID_COUNT - 1
_held_locks: dict[int, object] = {}  # uid -> lock file of the users this process reserved
#: Inside the sandbox.
HOME = "/home/student"
WORK = HOME + "/work"
IN, OUT = "/grader/in", "/grader/out"
CGROUP_ROOT = Path("/sys/fs/cgroup")
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "fonts", "mime.types",
        "nsswitch.conf", "passwd", "group", "host.conf", "matplotlibrc")


def course_root() -> Path:
    import companion

    return Path(companion.__file__).resolve().parents[1]


def _python_paths() -> list[str]:
    """What the kernel's Python needs of the installation and the environment, read-only: their
    ``bin``, ``lib`` and ``lib64`` folders and ``pyvenv.cfg``, and nothing else of them (a
    ``pip.conf`` with an index token next to them stays out of reach)."""
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    paths = set()
    for prefix in prefixes:
        if prefix in ("/", "/usr") or prefix.startswith("/usr/"):
            continue
        for name in ("bin", "lib", "lib64", "pyvenv.cfg"):
            path = os.path.join(prefix, name)
            if os.path.exists(path):
                paths.add(os.path.realpath(path) if os.path.islink(path) else path)
    inside = tuple(p.rstrip("/") + "/" for p in paths)
    for entry in sys.path:  # site folders a .pth file adds (dependencies installed elsewhere)
        real = os.path.realpath(entry) if entry else ""
        if real.endswith(("site-packages", "dist-packages")) and os.path.isdir(real) \
                and not (real + "/").startswith(inside) and not real.startswith("/usr/"):
            paths.add(real)
    return sorted(paths)


def python_executable() -> str:
    """The interpreter, as a path that finds its environment (``pyvenv.cfg``) inside the sandbox."""
    return os.path.join(os.path.realpath(sys.prefix), "bin", "python3")


@dataclass(frozen=True)
class Sandbox:
    """How kernels are confined on this machine; see the module docstring."""

    kind: str  # "bwrap" or "none"
    root: bool  # the grader runs as root: kernels drop to users of their own
    why_not: str = ""  # when kind == "none": why bwrap cannot be used
    memory_bytes: int | None = None
    tmpfs_bytes: int = 256 * 2**20
    disk_bytes: int = 512 * 2**20  # what a kernel may leave on the host's disk: replies, log, files
    disk_entries: int = 10_000  # files and folders it may make there
    processes: int = 256
    cgroups: bool = False  # as root: one memory and pids cgroup per kernel
    uids: tuple[int, ...] = ()  # one user per job slot, reserved by this run (see reserve)
    bwrap: str = "bwrap"
    netns: tuple[str, ...] = ()  # without bwrap: the `unshare` prefix that gives a kernel no network
    #: without bwrap, as root: each kernel in a mount namespace of its own (``unshare --mount``), where
    #: /tmp, /var/tmp, /dev/shm and /run/lock are in-memory file systems of :attr:`tmpfs_bytes` and its
    #: own folders one of :attr:`disk_bytes` (its disk quota, by blocks); see :data:`MOUNT_SCRIPT`
    mountns: bool = False

    def checked(self) -> "Sandbox":
        """Without bwrap, as root: refuse unless the kernel can run as an unprivileged user."""
        if self.kind == "none" and self.root:
            if shutil.which("setpriv") is None:
                raise SandboxRefused("refusing to run students' code as root without a sandbox: setpriv (util-linux) "
                                     "is needed to run each kernel as an unprivileged user")
            blocked = _unreachable(python_executable())
            if blocked:
                raise SandboxRefused(f"refusing to run students' code as root without a sandbox: an unprivileged user "
                                     f"cannot reach this Python ({blocked} is closed to others); install the course "
                                     "in a Python others can read, or install bubblewrap")
        return self

    # ------------------------------------------------------------------ finding out
    @classmethod
    def detect(cls, enabled: bool = True, memory_gib: float | None = 8.0) -> "Sandbox":
        memory = int(memory_gib * 2**30) if memory_gib else None
        root = hasattr(os, "geteuid") and os.geteuid() == 0
        if not enabled:  # as root, still a user of its own (never uid 0 for a student's code)
            return cls("none", root, "--no-sandbox was given", memory, netns=_netns_prefix(root),
                       mountns=root and _mountns_works()).checked()
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            return cls("none", root, "bubblewrap (bwrap) is not installed (Debian/Ubuntu: apt install bubblewrap)", memory,
                       netns=_netns_prefix(root), mountns=root and _mountns_works()).checked()
        probe = cls("bwrap", root, memory_bytes=memory, bwrap=bwrap, uids=(UID_BASE,) if root else ())
        cgroups = root and _cgroups_writable()
        try:
            done = subprocess.run(probe.wrap(["/bin/true"], slot=0, binds=[]), capture_output=True, timeout=30)
            error = done.stderr.decode(errors="replace").strip()
            ok = done.returncode == 0
        except (OSError, subprocess.SubprocessError) as exc:
            ok, error = False, str(exc)
        if not ok:
            return cls("none", root, f"bwrap could not make a sandbox here ({error[:200] or 'no reason given'}); "
                                     "user namespaces may be disabled (kernel.unprivileged_userns_clone)", memory,
                       netns=_netns_prefix(root), mountns=root and _mountns_works()).checked()
        return cls("bwrap", root, "", memory, cgroups=cgroups, bwrap=bwrap)

    def describe(self) -> str:
        if self.kind == "bwrap":
            who = ("each kernel as its own unprivileged user" if self.root
                   else "each kernel in a user namespace, as the grading user without capabilities")
            memory = (f"memory {self.memory_bytes / 2**30:g} GiB per kernel" if self.memory_bytes else "no memory limit")
            memory += " (a cgroup, shared memory included)" if self.cgroups else " per process (RLIMIT_AS)"
            return (f"bubblewrap sandbox: only its own notebook, the course and Python read-only; private /tmp, "
                    f"/dev/shm, home and working folder of {self.tmpfs_bytes / 2**20:.0f} MiB each; replies in "
                    f"one of {self.disk_bytes / 2**20:.0f} MiB (its disk quota), nothing on the host's disk; no network, no host sockets, no "
                    f"other process visible; cleared environment; at most {self.processes} processes; {memory}; "
                    f"{who}; every process ended with the kernel")
        who = "each kernel as its own unprivileged user" if self.root else "kernels run as the grading user"
        network = ("no network (each kernel in a network namespace of its own, made with unshare)" if self.netns else
                   "NO network isolation (unshare cannot make a network namespace here: Python's socket module is "
                   "patched to refuse internet sockets, but a child process or a C extension can still connect)")
        if self.mountns:
            disk = (f"its own folders on an in-memory file system of {self.disk_bytes / 2**20:.0f} MiB (its disk "
                    f"quota, by blocks) and /tmp, /var/tmp, /dev/shm, /run/lock of {self.tmpfs_bytes / 2**20:.0f} "
                    "MiB each, in a mount namespace of its own")
            leftover = "; it can write other folders open to every user, if the machine has any"
        else:
            disk = "a private folder whose disk quota is watched by listing it"
            leftover = ("; a fast kernel writes past its disk quota between two looks, and /tmp or any other folder "
                        "that user can write is not covered at all")
        return (f"NO SANDBOX ({self.why_not}): {network}; each kernel "
                f"starts in {disk}, with time and memory limits; {who}. NOT guaranteed: "
                "a kernel can read what that user can read (other submissions included), use Unix sockets, "
                "and leave processes behind" + leftover + ("" if self.root else
                "; it can also write what the grading user can write (the course's files included)"))

    def warning(self) -> str | None:
        """What to tell the instructor at the start, when the protection is weaker than it should be."""
        if self.kind == "bwrap":
            return None
        return "warning: grading without a sandbox. " + self.describe()

    # ------------------------------------------------------------------ users
    def reserve(self, slots: int) -> "Sandbox":
        """This sandbox with ``slots`` users reserved for this run alone (as root).

        Two grading runs on one machine must never share a user. Each user is held through an
        exclusive lock on ``<lock_folder()>/uid-<uid>.lock``, in a folder only root may write (not
        the shared ``/tmp``, where anyone could plant a lock file), until this process ends (or
        :func:`release`). Only a uid that no account has and no process runs as is taken: every
        process of it is then this run's kernels', so cleanup kills nothing of anyone else's."""
        if not self.root:
            return self
        import fcntl

        folder = lock_folder()
        busy = _uids_in_use()
        uids: list[int] = []
        for uid in range(UID_BASE, UID_BASE + UID_COUNT):
            if len(uids) == slots:
                break
            if uid in busy or _uid_has_account(uid):  # someone else's user: never ours to kill
                continue
            try:
                fd = os.open(f"{folder}/uid-{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            except OSError:
                continue
            handle = os.fdopen(fd, "a")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                continue
            _held_locks[uid] = handle
            uids.append(uid)
        if len(uids) < slots:
            raise RuntimeError(f"only {len(uids)} of {slots} sandbox users are free (other grading runs hold the rest)")
        return dataclasses.replace(self, uids=tuple(uids))

    def uid(self, slot: int) -> int | None:
        if not self.root:
            return None
        if slot >= len(self.uids):
            raise RuntimeError("no sandbox user reserved for this job slot (call Sandbox.reserve first)")
        return self.uids[slot]

    # ------------------------------------------------------------------ the command
    def wrap(self, argv: list[str], slot: int, binds: list[tuple[str, str, str]], env: dict[str, str] | None = None,
             chdir: str | None = None, seccomp_fd: int | None = None, info_fd: int | None = None,
             private: str | None = None) -> list[str]:
        """``argv`` run in the sandbox. ``binds``: ``(option, host path, path inside)`` with option
        ``--ro-bind`` or ``--bind``, for the kernel's own folders, ``--dir`` for a working folder in
        memory of :attr:`tmpfs_bytes`, ``--quota`` for one of :attr:`disk_bytes` (the kernel's replies
        and socket files: its disk quota). ``info_fd``: where bwrap writes the sandbox's first
        process (``--info-fd``). ``private``: without bwrap, with :attr:`mountns`, the kernel's folder
        (made on a file system of the quota's size, in its mount namespace)."""
        if self.kind != "bwrap":
            uid = self.uid(slot)
            if uid is None:
                return [*self.netns, *argv]
            drop = [shutil.which("setpriv") or "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                    "--no-new-privs", "--inh-caps=-all"]
            if self.mountns and private:
                unshare = [shutil.which("unshare") or "unshare", "--mount", "--propagation", "private",
                           *(["--net"] if self.netns else []), "--"]
                return [*unshare, "/bin/sh", "-c", MOUNT_SCRIPT, "sh", private, str(uid), str(self.tmpfs_bytes),
                        str(self.disk_bytes), *drop, *argv]
            return [*self.netns, *drop, *argv]
        cmd = [self.bwrap]
        if self.root:  # namespaces without a user namespace; the kernel drops to its user below
            cmd += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
        else:
            cmd += ["--unshare-all", "--unshare-user", "--disable-userns"]
        cmd += ["--die-with-parent", "--new-session", "--hostname", "sandbox", "--clearenv"]
        for key, value in sorted((env or {}).items()):
            cmd += ["--setenv", key, value]
        made: set[str] = {"/"}

        def parents(path: str) -> None:
            parts = Path(path).parent.parts
            for i in range(2, len(parts) + 1):
                p = str(Path(*parts[:i]))
                if p not in made:
                    made.add(p)
                    # in the kernel's home, its user (not root, who makes the folders) must write
                    cmd.extend(["--perms", "1777" if p.startswith(HOME + "/") else "0755", "--dir", p])

        cmd += ["--ro-bind", "/usr", "/usr"]
        made.add("/usr")
        for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            path = f"/{name}"
            if os.path.islink(path):
                cmd += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                cmd += ["--ro-bind", path, path]
            made.add(path)
        cmd += ["--perms", "0755", "--dir", "/etc"]
        made.add("/etc")
        for name in _ETC:
            if os.path.exists(f"/etc/{name}"):
                cmd += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
        cmd += ["--proc", "/proc", "--dev", "/dev"]
        made |= {"/proc", "/dev"}
        for path in ("/tmp", "/var/tmp", "/dev/shm", HOME):
            parents(path)
            cmd += ["--perms", "1777", "--size", str(self.tmpfs_bytes), "--tmpfs", path]
            made.add(path)
        mounted = [*_python_paths(), str(course_root() / "companion")]
        for path in mounted:
            parents(path)
            cmd += ["--ro-bind", path, path]
            made.add(path)
        # The interpreter may be a chain of links (a virtual environment made by a python3.11 that
        # is itself a link elsewhere): each link outside what is mounted is made again, alone.
        inside = tuple(m.rstrip("/") + "/" for m in [*mounted, "/usr", "/etc", "/bin", "/lib", "/lib64"])
        link = python_executable()
        for _ in range(16):
            if not os.path.islink(link):
                break
            target = os.path.join(os.path.dirname(link), os.readlink(link))
            if not link.startswith(inside) and link not in made:
                parents(link)
                cmd += ["--symlink", os.readlink(link), link]
                made.add(link)
            link = os.path.normpath(target)
        for option, host, inside in binds:
            parents(inside)
            if option == "--dir":  # a working folder of its own, in memory, of bounded size
                cmd += ["--perms", "1777", "--size", str(self.tmpfs_bytes), "--tmpfs", inside]
            elif option == "--quota":  # what it writes for the grader: a file system of the quota's size
                cmd += ["--perms", "1777", "--size", str(self.disk_bytes), "--tmpfs", inside]
            else:
                cmd += [option, host, inside]
            made.add(inside)
        if chdir:
            cmd += ["--chdir", chdir]
        if info_fd is not None:
            cmd += ["--info-fd", str(info_fd)]
        if self.root and seccomp_fd is not None:  # no user namespaces inside (see no_userns_filter)
            cmd += ["--seccomp", str(seccomp_fd)]
        uid = self.uid(slot)
        if uid is not None:
            cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--", "/usr/bin/setpriv",
                    f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs", "--inh-caps=-all"]
        else:
            cmd += ["--"]
        return cmd + list(argv)

    def preexec(self, cgroup: "Cgroup | None") -> Callable[[], None]:
        """Runs in the child before ``exec``: join the kernel's cgroup, die with the grader."""
        def apply() -> None:
            if cgroup is not None:
                cgroup.join()
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            try:  # PR_SET_PDEATHSIG: SIGKILL bwrap when the grading process ends
                import ctypes

                ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))
            except Exception:
                pass

        return apply

    def limits_argv(self) -> list[str]:
        """Arguments of :mod:`companion.grading.launch`, which sets the limits inside the sandbox
        (after the user namespace exists, so that the process limit counts this sandbox alone)."""
        return ["--nproc", str(self.processes), "--as", str(self.memory_bytes or 0), "--fsize", str(self.disk_bytes)]

    def kill_all(self, slot: int) -> None:
        """SIGKILL every process of the slot's user (without bwrap, as root)."""
        uid = self.uid(slot)
        if uid is None or self.kind == "bwrap":
            return
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if entry.stat().st_uid == uid:
                    os.kill(int(entry.name), signal.SIGKILL)
            except (OSError, ValueError):
                pass


LOCKS = "/run/course-grade"
KERNELS = "/run/course-grade-kernels"

#: Without bwrap, as root, in the kernel's new mount namespace (``sh -c MOUNT_SCRIPT sh FOLDER UID
#: TMPFS_BYTES DISK_BYTES COMMAND...``): in-memory file systems of bounded size over the folders
#: every user may write, and one of the disk quota's size over the kernel's own folder, which holds
#: its replies, socket files, home, temporary and working folders; then the command, there.
MOUNT_SCRIPT = r"""set -e
w="$1"; u="$2"; t="$3"; d="$4"; shift 4
for f in /tmp /var/tmp /dev/shm /run/lock; do
    if [ -d "$f" ] && [ ! -L "$f" ]; then mount -t tmpfs -o "size=$t,mode=1777,nosuid,nodev" tmpfs "$f"; fi
done
mount -t tmpfs -o "size=$d,mode=0700,nosuid,nodev" tmpfs "$w"
mkdir -p "$w/out" "$w/ipc" "$w/tmp" "$w/work" "$w/home/.ipython/profile_default"
cp "$w/../in/ipython_kernel_config.py" "$w/home/.ipython/profile_default/"
chown -R "$u:$u" "$w"
cd "$w/work"
exec "$@"
"""


def kernels_folder(path: str = KERNELS) -> str:
    """Where the kernels' folders are made without bwrap, as root (not under /tmp, which each
    kernel's mount namespace covers): made by root, mode 0711, never a link."""
    import stat

    try:
        os.mkdir(path, 0o711)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise RuntimeError(f"{path} is not a folder of the grader's (a link, another owner, or writable by others): "
                           "remove it, the grader makes it again")
    return path


def _mountns_works() -> bool:
    """As root without bwrap: can a kernel get a mount namespace with in-memory file systems?"""
    unshare = shutil.which("unshare")
    if unshare is None or not os.path.exists("/bin/sh"):
        return False
    try:
        kernels_folder()
        done = subprocess.run([unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
                               "mount -t tmpfs -o size=65536 tmpfs /tmp"], capture_output=True, timeout=30)
    except (OSError, RuntimeError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def lock_folder(path: str = LOCKS) -> str:
    """The private folder of the users' lock files: made by root, mode 0700, never a link; a folder
    there of someone else's is refused."""
    import stat

    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise RuntimeError(f"{path} is not a private folder of the grader's (a link, another owner, or open to "
                           "others): remove it, the grader makes it again")
    return path


def _uids_in_use() -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found.add(entry.stat().st_uid)
            except OSError:
                pass
    return found


def _uid_has_account(uid: int) -> bool:
    import pwd

    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False


def release(sandbox: Sandbox | None = None) -> None:
    """Give back the users ``sandbox`` reserved (all that this process reserved, by default)."""
    for uid in list(sandbox.uids if sandbox is not None else _held_locks):
        handle = _held_locks.pop(uid, None)
        if handle is not None:
            handle.close()


def no_userns_filter() -> bytes | None:
    """A seccomp program (classic BPF, for ``bwrap --seccomp``) that refuses new user namespaces:
    ``unshare`` and ``clone`` with ``CLONE_NEWUSER`` fail with EPERM, and ``clone3`` (whose flags a
    filter cannot read) with ENOSYS, on which the C library falls back to ``clone``. As root the
    kernel's user is not in a user namespace of bwrap's, so ``--disable-userns`` cannot be used;
    this does its work. x86-64 only (None elsewhere: the sandbox then says so)."""
    import platform
    import struct

    if platform.machine() not in ("x86_64", "AMD64"):
        return None
    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    program = [
        (ld, 0, 0, 4),  # 0: the architecture
        (jeq, 0, 6, 0xC000003E),  # 1: x86-64, else allow (8)
        (ld, 0, 0, 0),  # 2: the system call's number
        (jeq, 2, 0, 272),  # 3: unshare -> 6
        (jeq, 1, 0, 56),  # 4: clone -> 6
        (jeq, 4, 2, 435),  # 5: clone3 -> ENOSYS (10), else allow (8)
        (ld, 0, 0, 16),  # 6: its first argument (the flags)
        (jset, 1, 0, 0x10000000),  # 7: CLONE_NEWUSER -> EPERM (9)
        (ret, 0, 0, allow),  # 8
        (ret, 0, 0, eperm),  # 9
        (ret, 0, 0, enosys),  # 10
    ]
    return b"".join(struct.pack("<HBBI", *op) for op in program)


class SandboxRefused(RuntimeError):
    """Grading here would run students' code with the grader's privileges: the grader refuses."""


def _unreachable(path: str) -> str | None:
    """The first folder on the way to ``path`` that others cannot enter (None: all can)."""
    parts = Path(os.path.realpath(path)).parents
    for folder in reversed(list(parts)):
        try:
            if not os.stat(folder).st_mode & 0o001:
                return str(folder)
        except OSError:
            return str(folder)
    return None


def _netns_prefix(root: bool) -> tuple[str, ...]:
    """The ``unshare`` command that runs a kernel in a network namespace of its own (a loopback,
    no other interface), when this machine allows one; else ``()``."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return ()
    prefix = (unshare, "--net", "--") if root else (unshare, "--user", "--map-current-user", "--net", "--")
    try:
        done = subprocess.run([*prefix, "/bin/true"], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ()
    return prefix if done.returncode == 0 else ()


# ------------------------------------------------------------------------------- cgroups
def _cgroups_writable() -> bool:
    for controller in ("memory", "pids"):
        base = CGROUP_ROOT / controller
        if not (base / "cgroup.procs").exists():
            return False
        probe = base / f"course-grade-probe-{os.getpid()}"
        try:
            probe.mkdir()
            probe.rmdir()
        except OSError:
            return False
    return True


@dataclass
class Cgroup:
    """One memory and one pids cgroup (v1) for one kernel, as root."""

    name: str
    memory_bytes: int | None
    processes: int
    paths: list[Path] = field(default_factory=list)

    def create(self) -> "Cgroup":
        for controller in ("memory", "pids"):
            path = CGROUP_ROOT / controller / self.name
            path.mkdir(exist_ok=True)
            self.paths.append(path)
        memory, pids = self.paths
        if self.memory_bytes:
            (memory / "memory.limit_in_bytes").write_text(str(self.memory_bytes))
            swap = memory / "memory.memsw.limit_in_bytes"
            if swap.exists():
                try:
                    swap.write_text(str(self.memory_bytes))
                except OSError:
                    pass
        (pids / "pids.max").write_text(str(self.processes + 16))
        return self

    def join(self) -> None:  # in the child, before exec (async-signal-safe enough: plain writes)
        for path in self.paths:
            fd = os.open(str(path / "cgroup.procs"), os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)

    def oom_killed(self) -> bool:
        try:
            text = (self.paths[0] / "memory.oom_control").read_text()
            return any(line == "oom_kill 1" or (line.startswith("oom_kill ") and line != "oom_kill 0")
                       for line in text.splitlines())
        except (OSError, IndexError):
            return False

    def remove(self) -> None:
        for path in self.paths:
            for _ in range(50):
                try:
                    pids = [int(p) for p in (path / "cgroup.procs").read_text().split()]
                except OSError:
                    break
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                import time

                time.sleep(0.02)
            try:
                path.rmdir()
            except OSError:
                pass
