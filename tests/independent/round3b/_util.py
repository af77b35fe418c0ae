"""Helpers for the chapter files: variants of a base answer by text replacement."""
import importlib.util
import pathlib

_HERE = pathlib.Path(__file__).resolve().parent


def junk(module, table):
    spec = importlib.util.spec_from_file_location("_redteam_junk", _HERE / "_junk.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.junk_cases(module, table)


def sub(base, *pairs):
    """base with each (old, new) replaced once; old must occur."""
    out = base
    for old, new in pairs:
        if old not in out:
            raise ValueError(f"variant text not found: {old!r}")
        out = out.replace(old, new, 1)
    return out


class Maker:
    def __init__(self, exercise, checker, module, call):
        self.exercise, self.checker, self.module, self.call = exercise, checker, module, call
        self.cases = []

    def add(self, name, expect, why, source, call=None):
        assert expect in ("wrong", "right")
        assert all(c["name"] != name for c in self.cases), name
        self.cases.append(dict(exercise=self.exercise, checker=self.checker, module=self.module,
                               name=name, expect=expect, why=why, source=source.lstrip("\n"),
                               call=call or self.call))
