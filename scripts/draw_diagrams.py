"""Draw the book's architecture diagrams as SVG files in book/figures/ (committed).

    .venv/bin/python scripts/draw_diagrams.py            # every diagram
    .venv/bin/python scripts/draw_diagrams.py --preview /tmp/diagrams   # also PNG previews there

Each diagram is plain matplotlib (boxes, arrows, small grids standing for matrices), so it can
be changed like code and redrawn. The output is deterministic: the SVG ids come from a fixed
salt (``svg.hashsalt``), the date is left out, and text is stored as glyph outlines, so the
same matplotlib version writes the same bytes and a diff shows only real changes.

  attention.svg          chapter 2: Q, K, V -> scores -> mask -> softmax -> weighted sum
  multihead.svg          chapter 3: split into heads, attend in every head, merge, W_O
  block_norm_orders.svg  chapter 6: the transformer block, post-norm and pre-norm
  gpt.svg                chapter 7: the GPT, from token ids to logits
  encoder_decoder.svg    chapter 9: the encoder-decoder
  qkv_roles.svg          chapter 2: what the query, the keys and the values each do
  rope_arrows.svg        chapter 5: RoPE turns a query and a key like clock hands
  residual_stream.svg    chapter 6: the residual stream that every sublayer reads and adds to
"""
from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Rectangle  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "book" / "figures"

# One palette for every diagram: what a box *is* decides its colour.
INK = "#1f2d3d"
MUTED = "#5b6b7b"
TENSOR = "#eef1f5"  # data: inputs, intermediate tensors, outputs
ATTN = "#fbd9a6"  # attention
FFN = "#bcd7f0"  # feed-forward network, linear maps
NORM = "#c9e8c4"  # LayerNorm
EMBED = "#e0d0f0"  # embeddings
HEADS = ["#e07b39", "#3a8fb7", "#5aa469", "#a86cc1"]  # one colour per attention head
WEIGHT = plt.get_cmap("Oranges")
MASKED = "#d9d9d9"

FONT = 11
SMALL = 10


def new_figure(width: float, height: float):
    """A figure whose data coordinates are inches: (0, 0) bottom left, (width, height) top right."""
    fig = plt.figure(figsize=(width, height))
    fig.patch.set_facecolor("white")
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_axis_off()
    return fig, ax


def box(ax, x, y, w, h, text="", color=TENSOR, *, size=FONT, weight="normal", edge=INK, lw=1.0,
        dashed=False, text_color=INK, rounding=0.06):
    """A rounded box centred on (x, y)."""
    patch = FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle=f"round,pad=0,rounding_size={rounding}",
                           facecolor=color, edgecolor=edge, linewidth=lw, linestyle="--" if dashed else "-")
    ax.add_patch(patch)
    if text:
        ax.text(x, y, text, ha="center", va="center", fontsize=size, color=text_color, weight=weight,
                linespacing=1.25)
    return patch


def label(ax, x, y, text, *, size=SMALL, color=MUTED, ha="center", va="center", **kw):
    ax.text(x, y, text, ha=ha, va=va, fontsize=size, color=color, linespacing=1.25, **kw)


def arrow(ax, start, end, *, color=INK, lw=1.2, style="-|>", dashed=False, connection="arc3", shrink=0.0):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=11, color=color, lw=lw,
                                 linestyle="--" if dashed else "-", connectionstyle=connection,
                                 shrinkA=shrink, shrinkB=shrink))


def elbow(ax, points, *, color=INK, lw=1.2, dashed=False, both=False):
    """An arrow along a polyline: straight segments through ``points``, the head on the last."""
    xs, ys = zip(*points)
    ax.plot(xs[:-1], ys[:-1], color=color, lw=lw, linestyle="--" if dashed else "-", solid_capstyle="butt")
    ax.plot(xs[-2:], ys[-2:], color=color, lw=lw, linestyle="--" if dashed else "-", alpha=0)
    arrow(ax, points[-2], points[-1], color=color, lw=lw, dashed=dashed)
    if both:
        arrow(ax, points[1], points[0], color=color, lw=lw, dashed=dashed)


