"""Checkers for chapter 5, *Positional encoding*.

Each exercise asks for one step beyond what the chapter shows:

* 5.1 ``my_read_table(P)``: the base ``c`` and the layout of a sinusoidal table, read off the
  table itself (the formula inverted).
* 5.2 ``my_shift_table(P, k)``: the table of positions ``k .. k + T - 1`` from ``P`` alone (the
  rotations of the shift property are rows of the table; they compose and invert).
* 5.3 ``my_score_terms(mha, x, P)``: the four content/position terms of every head of a real
  :class:`companion.multihead.MultiHeadAttention`, whose sum is its pre-softmax scores.
* 5.4 ``my_rope_bug(rope, d)``: probes that tell a correct RoPE from five broken or foreign ones.

Every checker compares with an independent reference on generated inputs that cover the edge
classes by construction (the smallest sizes, an odd number of pairs, both dtypes, caller tensors
that require grad, calls under ``torch.no_grad``), names the class that fails in its hint, and
checks that the student's code leaves its inputs, grad mode, train/eval mode and torch's global
random state as they were.
"""
from __future__ import annotations

import math

import torch

from ._core import unseeded_rng, checker, close, describe, first_difference, hint, passed
from . import rules

__all__ = ["read_table", "shift_table", "score_terms", "rope_bug"]


# --------------------------------------------------------------------------- shared helpers
def _table(T: int, d: int, c: float = 10000.0, *, layout: str = "interleaved", start: int = 0,
           dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The sinusoidal table of positions ``start .. start + T - 1`` (built here, not by the companion)."""
    pos = torch.arange(start, start + T, dtype=torch.float64)[:, None]  # (T, 1)
    omega = c ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    angles = pos * omega  # (T, d/2)
    if layout == "halves":
        return torch.cat([angles.sin(), angles.cos()], dim=-1).to(dtype)
    P = torch.empty(T, d, dtype=torch.float64)
    P[:, 0::2], P[:, 1::2] = angles.sin(), angles.cos()
    return P.to(dtype)


def _number(value) -> float | None:
    """A Python float from a float, an int, a NumPy scalar or a one-element tensor; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.is_complex() or value.dtype == torch.bool:
            return None
        return float(value.detach().reshape(()).double())
    try:
        import numpy as np

        if isinstance(value, np.ndarray) and value.size == 1 and value.dtype.kind in "iuf":
            return float(value.reshape(()))
        if isinstance(value, (int, float, np.integer, np.floating)):
            out = float(value)
            return out
    except (OverflowError, ValueError, TypeError):
        return None
    return None


def _state():
    """What the student's code must leave as it found it: grad mode and torch's global random state."""
    return torch.is_grad_enabled(), unseeded_rng()


def _state_kept(before, fn) -> None:
    grad, rng = before
    if torch.is_grad_enabled() != grad:
        torch.set_grad_enabled(grad)  # put it back for the caller, then say so
        hint("your function switched gradient tracking " + ("off" if grad else "on") + " and left it so "
             "(torch.set_grad_enabled or torch.no_grad().__enter__ without the exit): use `with torch.no_grad():`, "
             "which restores it.")
    if not rules.is_remote(fn) and not torch.equal(torch.get_rng_state(), rng):
        torch.set_rng_state(rng)
        hint("your function drew from torch's global random generator (torch.randn, torch.rand...), which "
             "changes every random number the caller draws afterwards. This exercise needs no randomness; "
             "if you want random inputs, draw them from your own torch.Generator().manual_seed(...).")


# --------------------------------------------------------------------------- Exercise 5.1
#: (T, d, c, layout, dtype, requires_grad, no_grad): the edge classes by construction: T = 2 (rows
#: 0 and 1 only), d = 4 (two pairs), an odd number of pairs (d = 6, 10), a wide table whose last
#: pair turns very slowly (d = 128: in float32 its cosine rounds to 1), bases from 100 to 500,000,
#: both layouts, both dtypes, a table that requires grad, a call under no_grad.
_READ_CASES = [
    (50, 16, 10000.0, "interleaved", torch.float64, False, False),
    (2, 4, 10000.0, "halves", torch.float64, False, False),
    (9, 6, 1000.0, "interleaved", torch.float32, False, False),
    (17, 10, 500000.0, "halves", torch.float32, False, False),
    (3, 128, 10000.0, "interleaved", torch.float32, False, False),
    (2, 64, 2718.5, "halves", torch.float32, True, False),
    (40, 6, 100.0, "halves", torch.float64, False, True),
    (5, 4, 321.0, "interleaved", torch.float64, True, False),
    (12, 128, 500000.0, "halves", torch.float64, False, False),
    # a long table with a small base: even the slowest pair turns past pi by the last row
    (48, 4, 100.0, "interleaved", torch.float64, False, False),
]
_LAYOUTS = ("interleaved", "halves")


def _read_answer(out, call: str) -> tuple[float, str]:
    if out is None:
        hint(f"{call} returned None: did you forget the `return`? Return a pair (c, layout).")
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        hint(f"{call} should return a pair (c, layout), a number and a string; it returned {describe(out)}.")
    c, layout = out
    if isinstance(c, str) and _number(layout) is not None:
        hint("return the base first and the layout second: (c, layout).")
    value = _number(c)
    if value is None:
        hint(f"the base c should be a number (a float or a one-element tensor); {call} gave {describe(c)}.")
    if not isinstance(layout, str):
        hint(f"the layout should be one of the strings 'interleaved' or 'halves'; {call} gave {describe(layout)}.")
    if layout not in _LAYOUTS:
        if layout.strip().lower() in _LAYOUTS:
            hint(f"write the layout exactly as 'interleaved' or 'halves' (lower case, no spaces); you wrote {layout!r}.")
        hint(f"the layout is one of the two strings 'interleaved' or 'halves'; you returned {layout!r}.")
    return value, layout


def _rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b) if math.isfinite(a) else math.inf


