"""The machinery behind ``python -m companion.grade`` (see :mod:`companion.grade` for the command).

How one submission is graded, and why each step is there:

1. **Which chapter, which exercises** (:mod:`~companion.grading.registry`). The chapter comes from
   the notebook's metadata (``metadata.course.chapter``), else its title, else the checker module
   it imports, else its file name. Its exercises come from ``companion/exercises/registry.json``,
   generated from the book, never from the submission: a deleted or edited check cell changes
   nothing.
2. **The student's notebook runs in a sandboxed kernel** (:mod:`~companion.grading.session`). A
   fresh IPython kernel in a private folder, with limits on the notebook's time, each cell's time,
   memory and processes; no network (an empty network namespace when available, and internet
   sockets refused inside the kernel in any case); as root, under a user of its own, so that it
   cannot write the course, the gradebook or another kernel's files. Check cells are not run. A
   cell that loops is interrupted at its limit; a cell that ends the kernel, or ignores the
   interrupt, is skipped: the kernel is restarted and the cells before it replayed.
3. **The grader's own checkers run in the grader's process** (:mod:`~companion.grading.runner`), a
   fresh process per submission forked from a server that imported the checkers before any
   student code ran. Each name the student defines reaches the checker as a proxy
   (:class:`~companion.grading.wire.Remote`): calling it sends the arguments into the kernel
   (``torch.save``; closures the kernel cannot receive stay in the grader and are called back),
   calls the student's function there, and brings back the result in a format whose loading runs
   no code (:mod:`~companion.grading.wire`: safetensors and JSON). Arguments the function changed
   in place (tensors, a model's parameters and gradients, an optimizer's state, lists, dicts)
   are copied back onto the grader's objects. Each call and each exercise has a time limit.

Hence the guarantee: what a notebook prints, and anything it redefines in its kernel (``check``,
the checkers, the companion, ``torch``), decides nothing; only what its functions return, and
what they do to their arguments, does. And nothing a submission does reaches another
submission's grade: separate kernels, users, folders and grading processes; as root, the sandbox
users are reserved per grading run, so two runs on one machine do not meet either.
"""
