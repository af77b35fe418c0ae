"""Independent red-team cases for chapter 10 (the masked language model).

Written from the student notebook only: the exercise texts and the check
cells, never the checkers' code. See README.md.
"""
import textwrap

MODULE = "companion.exercises.mlm"
PRELUDE = """
import inspect
import math
import textwrap
import time
import torch
import torch.nn.functional as F
from companion.block import parameter_breakdown
from companion.exercises import mlm as check
"""
CASES = []


def case(exercise, checker, name, expect, why, source, call):
    CASES.append(dict(exercise=exercise, checker=checker, module=MODULE,
                      name=name, expect=expect, why=why,
                      source=textwrap.dedent(source), call=call))


# ---------------------------------------------------------------- 10.1 ---
def mt(name, expect, why, source):
    case("10.1", "mask_tokens", name, expect, why, source, "my_mask_tokens")


def _mask(p=0.15, p_mask=0.8, p_rand=0.1, rand_high="n_chars",
          special_ok=False, label_fill=-100, clone=True, gen="generator",
          label_dtype=None):
    """A parameterized BERT masking rule, to plant one mistake at a time."""
    return f"""
def my_mask_tokens(ids, n_chars, mask_id, generator):
    g = {gen}
    inputs = ids.clone() if {clone} else ids
    labels = torch.full_like(ids, {label_fill}{', dtype=' + label_dtype if label_dtype else ''})
    special = ids >= n_chars
    chosen = torch.rand(ids.shape, generator=g) < {p}
    if not {special_ok}:
        chosen &= ~special
    labels[chosen] = ids[chosen].to(labels.dtype)
    r = torch.rand(ids.shape, generator=g)
    to_mask = chosen & (r < {p_mask})
    to_rand = chosen & (r >= {p_mask}) & (r < {p_mask} + {p_rand})
    rand_ids = torch.randint(0, {rand_high}, ids.shape, generator=g, dtype=ids.dtype)
    inputs[to_mask] = mask_id
    inputs[to_rand] = rand_ids[to_rand]
    return inputs, labels
"""


mt("p_0145", "wrong", "chooses with probability 0.145", _mask(p=0.145))
mt("p_016", "wrong", "chooses with probability 0.16", _mask(p=0.16))
mt("split_78_12_10", "wrong", "78/12/10 instead of 80/10/10", _mask(p_mask=0.78, p_rand=0.12))
mt("split_80_15_5", "wrong", "80/15/5", _mask(p_rand=0.15))
mt("random_includes_specials", "wrong", "random replacement drawn from 0..mask_id, specials included",
   _mask(rand_high="mask_id + 1"))
mt("random_inclusive_n_chars", "wrong", "randint(0, n_chars + 1): one special id can be drawn",
   _mask(rand_high="n_chars + 1"))
