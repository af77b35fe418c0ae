"""companion: the tested code behind the course *Transformers, built by hand*.

One module per concept; each chapter of the book introduces one or two of them:

==========================  =========================================
module                      chapter
==========================  =========================================
``companion.vectors``       1. Dot products
``companion.attention``     2. Attention
``companion.multihead``     3. Multi-head attention
``companion.norm``          4. Layer normalization
``companion.positional``    5. Positional encoding
``companion.block``         6. The transformer block
``companion.data``,         7. Training a language model
``companion.model``,
``companion.train``
``companion.decoding``      8. Decoding and beam search
``companion.encoder``       9 and 10: a stack of encoder blocks
``companion.mlm``           10. Encoder-only: filling in the blanks
``companion.exercises``     the checkers behind every exercise
``companion.notebook``      reproducible set-up for the notebooks
==========================  =========================================

Submodules are imported on demand (``from companion import attention``), so that importing
the package stays cheap.
"""

__version__ = "0.1.0"

#: Where the course lives: the one address every other file takes (``_config.yml``'s
#: ``repository: url:`` holds the same, which tests/test_student.py checks; to move the course,
#: change both and run ``python scripts/stamp_repository.py`` to rewrite the copies).
REPOSITORY = "https://github.com/transformers-built-by-hand/course"

#: The distribution's name on the package index (the import name stays ``companion``; the name
#: ``companion`` on the index is an unrelated project).
DISTRIBUTION = "transformers-built-by-hand"


def book_url(repository: str = REPOSITORY) -> str:
    """Where the book is published: GitHub Pages of the repository (.github/workflows/pages.yml).

    ``https://github.com/OWNER/NAME`` -> ``https://OWNER.github.io/NAME/`` (lower-cased owner, as
    GitHub Pages serves it).
    """
    import re

    m = re.fullmatch(r"https://github\.com/([A-Za-z0-9-]+)/([A-Za-z0-9._-]+?)/?", repository)
    if m is None:
        raise ValueError(f"repository must be https://github.com/OWNER/NAME, got {repository!r}")
    return f"https://{m[1].lower()}.github.io/{m[2]}/"


#: The book's home page; chapter ``NN_name`` is at ``BOOK_URL + "book/NN_name.html"``.
BOOK_URL = book_url()


def install_requirement() -> str:
    """What ``pip install`` takes to install the course: ``"NAME @ git+ADDRESS"``."""
    return f"{DISTRIBUTION} @ git+{REPOSITORY}"