@checker("Exercise 5.1")
def read_table(my_read_table) -> None:
    """``my_read_table(P)`` -> ``(c, layout)``: the base and the layout of a sinusoidal table."""
    results = []
    for T, d, c, layout, dtype, grad, no_grad in _READ_CASES:
        P = _table(T, d, c, layout=layout, dtype=dtype)
        given = P.clone().requires_grad_(grad)
        call = f"my_read_table(<{T} x {d} {str(dtype)[6:]} table>)"
        before = _state()
        if no_grad:
            with torch.no_grad():
                out = my_read_table(given)
        else:
            out = my_read_table(given)
        _state_kept(before, my_read_table)
        if given.requires_grad != grad or (grad and given.grad is not None):
            hint("your function changed the table's requires_grad or gave it a .grad: read the numbers "
                 "(P.detach(), .item()) without backward() or requires_grad_().")
        results.append((T, d, c, layout, dtype, *_read_answer(out, call)))

    def wrong(case) -> bool:
        T, d, c, layout, dtype, got_c, got_layout = case
        return got_layout != layout or not _rel(got_c, c) < 1e-3

    bad = [r for r in results if wrong(r)]
    if not bad:
        passed("the base and the layout come back from the table alone, for bases 100 to 500,000, both "
               "layouts, d = 4 to 128 and tables of two rows.")
    layouts_wrong = [r for r in results if r[6] != r[3]]
    if layouts_wrong:
        T, d, c, layout, dtype, got_c, got_layout = layouts_wrong[0]
        if all(r[6] == "interleaved" for r in results) or all(r[6] == "halves" for r in results):
            hint(f"your function answers '{results[0][6]}' for every table. Row 0 tells the layouts apart: "
                 "sin 0 = 0 and cos 0 = 1, so the interleaved table starts [0, 1, 0, 1, ...] and the halves "
                 "table [0, 0, ..., 1, 1, ...].")
        if all(r[6] != r[3] for r in results):
            hint("the two layouts are swapped: the interleaved table's row 0 is [0, 1, 0, 1, ...] (sine, "
                 "cosine, sine, ...), the halves table's [0, ..., 0, 1, ..., 1] (all sines, then all cosines).")
        hint(f"the table ({T} x {d}, base {c:g}) is {layout}; your function says {got_layout}. Row 0 holds "
             "sin 0 = 0 and cos 0 = 1 in each pair's two columns.")
    # the layout is right everywhere: the base is wrong somewhere
    T, d, c, layout, dtype, got_c, _ = bad[0]
    where = f"for the {layout} table of width d = {d} ({str(dtype)[6:]}), base {c:g}, you returned c = {got_c:.6g}"
    if all(abs(r[5] - 1.0) < 1e-3 for r in bad):
        hint(f"{where}: pair 0 turns by 1 radian per position in every base (omega_0 = c**0 = 1), so it "
             "tells nothing about c. Read a pair whose frequency depends on c, and solve omega_j = "
             "c**(-2j/d) for c.")
    omega_last = c ** (-(d - 2) / d)
    candidates = [
        (omega_last, "that is the frequency of the last pair, omega = c**(-(d-2)/d), not the base: solve it for c"),
        (1 / omega_last, "that is 1 / omega of the last pair, c**((d-2)/d); the base is omega**(-d/(d-2))"),
        (c ** 2, "that is c squared: the exponent is 2j/d (with j the pair's index), not j/d"),
        (math.sqrt(c), "that is the square root of c: the exponent of pair j is 2j/d; did you use 4j/d, or "
                       "count j as the column index?"),
        (c ** (-2 / d), "that is the frequency of pair 1, omega_1 = c**(-2/d), not the base"),
        (c ** (2 / d), "that is 1 / omega_1 = c**(2/d); the base is omega_1**(-d/2)"),
        (c ** ((d - 2) / (d - 4)) if d > 4 else math.nan,
         "the exponent is off by one pair: the last pair is j = d/2 - 1, with omega = c**(-(d-2)/d)"),
    ]
    for value, message in candidates:
        if math.isfinite(value) and _rel(got_c, value) < 1e-3 and not _rel(value, c) < 1e-3:
            hint(f"{where}: {message}.")
    if all(r[3] == "interleaved" for r in bad):
        hint(f"{where}: every halves table is read right, but not the interleaved ones: there pair j sits "
             "in columns 2j (sine) and 2j + 1 (cosine).")
    if all(r[3] == "halves" for r in bad):
        hint(f"{where}: every interleaved table is read right, but not the halves ones: there pair j's sine "
             "is column j and its cosine column j + d/2.")
    if all(r[4] == torch.float32 for r in bad):
        hint(f"{where}: the float64 tables are read right, the float32 ones not. In float32 the cosine of a "
             "tiny angle rounds to 1 (cos 0.0001 = 0.999999995), so an angle read with acos becomes 0: read "
             "it with atan2(sine, cosine), or asin of the sine, which keeps its digits.")
    if all(r[0] == 2 for r in bad):
        hint(f"{where}: a table of T = 2 rows holds positions 0 and 1 only; row 1 is enough to read every "
             "frequency.")
    hint(f"{where}; the base is {c:g}. Row 1 holds sin(omega_j) and cos(omega_j) of every pair, with "
         "omega_j = c**(-2j/d).", generic=True)