mt("specials_chosen", "wrong", "special tokens can be chosen", _mask(special_ok=True))
mt("labels_minus_one", "wrong", "unchosen labels are -1, not -100", _mask(label_fill=-1))
mt("mutates_ids", "wrong", "writes the masks into ids itself", _mask(clone=False))
mt("global_rng", "wrong", "ignores generator: draws from the global RNG", _mask(gen="None"))
mt("int32_labels", "wrong", "labels as int32", _mask(label_dtype="torch.int32"))
mt("independent_bernoullis", "wrong", "classic bug: random = Bernoulli(0.1) of the non-masked, i.e. 2%", """
def my_mask_tokens(ids, n_chars, mask_id, generator):
    g = generator
    inputs, labels = ids.clone(), torch.full_like(ids, -100)
    chosen = (torch.rand(ids.shape, generator=g) < 0.15) & (ids < n_chars)
    labels[chosen] = ids[chosen]
    masked = chosen & (torch.rand(ids.shape, generator=g) < 0.8)
    rand = chosen & ~masked & (torch.rand(ids.shape, generator=g) < 0.1)
    inputs[masked] = mask_id
    inputs[rand] = torch.randint(0, n_chars, ids.shape, generator=g)[rand]
    return inputs, labels
""")
mt("fixed_count", "wrong", "exactly 15% of each row (randperm), not independent draws", """
def my_mask_tokens(ids, n_chars, mask_id, generator):
    g = generator
    inputs, labels = ids.clone(), torch.full_like(ids, -100)
    B, T = ids.shape
    chosen = torch.zeros_like(ids, dtype=torch.bool)
    for b in range(B):
        ok = (ids[b] < n_chars).nonzero().flatten()
        pick = ok[torch.randperm(len(ok), generator=g)[: round(0.15 * len(ok))]]
        chosen[b, pick] = True
    labels[chosen] = ids[chosen]
    r = torch.rand(ids.shape, generator=g)
    inputs[chosen & (r < 0.8)] = mask_id
    rnd = chosen & (r >= 0.8) & (r < 0.9)
    inputs[rnd] = torch.randint(0, n_chars, ids.shape, generator=g)[rnd]
    return inputs, labels
""")
mt("shared_column_draw", "wrong", "one draw per column, shared by every row", """
def my_mask_tokens(ids, n_chars, mask_id, generator):
    g = generator
    B, T = ids.shape
    inputs, labels = ids.clone(), torch.full_like(ids, -100)
    chosen = (torch.rand(T, generator=g) < 0.15).expand(B, T) & (ids < n_chars)
    labels[chosen] = ids[chosen]
    r = torch.rand(T, generator=g).expand(B, T)
    inputs[chosen & (r < 0.8)] = mask_id
    rnd = chosen & (r >= 0.8) & (r < 0.9)
    inputs[rnd] = torch.randint(0, n_chars, (B, T), generator=g)[rnd]
    return inputs, labels
""")
mt("labels_only_changed", "wrong", "the unchanged 10% get label -100", """
def my_mask_tokens(ids, n_chars, mask_id, generator):
    g = generator
    inputs, labels = ids.clone(), torch.full_like(ids, -100)
    chosen = (torch.rand(ids.shape, generator=g) < 0.15) & (ids < n_chars)
    r = torch.rand(ids.shape, generator=g)
    m = chosen & (r < 0.8)
    rnd = chosen & (r >= 0.8) & (r < 0.9)
    inputs[m] = mask_id
    inputs[rnd] = torch.randint(0, n_chars, ids.shape, generator=g)[rnd]
    labels[m | rnd] = ids[m | rnd]
    return inputs, labels
""")
mt("labels_everywhere", "wrong", "labels = ids at every position", """
def my_mask_tokens(ids, n_chars, mask_id, generator):
    g = generator
    inputs = ids.clone()
    chosen = (torch.rand(ids.shape, generator=g) < 0.15) & (ids < n_chars)
    r = torch.rand(ids.shape, generator=g)
    inputs[chosen & (r < 0.8)] = mask_id
    rnd = chosen & (r >= 0.8) & (r < 0.9)
    inputs[rnd] = torch.randint(0, n_chars, ids.shape, generator=g)[rnd]
    return inputs, ids.clone()
""")
mt("right_hf_style", "right", "Hugging Face's collator: Bernoulli(0.8), then Bernoulli(0.5) of the rest", """
def my_mask_tokens(ids, n_chars, mask_id, generator):
    g = generator
    labels = ids.clone()
    inputs = ids.clone()
    prob = torch.full(ids.shape, 0.15)
    prob.masked_fill_(ids >= n_chars, 0.0)
    chosen = torch.bernoulli(prob, generator=g).bool()
    labels[~chosen] = -100
    replaced = torch.bernoulli(torch.full(ids.shape, 0.8), generator=g).bool() & chosen
    inputs[replaced] = mask_id
    rand = torch.bernoulli(torch.full(ids.shape, 0.5), generator=g).bool() & chosen & ~replaced
    words = torch.randint(n_chars, ids.shape, generator=g, dtype=ids.dtype)
    inputs[rand] = words[rand]
    return inputs, labels
""")
mt("right_single_uniform", "right", "one uniform draw per position, split in bands", """
def my_mask_tokens(ids, n_chars, mask_id, generator):
    u = torch.rand(ids.shape, generator=generator)
    v = torch.rand(ids.shape, generator=generator)
    normal = ids < n_chars
    chosen = normal & (u < 0.15)
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    repl = torch.randint(0, n_chars, ids.shape, generator=generator).to(ids.dtype)
    out = torch.where(chosen & (v < 0.8), torch.full_like(ids, mask_id), ids)
    out = torch.where(chosen & (v >= 0.8) & (v < 0.9), repl, out)
    return out, labels
""")
mt("right_multinomial", "right", "a three-way multinomial for the chosen positions", """
def my_mask_tokens(ids, n_chars, mask_id, generator):
    g = generator
    flat = ids.reshape(-1)
    inputs = flat.clone()
    labels = torch.full_like(flat, -100)
    chosen = ((torch.rand(flat.shape, generator=g) < 0.15) & (flat < n_chars)).nonzero().flatten()
    labels[chosen] = flat[chosen]
    kind = torch.multinomial(torch.tensor([0.8, 0.1, 0.1]), len(chosen), replacement=True, generator=g) if len(chosen) else torch.zeros(0, dtype=torch.long)
    inputs[chosen[kind == 0]] = mask_id
    rnd = chosen[kind == 1]
    inputs[rnd] = torch.randint(0, n_chars, (len(rnd),), generator=g, dtype=flat.dtype)
    return inputs.view_as(ids), labels.view_as(ids)
""")