def plus(ax, x, y, r=0.13):
    """The residual sum: a circled plus."""
    ax.add_patch(Circle((x, y), r, facecolor="white", edgecolor=INK, lw=1.1, zorder=3))
    ax.plot([x - r * 0.6, x + r * 0.6], [y, y], color=INK, lw=1.1, zorder=4)
    ax.plot([x, x], [y - r * 0.6, y + r * 0.6], color=INK, lw=1.1, zorder=4)


def matrix(ax, x, y, rows, cols, *, cell=0.2, values=None, colors=None, masked=None, edge=INK):
    """A grid of rows x cols cells centred on (x, y), standing for a matrix.

    ``values`` (rows, cols) in [0, 1] shade the cells with WEIGHT; ``colors`` gives each column a
    colour (a head's features); ``masked`` (rows, cols) bool marks cells set to -inf.
    Returns the grid's (left, bottom, right, top).
    """
    left, top = x - cols * cell / 2, y + rows * cell / 2
    for i in range(rows):
        for j in range(cols):
            if masked is not None and masked[i, j]:
                face = MASKED
            elif values is not None:
                face = WEIGHT(0.1 + 0.8 * float(values[i, j]))
            elif colors is not None:
                face = colors[j]
            else:
                face = "white"
            ax.add_patch(Rectangle((left + j * cell, top - (i + 1) * cell), cell, cell, facecolor=face,
                                   edgecolor=edge, lw=0.6))
    return left, top - rows * cell, left + cols * cell, top


def save(fig, name: str, preview: Path | None) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / name
    # No date, a fixed creator: the file changes only when the drawing does.
    fig.savefig(path, format="svg", metadata={"Date": None, "Creator": "scripts/draw_diagrams.py"})
    if preview is not None:
        preview.mkdir(parents=True, exist_ok=True)
        fig.savefig(preview / name.replace(".svg", ".png"), dpi=110)
    plt.close(fig)
    return path


# --- (a) chapter 2: the attention computation --------------------------------------------------------

def attention_diagram(preview):
    """Top to bottom: the inputs, then one row per step (the operation, its result, a note)."""
    fig, ax = new_figure(7.4, 7.9)
    T, S, dk, dv = 4, 4, 3, 3
    rng = np.random.default_rng(7)
    raw = rng.normal(size=(T, S))
    shade = (raw - raw.min()) / np.ptp(raw)
    causal = np.triu(np.ones((T, S), dtype=bool), 1)
    xb, xm, xn = 2.35, 4.55, 5.2  # the steps' boxes, their results, the notes
    bw, bh = 2.0, 0.64

    label(ax, 3.7, 7.6, r"$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}(QK^{\top} / \sqrt{d_k})\, V$",
          size=FONT + 1.5, color=INK)

    # the queries and keys, on top
    y_in = 6.45
    for name, x, shape in (("Q", 1.55, "$(T, d_k)$"), ("K", 3.15, "$(S, d_k)$")):
        left, bottom, right, top = matrix(ax, x, y_in, 4, dk)
        ax.text(left - 0.12, y_in, name, ha="right", va="center", fontsize=14, weight="bold", color=INK)
        label(ax, x, bottom - 0.17, shape)
    label(ax, xn + 0.35, y_in, "queries and keys:\n$Q = XW_Q$, $K = XW_K$\n(self-attention: S = T)",
          ha="left", size=SMALL)

    def step(y, text, result, note, into=None):
        box(ax, xb, y, bw, bh, text, ATTN)
        if into is not None:
            arrow(ax, (xb, into), (xb, y + bh / 2))
        arrow(ax, (xb + bw / 2, y), (xm - 0.5, y))
        result(y)
        label(ax, xn, y, note, ha="left", size=SMALL)

    y1, y2, y3, y4 = 5.1, 3.8, 2.5, 1.2
    step(y1, "scores\n$QK^{\\top} / \\sqrt{d_k}$",
         lambda y: matrix(ax, xm, y, T, S, values=shade),
         "$(T, S)$: one score\nper query–key pair")
    arrow(ax, (1.55, y_in - 0.62), (xb - 0.45, y1 + bh / 2))
    arrow(ax, (3.15, y_in - 0.62), (xb + 0.45, y1 + bh / 2))

    def masked(y):
        left, bottom, right, top = matrix(ax, xm, y, T, S, values=shade, masked=causal)
        for i in range(T):
            for j in range(S):
                if causal[i, j]:
                    ax.text(left + (j + 0.5) * 0.2, top - (i + 0.5) * 0.2, "−∞", ha="center",
                            va="center", fontsize=5.5, color=MUTED)

    step(y2, "mask (optional):\nforbidden → −∞", masked,
         "causal: hides key j > query i\npadding: hides keys past\nthe end of a sequence", into=y1 - bh / 2)
    scores = np.where(causal, -np.inf, raw)
    weights = np.exp(scores - scores.max(1, keepdims=True))
    weights /= weights.sum(1, keepdims=True)
    step(y3, "softmax\nof each row", lambda y: matrix(ax, xm, y, T, S, values=weights),
         "weights $(T, S)$: each row\nis ≥ 0 and sums to 1", into=y2 - bh / 2)
    step(y4, "weighted sum\nweights $\\cdot\\, V$", lambda y: matrix(ax, xm, y, T, dv),
         "output $(T, d_v)$: for each\nquery, a weighted average\nof the rows of V", into=y3 - bh / 2)

    # the values enter at the last step
    left, bottom, right, top = matrix(ax, 0.55, y4, 4, dv)
    ax.text(0.55, top + 0.15, "V", ha="center", va="bottom", fontsize=14, weight="bold", color=INK)
    label(ax, 0.55, bottom - 0.17, "$(S, d_v)$")
    arrow(ax, (right + 0.05, y4), (xb - bw / 2, y4))
    label(ax, 3.7, 0.25, "The boxes are the steps; the grids their results, one cell per number.\n"
                         "Leading batch dimensions (B, and h for several heads) ride along unchanged.",
          size=SMALL)
    return save(fig, "attention.svg", preview)