# --------------------------------------------------------------------------- Exercise 5.2
#: (T, d, c, k, dtype, requires_grad, no_grad): k = 0, inside the table (k < T), k = T - 1, just past
#: it (k = T), far past it, negative (-1 and below -T), one pair (d = 2), two rows (T = 2), an odd
#: number of pairs, bases other than 10000, both dtypes, a table that requires grad, under no_grad.
_SHIFT_CASES = [
    (10, 8, 10000.0, 3, torch.float64, False, False),
    (10, 8, 10000.0, 0, torch.float64, False, False),
    (6, 6, 1000.0, 5, torch.float64, False, False),
    (6, 6, 1000.0, 6, torch.float32, False, False),
    (2, 2, 10000.0, 1, torch.float64, False, False),
    (2, 4, 500.0, 37, torch.float64, True, False),
    (7, 10, 250.0, -1, torch.float64, False, True),
    (5, 16, 10000.0, -9, torch.float32, False, False),
    (12, 64, 20000.0, 257, torch.float32, False, False),
    (3, 6, 777.0, -40, torch.float64, False, False),
]


@checker("Exercise 5.2")
def shift_table(my_shift_table) -> None:
    """``my_shift_table(P, k)`` -> the table of positions ``k .. k + T - 1``, from ``P`` alone."""
    results, dtypes_wrong = [], []
    for T, d, c, k, dtype, grad, no_grad in _SHIFT_CASES:
        P = _table(T, d, c, dtype=dtype)
        given = P.clone().requires_grad_(grad)
        call = f"my_shift_table(<{T} x {d} {str(dtype)[6:]} table>, k={k})"
        before = _state()
        if no_grad:
            with torch.no_grad():
                out = my_shift_table(given, k)
        else:
            out = my_shift_table(given, k)
        _state_kept(before, my_shift_table)
        if given.requires_grad != grad or (grad and given.grad is not None):
            hint("your function changed the table's requires_grad or gave it a .grad: compute with the "
                 "numbers (under torch.no_grad() or on P.detach()), without backward() or requires_grad_().")
        if out is None:
            hint(f"{call} returned None: did you forget the `return`?")
        if not isinstance(out, torch.Tensor):
            hint(f"{call} should return a tensor of shape ({T}, {d}); it returned {describe(out)}.")
        if out.is_complex() or out.dtype == torch.bool or not out.is_floating_point():
            hint(f"{call} should return real numbers in P's dtype ({dtype}); it returned {describe(out)}.")
        if tuple(out.shape) != (T, d):
            if 0 < k < T and tuple(out.shape) == (T - k, d):
                hint(f"{call} returned {T - k} rows: P[k:] holds only the positions that were already in the "
                     f"table. Return all {T} rows, positions k to k + T - 1.")
            hint(f"{call} should keep P's shape ({T}, {d}), one row per position; it has shape {tuple(out.shape)}.")
        if not rules.is_remote(my_shift_table) and out.untyped_storage().data_ptr() == \
                given.untyped_storage().data_ptr():
            hint(f"{call} returned P itself (or a view of it): return a new tensor, so that changing the "
                 "result never changes the caller's table.")
        if out.dtype != dtype:
            dtypes_wrong.append((T, d, k, dtype, out.dtype))
        results.append((T, d, c, k, dtype, out.detach().double()))

    def ok(r, start_of=lambda k: k, sign=1) -> bool:
        T, d, c, k, dtype, got = r
        tol = 2e-4 if dtype == torch.float32 else 1e-6
        return close(got, _table(T, d, c, start=sign * start_of(k)), rtol=0, atol=tol)

    bad = [r for r in results if not ok(r)]
    if not bad:
        if dtypes_wrong:
            T, d, k, dtype, out_dtype = dtypes_wrong[0]
            hint(f"the values are right, but for a {str(dtype)[6:]} table (k = {k}) your function returned "
                 f"{str(out_dtype)[6:]}: return P's dtype (.to(P.dtype)), as a layer that adds the table expects.")
        passed("every table moves by k from its own rows: forward and backward, past its last row, in any "
               "base. The rotation of pair j by k omega_j is row k of the table itself.")
    T, d, c, k, dtype, got = bad[0]
    where = f"for k = {k} (a {T} x {d} table, base {c:g})"
    if all(ok(r, sign=-1) for r in bad):
        hint(f"{where} your table holds positions -k .. -k + T - 1: it moved the wrong way. With row vectors, "
             "p_(i+k) = p_i M_k where M_k's block is [[cos, -sin], [sin, cos]] of k omega_j; its transpose "
             "turns by -k omega_j.")
    if all(ok(r, start_of=lambda k: k + 1) for r in bad):
        hint(f"{where} your table starts one position too late (k + 1): its first row must be position k "
             "(for k = 0, the table P itself).")
    if all(ok(r, start_of=lambda k: k - 1) for r in bad):
        hint(f"{where} your table starts one position too early (k - 1): its first row must be position k.")
    if all(r[3] < 0 for r in bad):
        hint(f"{where}: every k >= 0 is right, but not the negative ones. A shift by -k undoes a shift by k: "
             "the inverse of a rotation is its transpose (the angle -k omega_j).")
    if all(r[3] >= r[0] for r in bad):
        hint(f"{where}: every k inside the table (0 <= k < T) is right, but not k >= T, where row k is not "
             "in P. Rotations compose: a shift by a + b is the shift by a followed by the shift by b (or read "
             "each pair's angle omega_j from row 1 and turn it k times as far).")
    if all(r[2] != 10000.0 for r in bad) and all(ok(r) for r in results if r[2] == 10000.0):
        hint(f"{where}: the tables of base 10000 are right, the others not: the function must not assume the "
             "base. Everything it needs is in P: row 1 holds (sin omega_j, cos omega_j) of every pair.")
    if all(r[4] == torch.float32 for r in bad):
        T, d, c, k, dtype, got = bad[0]
        hint(f"{where}: the float64 tables are right, this float32 one is off by more than 2e-4 "
             f"({first_difference(got, _table(T, d, c, start=k), 'row')}): keep the rotations in float64 "
             "while you compose them, or read the angles with atan2.")
    hint(f"{where}: {first_difference(got, _table(T, d, c, start=k), 'out')} (rows counted from 0: row 0 is "
         "position k).", generic=True)