# ---------------------------------------------------------------- 10.2 ---
def ml(name, expect, why, source):
    case("10.2", "mlm_loss", name, expect, why, source, "my_mlm_loss")


ml("F_cross_entropy", "wrong", "the banned F.cross_entropy", """
def my_mlm_loss(logits, labels):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
""")
ml("aliased_cross_entropy", "wrong", "the banned call under an alias", """
from torch.nn.functional import cross_entropy as xe
def my_mlm_loss(logits, labels):
    return xe(logits.transpose(1, 2), labels)
""")
ml("nn_CrossEntropyLoss", "wrong", "nn.CrossEntropyLoss: the same banned call", """
import torch.nn as nn
def my_mlm_loss(logits, labels):
    return nn.CrossEntropyLoss()(logits.flatten(0, 1), labels.flatten())
""")
ml("mean_over_all", "wrong", "divides by every position, not just the scored ones", """
def my_mlm_loss(logits, labels):
    lp = torch.log_softmax(logits, dim=-1)
    keep = labels != -100
    picked = lp.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() / labels.numel()
""")
ml("mean_of_row_means", "wrong", "averages each row, then the rows", """
def my_mlm_loss(logits, labels):
    lp = torch.log_softmax(logits, dim=-1)
    keep = labels != -100
    picked = lp.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1) * keep
    per_row = -picked.sum(1) / keep.sum(1).clamp(min=1)
    return per_row[keep.any(1)].mean()
""")
ml("clamped_labels_all", "wrong", "clamps -100 to 0 and scores every position", """
def my_mlm_loss(logits, labels):
    lp = torch.log_softmax(logits, dim=-1)
    return -lp.gather(-1, labels.clamp(min=0).unsqueeze(-1)).mean()
""")
ml("log_of_softmax", "wrong", "log(softmax): -inf for large logits", """
def my_mlm_loss(logits, labels):
    keep = labels != -100
    p = torch.softmax(logits[keep], dim=-1)
    return -torch.log(p.gather(-1, labels[keep].unsqueeze(-1))).mean()
""")
ml("sum_not_mean", "wrong", "sums over the scored positions", """
def my_mlm_loss(logits, labels):
    keep = labels != -100
    lp = torch.log_softmax(logits[keep], dim=-1)
    return -lp.gather(-1, labels[keep].unsqueeze(-1)).sum()
""")
ml("label_zero_ignored", "wrong", "treats label 0 as unscored (labels > 0)", """
def my_mlm_loss(logits, labels):
    keep = labels > 0
    lp = torch.log_softmax(logits[keep], dim=-1)
    return -lp.gather(-1, labels[keep].unsqueeze(-1)).mean()
""")
ml("returns_float", "wrong", "returns a Python float", """
def my_mlm_loss(logits, labels):
    keep = labels != -100
    lp = torch.log_softmax(logits[keep], dim=-1)
    return -lp.gather(-1, labels[keep].unsqueeze(-1)).mean().item()
""")
ml("no_minus", "wrong", "forgets the minus sign", """
def my_mlm_loss(logits, labels):
    keep = labels != -100
    lp = torch.log_softmax(logits[keep], dim=-1)
    return lp.gather(-1, labels[keep].unsqueeze(-1)).mean()
""")
ml("in_place_shift", "wrong", "subtracts the max from logits in place", """
def my_mlm_loss(logits, labels):
    logits -= logits.amax(-1, keepdim=True)
    keep = labels != -100
    lp = logits[keep] - logits[keep].exp().sum(-1, keepdim=True).log()
    return -lp.gather(-1, labels[keep].unsqueeze(-1)).mean()
""")
ml("softmax_wrong_dim", "wrong", "log_softmax over the positions", """
def my_mlm_loss(logits, labels):
    lp = torch.log_softmax(logits, dim=1)
    keep = labels != -100
    return -lp[keep].gather(-1, labels[keep].unsqueeze(-1)).mean()
""")
ml("right_logsumexp", "right", "logsumexp minus the picked logit, boolean indexing", """
def my_mlm_loss(logits, labels):
    keep = labels.ne(-100)
    z = logits[keep]
    y = labels[keep]
    return (torch.logsumexp(z, dim=-1) - z[torch.arange(len(y)), y]).mean()
""")
ml("right_weighted_sum", "right", "masked sum over the count", """
def my_mlm_loss(logits, labels):
    lp = torch.log_softmax(logits, dim=-1)
    w = (labels != -100).to(lp.dtype)
    safe = torch.where(labels == -100, torch.zeros_like(labels), labels)
    nll = -lp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    return (nll * w).sum() / w.sum()
""")
ml("right_nll_loss", "right", "F.nll_loss on log_softmax (not the banned cross_entropy)", """
def my_mlm_loss(logits, labels):
    lp = torch.log_softmax(logits, dim=-1)
    return F.nll_loss(lp.reshape(-1, lp.shape[-1]), labels.reshape(-1), ignore_index=-100)
""")


