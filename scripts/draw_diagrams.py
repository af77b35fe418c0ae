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

FONT = 10.5
SMALL = 9


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
    fig, ax = new_figure(11.0, 4.6)
    T, S, dk, dv = 4, 4, 3, 3
    rng = np.random.default_rng(7)
    raw = rng.normal(size=(T, S))
    causal = np.triu(np.ones((T, S), dtype=bool), 1)

    # inputs, left
    ys = {"Q": 3.55, "K": 2.3, "V": 0.62}
    shapes = {"Q": "$(T, d_k)$", "K": "$(S, d_k)$", "V": "$(S, d_v)$"}
    for name, y in ys.items():
        left, bottom, right, top = matrix(ax, 0.95, y, 4, 3 if name != "V" else dv, cell=0.2)
        ax.text(0.35, y, name, ha="right", va="center", fontsize=13, weight="bold", color=INK)
        label(ax, 0.95, bottom - 0.15, shapes[name])
    label(ax, 0.95, 4.3, "queries, keys, values:\n$XW_Q$, $XW_K$, $XW_V$", size=SMALL)

    # step 1: scores
    x1 = 3.25
    box(ax, x1, 3.0, 1.65, 0.62, "scores\n$QK^{\\top} / \\sqrt{d_k}$", ATTN)
    arrow(ax, (1.35, ys["Q"]), (x1 - 0.83, 3.12))
    arrow(ax, (1.35, ys["K"]), (x1 - 0.83, 2.88))
    l, b, r, t = matrix(ax, x1, 1.75, T, S, cell=0.2, values=(raw - raw.min()) / np.ptp(raw))
    label(ax, x1, b - 0.15, "$(T, S)$: one score per\nquery–key pair", va="top")
    arrow(ax, (x1, 2.68), (x1, t + 0.05))

    # step 2: mask
    x2 = 5.35
    box(ax, x2, 3.0, 1.65, 0.62, "mask (optional)\nfalse → −∞", ATTN)
    arrow(ax, (x1 + 0.83, 3.0), (x2 - 0.83, 3.0))
    l, b, r, t = matrix(ax, x2, 1.75, T, S, cell=0.2, values=(raw - raw.min()) / np.ptp(raw), masked=causal)
    for i in range(T):
        for j in range(S):
            if causal[i, j]:
                ax.text(l + (j + 0.5) * 0.2, t - (i + 0.5) * 0.2, "−∞", ha="center", va="center", fontsize=5.5,
                        color=MUTED)
    label(ax, x2, b - 0.15, "causal: hides key j > query i\npadding: hides keys past the end", va="top")
    arrow(ax, (x2, 2.68), (x2, t + 0.05))

    # step 3: softmax
    x3 = 7.45
    box(ax, x3, 3.0, 1.65, 0.62, "softmax\nof each row", ATTN)
    arrow(ax, (x2 + 0.83, 3.0), (x3 - 0.83, 3.0))
    scores = np.where(causal, -np.inf, raw)
    weights = np.exp(scores - scores.max(1, keepdims=True))
    weights /= weights.sum(1, keepdims=True)
    l, b, r, t = matrix(ax, x3, 1.75, T, S, cell=0.2, values=weights)
    label(ax, x3, b - 0.15, "weights $(T, S)$: each row\nis ≥ 0 and sums to 1", va="top")
    arrow(ax, (x3, 2.68), (x3, t + 0.05))

    # step 4: weighted sum of the values
    x4 = 9.55
    box(ax, x4, 3.0, 1.65, 0.62, "weighted sum\nweights $\\cdot\\, V$", ATTN)
    arrow(ax, (x3 + 0.83, 3.12), (x4 - 0.83, 3.12))
    elbow(ax, [(1.35, ys["V"]), (8.45, ys["V"]), (8.45, 2.85), (x4 - 0.83, 2.85)])
    label(ax, 4.9, ys["V"] - 0.16, "the values: what each key contributes to the output")
    l, b, r, t = matrix(ax, x4, 1.75, T, dv, cell=0.2)
    label(ax, x4, b - 0.15, "output $(T, d_v)$: per query,\na weighted average of\nthe rows of V", va="top")
    arrow(ax, (x4, 2.68), (x4, t + 0.05))

    label(ax, 5.9, 4.3, r"$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}(QK^{\top} / \sqrt{d_k})\, V$"
          "     (self-attention: S = T)", size=FONT + 0.5, color=INK)
    return save(fig, "attention.svg", preview)