# --------------------------------------------------------------------------- Exercise 5.3
#: (B, T, d, h, bias, dtype, train, x requires grad, no_grad): a batch of one, one token, one head,
#: heads of width 1 (h = d), odd T, with and without biases, both dtypes, a layer in training mode,
#: tokens that require grad, a call under no_grad.
_TERM_CASES = [
    (2, 5, 8, 2, True, torch.float32, False, False, False),
    (1, 1, 6, 3, False, torch.float64, False, False, False),
    (3, 4, 4, 4, True, torch.float64, False, True, False),
    (1, 7, 6, 1, True, torch.float32, True, False, False),
    (2, 3, 12, 3, False, torch.float32, False, False, True),
    (2, 6, 8, 4, True, torch.float64, True, True, False),
]
_TERM_NAMES = ("content-content", "content-position", "position-content", "position-position")


def _heads(y: torch.Tensor, h: int) -> torch.Tensor:
    """(..., T, d) -> (..., h, T, d_head): head r holds features r d_head .. (r + 1) d_head - 1."""
    *lead, T, d = y.shape
    return y.reshape(*lead, T, h, d // h).transpose(-3, -2)


def _reference_terms(mha, x, P, *, scale=True, bias=True, transpose=True, split=_heads, bias_twice=False):
    """The four terms, independently of the module's forward (its weights read as plain matrices)."""
    h, dh = mha.n_heads, mha.d_head

    def project(lin, v, with_bias):
        W = lin.weight.detach().double()
        out = v.double() @ (W.T if transpose else W)
        if with_bias and lin.bias is not None:
            out = out + lin.bias.detach().double()
        return out

    qx, kx = project(mha.q_proj, x, bias), project(mha.k_proj, x, bias)  # (B, T, d)
    qp, kp = project(mha.q_proj, P, bias_twice), project(mha.k_proj, P, bias_twice)  # (T, d)
    B = x.shape[0]
    qx, kx = split(qx, h), split(kx, h)  # (B, h, T, dh)
    qp, kp = split(qp, h).expand(B, -1, -1, -1), split(kp, h).expand(B, -1, -1, -1)
    s = 1 / math.sqrt(dh) if scale else 1.0
    return tuple(s * (a @ b.transpose(-2, -1)) for a, b in ((qx, kx), (qx, kp), (qp, kx), (qp, kp)))


def _wrong_split(y: torch.Tensor, h: int) -> torch.Tensor:
    """The slip of splitting the features as (d_head, h): head r gets features r, r + h, r + 2h, ..."""
    *lead, T, d = y.shape
    return y.reshape(*lead, T, d // h, h).permute(*range(len(lead)), -1, -3, -2)


def _terms_answer(out, call: str, shape: tuple) -> list[torch.Tensor]:
    if out is None:
        hint(f"{call} returned None: did you forget the `return`?")
    if isinstance(out, torch.Tensor) and out.dim() >= 1 and out.shape[0] == 4 and not isinstance(out, tuple):
        hint("return a tuple of four tensors, (cc, cp, pc, pp), not one stacked tensor.")
    if not isinstance(out, (tuple, list)):
        hint(f"{call} should return a tuple of four tensors (cc, cp, pc, pp); it returned {describe(out)}.")
    if len(out) != 4:
        hint(f"{call} should return exactly four terms (content-content, content-position, position-content, "
             f"position-position); it returned {len(out)}.")
    terms = []
    for name, t in zip(_TERM_NAMES, out):
        if not isinstance(t, torch.Tensor) or t.is_complex() or not t.is_floating_point():
            hint(f"the {name} term should be a real tensor of shape (B, h, T, T) = {shape}; it is {describe(t)}.")
        if tuple(t.shape) != shape:
            if tuple(t.shape) == (shape[0],) + shape[2:]:
                hint(f"the {name} term has shape {tuple(t.shape)}, one table per sequence: keep one per head, "
                     f"(B, h, T, T) = {shape}, as the layer scores each head on its own.")
            if t.dim() == 4 and t.shape[0] == 1 and tuple(t.shape[1:]) == shape[1:]:
                hint(f"the {name} term has shape {tuple(t.shape)}: every sequence of the batch has the same "
                     f"positions, but return one table per sequence, {shape} (expand it over the batch).")
            hint(f"the {name} term should have shape (B, h, T, T) = {shape}; it has {tuple(t.shape)}.")
        terms.append(t.detach().double())
    return terms


@checker("Exercise 5.3", companion_given=True)
def score_terms(my_score_terms) -> None:
    """``my_score_terms(mha, x, P)`` -> ``(cc, cp, pc, pp)``, each ``(B, h, T, T)``, summing to ``mha``'s scores."""
    from companion.multihead import MultiHeadAttention

    g = torch.Generator().manual_seed(53)
    for B, T, d, h, bias, dtype, train, x_grad, no_grad in _TERM_CASES:
        torch_state = torch.get_rng_state()
        mha = MultiHeadAttention(d, h, bias=bias).to(dtype)
        torch.set_rng_state(torch_state)  # the layer's initialization leaves the caller's generator alone
        with torch.no_grad():
            for p in mha.parameters():
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) / math.sqrt(d))
        mha.train(train)
        x = torch.randn(B, T, d, generator=g, dtype=torch.float64).to(dtype).requires_grad_(x_grad)
        P = _table(T, d, dtype=dtype)
        call = f"my_score_terms(<MultiHeadAttention({d}, {h}{', bias=False' if not bias else ''})>, x {tuple(x.shape)}, P)"
        before = _state()
        if no_grad:
            with torch.no_grad():
                out = my_score_terms(mha, x, P)
        else:
            out = my_score_terms(mha, x, P)
        _state_kept(before, my_score_terms)
        if mha.training != train:
            hint(f"your function left the layer in {'training' if mha.training else 'evaluation'} mode; it was "
                 f"in {'training' if train else 'evaluation'} mode. Read its weights without calling "
                 ".eval() or .train(), or put the mode back.")
        if any(not p.requires_grad or p.grad is not None for p in mha.parameters()):
            hint("your function changed the layer's parameters (requires_grad, or a .grad from backward()): "
                 "read the weights with .detach() or under torch.no_grad().")
        if x.requires_grad != x_grad or x.grad is not None:
            hint("your function changed x's requires_grad or gave it a .grad: leave the caller's tokens alone.")
        terms = _terms_answer(out, call, (B, h, T, T))
        right = _reference_terms(mha, x, P)
        tol = dict(rtol=1e-4, atol=1e-4 if dtype == torch.float32 else 1e-8)
        if all(close(t, r, **tol) for t, r in zip(terms, right)):
            continue
        _diagnose_terms(terms, right, mha, x, P, call, tol, bias)
    passed("the four terms of every head add up to the layer's scores on x + P, biases with the content; "
           "the last one depends on the positions alone, the same for every sequence.")