# ---------------------------------------------------------------- 10.3 ---
def pb(name, expect, why, source):
    case("10.3", "pad_batch", name, expect, why, source, "my_pad_batch")


pb("mask_inverted", "wrong", "key_mask True at the padding", """
def my_pad_batch(seqs, pad_id):
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = s
    lengths = torch.tensor([len(s) for s in seqs])
    return ids, torch.arange(T)[None, :] >= lengths[:, None]
""")
pb("mask_long", "wrong", "key_mask as 0/1 integers", """
def my_pad_batch(seqs, pad_id):
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    mask = torch.zeros(len(seqs), T, dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = s
        mask[b, : len(s)] = 1
    return ids, mask
""")
pb("left_padding", "wrong", "pads on the left", """
def my_pad_batch(seqs, pad_id):
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    mask = torch.zeros(len(seqs), T, dtype=torch.bool)
    for b, s in enumerate(seqs):
        if len(s):
            ids[b, T - len(s):] = s
            mask[b, T - len(s):] = True
    return ids, mask
""")
pb("T_plus_one", "wrong", "one column too many", """
def my_pad_batch(seqs, pad_id):
    T = max(len(s) for s in seqs) + 1
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    mask = torch.zeros(len(seqs), T, dtype=torch.bool)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = s
        mask[b, : len(s)] = True
    return ids, mask
""")
pb("pads_with_zero", "wrong", "pad_sequence's default padding value 0", """
from torch.nn.utils.rnn import pad_sequence
def my_pad_batch(seqs, pad_id):
    ids = pad_sequence(seqs, batch_first=True)
    lengths = torch.tensor([len(s) for s in seqs])
    return ids, torch.arange(ids.shape[1])[None, :] < lengths[:, None]
""")
pb("float_ids", "wrong", "torch.zeros gives float ids", """
def my_pad_batch(seqs, pad_id):
    T = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), T) + pad_id
    mask = torch.zeros(len(seqs), T, dtype=torch.bool)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = s.float()
        mask[b, : len(s)] = True
    return ids, mask
""")
pb("mask_from_pad_id", "wrong", "key_mask = ids != pad_id: wrong when a real token equals pad_id", """
def my_pad_batch(seqs, pad_id):
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = s
    return ids, ids != pad_id
""")
pb("swapped", "wrong", "returns (key_mask, ids)", """
def my_pad_batch(seqs, pad_id):
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    mask = torch.zeros(len(seqs), T, dtype=torch.bool)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = s
        mask[b, : len(s)] = True
    return mask, ids
""")
pb("replaces_list_items", "wrong", "overwrites the caller's list with padded copies", """
def my_pad_batch(seqs, pad_id):
    T = max(len(s) for s in seqs)
    mask = torch.zeros(len(seqs), T, dtype=torch.bool)
    for b in range(len(seqs)):
        n = len(seqs[b])
        mask[b, :n] = True
        seqs[b] = torch.cat([seqs[b], torch.full((T - n,), pad_id, dtype=seqs[b].dtype)])
    return torch.stack(seqs), mask
""")
pb("int32_ids", "wrong", "int32 ids", """
def my_pad_batch(seqs, pad_id):
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.int32)
    mask = torch.zeros(len(seqs), T, dtype=torch.bool)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = s
        mask[b, : len(s)] = True
    return ids, mask
""")
pb("lists", "wrong", "returns Python lists", """
def my_pad_batch(seqs, pad_id):
    T = max(len(s) for s in seqs)
    ids = [s.tolist() + [pad_id] * (T - len(s)) for s in seqs]
    mask = [[True] * len(s) + [False] * (T - len(s)) for s in seqs]
    return ids, mask
""")
pb("first_length_for_all", "wrong", "uses the first sequence's length for every mask row", """
def my_pad_batch(seqs, pad_id):
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = s
    mask = (torch.arange(T) < len(seqs[0])).expand(len(seqs), T)
    return ids, mask
""")
pb("right_pad_sequence", "right", "pad_sequence with padding_value, arange mask", """
from torch.nn.utils.rnn import pad_sequence
def my_pad_batch(seqs, pad_id):
    ids = pad_sequence(list(seqs), batch_first=True, padding_value=pad_id)
    lengths = torch.tensor([s.numel() for s in seqs])
    return ids, torch.arange(ids.size(1)).unsqueeze(0) < lengths.unsqueeze(1)
""")
pb("right_cat_stack", "right", "cat each row with its padding, stack", """
def my_pad_batch(seqs, pad_id):
    T = max(s.shape[0] for s in seqs)
    rows, masks = [], []
    for s in seqs:
        n = s.shape[0]
        rows.append(torch.cat([s, s.new_full((T - n,), pad_id)]))
        masks.append(torch.cat([torch.ones(n, dtype=torch.bool), torch.zeros(T - n, dtype=torch.bool)]))
    return torch.stack(rows), torch.stack(masks)
""")
pb("right_nested_lists", "right", "nested lists, then torch.tensor", """
def my_pad_batch(seqs, pad_id):
    T = max(len(s) for s in seqs)
    ids = torch.tensor([s.tolist() + [pad_id] * (T - len(s)) for s in seqs], dtype=torch.long)
    mask = torch.tensor([[i < len(s) for i in range(T)] for s in seqs], dtype=torch.bool)
    return ids, mask
""")


