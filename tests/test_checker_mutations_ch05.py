"""Mutation registry of chapter 5 (positional encoding): see tests/mutation_harness.py.

The references are the book's solutions (written again here); each mutant is one plausible slip.
"""
import math

import torch

from companion.exercises import positional as check
from mutation_harness import Exercise, Mutant, make_tests


# --- 5.1 the base and the layout, read off a table ----------------------------------------------------
def my_read_table(P, pair="last", reader="atan2", exponent=None, layout_rule="row0", answer="c", columns="own"):
    T, d = P.shape
    raw, P = P.detach(), P.detach().double()
    interleaved = bool(P[0, 1] == 1) if layout_rule == "row0" else layout_rule == "always interleaved"
    j = d // 2 - 1 if pair == "last" else (0 if pair == "first" else 1)
    if interleaved or columns == "interleaved":
        sine, cosine, col = P[1, 2 * j], P[1, 2 * j + 1], 2 * j + 1
    else:
        sine, cosine, col = P[1, j], P[1, j + d // 2], j + d // 2
    if reader == "atan2":
        omega = math.atan2(float(sine), float(cosine))
    else:
        omega = float(torch.acos(raw[1, col]))  # in the table's dtype
    power = exponent(j, d) if exponent else 2 * j / d  # omega_j = c**(-power)
    c = float(torch.tensor(omega, dtype=torch.float64) ** (-1 / power)) if power else 1.0
    out = {"c": lambda: c, "omega": lambda: omega, "inverse": lambda: 1 / omega}[answer]()
    return out, ("interleaved" if interleaved else "halves")


def _read(**kw):
    return lambda P: my_read_table(P, **kw)


READ = [
    Mutant("pair 0, whose frequency is 1 in every base", _read(pair="first"), "tells nothing about c"),
    Mutant("the frequency instead of the base", _read(answer="omega"), "not the base: solve it for c"),
    Mutant("1 / omega instead of the base", _read(answer="inverse"), "1 / omega of the last pair"),
    Mutant("exponent j/d", _read(exponent=lambda j, d: j / d), "c squared"),
    Mutant("exponent 4j/d", _read(exponent=lambda j, d: 4 * j / d), "square root of c"),
    Mutant("always interleaved", _read(layout_rule="always interleaved"), "for every table"),
    Mutant("always halves", _read(layout_rule="always halves"), "for every table"),
    Mutant("layouts swapped", lambda P: (lambda c, lay: (c, "halves" if lay == "interleaved" else "interleaved"))(
        *my_read_table(P)), "layouts are swapped"),
    Mutant("halves read as interleaved columns", _read(columns="interleaved"), "not the halves ones"),
    Mutant("acos of a float32 cosine", _read(reader="acos"), "float32"),
    Mutant("layout capitalized", lambda P: (my_read_table(P)[0], my_read_table(P)[1].capitalize()), "exactly"),
    Mutant("a dict", lambda P: dict(zip(("c", "layout"), my_read_table(P))), "pair (c, layout)"),
    Mutant("swapped order", lambda P: my_read_table(P)[::-1], "base first"),
    Mutant("returns None", lambda P: None, "forget the `return`"),
    Mutant("base rounded to 10000", lambda P: (10000.0, my_read_table(P)[1])),
    Mutant("c as a string", lambda P: (str(my_read_table(P)[0]), my_read_table(P)[1]), "should be a number"),
    Mutant("layout as a bool", lambda P: (my_read_table(P)[0], my_read_table(P)[1] == "interleaved"),
           "one of the strings"),
    Mutant("gives the table a grad", lambda P: (P.sum().backward() if P.requires_grad else None,
                                                my_read_table(P))[1], "requires_grad or gave it a .grad"),
    Mutant("draws from the global generator", lambda P: (torch.rand(1), my_read_table(P))[1], "global random"),
]


# --- 5.2 the table moved by k, from the table alone ---------------------------------------------------
def my_shift_table(P, k):
    T, d = P.shape
    table = P.detach().double()
    omega = torch.atan2(table[1, 0::2], table[1, 1::2])  # (d/2,): row 1 holds each pair's angle
    cos, sin = torch.cos(k * omega), torch.sin(k * omega)
    out = torch.empty(T, d, dtype=torch.float64)
    out[:, 0::2] = table[:, 0::2] * cos + table[:, 1::2] * sin  # sin(a + b)
    out[:, 1::2] = table[:, 1::2] * cos - table[:, 0::2] * sin  # cos(a + b)
    return out.to(P.dtype)


def _by_rows(P, k):
    """p_(i+k) = p_i M_k with M_k's blocks read from row k: right for 0 <= k < T only."""
    T, d = P.shape
    table = P.detach().double()
    s, c = table[k % T, 0::2], table[k % T, 1::2]
    out = torch.empty(T, d, dtype=torch.float64)
    out[:, 0::2] = table[:, 0::2] * c + table[:, 1::2] * s
    out[:, 1::2] = table[:, 1::2] * c - table[:, 0::2] * s
    return out.to(P.dtype)


def _by_rows_abs(P, k):
    """Row |k| for both signs: right for k >= 0 inside the table, wrong for negative k."""
    return _by_rows(P, abs(k)) if abs(k) < P.shape[0] else my_shift_table(P, abs(k))


def _base_10000(P, k):
    T, d = P.shape
    pos = torch.arange(k, k + T, dtype=torch.float64)[:, None]
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    out = torch.empty(T, d, dtype=torch.float64)
    out[:, 0::2], out[:, 1::2] = torch.sin(pos * omega), torch.cos(pos * omega)
    return out.to(P.dtype)


def _float16_angles(P, k):
    T, d = P.shape
    omega = torch.atan2(P[1, 0::2].detach().half(), P[1, 1::2].detach().half()).double()
    table = P.detach().double()
    cos, sin = torch.cos(k * omega), torch.sin(k * omega)
    out = torch.empty(T, d, dtype=torch.float64)
    out[:, 0::2] = table[:, 0::2] * cos + table[:, 1::2] * sin
    out[:, 1::2] = table[:, 1::2] * cos - table[:, 0::2] * sin
    return out.to(P.dtype)


SHIFT = [
    Mutant("turned the wrong way (transposed blocks)", lambda P, k: my_shift_table(P, -k), "moved the wrong way"),
    Mutant("one position too late", lambda P, k: my_shift_table(P, k + 1), "one position too late"),
    Mutant("one position too early", lambda P, k: my_shift_table(P, k - 1), "one position too early"),
    Mutant("row k, wrapped around past the table", _by_rows, None),
    Mutant("row |k| for negative k", _by_rows_abs, "moved the wrong way"),
    Mutant("assumes the base 10000", _base_10000, "must not assume the base"),
    Mutant("P[k:] only", lambda P, k: P[k:].clone() if 0 < k < P.shape[0] else my_shift_table(P, k), "P[k:]"),
    Mutant("returns P itself for k = 0", lambda P, k: P if k == 0 else my_shift_table(P, k), "P itself"),
    Mutant("always float64", lambda P, k: my_shift_table(P, k).double(), "P's dtype"),
    Mutant("angles in float16", _float16_angles, None),
    Mutant("returns None", lambda P, k: None, "forget the `return`"),
    Mutant("a list of rows", lambda P, k: my_shift_table(P, k).tolist(), "should return a tensor"),
    Mutant("transposed table", lambda P, k: my_shift_table(P, k).T.contiguous() if P.shape[0] != P.shape[1]
           else my_shift_table(P, k).T.contiguous(), "keep P's shape"),
    Mutant("sine and cosine of the shift swapped", lambda P, k: my_shift_table(P, k).flip(-1), None),
    Mutant("draws from the global generator", lambda P, k: (torch.randn(1), my_shift_table(P, k))[1],
           "global random"),
    Mutant("switches grad off", lambda P, k: (torch.set_grad_enabled(False), my_shift_table(P, k))[1],
           "gradient tracking off"),
]


# --- 5.3 the four terms of every head of a real layer -------------------------------------------------
def my_score_terms(mha, x, P):
    B, T, d = x.shape
    h, d_head = mha.n_heads, mha.d_head

    def per_head(y):  # (..., T, d) -> (B, h, T, d_head)
        return y.reshape(-1, T, h, d_head).transpose(1, 2).expand(B, -1, -1, -1)

    with torch.no_grad():
        q_content, k_content = per_head(mha.q_proj(x)), per_head(mha.k_proj(x))  # biases: content
        q_position = per_head(P @ mha.q_proj.weight.T)
        k_position = per_head(P @ mha.k_proj.weight.T)
    pairs = ((q_content, k_content), (q_content, k_position), (q_position, k_content), (q_position, k_position))
    return tuple(a @ b.transpose(-2, -1) / math.sqrt(d_head) for a, b in pairs)


def _terms(scale=True, bias="content", transpose=True, split="heads"):
    def fn(mha, x, P):
        B, T, d = x.shape
        h, dh = mha.n_heads, mha.d_head

        def per_head(y):
            if split == "heads":
                return y.reshape(-1, T, h, dh).transpose(1, 2).expand(B, -1, -1, -1)
            return y.reshape(-1, T, dh, h).permute(0, 3, 1, 2).expand(B, -1, -1, -1)

        def project(lin, v, with_bias):
            W = lin.weight.detach()
            out = v @ (W.T if transpose else W)
            return out + lin.bias.detach() if with_bias and lin.bias is not None else out

        qx = per_head(project(mha.q_proj, x.detach(), bias in ("content", "twice")))
        kx = per_head(project(mha.k_proj, x.detach(), bias in ("content", "twice")))
        qp = per_head(project(mha.q_proj, P, bias == "twice"))
        kp = per_head(project(mha.k_proj, P, bias == "twice"))
        s = 1 / math.sqrt(dh) if scale else 1.0
        return tuple(s * a @ b.transpose(-2, -1) for a, b in ((qx, kx), (qx, kp), (qp, kx), (qp, kp)))
    return fn


def _heads_averaged(mha, x, P):
    return tuple(t.mean(1) for t in my_score_terms(mha, x, P))


def _pp_not_expanded(mha, x, P):
    cc, cp, pc, pp = my_score_terms(mha, x, P)
    return cc, cp, pc, pp[:1]


def _eval_mode(mha, x, P):
    mha.eval()
    return my_score_terms(mha, x, P)


def _lumped(mha, x, P):
    cc, cp, pc, pp = my_score_terms(mha, x, P)
    return cc + cp, torch.zeros_like(cp), pc, pp


TERMS = [
    Mutant("no 1 / sqrt(d_head)", _terms(scale=False), "1 / sqrt(d_head)"),
    Mutant("biases forgotten", _terms(bias="none"), "biases are missing"),
    Mutant("biases counted with the positions too", _terms(bias="twice"), "counted twice"),
    Mutant("x @ weight, no transpose", _terms(transpose=False), "(out_features, in_features)"),
    Mutant("heads split as (d_head, h)", _terms(split="wrong"), "split the wrong way"),
    Mutant("cross terms swapped", lambda *a: (lambda t: (t[0], t[2], t[1], t[3]))(my_score_terms(*a)),
           "cross terms are swapped"),
    Mutant("tables transposed", lambda *a: tuple(t.transpose(-2, -1) for t in my_score_terms(*a)), "transposed"),
    Mutant("sum put in one term", _lumped, "not split as asked"),
    Mutant("heads averaged", _heads_averaged, "one table per sequence"),
    Mutant("position term not expanded over the batch", _pp_not_expanded, None),
    Mutant("one stacked tensor", lambda *a: torch.stack(my_score_terms(*a)), "not one stacked tensor"),
    Mutant("three terms", lambda *a: my_score_terms(*a)[:3], "exactly four"),
    Mutant("returns None", lambda *a: None, "forget the `return`"),
    Mutant("puts the layer in eval mode", _eval_mode, "evaluation mode"),
    Mutant("backward on the weights", lambda mha, x, P: (mha.q_proj.weight.sum().backward(),
                                                         my_score_terms(mha, x, P))[1], "parameters"),
    Mutant("sign flipped", lambda *a: tuple(-t for t in my_score_terms(*a)), None),
]


# --- 5.4 which bug does this RoPE have? ---------------------------------------------------------------
def my_rope_bug(rope, d):
    e = torch.eye(d, dtype=torch.float64)
    x = torch.cat([e, e])  # (2d, d): every basis vector at two positions
    out = rope(x)
    if not torch.allclose(out.norm(dim=-1), x.norm(dim=-1)):
        return "not a rotation"  # the two members of some pair turned by different angles
    if not torch.allclose(rope(x, offset=3), rope(torch.cat([x[:3], x]))[3:]):
        return "offset"
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    pairs = torch.stack([e[0::2], e[0::2]], dim=1)  # (d/2, 2, d): e_2j at positions 0 and 1, a batch
    ones = rope(pairs)[:, 1]  # (d/2, d): e_2j turned as at position 1
    j = torch.arange(d // 2)
    if torch.allclose(ones[j, 2 * j + 1], -omega.sin()):
        return "clockwise"
    if not torch.allclose(ones[j, 2 * j + 1], omega.sin()):
        return "halves" if torch.allclose(ones[0, d // 2], torch.tensor(math.sin(1.0), dtype=torch.float64)) \
            else "frequencies"
    if not torch.allclose(ones[j, 2 * j], omega.cos()):
        return "frequencies"
    return "correct"


def _always(label):
    return lambda rope, d: label


def _loose(rope, d):
    """Frequencies compared with a tolerance of 0.01: misses a base close to 10000."""
    e = torch.eye(d, dtype=torch.float64)
    label = my_rope_bug(rope, d)
    if label != "frequencies":
        return label
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    turned = rope(torch.stack([e[0], e[0]]).double())
    return "correct" if abs(float(turned[1, 0]) - math.cos(omega[0])) < 1e-2 and \
        torch.allclose(rope(torch.stack([e[2], e[2]]))[1, 2:4],
                       torch.stack([omega[1].cos(), omega[1].sin()]), atol=1e-2) else "frequencies"


def _pair0_only(rope, d):
    """Checks pair 0 only: every base turns pair 0 by 1 radian per position."""
    label = my_rope_bug(rope, d)
    return "correct" if label == "frequencies" else label


def _no_norm_test(rope, d):
    label = my_rope_bug(rope, d)
    return "halves" if label == "not a rotation" else label


def _no_offset_test(rope, d):
    label = my_rope_bug(rope, d)
    return "correct" if label == "offset" else label


def _sign_blind(rope, d):
    label = my_rope_bug(rope, d)
    return "correct" if label == "clockwise" else label


def _halves_as_frequencies(rope, d):
    label = my_rope_bug(rope, d)
    return "frequencies" if label == "halves" else label


ROPE = [
    Mutant("always correct", _always("correct"), "for every rope"),
    Mutant("always halves", _always("halves"), "for every rope"),
    Mutant("a frequency close to 10000 missed by a loose tolerance", _loose, "tight tolerance"),
    Mutant("only pair 0 checked", _pair0_only, "its pairs turn at the wrong frequencies"),
    Mutant("no norm test", _no_norm_test, "no rotation"),
    Mutant("offset never tested", _no_offset_test, "ignores its offset"),
    Mutant("sign of the sine not looked at", _sign_blind, "clockwise"),
    Mutant("halves called frequencies", _halves_as_frequencies, "Hugging Face's rotate_half"),
    Mutant("a label with a capital", lambda rope, d: my_rope_bug(rope, d).capitalize(), "exactly"),
    Mutant("a label with an underscore", lambda rope, d: my_rope_bug(rope, d).replace(" ", "_"), "exactly"),
    Mutant("a bool", lambda rope, d: my_rope_bug(rope, d) == "correct", "one of the strings"),
    Mutant("returns None", lambda rope, d: None, "forget the `return`"),
    Mutant("random probes from the global generator", lambda rope, d: (rope(torch.randn(3, d)),
                                                                        my_rope_bug(rope, d))[1], "global random"),
    Mutant("calls rope on one vector", lambda rope, d: (rope(torch.ones(d)), "correct")[1], "shape", raised=True),
]


EXERCISES = [
    Exercise(check.read_table, my_read_table, READ),
    Exercise(check.shift_table, my_shift_table, SHIFT),
    Exercise(check.score_terms, my_score_terms, TERMS),
    Exercise(check.rope_bug, my_rope_bug, ROPE),
]

test_reference_passes_and_enough_mutants, test_mutant_is_caught, test_specific_hints_name_their_mistake = make_tests(EXERCISES)