def _diagnose_terms(terms, right, mha, x, P, call, tol, bias) -> None:
    def same(other) -> bool:
        return all(close(t, r, **tol) for t, r in zip(terms, other))

    where = f"for {call}"
    total = sum(terms)
    if same((right[0], right[2], right[1], right[3])):
        hint(f"{where} the two cross terms are swapped: content-position pairs the query's content (x W_Q^T + "
             "b_Q) with the key's position (P W_K^T); position-content the reverse.")
    if same(tuple(r.transpose(-2, -1) for r in right)) or same((right[0].transpose(-2, -1), right[2].transpose(-2, -1),
                                                               right[1].transpose(-2, -1), right[3].transpose(-2, -1))):
        hint(f"{where} your tables are transposed: rows are queries (position i), columns keys (position j), "
             "entry q_i . k_j.")
    if same(_reference_terms(mha, x, P, scale=False)):
        hint(f"{where} the terms are missing the scale 1 / sqrt(d_head): the layer divides every score by "
             f"sqrt({mha.d_head}) before the softmax, so each term carries it.")
    if same(_reference_terms(mha, x, P, transpose=False)):
        hint(f"{where} nn.Linear stores its weight as (out_features, in_features) and computes x W^T + b: "
             "multiply by q_proj.weight.T (or call q_proj on the tokens), not by q_proj.weight.")
    if bias and same(_reference_terms(mha, x, P, bias=False)):
        hint(f"{where} the projections' biases are missing: q_proj and k_proj add b_Q and b_K. Count them with "
             "the content, x W^T + b, so that the position-position term depends on positions alone.")
    if bias and same(_reference_terms(mha, x, P, bias_twice=True)):
        hint(f"{where} the biases are counted twice: with the positions too (q_proj(P) adds b_Q again). The "
             "layer adds each bias once, to (x + P) W^T; put it with the content only.")
    if bias and close(total, sum(_reference_terms(mha, x, P, bias_twice=True)), **tol):
        hint(f"{where} the sum counts each bias twice: q_proj(x) + q_proj(P) adds b_Q twice, while the layer "
             "computes q_proj(x + P), one b_Q. Put the bias with the content only.")
    if mha.n_heads > 1 and mha.d_head > 1 and same(_reference_terms(mha, x, P, split=_wrong_split)):
        hint(f"{where} the heads are split the wrong way: head r holds the d_head consecutive features "
             "r d_head .. (r + 1) d_head - 1, a view (B, T, h, d_head) then a transpose, not (B, T, d_head, h).")
    if close(total, sum(right), **tol):
        hint(f"{where} the terms add up to the layer's scores but are not split as asked: content-content "
             "(x, x), content-position (x, P), position-content (P, x), position-position (P, P), with the "
             "biases counted with the content.")
    for name, t, r in zip(_TERM_NAMES, terms, right):
        if not close(t, r, **tol):
            hint(f"{where} the {name} term differs: {first_difference(t, r, name, rtol=tol['rtol'], atol=tol['atol'])} "
                 "(indices: batch, head, query position, key position).", generic=True)