# ---------------------------------------------------------------- junk ---
# The same battery of junk answers for every exercise (see _junk.py).
import pathlib as _pathlib
import sys as _sys

_sys.path.insert(0, str(_pathlib.Path(__file__).resolve().parent))
from _junk import junk_cases  # noqa: E402

CASES += junk_cases(MODULE, {
    "10.1": ("mask_tokens", "my_mask_tokens", "ids, n_chars, mask_id, generator"),
    "10.2": ("mlm_loss", "my_mlm_loss", "logits, labels"),
    "10.3": ("pad_batch", "my_pad_batch", "seqs, pad_id"),
    "10.4": ("swap_letters", "my_swap_letters", "line, generator"),
})


# ------------------------------------------------------------- batch 2 ---
mt("own_fixed_generator", "wrong", "ignores the given generator, makes its own with seed 0", _mask(gen="torch.Generator().manual_seed(0)"))
mt("reseeds_given_generator", "wrong", "re-seeds the generator it is given: every call draws the same masks", _mask(gen="generator.manual_seed(0)"))
mt("random_excludes_original", "wrong", "random replacement never equals the original character (shifts the shares by 0.1 / n_chars: likely statistically undetectable)", """
def my_mask_tokens(ids, n_chars, mask_id, generator):
    g = generator
    inputs, labels = ids.clone(), torch.full_like(ids, -100)
    chosen = (torch.rand(ids.shape, generator=g) < 0.15) & (ids < n_chars)
    labels[chosen] = ids[chosen]
    r = torch.rand(ids.shape, generator=g)
    inputs[chosen & (r < 0.8)] = mask_id
    rnd = chosen & (r >= 0.8) & (r < 0.9)
    offset = torch.randint(1, n_chars, ids.shape, generator=g)
    inputs[rnd] = ((ids + offset) % n_chars)[rnd]
    return inputs, labels
""")
mt("mask_id_for_random_too", "wrong", "the 10% random get mask_id as well (90% masked)", _mask(p_mask=0.9, p_rand=0.0))
ml("numpy_loss", "wrong", "NumPy loss wrapped in a tensor: no gradient", """
import numpy as np
def my_mlm_loss(logits, labels):
    keep = (labels != -100).numpy()
    z = logits.detach().numpy()[keep]
    y = labels.numpy()[keep]
    z = z - z.max(-1, keepdims=True)
    lp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return torch.tensor(-lp[np.arange(len(y)), y].mean())
""")
ml("getattr_cross_entropy", "wrong", "the banned call fetched with getattr", """
def my_mlm_loss(logits, labels):
    return getattr(F, "cross_entropy")(logits.flatten(0, 1), labels.flatten())
""")
pb("pad_sequence_default_mask_from_zero", "wrong", "pads with pad_id but builds the mask from ids != 0", """
from torch.nn.utils.rnn import pad_sequence
def my_pad_batch(seqs, pad_id):
    ids = pad_sequence(seqs, batch_first=True, padding_value=pad_id)
    return ids, ids != 0
""")
mt("right_python_loop", "right", "a plain Python loop, one position at a time (slow but allowed)", """
def my_mask_tokens(ids, n_chars, mask_id, generator):
    inputs, labels = ids.clone(), torch.full_like(ids, -100)
    flat_in, flat_lab, flat_ids = inputs.view(-1), labels.view(-1), ids.reshape(-1)
    u = torch.rand(flat_ids.numel(), generator=generator).tolist()
    v = torch.rand(flat_ids.numel(), generator=generator).tolist()
    r = torch.randint(0, n_chars, (flat_ids.numel(),), generator=generator).tolist()
    ids_list = flat_ids.tolist()
    out_in, out_lab = list(ids_list), [-100] * len(ids_list)
    for i, tok in enumerate(ids_list):
        if tok >= n_chars or u[i] >= 0.15:
            continue
        out_lab[i] = tok
        if v[i] < 0.8:
            out_in[i] = mask_id
        elif v[i] < 0.9:
            out_in[i] = r[i]
    flat_in.copy_(torch.tensor(out_in, dtype=ids.dtype))
    flat_lab.copy_(torch.tensor(out_lab, dtype=ids.dtype))
    return inputs, labels
""")


