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

#: Where the course lives. Students install it with
#: ``pip install "git+https://github.com/transformers-built-by-hand/course"``; the first cell
#: of every chapter does that when the companion is missing (on Colab, say).
REPOSITORY = "https://github.com/transformers-built-by-hand/course"
