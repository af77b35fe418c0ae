"""The course runs from a plain, non-editable install, from any folder, with no network.

What a student does (README, "For students"): ``pip install "transformers-built-by-hand @
git+https://github.com/…/course"``, then opens a student notebook anywhere. This test does the same
without the network:

1. builds the wheel from the checkout (``pip wheel --no-deps``) and checks its size;
2. creates a fresh virtual environment that does not see the checkout, and gives it the wheel's
   runtime dependencies (and ipykernel, to run notebooks) by linking the already installed
   distributions into it: exactly the closure of the requirements the wheel declares, nothing else,
   so a dependency missing from pyproject.toml fails here as it would for a student;
3. installs the wheel (not editable) with ``pip install --no-deps --no-index --target``;
4. runs ``python -m companion.student`` from the installed package: without a book it says exactly
   what it needs; given the checkout's ``book/`` (``--book``) it writes student versions;
5. runs the student versions of chapters 7 to 10 in a temporary folder outside the checkout, in a
   kernel started with the fresh environment's Python in isolated mode (``-I``: no PYTHONPATH, no
   user site), with every non-local network connection refused, and checks that no cell fails
   (other than those tagged ``raises-exception``), that every check says "not attempted yet", and
   that the kernel imported the installed companion.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

import companion
from companion import student

pytestmark = pytest.mark.slow  # builds a wheel and runs four notebooks; part of scripts/test.sh

ROOT = Path(__file__).resolve().parents[1]
#: Run here from a plain install (and therefore skipped by test_student.py's run from the checkout).
CHAPTERS = ["07", "08", "09", "10"]  # the chapters that read the shipped text and models
MAX_WHEEL_MB = 10
NOT_ATTEMPTED = re.compile(r"⏳ Exercise (?:\d+|A)\.\d+ not attempted yet")

#: The first cell run in the fresh kernel: any connection to a host other than this machine fails.
NO_NETWORK = '''\
import socket

_connect, _getaddrinfo = socket.socket.connect, socket.getaddrinfo
_LOCAL = ("127.0.0.1", "::1", "localhost", "")


def _refuse(host):
    if isinstance(host, str) and host not in _LOCAL and not host.startswith("/"):
        raise OSError(f"network access from a student notebook: {host}")


def _guarded_connect(self, address, *args, **kwargs):
    _refuse(address[0] if isinstance(address, tuple) else address)
    return _connect(self, address, *args, **kwargs)


def _guarded_getaddrinfo(host, *args, **kwargs):
    _refuse(host)
    return _getaddrinfo(host, *args, **kwargs)


socket.socket.connect, socket.getaddrinfo = _guarded_connect, _guarded_getaddrinfo'''

WHERE = "import companion, os\nprint(companion.__file__)\nprint(os.getcwd())"


def _requirements(dist: metadata.Distribution) -> list[str]:
    """Names of the distributions ``dist`` needs (markers evaluated here, extras left out)."""
    from packaging.requirements import Requirement

    names = []
    for line in dist.requires or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            names.append(req.name)
    return names


def _closure(names: list[str]) -> dict[str, metadata.Distribution]:
    """Every installed distribution needed by ``names``, transitively."""
    found: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # not needed on this platform (pip would not install it either)
        found[key] = dist
        todo.extend(_requirements(dist))
    return found


def _link_distributions(dists: dict[str, metadata.Distribution], site: Path) -> None:
    """Make each distribution importable in ``site`` by linking its top-level files and folders."""
    for dist in dists.values():
        base = Path(dist.locate_file(""))
        tops = {Path(f).parts[0] for f in (dist.files or []) if not str(f).startswith("..")}
        for top in tops:
            source, target = base / top, site / top
            if source.exists() and not target.exists() and top != "__pycache__":
                target.symlink_to(source, target_is_directory=source.is_dir())


def _wheel_dependencies(wheel: Path) -> list[str]:
    import zipfile

    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(name).decode()
    return [Requirement(line.split(":", 1)[1].strip()).name for line in text.splitlines() if line.startswith("Requires-Dist:")]


@pytest.fixture(scope="module")
def fresh_env(tmp_path_factory):
    """(python of a fresh environment with the wheel installed, wheel path, seconds taken)."""
    start = time.perf_counter()
    tmp = tmp_path_factory.mktemp("install")
    source = tmp / "source"  # the files the wheel is built from, outside the checkout
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "LICENSE-text"):
        if (ROOT / name).is_file():
            shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "companion", source / "companion", ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "-q", "-w", str(wheels), str(source)], capture_output=True, text=True)
    assert built.returncode == 0, f"pip wheel failed:\n{built.stdout}\n{built.stderr}"
    wheel = next(wheels.glob(f"{companion.DISTRIBUTION.replace('-', '_')}-*.whl"))

    venv = tmp / "venv"
    base_python = getattr(sys, "_base_executable", sys.executable)
    made = subprocess.run([base_python, "-m", "venv", "--without-pip", str(venv)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    # ipykernel to run notebooks; the "student" extra for python -m companion.student.
    extras = ["ipykernel", "nbformat", "pybtex", "latexcodec"]
    _link_distributions(_closure(_wheel_dependencies(wheel) + extras), site)
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
                                "--target", str(site), str(wheel)], capture_output=True, text=True)
    assert installed.returncode == 0, f"pip install failed:\n{installed.stderr}"
    return python, wheel, time.perf_counter() - start


def test_the_wheel_is_small_and_carries_the_data(fresh_env):
    python, wheel, seconds = fresh_env
    size_mb = wheel.stat().st_size / 2**20
    print(f"\nwheel {wheel.name}: {size_mb:.2f} MiB; build + fresh environment: {seconds:.1f} s")
    assert size_mb < MAX_WHEEL_MB, f"the wheel is {size_mb:.1f} MiB"
    probe = subprocess.run(
        [str(python), "-I", "-c",
         "import companion, companion.checkpoint as c, companion.data as d\n"
         "print(companion.__file__); print(c.shipped_model_path()); print(len(d.load_split('train')))"],
        capture_output=True, text=True, cwd=wheel.parent)
    assert probe.returncode == 0, probe.stderr
    where, model, characters = probe.stdout.split()
    assert str(ROOT) not in where and "site-packages" in where, f"the fresh environment imports {where}"
    assert Path(model).is_file() and str(ROOT) not in model
    assert int(characters) > 1_000_000


def test_the_wheel_has_the_distributions_name(fresh_env):
    python, wheel, _ = fresh_env
    assert wheel.name.startswith("transformers_built_by_hand-"), wheel.name
    probe = subprocess.run([str(python), "-I", "-c", "from importlib import metadata; import companion\n"
                            "print(metadata.version(companion.DISTRIBUTION))"],
                           capture_output=True, text=True, cwd=wheel.parent)
    assert probe.returncode == 0 and probe.stdout.strip() == companion.__version__, probe.stderr


def test_the_student_command_runs_from_the_installed_package(fresh_env, tmp_path):
    """Without a book it says exactly what it needs (one message, no traceback); with ``--book``
    it writes student versions whose links are absolute and whose install cell names the course."""
    python, _, _ = fresh_env
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    bare = subprocess.run([str(python), "-I", "-m", "companion.student", "3"], capture_output=True, text=True,
                          cwd=tmp_path, env=env)
    assert bare.returncode == 2 and "Traceback" not in bare.stderr, bare.stderr
    for needed in (companion.BOOK_URL, f"git clone {companion.REPOSITORY}", "--book"):
        assert needed in bare.stderr, bare.stderr
    done = subprocess.run([str(python), "-I", "-m", "companion.student", "--book", str(ROOT / "book"), "2", "9"],
                          capture_output=True, text=True, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    written = sorted((tmp_path / "student").glob("*.ipynb"))
    assert [p.name for p in written] == ["02_attention.ipynb", "09_encoder_decoder.ipynb"], done.stdout
    nb = nbformat.read(written[1], as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert f"]({companion.BOOK_URL}book/05_positional_encoding.html" in text
    assert not re.search(r"\]\((?!https?://|attachment:)", text)
    assert companion.install_requirement().split(" @ ")[0] in nb.cells[1].source


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_student_notebook_runs_from_a_plain_install(chapter, fresh_env, tmp_path, monkeypatch):
    python, _, _ = fresh_env
    kernels = tmp_path / "jupyter" / "kernels" / "fresh"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-I", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "fresh install", "language": "python",
        "env": {"MPLBACKEND": "Agg", "OMP_WAIT_POLICY": "PASSIVE", "PYTHONPATH": ""},
    }))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    run = tmp_path / "anywhere"  # a folder outside the checkout, with nothing in it
    run.mkdir()
    path = student.resolve([chapter])[0]
    nb = student.student_version(nbformat.read(path, as_version=4), path.name, book=path.parent)
    nb.cells.insert(0, nbformat.v4.new_code_cell(NO_NETWORK))
    nb.cells.append(nbformat.v4.new_code_cell(WHERE))
    nbformat.write(nb, run / path.name)
    client = NotebookClient(nb, timeout=600, kernel_name="fresh", resources={"metadata": {"path": str(run)}})
    try:
        client.execute()
    except Exception as exc:  # noqa: BLE001 - nbclient raises CellExecutionError and timeouts
        message = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
        pytest.fail(f"the student version of {path.name} fails from a plain install:\n{message[-3000:]}", pytrace=False)
    texts = {i: "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in c.outputs)
             for i, c in enumerate(nb.cells) if c.cell_type == "code"}
    where, cwd = texts[len(nb.cells) - 1].split()
    assert "site-packages" in where and str(ROOT) not in where, f"the kernel imported {where}"
    assert Path(cwd) == run
    checks = student.check_cells(nb)
    assert checks, f"{path.name} has no check cell"
    wrong = {i: texts[i] for i in checks if not NOT_ATTEMPTED.search(texts[i])}
    assert not wrong, f"{path.name}: check cells that do not say 'not attempted yet': {wrong}"