# ---------------------------------------------------------------- 10.4 ---
def sw(name, expect, why, source):
    case("10.4", "swap_letters", name, expect, why, source, "my_swap_letters")


def _swap(ok="a.isalpha() and b.isalpha() and a != b", stop="len(line) - 1",
          draw="int(torch.randint(len(pairs), (1,), generator=generator))",
          empty="raise ValueError('nothing to swap')", j="i + 1"):
    """The text's rule, to plant one mistake at a time."""
    return f"""
def my_swap_letters(line, generator):
    pairs = []
    for i in range({stop}):
        a, b = line[i], line[i + 1]
        if {ok}:
            pairs.append(i)
    if not pairs:
        {empty}
    i = pairs[{draw}]
    j = {j}
    if j >= len(line):
        j = len(line) - 1
    chars = list(line)
    chars[i], chars[j] = chars[j], chars[i]
    return "".join(chars)
"""


sw("right_plain", "right", "the rule as the text states it, with a list of characters", _swap())
sw("right_randperm", "right", "draws the pair as the first of a random permutation (uniform too)",
   _swap(draw="int(torch.randperm(len(pairs), generator=generator)[0])"))
sw("right_floor_rand", "right", "draws a uniform float and takes floor(u * n) (uniform too)",
   _swap(draw="min(int(torch.rand(1, generator=generator) * len(pairs)), len(pairs) - 1)"))
