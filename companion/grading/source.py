"""What the grader reads from a submission's own file, without running anything of it.

The kernel runs the student's code, so whatever it reports about that code (the source of a
function, the calls it saw) is only as honest as the student: a notebook can replace the grader's
helper inside its kernel. So the rules that read source text read the text the grader parses itself
from the notebook it was given (:func:`source_for`), and the kernel's report is only a second
signal that can add facts, never remove them; and a notebook whose code reaches for the grader's
machinery (:func:`tampering`) gets no points.

* :func:`source_for`: for a name the student defined, the statement that last binds it at the
  top level of a cell that ran (a ``def``, a ``class``, an import, an assignment), preceded by
  the import (or assignment) of each global name it reads: what
  :func:`companion.grading.kernel.source` sends for an honest notebook. A course function bound to
  the answer's name (``from companion.bpe import bytes_to_unicode as my_fn``, ``my_fn =
  lru_cache(companion.bpe.fn)``) shows as the import it is, whatever a cache or a wrapper does at
  run time.
* :func:`tampering`: the first sign, in any cell, of code aimed at the grader's observer or at
  Python's own machinery (``companion.grading``, the rules' observer, ``sys.setprofile``,
  ``sys.modules``, ``ctypes``, ``exec``, ``__import__``, ``globals()``, ``__code__``, a
  ``setattr`` with a computed name, a write into ``vars(...)``, ...). No honest answer to an exercise needs any of them. It is
  a static scan: code that hides itself from it (a payload in a data file the notebook reads,
  say) is not seen; the runtime observation then still counts as a second signal.
"""
from __future__ import annotations

import ast
import textwrap
from typing import Iterable

#: Modules whose import (or naming in a string) is a sign of tampering.
_MODULES = ("companion.grading", "companion.exercises.rules", "companion.exercises._core", "ctypes", "gc", "sys",
            "builtins", "importlib", "inspect", "threading", "_thread", "signal", "torch.overrides", "torch._C")
#: ...except these uses, which the book's own notebooks make.
_HONEST_ATTRIBUTES = {"importlib.util", "importlib.util.find_spec", "importlib.invalidate_caches", "inspect.getsource",
                      "inspect.signature", "sys.version", "sys.version_info", "sys.path", "sys.executable",
                      "sys.stdout", "sys.stderr", "sys.platform", "sys.float_info", "sys.maxsize", "gc.collect",
                      "sys.getsizeof", "sys.getrecursionlimit", "signal.SIGINT"}
#: Names and attributes that are signs of tampering wherever they appear.
_NAMES = {"exec", "eval", "compile", "__import__", "globals", "__builtins__", "breakpoint"}
_ATTRIBUTES = {"setprofile", "settrace", "observe", "_guard", "source_of", "source_facts", "graph_facts",
               "write_safe", "_dispatch", "_call", "_keep_for_relay", "_relay_backward", "_relays", "__code__", "__globals__", "__closure__", "__subclasses__",
               "__builtins__", "f_globals", "f_locals", "f_back", "tb_frame", "gi_frame", "_getframe", "rules", "_core",
               "grading", "_Recorder", "DisableTorchFunction", "_disabled_torch_function_impl", "__torch_function__"}
_STRINGS = ("companion.grading", "exercises.rules", "exercises._core", "setprofile", "settrace", "graph_facts",
            "write_safe", "source_of", "_relay_backward", "_keep_for_relay", "__code__", "__globals__", "__builtins__",
            "sys.modules")


