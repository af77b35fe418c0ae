"""Rewrite every copy of the course's repository address from the one in _config.yml.

The address lives in one place: ``repository: url:`` of ``_config.yml``. ``companion.REPOSITORY``
must say the same (tests/test_student.py checks it), and a few files carry copies that a reader
sees as text (the README's install command, the licences, the notebooks' install cell, the
footer). To move the course, change ``_config.yml`` and run

    .venv/bin/python scripts/stamp_repository.py          # rewrite every copy
    .venv/bin/python scripts/stamp_repository.py --check  # only list what would change (exit 1)

Every tracked text file that holds the old address (``companion.REPOSITORY`` as it is written in
companion/__init__.py) gets the new one, and with it the book's address on GitHub Pages
(``https://OWNER.github.io/NAME/``).
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_CONSTANT = re.compile(r'^REPOSITORY = "([^"]+)"$', re.MULTILINE)


def configured(root: Path = ROOT) -> str:
    """``repository: url:`` of _config.yml."""
    import yaml

    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8")) or {}
    url = (config.get("repository") or {}).get("url")
    if not isinstance(url, str) or not url.startswith("https://github.com/"):
        raise SystemExit(f"_config.yml: repository: url: must be https://github.com/OWNER/NAME, got {url!r}")
    return url.rstrip("/")


def constant(root: Path = ROOT) -> str:
    """``REPOSITORY`` as written in companion/__init__.py (read as text, not imported)."""
    m = _CONSTANT.search((root / "companion" / "__init__.py").read_text(encoding="utf-8"))
    if m is None:
        raise SystemExit('companion/__init__.py: no line REPOSITORY = "..."')
    return m.group(1)


def pages(url: str) -> str:
    owner, name = url.removeprefix("https://github.com/").split("/", 1)
    return f"https://{owner.lower()}.github.io/{name}/"


def tracked_text_files(root: Path = ROOT) -> list[Path]:
    names = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True, check=True).stdout
    found = []
    for name in filter(None, names.split("\0")):
        path = root / name
        if path.is_file() and path.suffix not in {".safetensors", ".bz2", ".png", ".svg", ".ico"}:
            found.append(path)
    return found


def plan(root: Path = ROOT) -> dict[Path, str]:
    """file -> its new text, for every file whose copy of the address is not the configured one."""
    new, old = configured(root), constant(root)
    changes = {}
    if new == old:
        return changes
    for path in tracked_text_files(root):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        updated = text.replace(pages(old), pages(new)).replace(old, new)
        if updated != text:
            changes[path] = updated
    return changes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="list the files that would change; exit 1 if any")
    args = parser.parse_args(argv)
    changes = plan()
    for path in changes:
        print(path.relative_to(ROOT))
        if not args.check:
            path.write_text(changes[path], encoding="utf-8")
    if args.check and changes:
        print(f"{len(changes)} files still carry {constant()}; run scripts/stamp_repository.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