sw("same_letters_allowed", "wrong", "allows a pair of equal letters: the line may not change",
   _swap(ok="a.isalpha() and b.isalpha()"))
sw("any_characters", "wrong", "swaps any two different characters, spaces and punctuation too",
   _swap(ok="a != b"))
sw("lowercase_only", "wrong", "only lower-case letters count as letters",
   _swap(ok="a.islower() and b.islower() and a != b"))
sw("last_pair_missed", "wrong", "range(len(line) - 2): the last pair is never a candidate",
   _swap(stop="len(line) - 2"))
sw("randint_upper_bound", "wrong", "randint(len(pairs) - 1): never the last pair (and fails for one pair)",
   _swap(draw="int(torch.randint(max(len(pairs) - 1, 1), (1,), generator=generator))"))
sw("always_first", "wrong", "always swaps the first pair", _swap(draw="0"))
sw("returns_line", "wrong", "returns the line unchanged when there is no pair, instead of raising",
   _swap(empty="return line"))
sw("skip_one", "wrong", "swaps line[i] with line[i + 2]", _swap(j="i + 2"))
sw("python_random", "wrong", "Python's random module, not the generator: not repeatable",
   "import random\n" + _swap(draw="random.randrange(len(pairs))"))
sw("own_generator", "wrong", "makes its own generator with a fixed seed: the same swap every call",
   _swap(draw="int(torch.randint(len(pairs), (1,), generator=torch.Generator().manual_seed(1)))"))
sw("companion", "wrong", "the companion's own function: does not do the exercise", """
from companion.mlm import swap_letters as my_swap_letters
""")
sw("biased_next_pair", "wrong", "draws any position, then takes the next pair from there: not uniform", """
def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    k = int(torch.randint(len(line) - 1, (1,), generator=generator))
    i = next((p for p in pairs if p >= k), pairs[0])
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
