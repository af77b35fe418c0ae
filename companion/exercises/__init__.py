"""Checkers for the exercises of every chapter.

Each exercise in the book has three cells: the task (markdown), the student's code, and a check
cell that calls a checker from this package, for example::

    from companion.exercises import vectors as check
    check.dot_product(my_dot)

A checker never raises. It returns a :class:`Feedback` whose text is one of

* ``✅ Exercise 1.1 passed: …``
* ``❌ Exercise 1.1 not yet: <a specific hint for the mistake it recognized>``
* ``⏳ Exercise 1.1 not attempted yet: …`` while the stub is untouched (it raises
  ``NotImplementedError`` or the answer is still ``...``).

Checkers for a chapter live in the submodule named after the concept (``vectors``,
``attention``, ...). They are written with the :func:`checker` decorator, which turns an
untouched stub into "not attempted yet" and any unexpected exception of the student's code into
a hint, so that a check cell never crashes the notebook.
"""
from __future__ import annotations

from ._core import Feedback, checker, close, hint, passed

__all__ = ["Feedback", "checker", "close", "hint", "passed"]