# --- (b) chapter 3: multi-head split and merge -------------------------------------------------------

def multihead_diagram(preview):
    fig, ax = new_figure(11.0, 5.0)
    T, h, dh = 4, 4, 2
    d = h * dh
    head_cols = [HEADS[j // dh] for j in range(d)]
    cell = 0.17
    y0 = 3.6

    # x and the projection
    matrix(ax, 0.8, y0, T, d, cell=cell)
    label(ax, 0.8, y0 + 0.55, "x", size=12, color=INK, weight="bold")
    label(ax, 0.8, y0 - 0.5, "$(B, T, d)$")
    box(ax, 2.3, y0, 1.0, 0.62, "$W_Q$\n$(d, d)$", FFN)
    arrow(ax, (1.5, y0), (1.8, y0))
    arrow(ax, (2.8, y0), (3.1, y0))
    label(ax, 2.3, y0 - 0.55, "the same\nfor k and v")
    matrix(ax, 3.8, y0, T, d, cell=cell, colors=head_cols)
    label(ax, 3.8, y0 + 0.55, "$q = xW_Q$", size=FONT, color=INK)
    label(ax, 3.8, y0 - 0.45, "$(B, T, d)$: head r owns\n" r"features $r\,d_{head}$ … $(r+1)\,d_{head} - 1$",
          va="top")

    # view + transpose into heads
    arrow(ax, (4.55, y0), (5.45, y0))
    label(ax, 5.0, y0 + 0.5, "view as\n$(B, T, h, d_{head})$", size=8.5)
    label(ax, 5.0, y0 - 0.3, "transpose(1, 2)", size=8.5)
    for r in range(h):
        off = 0.16 * r
        matrix(ax, 5.95 + off, y0 + 0.36 - off * 1.6, T, dh, cell=cell, colors=[HEADS[r]] * dh)
    label(ax, 6.2, y0 - 1.0, "$(B, h, T, d_{head})$: h heads,\neach a $(T, d_{head})$ matrix", va="top")

    # attention in every head
    box(ax, 7.95, y0, 1.3, 0.85, "attention in\nevery head\n(chapter 2)", ATTN)
    arrow(ax, (6.85, y0), (7.3, y0))
    label(ax, 7.95, y0 - 0.55, "weights $(B, h, T, T)$,\n" r"scale $\sqrt{d_{head}}$", va="top")
    arrow(ax, (8.6, y0), (9.05, y0))
    for r in range(h):
        off = 0.16 * r
        matrix(ax, 9.55 + off, y0 + 0.36 - off * 1.6, T, dh, cell=cell, colors=[HEADS[r]] * dh)
    label(ax, 10.45, y0 + 0.75, "heads\n$(B, h, T, d_{head})$", ha="center")

    # merge: transpose back and reshape (the concatenation), then W_O
    ym = 0.85
    arrow(ax, (9.8, y0 - 1.0), (9.8, ym + 0.45))
    label(ax, 9.65, (y0 - 1.0 + ym + 0.45) / 2, "merge: transpose(1, 2) → $(B, T, h, d_{head})$,\n"
                                                 "reshape → $(B, T, d)$", ha="right", size=8.5)
    matrix(ax, 9.8, ym, T, d, cell=cell, colors=head_cols)
    label(ax, 9.8, ym - 0.5, "heads side by side $(B, T, d)$")
    box(ax, 7.75, ym, 1.0, 0.62, "$W_O$\n$(d, d)$", FFN)
    arrow(ax, (9.05, ym), (8.25, ym))
    arrow(ax, (7.25, ym), (6.55, ym))
    matrix(ax, 5.8, ym, T, d, cell=cell)
    label(ax, 5.8, ym - 0.5, "y $(B, T, d)$: $W_O$ mixes the heads")
    label(ax, 2.35, ym, "h heads of width $d_{head} = d / h$:\n"
                        "$3d^2$ (for $W_Q, W_K, W_V$) + $d^2$ (for $W_O$)\nparameters, whatever h is",
          size=FONT, color=INK)
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
    fig, ax = new_figure(9.8, 6.6)
    _block_column(ax, 1.2, pre_norm=False)
    _block_column(ax, 6.0, pre_norm=True)
    label(ax, 2.3, 6.35, "post-norm (Vaswani et al., 2017)", size=11.5, color=INK, weight="bold")
    label(ax, 2.3, 6.02, "x ← LayerNorm(x + sublayer(x))", size=FONT, color=INK)
    label(ax, 7.1, 6.35, "pre-norm (GPT-2 and most models since)", size=11.5, color=INK, weight="bold")
    label(ax, 7.1, 6.02, "x ← x + sublayer(LayerNorm(x))", size=FONT, color=INK)
    label(ax, 3.2, 4.6, "thick line: the residual\nstream; ⊕ adds a\nsublayer's output to it;\n"
                        "each LayerNorm here\nrescales the stream itself", ha="left", size=SMALL)
    label(ax, 7.95, 4.9, "the stream itself is\nnever normalized: a\npre-norm stack ends\n"
                         "with one more LayerNorm\nafter its last block", ha="left", size=SMALL)
    ax.plot([4.85, 4.85], [0.3, 6.5], color="#cfd6de", lw=1.0)
    return save(fig, "block_norm_orders.svg", preview)


# --- (d) chapter 7: the GPT ---------------------------------------------------------------------------------

def gpt_diagram(preview):
    fig, ax = new_figure(9.2, 7.4)
    x = 4.0
    box(ax, x, 0.45, 2.6, 0.45, "token ids  (B, T)", TENSOR)
    box(ax, x - 1.05, 1.45, 1.9, 0.62, "token embedding\nE: table $(V, d)$", EMBED)
    box(ax, x + 1.25, 1.45, 1.9, 0.62, "position embedding\ntable (context_length, d)", EMBED)
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
    box(ax, x, 3.3, 2.7, 0.4, "LayerNorm → causal multi-head\nattention → + residual", ATTN, size=9)
    box(ax, x, 4.25, 2.7, 0.4, "LayerNorm → feed-forward\n→ + residual", FFN, size=9)
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
    elbow(ax, [(x - 2.0, 1.45), (x - 2.3, 1.45), (x - 2.3, 6.2), (x - 1.2, 6.2)], dashed=True,
          color=MUTED, both=True)
    label(ax, x - 2.45, 4.0, "tied: the head is the\ntoken embedding E\nitself, logits = $x\\,E^{\\top}$:\n"
                             "the final state against\nevery token's embedding", ha="right", size=SMALL)
    label(ax, x + 1.45, 7.0, "softmax of row t: the\nnext-token distribution\nafter tokens 0 … t", ha="left")
    return save(fig, "gpt.svg", preview)


# --- (e) chapter 9: the encoder-decoder ------------------------------------------------------------------

def encoder_decoder_diagram(preview):
    fig, ax = new_figure(10.4, 8.4)
    ax.set_ylim(-0.55, 7.85)
    xe, xd = 2.4, 7.3

    # encoder
    box(ax, xe, 0.45, 2.6, 0.45, "source token ids  (B, S)", TENSOR)
    box(ax, xe, 1.35, 2.9, 0.55, "token embedding +\nsinusoidal positions", EMBED)
    arrow(ax, (xe, 0.68), (xe, 1.07))
    eb, et = 1.95, 4.15
    box(ax, xe, (eb + et) / 2, 3.4, et - eb, "", "#fafbfc", dashed=True)
    label(ax, xe - 1.6, et - 0.2, "N ×", size=FONT, color=INK, ha="left", weight="bold")
    box(ax, xe, 2.6, 2.7, 0.5, "self-attention, no causal mask\n(source padding masked)", ATTN, size=9)
    box(ax, xe, 3.5, 2.7, 0.4, "feed-forward", FFN, size=9)
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
    box(ax, xd, 2.55, 2.7, 0.5, "masked self-attention\n(causal: no peeking ahead)", ATTN, size=9)
    box(ax, xd, 3.45, 2.7, 0.5, "cross-attention: queries from\nhere, keys and values: memory", ATTN, size=9)
    box(ax, xd, 4.3, 2.7, 0.4, "feed-forward", FFN, size=9)
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
    elbow(ax, [(xe + 1.35, 5.8), (4.85, 5.8), (4.85, 3.45), (xd - 1.35, 3.45)], lw=1.6)
    label(ax, 4.85, 4.95, "into the cross-attention\nof every decoder block", size=SMALL)
    label(ax, 4.85, -0.3, "every sublayer has its residual sum and LayerNorm, in either order (chapter 6); "
                          "the LayerNorm after each stack is the one a pre-norm stack needs",
          size=SMALL)
    return save(fig, "encoder_decoder.svg", preview)


DIAGRAMS = [attention_diagram, multihead_diagram, block_diagram, gpt_diagram, encoder_decoder_diagram]


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