# --------------------------------------------------------------------------- Exercise 5.4
ROPE_LABELS = ("correct", "halves", "clockwise", "frequencies", "offset", "not a rotation")


class Rope:
    """A RoPE with (at most) one known bug, called ``rope(x, offset=0)`` on ``x`` of shape ``(..., T, d)``.

    ``kind``: ``"correct"`` (interleaved pairs (2j, 2j + 1), counterclockwise by t omega_j, omega_j =
    10000**(-2j/d), positions offset .. offset + T - 1), ``"halves"`` (pairs (j, j + d/2)),
    ``"clockwise"``, ``"frequencies"`` (another ``base``), ``"offset"`` (ignores the offset),
    ``"mixed halves"``/``"mixed interleaved"`` (the angles laid out for the other pairing: the two
    members of a pair turn by different angles, so it is no rotation).
    """

    def __init__(self, d: int, kind: str = "correct", base: float = 10000.0):
        self._d, self._kind, self._base = d, kind, base

    def __repr__(self) -> str:  # the same for every suspect: the bug is found by probing, not by reading
        return f"<rope, d = {self._d}>"

    def __call__(self, x, offset=0):
        d = self._d
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"rope: `x` must be a torch.Tensor of shape (T, {d}) (got {type(x).__name__})")
        if not x.is_floating_point():
            raise TypeError(f"rope: `x` must hold floats (got dtype {x.dtype}); use torch.zeros(T, {d}) or "
                            "torch.eye(...) with a float dtype")
        if x.dim() < 2 or x.shape[-1] != d:
            raise ValueError(f"rope: `x` must have shape (T, {d}), positions along axis -2 and the {d} "
                             f"features last (got shape {tuple(x.shape)})")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"rope: `offset` must be an integer >= 0 (got {offset!r})")
        T = x.shape[-2]
        start = 0 if self._kind == "offset" else offset
        pos = torch.arange(start, start + T, dtype=torch.float64)[:, None]
        base = self._base if self._kind == "frequencies" else 10000.0
        angles = pos * base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (T, d/2)
        if self._kind == "clockwise":
            angles = -angles
        halves = self._kind in ("halves", "mixed halves")
        # one angle per feature, laid out for the pairing used (or, mixed, for the other one)
        if (self._kind == "mixed halves") or (not halves and self._kind != "mixed interleaved"):
            per_feature = angles.repeat_interleave(2, dim=-1)  # (T, d): a0 a0 a1 a1 ...
        else:
            per_feature = torch.cat([angles, angles], dim=-1)  # (T, d): a0 a1 ... a0 a1 ...
        if halves:
            partner = torch.cat([torch.arange(d // 2, d), torch.arange(0, d // 2)])
            sign = torch.cat([-torch.ones(d // 2), torch.ones(d // 2)]).double()
        else:
            partner = torch.arange(d).view(-1, 2).flip(-1).reshape(-1)
            sign = torch.tensor([-1.0, 1.0]).repeat(d // 2).double()
        xd = x.double()
        out = xd * per_feature.cos() + sign * xd[..., partner] * per_feature.sin()
        return out.to(x.dtype)


#: (d, kind, base): every label at several widths, d = 4 (two pairs), 6 (an odd number of pairs), 8, 64.
_ROPE_SUSPECTS = [
    (8, "correct", 10000.0), (4, "halves", 10000.0), (6, "clockwise", 10000.0), (4, "frequencies", 1000.0),
    (8, "offset", 10000.0), (6, "mixed halves", 10000.0), (64, "correct", 10000.0), (64, "halves", 10000.0),
    (8, "frequencies", 500000.0), (64, "frequencies", 100.0), (4, "offset", 10000.0),
    (8, "mixed interleaved", 10000.0), (4, "correct", 10000.0), (6, "halves", 10000.0),
    (64, "clockwise", 10000.0), (64, "mixed halves", 10000.0), (6, "correct", 10000.0),
    (64, "frequencies", 10500.0),
]


def _truth(kind: str) -> str:
    return "not a rotation" if kind.startswith("mixed") else kind


_ROPE_ADVICE = {
    "correct": "it pairs neighbours, turns counterclockwise by t * 10000**(-2j/d) and honours its offset. "
               "A probe that calls it broken compares against a wrong expectation: write the expected pair out "
               "(e_0 at position 1 must become cos 1 in feature 0 and sin 1 in feature 1), and compare with "
               "torch.allclose",
    "halves": "it pairs feature j with feature j + d/2 (Hugging Face's rotate_half layout). Turn the basis "
              "vector e_0 at position 1: a rope with neighbouring pairs puts sin 1 in feature 1, this one in "
              "feature d/2",
    "clockwise": "it turns every pair clockwise, by -t omega_j: e_0 at position 1 becomes (cos 1, -sin 1) "
                 "instead of (cos 1, sin 1). A test of relative scores alone cannot see it (queries and keys "
                 "turn alike); look at the sign of the sine",
    "frequencies": "its pairs turn at the wrong frequencies (another base). Pair 0 turns by 1 radian per "
                   "position in every base: check the angle of every pair j at position 1 against "
                   "10000**(-2j/d), with a tight tolerance (the base 10500 moves them by 0.002 radians or less at position 1)",
    "offset": "it ignores its offset: every call starts at position 0. Compare rope(x, offset=k) with the rows "
              "k.. of rope on a longer input",
    "not a rotation": "the two members of a pair turn by different angles (the angles were laid out for the "
                      "other pairing), so it is no rotation: it changes the length of the rows. Compare the "
                      "norm of each row before and after",
}


@checker("Exercise 5.4", allow=("companion.positional",))  # the text allows apply_rotary as a reference
def rope_bug(my_rope_bug) -> None:
    """``my_rope_bug(rope, d)`` -> one of :data:`ROPE_LABELS`: which bug (if any) ``rope`` has."""
    said = []
    for d, kind, base in _ROPE_SUSPECTS:
        rope = Rope(d, kind, base)
        call = f"my_rope_bug(rope, {d})"
        before = _state()
        got = my_rope_bug(rope, d)
        _state_kept(before, my_rope_bug)
        if got is None:
            hint(f"{call} returned None: did you forget the `return`? Return one of the labels "
                 f"{', '.join(repr(s) for s in ROPE_LABELS)}.")
        if not isinstance(got, str):
            hint(f"{call} should return one of the strings {', '.join(repr(s) for s in ROPE_LABELS)}; it "
                 f"returned {describe(got)}.")
        if got not in ROPE_LABELS:
            fixed = got.strip().lower().replace("_", " ").replace("-", " ")
            if fixed in ROPE_LABELS:
                hint(f"write the label exactly as {fixed!r}; you returned {got!r}.")
            hint(f"{call} returned {got!r}, which is not one of the labels {', '.join(repr(s) for s in ROPE_LABELS)}.")
        said.append((d, kind, base, got))
    wrong = [(d, kind, base, got) for d, kind, base, got in said if got != _truth(kind)]
    if not wrong:
        passed("your probes tell a correct RoPE from the halves pairing, a clockwise turn, other frequencies "
               "(even base 10500), an ignored offset and angles that do not rotate, at d = 4 to 64.")
    labels = {got for *_, got in said}
    if len(labels) == 1:
        hint(f"your function answers {labels.pop()!r} for every rope; the check gives it one of each kind, "
             "and a correct one at each width.")
    # the first mistake, in the order of the labels (a correct rope first)
    order = {label: i for i, label in enumerate(ROPE_LABELS)}
    d, kind, base, got = min(wrong, key=lambda w: order[_truth(w[1])])
    truth = _truth(kind)
    if truth == "correct":
        hint(f"a correct rope (d = {d}) was called {got!r}: {_ROPE_ADVICE['correct']}.")
    described = {"frequencies": f"its base is {base:g}"}.get(truth, "")
    hint(f"a rope with the bug {truth!r} (d = {d}{', ' + described if described else ''}) was called {got!r}: "
         f"{_ROPE_ADVICE[truth]}.")
