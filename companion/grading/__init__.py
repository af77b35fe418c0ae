"""The machinery behind ``python -m companion.grade`` (see :mod:`companion.grade` for the command).

How one submission is graded, and why each step is there:

1. **Which chapter, which exercises** (:mod:`~companion.grading.registry`). The chapter comes from
   the notebook's metadata (``metadata.course.chapter``), else its title, else the checker module
   it imports, else its file name. Its exercises come from ``companion/exercises/registry.json``,
   generated from the book, never from the submission: a deleted or edited check cell changes
   nothing.
2. **The student's notebook runs in a sandboxed kernel** (:mod:`~companion.grading.sandbox`,
   :mod:`~companion.grading.session`). A fresh IPython kernel in a bubblewrap sandbox of its own:
   its own notebook copy, the course and Python read-only, private in-memory ``/tmp``,
   ``/dev/shm`` and home, no network and no host sockets, no other process visible, a cleared
   environment, limits on processes, memory and time, and as root a user of its own. Check cells
   are not run. A cell that loops is interrupted at its limit; a cell that ends the kernel, or
   ignores the interrupt, is skipped: the kernel is restarted and the cells before it replayed,
   within the notebook's one time budget. Without bubblewrap the grader says so and what is then
   not guaranteed.
3. **The grader's own checkers run in the grader's process** (:mod:`~companion.grading.runner`), a
   fresh process per submission forked from a server that imported the checkers before any
   student code ran, with an emptied environment. Each name the student defines reaches the
   checker as a proxy (:class:`~companion.grading.wire.Remote`): calling it sends the arguments
   into the kernel as data (``torch.save`` of tensors, models and optimizers whose classes are on
   an allow-list, and the checkers' helper functions by value; nothing by reference), calls the
   student's function there through :func:`companion.exercises.rules.observe`, and brings back
   the result and the Observation in a format whose loading runs no code
   (:mod:`~companion.grading.wire`: safetensors and JSON, read without following links).
   Arguments the function changed in place are copied back onto the grader's objects; the
   Observation is recorded for the checker's ``rules.watch``, and the function's source (with an
   import line per global name it uses) is carried as ``__course_source__``. Each call and each
   exercise has a time limit.

Nothing the kernel reports about itself earns points (:mod:`~companion.grading.source`): the
source the rules read is parsed by the grader from the submitted file, the kernel's report only
adds to it; ``require_graph`` gets the autograd facts computed where the graph is; a notebook whose
code reaches for the grader's machinery gets no points. Budgets are CPU time of the kernel, with a
generous wall-clock limit against a hang only (:func:`~companion.grading.session.wall_limit`).

Hence the guarantee: what a notebook prints, and anything it redefines in its kernel (``check``,
the checkers, the companion, ``torch``), decides nothing; only what its functions return, and
what they do to their arguments, does; the rules are observed as in the notebook. And nothing a
submission does reaches another submission, the grader or the machine: separate sandboxes,
folders and grading processes, and as root separate users, reserved per grading run.
"""
