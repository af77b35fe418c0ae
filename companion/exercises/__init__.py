"""Checkers for the exercises of every chapter.

Each exercise in the book has three cells: the task (markdown), the student's code, and a check
cell that calls a checker from this package, for example::

    from companion.exercises import vectors as check
    check.sparse_dot(my_sparse_dot)

A checker never raises. It returns a :class:`Feedback` whose text is one of

* ``✅ Exercise 1.1 passed: …``
* ``❌ Exercise 1.1 not yet: <a specific hint for the mistake it recognized>``
* ``⏳ Exercise 1.1 not attempted yet: …`` while the stub is untouched (it raises
  ``NotImplementedError`` or the answer is still ``...``);
* ``⚠️ Exercise 1.1 could not be checked: …`` when the checker's own code fails: a bug of the
  course, never blamed on the student, who is asked to tell the instructors.

Checkers for a chapter live in the submodule named after the concept (``vectors``,
``attention``, ...). They are written with the :func:`checker` decorator, which turns an
untouched stub into "not attempted yet", an exception of the student's code into a hint naming it
and its line, and an exception of the checker's own code into the internal error above, so that a
check cell never crashes the notebook. A hint is ``specific`` (a recognized mistake, named) or
``generic`` (how the answer differs); ``tests/test_checker_mutations_chNN.py`` holds, for every
exercise, wrong solutions that must each get a hint and never a pass.
"""
from __future__ import annotations

from ._core import Feedback, StudentError, attempt, checker, close, hint, passed

__all__ = ["Feedback", "StudentError", "attempt", "checker", "close", "hint", "passed"]