# --- (b) chapter 3: multi-head split and merge -------------------------------------------------------

def _head_stack(ax, x, y, T, dh, cell, h):
    """h small (T, d_head) matrices, one per head, fanned out like cards; returns their extent."""
    for r in range(h):
        off = 0.15 * r
        matrix(ax, x - 0.22 + off, y + 0.3 - off * 1.5, T, dh, cell=cell, colors=[HEADS[r]] * dh)
    return x - 0.22 - dh * cell / 2, x + 0.23 + dh * cell / 2  # left, right


def multihead_diagram(preview):
    """A snake: split (left to right), attend and merge (right to left), project (left to right)."""
    fig, ax = new_figure(8.2, 6.7)
    ax.set_ylim(-0.2, 6.5)
    T, h, dh = 4, 4, 2
    d = h * dh
    head_cols = [HEADS[j // dh] for j in range(d)]
    cell = 0.17
    y1, y2, y3 = 5.6, 3.35, 1.05

    # row 1: project, split into heads
    matrix(ax, 0.85, y1, T, d, cell=cell)
    label(ax, 0.85, y1 + 0.52, "x", size=13, color=INK, weight="bold")
    label(ax, 0.85, y1 - 0.5, "$(B, T, d)$")
    box(ax, 2.3, y1, 0.85, 0.6, "$W_Q$\n$(d, d)$", FFN)
    arrow(ax, (1.58, y1), (1.87, y1))
    arrow(ax, (2.73, y1), (3.08, y1))
    matrix(ax, 3.8, y1, T, d, cell=cell, colors=head_cols)
    label(ax, 3.8, y1 + 0.52, "$q = xW_Q$", size=FONT, color=INK)
    label(ax, 3.05, y1 - 0.45, "$(B, T, d)$; head r owns features\n"
                               r"$r\,d_{head}$ to $(r+1)\,d_{head} - 1$" "\n(k and v: the same, with $W_K$, $W_V$)",
          va="top", ha="left")
    arrow(ax, (4.6, y1), (5.75, y1))
    label(ax, 5.17, y1 + 0.38, "view as\n$(B, T, h, d_{head})$", size=SMALL - 0.5)
    label(ax, 5.17, y1 - 0.3, "transpose(1, 2)", size=SMALL - 0.5)
    _head_stack(ax, 6.55, y1, T, dh, cell, h)
    label(ax, 6.68, y1 - 1.2, "$(B, h, T, d_{head})$:\none matrix per head", ha="left", size=SMALL - 1)

    # row 2: attend in every head, merge
    box(ax, 6.55, y2, 1.6, 0.85, "attention in\nevery head at\nonce (chapter 2)", ATTN)
    arrow(ax, (6.55, y1 - 0.95), (6.55, y2 + 0.43))
    label(ax, 6.55, y2 - 0.5, "weights $(B, h, T, T)$,\n" r"scale $\sqrt{d_{head}}$", va="top")
    _head_stack(ax, 4.35, y2, T, dh, cell, h)
    arrow(ax, (5.75, y2), (4.95, y2))
    label(ax, 4.35, y2 - 0.85, "heads $(B, h, T, d_{head})$", va="top")
    matrix(ax, 1.1, y2, T, d, cell=cell, colors=head_cols)
    arrow(ax, (3.75, y2), (1.85, y2))
    label(ax, 2.8, y2 + 0.42, "merge: transpose(1, 2),\nreshape to $(B, T, d)$", size=SMALL - 0.5)
    label(ax, 1.1, y2 - 0.5, "heads side by side\n$(B, T, d)$", va="top")

    # row 3: the output projection mixes the heads
    elbow(ax, [(0.35, y2), (0.2, y2), (0.2, y3), (2.45, y3)])
    box(ax, 2.9, y3, 0.85, 0.6, "$W_O$\n$(d, d)$", FFN)
    arrow(ax, (3.33, y3), (3.75, y3))
    matrix(ax, 4.5, y3, T, d, cell=cell)
    label(ax, 4.5, y3 + 0.52, "y", size=13, color=INK, weight="bold")
    label(ax, 4.5, y3 - 0.5, "$(B, T, d)$: $W_O$ mixes the heads")
    label(ax, 4.1, 0.2, "parameters: $3d^2$ for $W_Q, W_K, W_V$ and $d^2$ for $W_O$, whatever h is",
          size=SMALL)
    return save(fig, "multihead.svg", preview)


# --- (c) chapter 6: the block in both norm orders ------------------------------------------------------

def _block_column(ax, x, pre_norm: bool):
    """One transformer block drawn bottom to top on the residual stream at x."""
    side = x + 1.25  # the sublayers sit to the right of the stream
    y = 0.55
    box(ax, x, y, 1.3, 0.42, "x  (B, T, d)", TENSOR)
    stream_bottom = y + 0.21

    def sublayer(y_plus, name, color, height=0.5):
        """The branch: from the stream at y_branch, through (norm and) the sublayer, back to ⊕."""
        y_branch = y_plus - (1.55 if pre_norm else 1.05)
        ax.plot([x, side], [y_branch, y_branch], color=INK, lw=1.1)
        yy = y_branch
        if pre_norm:
            box(ax, side, yy + 0.45, 1.35, 0.38, "LayerNorm", NORM)
            arrow(ax, (side, yy), (side, yy + 0.26))
            yy += 0.45 + 0.19
        box(ax, side, yy + 0.5, 1.35, height, name, color)
        arrow(ax, (side, yy), (side, yy + 0.5 - height / 2))
        top = yy + 0.5 + height / 2
        ax.plot([side, side], [top, y_plus], color=INK, lw=1.1)
        arrow(ax, (side, y_plus), (x + 0.14, y_plus))
        plus(ax, x, y_plus)
        return y_plus

    y1 = sublayer(2.45 if pre_norm else 1.95, "multi-head\nself-attention", ATTN, 0.55)
    if not pre_norm:
        box(ax, x, y1 + 0.55, 1.3, 0.38, "LayerNorm", NORM)
        arrow(ax, (x, y1 + 0.13), (x, y1 + 0.36))
        after1 = y1 + 0.74
    else:
        after1 = y1 + 0.13
    y2 = sublayer(after1 + (1.95 if pre_norm else 1.45), "feed-forward\n$d \\to d_{ff} \\to d$", FFN, 0.55)
    ax.plot([x, x], [stream_bottom, y1 - 0.13], color=INK, lw=1.6)
    ax.plot([x, x], [after1, y2 - 0.13], color=INK, lw=1.6)
    if not pre_norm:
        box(ax, x, y2 + 0.55, 1.3, 0.38, "LayerNorm", NORM)
        arrow(ax, (x, y2 + 0.13), (x, y2 + 0.36))
        out_y = y2 + 0.74
    else:
        out_y = y2 + 0.13
    box(ax, x, out_y + 0.55, 1.3, 0.42, "out  (B, T, d)", TENSOR)
    arrow(ax, (x, out_y), (x, out_y + 0.34))
    return out_y + 0.55


def block_diagram(preview):
    fig, ax = new_figure(8.0, 7.1)
    ax.set_ylim(-0.5, 6.6)
    _block_column(ax, 0.95, pre_norm=False)
    _block_column(ax, 4.85, pre_norm=True)
    label(ax, 1.6, 6.4, "post-norm (Vaswani et al., 2017)", size=FONT + 0.5, color=INK, weight="bold")
    label(ax, 1.6, 6.07, "x ← LayerNorm(x + sublayer(x))", size=FONT, color=INK)
    label(ax, 5.5, 6.4, "pre-norm (GPT-2 and most since)", size=FONT + 0.5, color=INK, weight="bold")
    label(ax, 5.5, 6.07, "x ← x + sublayer(LayerNorm(x))", size=FONT, color=INK)
    ax.plot([3.75, 3.75], [0.3, 6.55], color="#cfd6de", lw=1.0)
    label(ax, 4.0, -0.2, "Thick line: the residual stream; ⊕ adds a sublayer's output to it. Post-norm normalizes\n"
                         "the stream after each sum; pre-norm normalizes only each sublayer's input, so a\n"
                         "pre-norm stack ends with one more LayerNorm after its last block.", size=SMALL)
    return save(fig, "block_norm_orders.svg", preview)


# --- (d) chapter 7: the GPT ---------------------------------------------------------------------------------

def gpt_diagram(preview):
    fig, ax = new_figure(7.6, 7.4)
    x = 3.2
    box(ax, x, 0.45, 2.6, 0.45, "token ids  (B, T)", TENSOR)
    box(ax, x - 1.05, 1.45, 1.9, 0.62, "token embedding\nE: table $(V, d)$", EMBED)
    box(ax, x + 1.3, 1.45, 2.1, 0.62, "position embedding\n$(context\\_length, d)$", EMBED)
    arrow(ax, (x - 0.6, 0.68), (x - 1.05, 1.14))
    label(ax, x + 1.25, 0.88, "positions 0 … T−1", size=SMALL)
    arrow(ax, (x + 1.25, 1.0), (x + 1.25, 1.14))
    plus(ax, x, 2.3)
    arrow(ax, (x - 1.05, 1.76), (x - 0.12, 2.25))
    arrow(ax, (x + 1.25, 1.76), (x + 0.12, 2.25))
    label(ax, x + 0.35, 2.3, "(B, T, d)", ha="left")

    # the stack of blocks
    stack_bottom, stack_top = 2.8, 5.05
    box(ax, x, (stack_bottom + stack_top) / 2, 3.4, stack_top - stack_bottom, "", "#fafbfc", dashed=True)
    label(ax, x - 1.6, stack_top - 0.2, "n_layers ×", size=FONT, color=INK, ha="left", weight="bold")
    box(ax, x, 3.3, 2.9, 0.46, "LayerNorm → causal multi-head\nattention → + residual", ATTN, size=SMALL)
    box(ax, x, 4.25, 2.9, 0.46, "LayerNorm → feed-forward\n→ + residual", FFN, size=SMALL)
    arrow(ax, (x, 2.43), (x, 3.1))
    arrow(ax, (x, 3.5), (x, 4.05))
    label(ax, x + 1.75, 3.78, "pre-norm block\n(chapter 6)\n(B, T, d)", ha="left")
    box(ax, x, 5.45, 2.0, 0.4, "final LayerNorm", NORM)
    arrow(ax, (x, 4.45), (x, 5.25))
    box(ax, x, 6.2, 2.4, 0.5, "output head: linear\n$d \\to V$, weight tied", FFN)
    arrow(ax, (x, 5.65), (x, 5.95))
    box(ax, x, 7.0, 2.6, 0.45, "logits  (B, T, V)", TENSOR)
    arrow(ax, (x, 6.45), (x, 6.78))
    # the tied weight
    elbow(ax, [(x - 2.0, 1.45), (x - 2.25, 1.45), (x - 2.25, 6.2), (x - 1.2, 6.2)], dashed=True,
          color=MUTED, both=True)
    label(ax, x + 1.35, 6.05, "tied: the head is the token\nembedding E itself, logits =\n"
                             "$x\\,E^{\\top}$: the final state against\nevery token's embedding", ha="left", size=SMALL)
    label(ax, x + 1.45, 7.0, "softmax of row t: the\nnext-token distribution\nafter tokens 0 … t", ha="left")
    return save(fig, "gpt.svg", preview)


# --- (e) chapter 9: the encoder-decoder ------------------------------------------------------------------

def encoder_decoder_diagram(preview):
    fig, ax = new_figure(9.0, 8.6)
    ax.set_ylim(-0.75, 7.85)
    xe, xd = 2.2, 6.8

    # encoder
    box(ax, xe, 0.45, 2.6, 0.45, "source token ids  (B, S)", TENSOR)
    box(ax, xe, 1.35, 2.9, 0.55, "token embedding +\nsinusoidal positions", EMBED)
    arrow(ax, (xe, 0.68), (xe, 1.07))
    eb, et = 1.95, 4.15
    box(ax, xe, (eb + et) / 2, 3.4, et - eb, "", "#fafbfc", dashed=True)
    label(ax, xe - 1.6, et - 0.2, "N ×", size=FONT, color=INK, ha="left", weight="bold")
    box(ax, xe, 2.6, 2.7, 0.5, "self-attention, no causal mask\n(source padding masked)", ATTN, size=SMALL)
    box(ax, xe, 3.5, 2.7, 0.4, "feed-forward", FFN, size=SMALL)
    arrow(ax, (xe, 1.63), (xe, 2.35))
    arrow(ax, (xe, 2.85), (xe, 3.3))
    label(ax, xe, 4.35, "encoder block", size=SMALL)
    box(ax, xe, 4.95, 2.0, 0.4, "LayerNorm", NORM)
    arrow(ax, (xe, 3.7), (xe, 4.75))
    box(ax, xe, 5.8, 2.7, 0.5, "memory  (B, S, d):\none vector per source token", TENSOR)
    arrow(ax, (xe, 5.15), (xe, 5.55))
    label(ax, xe, 7.7, "encoder: reads the source", size=11.5, color=INK, weight="bold")

    # decoder
    box(ax, xd, 0.45, 2.9, 0.45, "target ids, shifted right  (B, T)", TENSOR)
    box(ax, xd, 1.35, 2.9, 0.55, "token embedding +\nsinusoidal positions", EMBED)
    arrow(ax, (xd, 0.68), (xd, 1.07))
    db, dt = 1.95, 5.0
    box(ax, xd, (db + dt) / 2, 3.4, dt - db, "", "#fafbfc", dashed=True)
    label(ax, xd + 1.6, dt - 0.2, "× N", size=FONT, color=INK, ha="right", weight="bold")
    box(ax, xd, 2.55, 2.7, 0.5, "masked self-attention\n(causal: no peeking ahead)", ATTN, size=SMALL)
    box(ax, xd, 3.45, 2.7, 0.5, "cross-attention: queries from\nhere, keys and values: memory", ATTN, size=SMALL)
    box(ax, xd, 4.3, 2.7, 0.4, "feed-forward", FFN, size=SMALL)
    arrow(ax, (xd, 1.63), (xd, 2.3))
    arrow(ax, (xd, 2.8), (xd, 3.2))
    arrow(ax, (xd, 3.7), (xd, 4.1))
    label(ax, xd, 5.2, "decoder block", size=SMALL)
    box(ax, xd, 5.75, 2.0, 0.4, "LayerNorm", NORM)
    arrow(ax, (xd, 4.5), (xd, 5.55))
    box(ax, xd, 6.45, 2.6, 0.45, "output head: linear (d → V)", FFN)
    arrow(ax, (xd, 5.95), (xd, 6.22))
    box(ax, xd, 7.2, 2.7, 0.42, "logits  (B, T, V)", TENSOR)
    arrow(ax, (xd, 6.68), (xd, 6.99))
    label(ax, xd, 7.7, "decoder: writes the target", size=11.5, color=INK, weight="bold")

    # memory -> every decoder block's cross-attention
    elbow(ax, [(xe + 1.35, 5.8), (4.45, 5.8), (4.45, 3.45), (xd - 1.35, 3.45)], lw=1.6)
    label(ax, 4.37, 5.34, "into the cross-attention\nof every decoder block", size=SMALL - 0.5, ha="right")
    label(ax, 4.5, -0.4, "Every sublayer has its residual sum and LayerNorm, in either order (chapter 6);\n"
                         "the LayerNorm after each stack is the one a pre-norm stack needs.", size=SMALL)
    return save(fig, "encoder_decoder.svg", preview)


# --- (f) chapter 2: the roles of the query, the keys and the values -----------------------------------------

def qkv_roles_diagram(preview):
    """One query against the running example's keys: scores, weights, and the sum of the values."""
    fig, ax = new_figure(7.6, 4.4)
    words = ["the", "cat", "sat", "on", "the", "mat"]
    weights = [0.03, 0.95, 0.03, 0.0, 0.0, 0.0]  # 'sat', subject head, causal (chapter 2's numbers)
    label(ax, 3.8, 4.18, "query of 'sat': who did it?   q = x W_Q", size=FONT, color=INK, weight="bold")
    box(ax, 3.8, 3.72, 2.6, 0.42, "q  (what I am looking for)", ATTN)
    for j, (word, w) in enumerate(zip(words, weights)):
        x = 1.0 + j * 1.17
        masked = j > 2
        face = MASKED if masked else FFN
        box(ax, x, 2.62, 1.0, 0.4, f"k: {word}", face, size=SMALL)  # what each word offers
        arrow(ax, (3.8, 3.5), (x, 2.84), color=MUTED, lw=0.8)
        score = "−∞" if masked else ("6.25/√3" if word == "cat" else "0")
        label(ax, x, 2.2, f"score {score}", size=SMALL - 1)
        ax.add_patch(Rectangle((x - 0.4, 1.62), 0.8, 0.3, facecolor=WEIGHT(0.1 + 0.8 * w), edgecolor=INK, lw=0.6))
        label(ax, x, 1.77, f"{w:.2f}", size=SMALL - 1, color="white" if w > 0.5 else INK)
        box(ax, x, 1.05, 1.0, 0.4, f"v: {word}", EMBED if not masked else MASKED, size=SMALL)
        arrow(ax, (x, 0.84), (3.8, 0.42), color=MUTED, lw=0.5 + 2.5 * w)
    label(ax, 0.12, 2.62, "keys", ha="left", size=SMALL - 1, color=MUTED, rotation=90)
    label(ax, 0.1, 1.77, "softmax", ha="left", size=SMALL - 1, rotation=90)
    label(ax, 0.1, 1.05, "values", ha="left", size=SMALL - 1, rotation=90)
    box(ax, 3.8, 0.22, 3.3, 0.38, "output = Σ_j w_j v_j  (mostly the value of 'cat')", TENSOR, size=SMALL)
    return save(fig, "qkv_roles.svg", preview)


# --- (g) chapter 5: RoPE as turning arrows -------------------------------------------------------------------

def rope_arrows_diagram(preview):
    """One feature pair of a query and a key, turned by position: the angle between them is (i - j) w."""
    fig, ax = new_figure(8.0, 3.9)
    ax.set_ylim(-0.2, 3.7)
    omega = 0.5  # radians per position, for the drawing
    q0, k0 = np.array([1.0, 0.25]), np.array([0.8, -0.45])

    def turn(v, t):
        a = t * omega
        return np.array([v[0] * np.cos(a) - v[1] * np.sin(a), v[0] * np.sin(a) + v[1] * np.cos(a)])

    panels = [(1.45, "the same query at\npositions 0, 1, 2, 3", None),
              (4.1, "query at 3, key at 1", (3, 1)), (6.6, "query at 6, key at 4", (6, 4))]
    for cx, title, pair in panels:
        cy = 1.75
        ax.add_patch(Circle((cx, cy), 1.05, facecolor="none", edgecolor="#cfd6de", lw=0.8))
        ax.plot([cx - 1.15, cx + 1.15], [cy, cy], color="#e3e8ee", lw=0.6)
        ax.plot([cx, cx], [cy - 1.15, cy + 1.15], color="#e3e8ee", lw=0.6)
        label(ax, cx, 3.3, title, size=SMALL, color=INK)
        if pair is None:
            for t in range(4):
                v = turn(q0, t)
                arrow(ax, (cx, cy), (cx + v[0], cy + v[1]), color=ATTN if t else HEADS[0], lw=1.6)
                label(ax, cx + 1.18 * v[0], cy + 1.18 * v[1], f"{t}", size=SMALL - 1, color=INK)
        else:
            i, j = pair
            q, k = turn(q0, i), turn(k0, j)
            arrow(ax, (cx, cy), (cx + q[0], cy + q[1]), color=HEADS[0], lw=1.8)
            arrow(ax, (cx, cy), (cx + k[0], cy + k[1]), color=HEADS[1], lw=1.8)
            label(ax, cx + 1.2 * q[0], cy + 1.2 * q[1], "q", size=FONT, color=HEADS[0], weight="bold")
            label(ax, cx + 1.25 * k[0], cy + 1.25 * k[1], "k", size=FONT, color=HEADS[1], weight="bold")
            label(ax, cx, 0.45, f"q·k = {float(q @ k):.3f}", size=SMALL, color=INK)
    label(ax, 4.0, 0.0, "Each pair of features turns by t·ω at position t. Turning both by the same extra "
                        "amount changes nothing:\nthe angle between q and k, so their dot product, "
                        "depends only on i − j (here 2 in both right panels).", size=SMALL - 1)
    return save(fig, "rope_arrows.svg", preview)


# --- (h) chapter 6: the residual stream ----------------------------------------------------------------------

def residual_stream_diagram(preview):
    """A pre-norm stack seen from the side: one stream per token, sublayers that read it and add to it."""
    fig, ax = new_figure(8.0, 3.3)
    y = 1.2
    box(ax, 0.55, y, 0.9, 0.5, "token +\nposition", EMBED, size=SMALL)
    parts = [("attention", ATTN), ("feed-\nforward", FFN), ("attention", ATTN), ("feed-\nforward", FFN)]
    xs = [1.75 + 1.3 * n for n in range(len(parts))]
    ax.plot([1.0, xs[-1] + 0.95], [y, y], color=INK, lw=3.0, solid_capstyle="butt")
    for n, ((name, color), x) in enumerate(zip(parts, xs)):
        elbow(ax, [(x - 0.35, y), (x - 0.35, y + 0.55), (x - 0.35, y + 0.72)])
        box(ax, x - 0.35, y + 0.95, 0.62, 0.26, "LN", NORM, size=SMALL - 1)
        box(ax, x + 0.12, y + 1.55, 0.95, 0.55, name, color, size=SMALL)
        arrow(ax, (x - 0.35, y + 1.08), (x - 0.2, y + 1.27))
        elbow(ax, [(x + 0.45, y + 1.27), (x + 0.45, y + 0.55), (x + 0.45, y + 0.14)])
        plus(ax, x + 0.45, y)
        label(ax, x + 0.05, y - 0.45, f"block {n // 2 + 1}" if n % 2 == 0 else "", size=SMALL - 1)
    box(ax, xs[-1] + 1.35, y, 0.8, 0.5, "final\nLN", NORM, size=SMALL)
    label(ax, 4.0, 0.22, "The thick line is one token's vector, the residual stream: each sublayer reads a "
                         "normalized copy (LN)\nand adds its output back (⊕). A sum can cancel: in chapter 6, "
                         "'sat' keeps 'verb', gains 'animate' and gets −1.2 'place'.", size=SMALL - 1)
    return save(fig, "residual_stream.svg", preview)


DIAGRAMS = [attention_diagram, multihead_diagram, block_diagram, gpt_diagram, encoder_decoder_diagram,
            qkv_roles_diagram, rope_arrows_diagram, residual_stream_diagram]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preview", type=Path, help="also write PNG previews into this folder")
    args = parser.parse_args()
    plt.rcdefaults()
    plt.rcParams.update({"svg.hashsalt": "transformers-built-by-hand", "svg.fonttype": "path",
                         "font.family": "DejaVu Sans"})
    for draw in DIAGRAMS:
        path = draw(args.preview)
        print(f"{path.relative_to(ROOT)}: {path.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
