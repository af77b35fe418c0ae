"""Hostile submissions: each attack of issue 18 ("What was measured", 1 to 7) as a notebook that
tries it, graded next to a classmate's honest notebook; each test asserts that the attack gains
nothing and changes nothing outside its sandbox.

One grading run (module fixture ``attacked``) holds every hostile notebook and the classmate's,
with a secret token in the grader's environment, a Unix socket listening on the host, a file
only root may read and the course's files hashed before and after. The attacks report what they
saw through the message of an exception their answer raises (it lands in their own feedback),
so that the tests can check that the sandbox showed them nothing.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from companion.grade import Options, grade
from companion.grading import registry
from companion.grading.sandbox import Sandbox
from companion.grading.session import Limits

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
CHAPTERS = registry.load()
SECRET = "course-grader-secret-0f9e8d7c"
SANDBOX = Sandbox.detect()
needs_bwrap = pytest.mark.skipif(SANDBOX.kind != "bwrap", reason=f"no bubblewrap sandbox here: {SANDBOX.why_not}")
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), needs_bwrap]

#: The variables a kernel may have (what the grader sets, and what ipykernel adds).
KERNEL_ENV = {"HOME", "TMPDIR", "MPLCONFIGDIR", "IPYTHONDIR", "JUPYTER_RUNTIME_DIR", "XDG_CACHE_HOME", "PATH",
              "PYTHONPATH", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE", "MPLBACKEND", "OMP_WAIT_POLICY", "PIP_NO_INDEX",
              "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "LANG", "LC_ALL", "TZ", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
              "OPENBLAS_NUM_THREADS", "PWD", "PYDEVD_USE_FRAME_EVAL", "TERM", "CLICOLOR", "FORCE_COLOR",
              "CLICOLOR_FORCE", "PAGER", "GIT_PAGER", "JPY_PARENT_PID", "JPY_SESSION_NAME"}

REPORT = '''
def my_sparse_dot(a, b):
    raise ValueError("REPORT" + json.dumps(found, sort_keys=True) + "END")
'''


def _notebook(chapter: int, *cells: str, title: str | None = None) -> nbformat.NotebookNode:
    nb = new_notebook()
    nb.metadata["course"] = {"chapter": chapter}
    if title:
        nb.cells.append(new_markdown_cell(f"# {title}"))
    nb.cells += [new_code_cell(textwrap.dedent(c).strip()) for c in cells]
    return nb


def _write(nb, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nbformat.write(nb, path)
    return path


def _digest(paths) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def _course_files() -> list[Path]:
    return sorted(p for p in (ROOT / "companion").rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def _report(entry: dict) -> dict:
    """What a hostile notebook saw, from the message its my_sparse_dot raised."""
    assert entry["exercises"] and "REPORT" in entry["exercises"][0]["message"], (entry["problem"], entry)
    message = entry["exercises"][0]["message"]
    return json.loads(message.split("REPORT", 1)[1].rsplit("END", 1)[0])


def _attack_notebooks(folder: Path, host: dict) -> None:
    """Write the hostile notebooks. ``host``: host paths an attacker could know or guess."""
    common = "import os, sys, json, glob, socket, subprocess, time, signal, ctypes\nfound = {}"
    # 2. Reach the grader through the objects a checker passes (6.1 hands over a block): walk its
    # methods' globals and closures for anything of the grader's, and use ctypes to run code "in
    # the grader".
    _write(_notebook(6, common, f'''
def my_block_forward(block, x):
    seen = []
    for f in (block.forward, block.attn.forward, block.ff.forward, block.norm1.forward):
        seen.append(type(f).__name__)
        seen += sorted(k for k in getattr(f, "__globals__", {{}}) if k in ("StudentKernel", "Kernel", "session"))
        for cell in getattr(f, "__closure__", None) or ():
            seen.append(type(cell.cell_contents).__name__)
    code = "open({str(host['marker'])!r}, 'w').write('pwned')"
    ctypes.pythonapi.PyRun_SimpleString(code.encode())
    try:
        open({str(host['feedback'])!r}, "w").write("passed")
    except OSError as exc:
        seen.append("feedback: " + type(exc).__name__)
    raise ValueError("REPORT" + json.dumps({{"seen": seen, "me": os.getpid()}}) + "END")
'''), folder / "mallory" / "callbacks.ipynb")
    # 3. Links planted in the kernel's writable folder, aimed at a classmate's file and a root-only
    # file, for the grader to read, write through or chmod: the kernel's helper is replaced so
    # that every reply is a link.
    _write(_notebook(1, common, f'''
import companion.grading.kernel as helper
targets = [{str(host['classmate'])!r}, {str(host['root_only'])!r}]
def evil(path, obj, handle=None):
    for name in (path, path + ".part"):
        try:
            os.symlink(targets[len(name) % 2], name)
        except OSError:
            pass
helper.wire.write_safe = evil
for name in ("kernel.log", "kernel.json", "ipc", "gradebook.csv"):
    try:
        os.symlink(targets[1], os.path.join("/grader/out", name))
    except OSError:
        pass
def my_sparse_dot(a, b):
    return sum(v * b.get(k, 0) for k, v in a.items())
'''), folder / "mallory" / "links.ipynb")
    # 4. Snooping: the grader's environment, its command line, the submissions folder, a
    # classmate's notebook and an earlier gradebook.
    _write(_notebook(1, common, f'''
allowed = {sorted(KERNEL_ENV)!r}
found["extra_env"] = sorted(k for k in os.environ if k not in allowed)
found["secrets"] = [k for k, v in os.environ.items() if "secret" in v.lower()]
cmdlines = []
for p in glob.glob("/proc/[0-9]*/cmdline"):
    try:
        cmdlines.append(open(p, "rb").read().decode(errors="replace"))
    except OSError:
        pass
found["grader_cmdline"] = [c[:40] for c in cmdlines if "companion.grade " in c.replace(chr(0), " ") + " " or "pytest" in c]
found["visible"] = []
for path in ({str(host['classmate'])!r}, {str(host['submissions'])!r}, {str(host['gradebook'])!r},
             "/etc/shadow", {str(host['root_only'])!r}):
    try:
        found["visible"].append(len(os.listdir(path)) if os.path.isdir(path) else open(path).read(9) and "read")
    except OSError as exc:
        found["visible"].append(type(exc).__name__[:4])
found["ps"] = len([p for p in os.listdir("/proc") if p.isdigit()])
''', REPORT), folder / "mallory" / "snoop.ipynb")
    # 5. The sandbox's walls: host Unix sockets (a file and an abstract one), files left in /tmp,
    # /var/tmp and /dev/shm, 512 MiB in /dev/shm, more processes than allowed, a daemon, the
    # course's files, a classmate's file, killing the grader, memory.
    _write(_notebook(1, common, f'''
found["unix"] = []
for address in ({str(host['socket'])!r}, "\\0{host['abstract']}"):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(address)
        s.sendall(b"hello from the kernel")
        found["unix"].append("connected")
    except OSError as exc:
        found["unix"].append(type(exc).__name__)
found["left"] = []
for d in ("/tmp", "/var/tmp", "/dev/shm"):
    found["left"] += [f for f in os.listdir(d) if f.startswith("course-attack")]
    try:
        open(os.path.join(d, "course-attack-{host['tag']}"), "w").write("left behind")
    except OSError as exc:
        found.setdefault("write_errors", []).append(type(exc).__name__)
written = 0
try:
    with open("/dev/shm/course-attack-big", "wb") as f:
        for _ in range(512):
            f.write(b"\\0" * 2**20)
            f.flush()
            written += 1
except OSError as exc:
    found["shm_error"] = type(exc).__name__
found["shm_mib"] = written
os.remove("/dev/shm/course-attack-big")
children = []
try:
    for _ in range(400):
        children.append(subprocess.Popen(["sleep", "30"]))
except OSError as exc:
    found["fork_error"] = type(exc).__name__
found["children"] = len(children)
for c in children:
    c.kill()
    c.wait()
subprocess.Popen(["sleep", "{host['daemon_seconds']}"], start_new_session=True, stdout=subprocess.DEVNULL)
import companion.exercises._core as core
try:
    with open(core.__file__, "a") as f:
        f.write("\\npassed = lambda *a, **k: None\\n")
    found["course"] = "written"
except OSError as exc:
    found["course"] = type(exc).__name__
for path in ({str(host['classmate'])!r},):
    try:
        os.remove(path)
        found["removed"] = True
    except OSError as exc:
        found["removed"] = type(exc).__name__
found["killed"] = 0
for p in os.listdir("/proc"):
    if p.isdigit() and int(p) != os.getpid():
        try:
            os.kill(int(p), signal.SIGKILL)
            found["killed"] += 1
        except OSError:
            pass
''', f'''
try:
    import torch
    big = torch.ones(2**31, dtype=torch.float32)  # 8 GiB
    found["memory"] = "allocated"
except (MemoryError, RuntimeError) as exc:
    found["memory"] = type(exc).__name__
''', REPORT), folder / "mallory" / "walls.ipynb")
    # 6. Filling the disk: its working folder (in memory, bounded), then the reply folder (in
    # memory too, of the quota's size) with files of 64 MiB (killed once it is full; the replay
    # skips that cell), and its log through the C-level stderr (a pipe; killed past the quota).
    _write(_notebook(1, common, '''
found["work_mib"] = 0
try:
    with open("fill", "wb") as f:
        for _ in range(1024):
            f.write(b"\\0" * 2**20)
            f.flush()
            found["work_mib"] += 1
except OSError as exc:
    found["work_error"] = type(exc).__name__
os.remove("fill")
''', '''
for n in range(64):
    with open(f"/grader/out/fill-{n}", "wb") as f:
        for _ in range(64):
            f.write(b"\\0" * 2**20)
''', '''
for _ in range(2048):
    os.write(2, b"x" * 2**20)
''', REPORT), folder / "mallory" / "disk.ipynb")
    # 5 (second half). A notebook graded in the same run that looks for what the others left.
    _write(_notebook(1, common, f'''
found["left"] = []
for d in ("/tmp", "/var/tmp", "/dev/shm"):
    found["left"] += [f for f in os.listdir(d) if f.startswith("course-attack")]
''', REPORT), folder / "mallory" / "zz_looks_for_leftovers.ipynb")


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    base = tmp_path_factory.mktemp("attacked")
    os.chmod(base, 0o755)
    folder = base / "submissions"
    classmate = folder / "bob" / CHAPTERS[1].notebook
    classmate.parent.mkdir(parents=True)
    shutil.copy(BOOK / CHAPTERS[1].notebook, classmate)
    root_only = base / "root_only.txt"
    root_only.write_text("only the grader may read this")
    os.chmod(root_only, 0o600)
    gradebook = base / "out" / "gradebook.csv"
    gradebook.parent.mkdir()
    gradebook.write_text("an earlier gradebook: alice,4\n")
    tag = f"{os.getpid()}-{time.time_ns()}"
    host = {"marker": base / "PWNED", "feedback": base / "out" / "feedback" / "mallory__callbacks.md",
            "classmate": classmate, "root_only": root_only, "submissions": folder, "gradebook": gradebook,
            "socket": base / "host.sock", "abstract": f"course-attack-{tag}", "tag": tag,
            "daemon_seconds": 7000 + os.getpid() % 1000}
    _attack_notebooks(folder, host)
    # A host socket file and an abstract socket, listening: nothing may reach them.
    received: list[bytes] = []
    listeners = []
    for address in (str(host["socket"]), "\0" + host["abstract"]):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(address)
        s.listen(5)
        s.settimeout(0.5)
        listeners.append(s)
    if os.path.exists(host["socket"]):
        os.chmod(host["socket"], 0o777)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            for s in listeners:
                try:
                    conn, _ = s.accept()
                    received.append(conn.recv(100) or b"(connected)")
                    conn.close()
                except OSError:
                    pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    before = _digest(_course_files() + [classmate, root_only])
    mode = os.stat(root_only).st_mode
    old = os.environ.get("GRADER_TOKEN")
    os.environ["GRADER_TOKEN"] = SECRET
    try:
        entries = grade([str(folder)], Options(out=gradebook, feedback_dir=base / "out" / "feedback", jobs=2,
                                               progress=False, memory_gib=3,
                                               limits=Limits(notebook=120, cell=60, call=20, exercise=40)))
    finally:
        if old is None:
            os.environ.pop("GRADER_TOKEN", None)
        else:
            os.environ["GRADER_TOKEN"] = old
        stop.set()
        thread.join(timeout=5)
        for s in listeners:
            s.close()
    after = _digest(_course_files() + [classmate, root_only])
    daemons = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and f"sleep\0{host['daemon_seconds']}" in (p / "cmdline").read_bytes().decode(errors="replace"):
                daemons.append(p.name)
        except OSError:
            pass
    leftovers = [p for d in ("/tmp", "/var/tmp", "/dev/shm") for p in Path(d).glob(f"course-attack-{tag}")]
    return {"by_name": {Path(e["submission"]).name: e for e in entries}, "host": host, "before": before,
            "after": after, "received": received, "daemons": daemons, "leftovers": leftovers, "base": base,
            "root_only_mode": (mode, os.stat(root_only).st_mode),
            "files": [p for p in (base / "out").rglob("*") if p.is_file()]}


def test_the_classmate_is_graded_untouched_next_to_the_attacks(attacked):
    entry = attacked["by_name"][CHAPTERS[1].notebook]
    assert entry["problem"] is None and entry["total"] == entry["out_of"] == len(CHAPTERS[1].exercises), entry
    assert attacked["before"] == attacked["after"]  # the course, the classmate's file, the root-only file
    assert attacked["root_only_mode"][0] == attacked["root_only_mode"][1]


def test_2_the_functions_a_checker_passes_lead_nowhere_in_the_grader(attacked):
    entry = attacked["by_name"]["callbacks.ipynb"]
    assert not attacked["host"]["marker"].exists()  # ctypes ran nothing in the grader
    first = entry["exercises"][0]
    if "REPORT" in first["message"]:  # the check ran: what the attacker's walk found
        seen = json.loads(first["message"].split("REPORT", 1)[1].rsplit("END", 1)[0])["seen"]
        assert not {"StudentKernel", "Kernel", "session"} & set(seen), seen
    # importing ctypes reaches for the grader's machinery: no points, and a note that says why
    assert entry["total"] == 0 and any("ctypes" in note for note in entry["notes"]), entry
    text = (attacked["base"] / "out" / "feedback" / "mallory__callbacks.md").read_text()
    assert "passed" not in text.split("Exercise 6.1", 1)[1].split("\n")[0]


def test_3_links_in_the_kernels_folder_are_never_followed(attacked):
    entry = attacked["by_name"]["links.ipynb"]
    assert {ex["status"] for ex in entry["exercises"]} == {"error"} and entry["total"] == 0, entry
    assert "not a regular file" in entry["exercises"][0]["message"] or "no reply file" in entry["exercises"][0]["message"]
    assert attacked["before"] == attacked["after"] and attacked["root_only_mode"][0] == attacked["root_only_mode"][1]
    assert attacked["by_name"][CHAPTERS[1].notebook]["total"] == len(CHAPTERS[1].exercises)


def test_4_no_secret_command_line_classmate_or_gradebook_is_visible(attacked):
    entry = attacked["by_name"]["snoop.ipynb"]
    found = _report(entry)
    assert found["extra_env"] == [] and found["secrets"] == [] and SECRET not in json.dumps(found)
    assert found["grader_cmdline"] == []
    assert found["ps"] <= 4  # its own processes only: the sandbox's first process, the kernel, ...
    assert found["visible"] == ["File"] * 5, found["visible"]  # none of them exists inside the sandbox
    everything = json.dumps(attacked["by_name"], ensure_ascii=False)
    assert SECRET not in everything and "an earlier gradebook" not in everything
    for file in attacked["files"]:
        text = file.read_text(errors="replace")
        assert SECRET not in text and "def my_sparse_dot(a, b):\n    return sum" not in text


def test_5_host_sockets_files_processes_and_memory_stay_out_of_reach(attacked):
    found = _report(attacked["by_name"]["walls.ipynb"])
    assert attacked["received"] == [] and set(found["unix"]) <= {"FileNotFoundError", "ConnectionRefusedError"}
    assert found["left"] == [] and attacked["leftovers"] == []
    assert _report(attacked["by_name"]["zz_looks_for_leftovers.ipynb"])["left"] == []
    assert found["shm_mib"] <= SANDBOX.tmpfs_bytes // 2**20 and found["shm_error"] == "OSError"
    assert found["children"] < SANDBOX.processes and "fork_error" in found
    assert attacked["daemons"] == []
    assert found["course"] in ("OSError", "PermissionError") and found["removed"] == "FileNotFoundError"
    assert found["memory"] in ("RuntimeError", "MemoryError")
    assert attacked["before"] == attacked["after"]
    # It killed what it could (its own sandbox): the grader graded everyone anyway.
    assert all(e["problem"] is None for e in attacked["by_name"].values())


def test_6_the_host_disk_is_under_a_quota(attacked):
    entry = attacked["by_name"]["disk.ipynb"]
    found = _report(entry)
    assert found["work_mib"] <= SANDBOX.tmpfs_bytes // 2**20 and found["work_error"] == "OSError"
    quota = [n for n in entry["notes"] if "disk quota" in n]
    assert len(quota) == 2, entry["notes"]  # the reply folder, then the log: each cell killed, then skipped


def test_the_attacks_gain_no_points(attacked):
    for name in ("callbacks.ipynb", "links.ipynb", "snoop.ipynb", "walls.ipynb", "zz_looks_for_leftovers.ipynb",
                 "disk.ipynb"):
        assert attacked["by_name"][name]["total"] == 0, name


# ------------------------------------------------------------------ as an ordinary user
def _ordinary_user(tmp_path: Path, as_root: bool = False) -> list[str] | None:
    """The command prefix that runs what follows as an ordinary user ([] when we are one already;
    None when that is impossible here). As root, a user is made (``useradd``); where this Python
    lives below /root (a folder only root may enter), a private mount namespace shows it to that
    user without changing anything on the machine. ``as_root``: the same namespace, but what
    follows stays root (a grader run as root whose Python every user can reach)."""
    if os.geteuid() != 0:
        return None if as_root else []
    if not all(shutil.which(t) for t in ("setpriv", "useradd", "unshare", "mount")):
        return None
    name = "coursegradetest"
    if subprocess.run(["id", "-u", name], capture_output=True).returncode != 0:
        if subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                          capture_output=True).returncode != 0:
            return None
    uid = subprocess.run(["id", "-u", name], capture_output=True, text=True).stdout.strip()
    drop = "exec" if as_root else f"exec setpriv --reuid={uid} --regid={uid} --clear-groups --reset-env"
    base = os.path.realpath(sys.base_prefix)
    if not base.startswith("/root/"):
        return ["sh", "-c", drop + ' "$@"', "sh"]
    top = "/root/" + base.split("/")[2]
    keep = tmp_path / "python-bind"
    keep.mkdir()
    script = (f"mount --bind {top} {keep} && mount -t tmpfs -o mode=755,size=1m none /root && mkdir {top} && "
              f"mount --bind {keep} {top} && {drop} " + '"$@"')
    if subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True).returncode != 0:
        return None
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"]


@pytest.fixture
def shared_tmp():
    """A folder an ordinary user can enter (pytest's own are root's alone when root runs them)."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="course-grade-user-"))
    os.chmod(path, 0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_as_an_ordinary_user_the_sandbox_holds_too(tmp_path, shared_tmp):
    argv = _ordinary_user(tmp_path)
    if argv is None:
        pytest.skip("running as root without setpriv, useradd or mount namespaces: no ordinary user to grade as")
    keep, tmp_path = tmp_path, shared_tmp
    folder = tmp_path / "submissions"
    classmate = folder / "bob" / CHAPTERS[1].notebook
    classmate.parent.mkdir(parents=True)
    shutil.copy(BOOK / CHAPTERS[1].notebook, classmate)
    tag = f"user-{os.getpid()}"
    daemon = 8000 + os.getpid() % 1000
    _write(_notebook(1, "import os, json, subprocess, signal, glob\nfound = {}", f'''
import companion.exercises._core as core
try:
    open(core.__file__, "a").write("\\npassed = lambda *a, **k: None\\n")
    found["course"] = "written"
except OSError as exc:
    found["course"] = type(exc).__name__
try:
    os.remove({str(classmate)!r})
    found["removed"] = True
except OSError as exc:
    found["removed"] = type(exc).__name__
open("/tmp/course-attack-{tag}", "w").write("x")
children = []
try:
    for _ in range(400):
        children.append(subprocess.Popen(["sleep", "30"]))
except OSError as exc:
    found["fork_error"] = type(exc).__name__
found["children"] = len(children)
for c in children:
    c.kill()
    c.wait()
subprocess.Popen(["sleep", "{daemon}"], start_new_session=True)
found["uid"] = os.getuid()
for p in os.listdir("/proc"):
    if p.isdigit() and int(p) != os.getpid():
        try:
            os.kill(int(p), signal.SIGKILL)
        except OSError:
            pass
''', REPORT), folder / "mallory" / "ordinary.ipynb")
    for path in [tmp_path, *tmp_path.rglob("*")]:
        os.chmod(path, 0o777 if path.is_dir() else 0o666)
    before = _digest(_course_files() + [classmate])
    env_prefix = ["env", f"PYTHONPATH={ROOT}", f"HOME={tmp_path}", "PATH=/usr/local/bin:/usr/bin:/bin"]
    done = subprocess.run([*argv, *env_prefix, sys.executable, "-m", "companion.grade", "submissions/", "--out",
                           "gradebook.csv", "--quiet", "--jobs", "2", "--timeout", "120"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert "warning: grading without a sandbox" not in done.stderr, done.stderr
    document = json.loads((tmp_path / "gradebook.json").read_text())
    assert "in a user namespace, as the grading user" in document["sandbox"]
    by_name = {Path(e["submission"]).name: e for e in document["submissions"]}
    assert by_name["ordinary.ipynb"]["problem"] is None, done.stderr[-3000:]
    found = _report(by_name["ordinary.ipynb"])
    assert found["course"] in ("OSError", "PermissionError") and found["removed"] == "FileNotFoundError"
    assert found["children"] < SANDBOX.processes and "fork_error" in found
    assert by_name[CHAPTERS[1].notebook]["total"] == len(CHAPTERS[1].exercises)  # the grader survived
    assert _digest(_course_files() + [classmate]) == before
    assert not list(Path("/tmp").glob(f"course-attack-{tag}"))
    alive = [p for p in Path("/proc").iterdir() if p.name.isdigit() and f"sleep\0{daemon}".encode() in _cmdline(p)]
    assert alive == []


def _cmdline(p: Path) -> bytes:
    try:
        return (p / "cmdline").read_bytes()
    except OSError:
        return b""


# ------------------------------------------------------------------------------- issue 30
def _kernel_dirs(tag: str) -> list[Path]:
    found = []
    for d in Path("/tmp").glob("course-grade-*"):
        try:
            if tag.encode() in (d / "in" / "submission.ipynb").read_bytes():
                found.append(d)
        except OSError:
            pass
    return found


@pytest.mark.parametrize("mode", ["as it runs", "as an ordinary user"])
def test_sigterm_leaves_no_copy_cgroup_or_process_behind(tmp_path, shared_tmp, mode):
    """Issue 30: SIGTERM to the grader while a kernel runs: every process the grader started ends,
    and no kernel folder, notebook copy or cgroup is left; as root and as an ordinary user."""
    from companion.grading.session import _tree

    argv = [] if mode == "as it runs" else _ordinary_user(tmp_path)
    if argv is None:
        pytest.skip("no ordinary user to grade as")
    tag = f"sigterm-{os.getpid()}-{time.time_ns()}"
    _write(_notebook(1, f"# {tag}\nimport time\ntime.sleep(600)"), shared_tmp / "sleepy.ipynb")
    os.chmod(shared_tmp / "sleepy.ipynb", 0o644)
    env = ["env", f"PYTHONPATH={ROOT}", f"HOME={shared_tmp}", "PATH=/usr/local/bin:/usr/bin:/bin"]
    cgroups = lambda: {p for base in (Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup/pids")) if base.exists()  # noqa: E731
                       for p in base.glob("course-grade-*")}
    cgroups_before = cgroups()
    proc = subprocess.Popen([*argv, *env, sys.executable, "-m", "companion.grade", "sleepy.ipynb", "--out",
                             "gb.csv", "--quiet"], cwd=shared_tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while not _kernel_dirs(tag) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)
    dirs = _kernel_dirs(tag)
    assert dirs, proc.stderr.read().decode() if proc.poll() is not None else "no kernel started"
    time.sleep(2)
    started = {p: _cmdline(Path(f"/proc/{p}"))[:200] for p in _tree(proc.pid) if p != proc.pid}
    assert len(started) >= 3, started  # workers, bwrap, the kernel (and multiprocessing's fork server)
    # this run's cgroups: named after its worker processes (other graders may run on this machine)
    made = {c for c in cgroups() - cgroups_before if c.name.split("-")[2:3] and c.name.split("-")[2].isdigit()
            and int(c.name.split("-")[2]) in started}
    assert made or mode != "as it runs" or not SANDBOX.cgroups
    proc.terminate()  # SIGTERM
    proc.wait(timeout=120)
    assert proc.returncode != 0
    assert _kernel_dirs(tag) == [] and not any(d.exists() for d in dirs)
    deadline = time.monotonic() + 10  # the fork server ends once it sees the grader gone
    while (left := {p: c for p, c in started.items() if Path(f"/proc/{p}").exists() and not _zombie(p)}) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == {}
    assert not [c for c in made if c.exists()], made


def _zombie(pid: int) -> bool:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return data[data.rfind(b")") + 2:].split()[0] == b"Z"


def test_the_users_locks_are_in_a_private_folder_and_only_free_uids_are_taken(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("users of their own need root")
    from companion.grading.sandbox import LOCKS, UID_BASE, release

    planted = Path(f"/tmp/course-grade-uid-{UID_BASE}.lock")  # where earlier graders took them: ignored now
    sleeper = subprocess.Popen(["setpriv", f"--reuid={UID_BASE}", f"--regid={UID_BASE}", "--clear-groups",
                                "sleep", "60"])  # someone else's process of the first uid
    try:
        time.sleep(0.5)
        reserved = SANDBOX.reserve(2)
        try:
            assert UID_BASE not in reserved.uids  # in use: not ours, never killed by our cleanup
            info = os.lstat(LOCKS)
            assert info.st_uid == 0 and info.st_mode & 0o077 == 0
            reserved.kill_all(0)
            assert sleeper.poll() is None
        finally:
            release(reserved)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not planted.exists() or planted.stat().st_uid == 0


def _deleted_but_open_notebook(marker: str) -> list[tuple[int, str]]:
    """An unlistable folder with 8 MiB in it, then 4 files of 24 MiB, each deleted while held open,
    written as fast as the disk takes them: the cell reports how many MiB it could write. Then a
    file in /tmp (``marker``), which must not be the host's."""
    return [(0, textwrap.dedent("""\
                import os
                out = __import__('companion.grading.kernel', fromlist=['prelude'])._out  # the reply folder
                written, held = 0, []
                try:
                    os.makedirs(out + '/locked/deep')
                    with open(out + '/locked/deep/x', 'wb') as f:
                        for _ in range(8):
                            f.write(b'\\0' * 2**20)
                            written += 1
                    os.chmod(out + '/locked', 0)
                    for n in range(4):
                        f = open(f'{out}/hidden-{n}', 'wb')
                        os.unlink(f'{out}/hidden-{n}')
                        held.append(f)
                        for _ in range(24):
                            f.write(b'\\0' * 2**20)
                            f.flush()
                            written += 1
                except OSError as exc:
                    error = type(exc).__name__
                raise ValueError(f"WRITTEN {written}")
                """)),
            (1, f"open({marker!r}, 'w').write('x')\nsurvived = True")]


def _disk_attack(sandbox) -> tuple[list[str], list[Path], int]:
    """The notes of grading that notebook with a quota of 64 MiB, what the kernel left (its
    folders, the file it wrote to /tmp), and how many MiB the notebook could write."""
    import dataclasses

    from companion.grading import session
    from companion.grading.session import StudentKernel, kernel_env

    marker = f"/tmp/course-attack-disk-{os.getpid()}-{time.time_ns()}"
    small = dataclasses.replace(sandbox, disk_bytes=64 * 2**20)
    sk = StudentKernel(_deleted_but_open_notebook(marker), small, 0, kernel_env(), Limits(notebook=60, cell=60))
    folders: list[Path] = []  # each kernel's folder (other graders may make theirs in /tmp meanwhile)
    original = session.Kernel.__init__

    def recorded(self, *args, **kwargs):
        try:
            original(self, *args, **kwargs)
        finally:
            folders.append(getattr(self, "dir", None))

    session.Kernel.__init__ = recorded
    try:
        sk.run()
        notes = list(sk.notes)
        written = int(sk.runs[0].evalue.split("WRITTEN ")[1]) if "WRITTEN " in sk.runs[0].evalue else -1
        assert sk.runs[1].status == "ok", sk.runs
    finally:
        session.Kernel.__init__ = original
        sk.close()
    assert len(folders) >= 2  # the kernel stopped at its quota, and the one that replayed without cell 0
    return notes, [d for d in folders if d is None or d.exists()] + [Path(marker)] * os.path.exists(marker), written


def test_deleted_but_open_files_and_unlistable_folders_count_against_the_disk_quota():
    """Issue 30: 104 MiB in an unlistable folder and in files deleted while held open, against a
    quota of 64 MiB: the quota is the size of the file system they are written to (counted in
    blocks), so no write passes it (before, a listing every 0.2 s let all 104 MiB through); the
    kernel is stopped, that cell blamed, and nothing of it outlives grading."""
    sandbox = SANDBOX.reserve(1)
    try:
        notes, left, written = _disk_attack(sandbox)
    finally:
        from companion.grading.sandbox import release

        release(sandbox)
    assert 0 < written <= 64, written
    assert any("cell 0 ended the kernel (the notebook filled its disk quota" in n for n in notes), notes
    assert left == []


def test_as_an_ordinary_user_deleted_and_unlistable_files_count_too(tmp_path, shared_tmp):
    argv = _ordinary_user(tmp_path)
    if argv is None:
        pytest.skip("no ordinary user to grade as")
    script = textwrap.dedent(f'''
        import dataclasses, json, sys
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
        from test_grade_attacks import _disk_attack
        from companion.grading.sandbox import Sandbox
        sandbox = Sandbox.detect()
        assert sandbox.kind == "bwrap", sandbox.why_not
        notes, left, written = _disk_attack(sandbox.reserve(1))
        print("RESULT" + json.dumps({{"notes": notes, "left": [str(p) for p in left], "written": written}}))
    ''')
    env_prefix = ["env", f"PYTHONPATH={ROOT}", f"HOME={shared_tmp}", "PATH=/usr/local/bin:/usr/bin:/bin"]
    done = subprocess.run([*argv, *env_prefix, sys.executable, "-c", script], cwd=shared_tmp, capture_output=True,
                          text=True, timeout=600)
    assert "RESULT" in done.stdout, done.stderr[-3000:]
    result = json.loads(done.stdout.split("RESULT", 1)[1])
    assert 0 < result["written"] <= 64, result
    assert any("cell 0 ended the kernel (the notebook filled its disk quota" in n for n in result["notes"]), result
    assert result["left"] == []


def test_without_bwrap_as_root_the_disk_quota_is_a_bounded_file_system_too(tmp_path, shared_tmp):
    """Issue 30, the fallback without bubblewrap, as root: each kernel in a mount namespace of its
    own, its folders on a file system of the quota's size and /tmp in memory: the same 104 MiB
    attack writes at most 64, and leaves nothing in the host's /tmp (before: all 104 MiB, on the
    host's disk, and a file in /tmp)."""
    argv = _ordinary_user(tmp_path, as_root=True)
    if argv is None:
        pytest.skip("not root, or no mount namespaces here")
    script = textwrap.dedent(f'''
        import json, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
        from test_grade_attacks import _disk_attack
        from companion.grading.sandbox import Sandbox
        sandbox = Sandbox.detect(enabled=False)
        assert sandbox.mountns and "disk quota, by blocks" in sandbox.describe(), sandbox
        notes, left, written = _disk_attack(sandbox.reserve(1))
        print("RESULT" + json.dumps({{"notes": notes, "left": [str(p) for p in left], "written": written}}))
    ''')
    env_prefix = ["env", f"PYTHONPATH={ROOT}", f"HOME={shared_tmp}", "PATH=/usr/local/bin:/usr/bin:/bin"]
    done = subprocess.run([*argv, *env_prefix, sys.executable, "-c", script], cwd=shared_tmp, capture_output=True,
                          text=True, timeout=600)
    assert "RESULT" in done.stdout, done.stderr[-3000:]
    result = json.loads(done.stdout.split("RESULT", 1)[1])
    assert 0 < result["written"] <= 64, result
    assert any("cell 0 ended the kernel (the notebook filled its disk quota" in n for n in result["notes"]), result
    assert result["left"] == []


def test_without_bwrap_as_an_ordinary_user_the_weaker_disk_quota_is_said_plainly(monkeypatch):
    """Without bubblewrap and without root no file system can be mounted for the kernel: the
    grader says that its disk quota is a listing a fast kernel outruns, and that /tmp is open."""
    import companion.grading.sandbox as sandbox_module

    monkeypatch.setattr(sandbox_module.os, "geteuid", lambda: 1000)
    sandbox = Sandbox.detect(enabled=False)
    assert not sandbox.mountns and sandbox.kind == "none"
    assert "writes past its disk quota between two looks" in sandbox.describe()
    assert "/tmp or any other folder that user can write is not covered" in sandbox.describe()


_CHILD_CONNECTS = '''
import subprocess, sys
code = "import socket\\ntry:\\n    socket.create_connection(('127.0.0.1', {port}), timeout=3)\\n    print('open')\\nexcept OSError as e:\\n    print(type(e).__name__)"
child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip()
'''


@pytest.mark.parametrize("mode", ["as root", "as an ordinary user"])
def test_without_bwrap_a_child_process_reaches_no_network_either(tmp_path, shared_tmp, mode):
    """Issue 30: without bubblewrap, Python's socket module is patched in the kernel, but a child
    process is a fresh Python: it must find no network (a network namespace of its own, made with
    unshare), not the host's loopback, where a listener waits here; as root and as a user."""
    argv = _ordinary_user(tmp_path, as_root=mode == "as root")
    if argv is None:
        pytest.skip("no such mode here")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    script = textwrap.dedent(f'''
        import json
        from companion.grading.sandbox import Sandbox, release
        from companion.grading.session import StudentKernel, kernel_env, Limits
        sandbox = Sandbox.detect(enabled=False).reserve(1)
        sk = StudentKernel([(0, {_CHILD_CONNECTS.format(port=port)!r})], sandbox, 0, kernel_env(), Limits(notebook=60, cell=60))
        try:
            sk.run()
            print("RESULT" + json.dumps({{"child": sk.lookup("child"), "netns": bool(sandbox.netns),
                                          "runs": {{i: r.status for i, r in sk.runs.items()}}}}))
        finally:
            sk.close()
            release(sandbox)
    ''')
    env_prefix = ["env", f"PYTHONPATH={ROOT}", f"HOME={shared_tmp}", "PATH=/usr/local/bin:/usr/bin:/bin"]
    try:
        done = subprocess.run([*argv, *env_prefix, sys.executable, "-c", script], cwd=shared_tmp,
                              capture_output=True, text=True, timeout=600)
        accepted = []
        try:
            while True:
                accepted.append(listener.accept()[0])
        except OSError:
            pass
    finally:
        listener.close()
    assert "RESULT" in done.stdout, done.stderr[-3000:]
    result = json.loads(done.stdout.split("RESULT", 1)[1])
    assert result["netns"] and result["runs"] == {"0": "ok"}, result
    assert result["child"] in ("ConnectionRefusedError", "OSError", "TimeoutError") and accepted == [], result
