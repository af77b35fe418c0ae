"""Mutation registry of chapter 13 (today's decoder): see tests/mutation_harness.py.

The wrong answers are those of tests/test_exercises_modern.py, each with the hint it must get
(``expect=None`` where only the generic description of the difference catches it), and a few that
raise inside the student's own code."""
import torch

from companion.exercises import modern as check
from mutation_harness import Exercise, Mutant, make_tests
from test_exercises_modern import (GQA_WRONG, MUON_WRONG, NS_WRONG, REPEAT_WRONG, RMS_WRONG, ROTATE_WRONG,
                                   SWIGLU_WRONG, gqa_by_hand, gqa_right, muon_right, ns_on_the_tall_side, ns_right,
                                   repeat_right, rms_right, rotate_right, swiglu_right)

#: Table entries whose message is a generic description of the difference: any hint is right.
GENERIC = {"differ from", "fails on", "shape", "i // groups", "base"}


def _sdpa_causal_in_the_chunk(attn, x, past):
    """A cache whose new block of queries uses is_causal=True: right for one new token, wrong for
    several after a cache (its mask is aligned at the top left)."""
    import torch.nn.functional as F
    from companion.modern import repeat_kv, rotate
    B, T, _ = x.shape
    h, h_kv, d = attn.n_heads, attn.n_kv_heads, attn.d_head
    S = 0 if past is None else past[0].shape[2]
    q = rotate(attn.q_proj(x).view(B, T, h, d).transpose(1, 2), offset=S)
    k = rotate(attn.k_proj(x).view(B, T, h_kv, d).transpose(1, 2), offset=S)
    v = attn.v_proj(x).view(B, T, h_kv, d).transpose(1, 2)
    if past is not None:
        k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
    y = F.scaled_dot_product_attention(q, repeat_kv(k, h // h_kv), repeat_kv(v, h // h_kv), is_causal=True)
    return attn.o_proj(y.transpose(1, 2).reshape(B, T, h * d)), (k, v)


def mutants(table):
    return [Mutant(expect, fn, None if expect in GENERIC else expect) for expect, fn in table.items()]


EXERCISES = [
    Exercise(check.rms_norm_heads, rms_right, mutants(RMS_WRONG) + [
        Mutant("returns None", lambda x, w, eps: None, "return a tensor"),
        Mutant("keepdim forgotten", lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(-1) + eps) * w, "RuntimeError",
               raised=True),
    ]),
    Exercise(check.swiglu, swiglu_right, mutants(SWIGLU_WRONG) + [
        Mutant("untransposed nn.Linear convention", lambda x, wg, wu, wd: (torch.nn.functional.silu(x @ wg.T) * (x @ wu.T)) @ wd.T,
               "RuntimeError", raised=True),
    ]),
    Exercise(check.rotate_at_offset, rotate_right, mutants(ROTATE_WRONG) + [
        Mutant("returns the input", lambda x, offset: x.clone()),
        Mutant("returns a NumPy array", lambda x, offset: rotate_right(x, offset).numpy(), "return a tensor"),
    ]),
    Exercise(check.repeat_heads, repeat_right, mutants(REPEAT_WRONG) + [
        Mutant("expands the wrong axis", lambda k, g: k[:, None].expand(k.shape[0], g, *k.shape[1:]).reshape(
            k.shape[0], -1, *k.shape[2:]), "You tiled the heads"),  # the same order as k.repeat
        Mutant("returns None", lambda k, g: None, "return a tensor"),
    ]),
    Exercise(check.gqa_with_cache, gqa_right, mutants(GQA_WRONG) + [
        Mutant("is_causal=True under a cache", _sdpa_causal_in_the_chunk, "tril(diagonal=S)"),
        Mutant("returns None", lambda attn, x, past: None, "return a pair"),
        Mutant(
            "cache as a list", lambda attn, x, past: (gqa_right(attn, x, past)[0], list(gqa_right(attn, x, past)[1])),
            "return a pair"),
    ]),
    Exercise(check.newton_schulz, ns_right, mutants(NS_WRONG) + [
        Mutant("returns None", lambda g, steps: None, "return a tensor"),
        Mutant("returns the normalized input", lambda g, steps: g / g.norm()),
        Mutant("an SVD's U V^T", lambda g, steps: (lambda u, s, vh: u @ vh)(*torch.linalg.svd(g, full_matrices=False)),
               "torch.linalg.svd"),
    ]),
    Exercise(check.muon_step, muon_right, mutants(MUON_WRONG) + [
        Mutant("returns None", lambda *a: None, "return a pair"),
        Mutant("plain SGD with momentum", lambda w, g, b, lr, m, wd: (w - lr * (m * b + g), m * b + g),
               "the buffer is an average"),
        Mutant("no orthogonalization", lambda w, g, b, lr, m, wd: (
            w * (1 - lr * wd) - lr * g.lerp(b.lerp(g, 1 - m), m), b.lerp(g, 1 - m))),
    ]),
]

#: Right answers written another way: each must pass.
RIGHT_VARIANTS = [(check.gqa_with_cache, gqa_by_hand), (check.newton_schulz, ns_on_the_tall_side)]


def test_right_variants_pass():
    for fn, answer in RIGHT_VARIANTS:
        assert fn(answer).passed, fn


(test_reference_passes_and_enough_mutants, test_mutant_is_caught,
 test_specific_hints_name_their_mistake) = make_tests(EXERCISES)