def _parse(src: str, depth: int = 0) -> ast.Module | None:
    """A cell's code as IPython runs it (magics and ``!`` lines transformed), parsed; None if it
    does not parse (it then raised in the kernel too)."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        src = TransformerManager().transform_cell(src)
    except Exception:  # noqa: BLE001 - IPython missing or a cell it cannot transform: parse as is
        pass
    try:
        tree = ast.parse(src)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    # a magic's body (%%time, %time x = f()) is code too: read it as the cell's own
    for node in list(ast.walk(tree)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("run_cell_magic", "run_line_magic") and node.args
                and isinstance(node.args[-1], ast.Constant) and isinstance(node.args[-1].value, str) and depth < 3):
            inner = _parse(node.args[-1].value, depth + 1)
            if inner is not None:
                for stmt in ast.walk(inner):  # their lines are the magic's body's
                    if isinstance(stmt, ast.stmt) and not hasattr(stmt, "course_source"):
                        stmt.course_source = node.args[-1].value  # type: ignore[attr-defined]
                tree.body.extend(inner.body)
    return tree


class Notebook:
    """The code cells of a submission, parsed once."""

    def __init__(self, cells: Iterable[tuple[int, str]]):
        self.cells = [(i, src, _parse(src)) for i, src in cells]

    # ---------------------------------------------------------------------- bindings
    def _top_level(self, body: list[ast.stmt]) -> Iterable[ast.stmt]:
        """The statements of a cell's top level, those inside if/for/while/with/try included."""
        for node in body:
            yield node
            if isinstance(node, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)):
                yield from self._top_level(node.body)
                yield from self._top_level(getattr(node, "orelse", []))
            elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
                yield from self._top_level(node.body)
                for handler in node.handlers:
                    yield from self._top_level(handler.body)
                yield from self._top_level(node.orelse)
                yield from self._top_level(node.finalbody)

    @staticmethod
    def _binds(node: ast.stmt) -> set[str]:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return {node.name}
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return {(a.asname or a.name.split(".")[0]) for a in node.names if a.name != "*"}
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
            targets = [node.target]
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            targets = [node.target]
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            targets = [i.optional_vars for i in node.items if i.optional_vars is not None]
        names = set()
        for t in targets:
            names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        return names

    def binding(self, name: str) -> tuple[str, ast.stmt] | None:
        """``(cell source, statement)`` of the last top-level statement that binds ``name``."""
        found = None
        for _, src, tree in self.cells:
            if tree is None:
                continue
            for node in self._top_level(tree.body):
                if name in self._binds(node):
                    found = (src, node)
        return found

    @staticmethod
    def _text(src: str, node: ast.stmt) -> str:
        lines = getattr(node, "course_source", src).splitlines()
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        text = "\n".join(lines[first - 1:node.end_lineno or node.lineno])
        return textwrap.dedent(text)

    def source_for(self, name: str, depth: int = 3) -> str | None:
        """The source the rules read for ``name`` (see the module docstring), or None when no
        top-level statement of the notebook binds it."""
        found = self.binding(name)
        if found is None:
            return None
        src, node = found
        body = self._text(src, node)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return body
        preamble: list[str] = []
        seen = {name}
        made: list[ast.stmt] = []
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            # my_fn = make_fn(), model = MyModel(): the code that made it is what the rules read
            for read in sorted({n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}):
                other = self.binding(read)
                if other is not None and isinstance(other[1], (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    seen.add(read)
                    made.append(other[1])
                    body = self._text(*other) + "\n" + body
        todo = [(node, depth), *((m, depth) for m in made)]
        while todo:
            current, level = todo.pop()
            reads = sorted(_global_reads(current))
            for read in reads:
                if read in seen:
                    continue
                seen.add(read)
                other = self.binding(read)
                if other is None or isinstance(other[1], (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    continue  # a builtin, or another function of the student's (its own source is its own)
                text = self._text(*other)
                if isinstance(other[1], (ast.Import, ast.ImportFrom)):
                    preamble.append(text)
                elif level > 0 and isinstance(other[1], (ast.Assign, ast.AnnAssign)) and len(text) < 2000 \
                        and isinstance(other[1].value, (ast.Name, ast.Attribute)):
                    preamble.append(text)  # an alias: sm = torch.softmax; F = torch.nn.functional
                    todo.append((other[1], level - 1))
        return "\n".join([*reversed(preamble), body])

    # ---------------------------------------------------------------------- tampering
    def tampering(self) -> str | None:
        """The first sign of tampering with the grader (see the module docstring), as a phrase
        naming the cell and what was found; None when there is none."""
        for index, src, tree in self.cells:
            if tree is None:
                continue
            why = _scan(tree)
            if why:
                return f"cell {index} {why}"
        return None


def _global_reads(node: ast.AST) -> set[str]:
    """The names ``node`` reads that are not its own locals (as ``LOAD_GLOBAL`` would show): for
    a function or class, its parameters and the names it assigns are left out."""
    reads = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
        return reads
    local = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
    local |= {a.arg for n in ast.walk(node) if isinstance(n, ast.arguments)
              for a in [*n.posonlyargs, *n.args, *n.kwonlyargs, *([n.vararg] if n.vararg else []),
                        *([n.kwarg] if n.kwarg else [])]}
    local |= {n.name for n in ast.walk(node) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
              and n is not node}
    local |= {(a.asname or a.name.split(".")[0]) for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))
              for a in n.names}
    declared = {name for n in ast.walk(node) if isinstance(n, ast.Global) for name in n.names}
    return reads - (local - declared)


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _flagged_module(name: str) -> bool:
    return any(name == m or name.startswith(m + ".") for m in _MODULES) and name not in _HONEST_ATTRIBUTES


def _scan(tree: ast.Module) -> str | None:
    aliases: dict[str, str] = {}  # local name -> module, for the modules of _MODULES
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if _flagged_module(a.name) and not any(h.startswith(a.name + ".") for h in _HONEST_ATTRIBUTES):
                    return f"imports {a.name}"
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            for a in node.names:
                full = f"{module}.{a.name}"
                if (_flagged_module(module) and full not in _HONEST_ATTRIBUTES) or _flagged_module(full) and full not in _HONEST_ATTRIBUTES:
                    if not (module == "importlib" and a.name == "util"):
                        return f"imports {full}"
                if a.name in _ATTRIBUTES or a.name in _NAMES:
                    return f"imports {a.name}"
        elif isinstance(node, ast.Name) and node.id in _NAMES:
            return f"uses {node.id}"
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            if node.attr in _ATTRIBUTES and not (dotted and dotted in _HONEST_ATTRIBUTES):
                return f"uses .{node.attr}"
            if dotted:
                head = dotted.split(".")[0]
                module = aliases.get(head)
                if module in ("sys", "gc", "inspect", "importlib", "signal", "threading", "builtins"):
                    full = module + dotted[len(head):]
                    if not any(full == h or full.startswith(h + ".") for h in _HONEST_ATTRIBUTES) and \
                            not any(h.startswith(full + ".") for h in _HONEST_ATTRIBUTES):
                        return f"uses {full}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            if len(node.args) >= 2 and not isinstance(node.args[1], ast.Constant):
                return f"uses {node.func.id} with a computed name"
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)):
            inner = node.value
            if (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name) and inner.func.id == "vars") or \
                    (isinstance(inner, ast.Attribute) and inner.attr == "__dict__"):
                return "writes into an object's namespace (vars(...)[...] or .__dict__[...])"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if any(s in node.value for s in _STRINGS) or any(node.value == a for a in _ATTRIBUTES):
                return f"names {node.value[:40]!r} in a string"
    return None
