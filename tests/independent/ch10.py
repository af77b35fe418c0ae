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
    "10.4": ("mlm_step", "my_mlm_step", "model, optimizer, ids, key_mask, tokenizer, generator"),
    "10.5": ("swap_letters", "my_swap_letters", "line, generator"),
    "10.6": ("cls_step", "my_cls_step", "body, head, optimizer, ids, key_mask, labels"),
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


# ---------------------------------------------------------------- 10.5 ---
def sw(name, expect, why, source):
    case("10.5", "swap_letters", name, expect, why, source, "my_swap_letters")


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


# ------------------------------------------------- outside red team (out_) ---
# 10.5: the text asks for one swap of adjacent letters (str.isalpha()) that
# differ, "uniformly among all such pairs of the line, with draws from
# `generator`", a ValueError on a line with no such pair, and "the same seed
# gives the same swap". It does not prescribe how the generator is consumed,
# so an answer that draws differently (but uniformly, and only from the
# generator) is right.
sw("out_ascii_letters", "wrong", "string.ascii_letters for letters: accented letters never swapped", """
import string
def my_swap_letters(line, generator):
    L = set(string.ascii_letters)
    pairs = [i for i in range(len(line) - 1)
             if line[i] in L and line[i + 1] in L and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_regex_a_z", "wrong", "[A-Za-z] regex with a lookahead: accents are not letters", """
import re
def my_swap_letters(line, generator):
    pairs = [m.start() for m in re.finditer(r"(?=[A-Za-z][A-Za-z])", line)
             if line[m.start()] != line[m.start() + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_apostrophe_is_letter", "wrong", "counts the apostrophe as a letter (\"don't\" -> \"dont'\")", """
def my_swap_letters(line, generator):
    ok = lambda c: c.isalpha() or c == "'"
    pairs = [i for i in range(len(line) - 1)
             if ok(line[i]) and ok(line[i + 1]) and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_isalnum", "wrong", "isalnum(): digits count as letters (may be undetectable if no test line has a digit)", """
def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalnum() and line[i + 1].isalnum() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_case_insensitive_differ", "wrong", "'differ' tested case-blind: 'Oo' or 'Aa' is never a candidate (detectable only on such a line)", """
def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha()
             and line[i].lower() != line[i + 1].lower()]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_lowercases_line", "wrong", "lower-cases the line before swapping", """
def my_swap_letters(line, generator):
    line = line.lower()
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_keeps_case_pattern", "wrong", "keeps the case of each position ('The' -> 'Hte'): not a swap", """
def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    a, b = line[i], line[i + 1]
    na = b.upper() if a.isupper() else b.lower()
    nb = a.upper() if b.isupper() else a.lower()
    return line[:i] + na + nb + line[i + 2:]
""")
sw("out_returns_list", "wrong", "returns the list of characters, not a string", """
def my_swap_letters(line, generator):
    chars = list(line)
    pairs = [i for i in range(len(chars) - 1)
             if chars[i].isalpha() and chars[i + 1].isalpha() and chars[i] != chars[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    chars[i], chars[i + 1] = chars[i + 1], chars[i]
    return chars
""")
sw("out_returns_tuple", "wrong", "returns (new_line, i)", """
def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:], i
""")
sw("out_prev_valid_pair", "wrong", "uniform position, then the nearest valid pair at or before it: not uniform", """
def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    k = int(torch.randint(len(line) - 1, (1,), generator=generator))
    before = [p for p in pairs if p <= k]
    i = before[-1] if before else pairs[-1]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_word_then_pair", "wrong", "a word uniformly, then a pair in it: pairs of short words favoured", """
def my_swap_letters(line, generator):
    groups = {}
    w = 0
    for i in range(len(line) - 1):
        if line[i] == " ":
            w += 1
        if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]:
            groups.setdefault(w, []).append(i)
    if not groups:
        raise ValueError("no pair")
    keys = sorted(groups)
    ps = groups[keys[int(torch.randint(len(keys), (1,), generator=generator))]]
    i = ps[int(torch.randint(len(ps), (1,), generator=generator))]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_two_tries_then_first", "wrong", "two random positions, then falls back to the first pair: biased to the first", """
def my_swap_letters(line, generator):
    ok = lambda i: line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]
    pairs = [i for i in range(len(line) - 1) if ok(i)]
    if not pairs:
        raise ValueError("no pair")
    for _ in range(2):
        i = int(torch.randint(len(line) - 1, (1,), generator=generator))
        if ok(i):
            break
    else:
        i = pairs[0]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_numpy_random", "wrong", "np.random instead of the generator: not repeatable", """
import numpy as np
def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[np.random.randint(len(pairs))]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_global_torch", "wrong", "torch.randint without generator=: the global RNG, not repeatable", """
def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[torch.randint(len(pairs), (1,)).item()]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_initial_seed", "wrong", "random.Random(generator.initial_seed()): the same swap on every call with one generator", """
import random
def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = random.Random(generator.initial_seed()).choice(pairs)
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_restores_state", "wrong", "restores the generator's state after drawing: the same swap on every call", """
def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    state = generator.get_state()
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    generator.set_state(state)
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_misses_first_pair", "wrong", "range(1, len(line) - 1): a pair at the start is never a candidate", """
def my_swap_letters(line, generator):
    pairs = [i for i in range(1, len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_checks_prev_swaps_next", "wrong", "tests (line[i-1], line[i]) but swaps (line[i], line[i+1])", """
def my_swap_letters(line, generator):
    pairs = [i for i in range(1, len(line))
             if line[i - 1].isalpha() and line[i].isalpha() and line[i - 1] != line[i]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    return line[:i] + line[i + 1:i + 2] + line[i] + line[i + 2:]
""")
sw("out_two_swaps", "wrong", "swaps two different pairs when it can", """
def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    chars = list(line)
    for k in torch.randperm(len(pairs), generator=generator)[:2].tolist():
        i = pairs[k]
        chars[i], chars[i + 1] = chars[i + 1], chars[i]
    return "".join(chars)
""")
sw("out_randint_zero_runtime_error", "wrong", "no check: torch.randint(0, ...) raises RuntimeError, not ValueError", """
def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_assert_pairs", "wrong", "assert pairs: AssertionError, not ValueError", """
def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    assert pairs, "no pair to swap"
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_returns_none_no_pair", "wrong", "returns None on a line with no pair", """
def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        return None
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_valueerror_only_without_letters", "wrong", "ValueError only when the line has under two letters; 'aa' reaches randint(0) (RuntimeError)", """
def my_swap_letters(line, generator):
    if sum(c.isalpha() for c in line) < 2:
        raise ValueError("not enough letters")
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_middle_pair", "wrong", "hard-codes the middle pair: no randomness", """
def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[len(pairs) // 2]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_drops_char", "wrong", "slicing off by one: line[i + 3:] drops a character", """
def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    return line[:i] + line[i + 1] + line[i] + line[i + 3:]
""")
sw("out_duplicates_char", "wrong", "slicing off by one: line[i + 1:] repeats a character", """
def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    return line[:i] + line[i + 1] + line[i] + line[i + 1:]
""")
sw("out_nfd_normalize", "wrong", "NFD-normalizes the line first: accented letters become two characters", """
import unicodedata
def my_swap_letters(line, generator):
    line = unicodedata.normalize("NFD", line)
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_ascii_ignore", "wrong", "encodes to ASCII with errors='ignore': accents vanish", """
def my_swap_letters(line, generator):
    line = line.encode("ascii", "ignore").decode()
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_round_not_floor", "wrong", "round(u * (n - 1)): the first and last pairs get half the weight", """
def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    u = float(torch.rand(1, generator=generator))
    i = pairs[round(u * (len(pairs) - 1))]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_regex_nonoverlapping", "wrong", "re.finditer of two letters: non-overlapping matches miss half the pairs", """
import re
def my_swap_letters(line, generator):
    pairs = [m.start() for m in re.finditer(r"[^\\W\\d_]{2}", line)
             if m.group()[0] != m.group()[1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_modulo_byte", "wrong", "randint(256) % n: modulo bias (strong only on lines with many pairs; arguable to detect)", """
def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[int(torch.randint(256, (1,), generator=generator)) % len(pairs)]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_unique_bigrams", "wrong", "draws among distinct bigrams, swaps the first occurrence: not uniform over pairs", """
def my_swap_letters(line, generator):
    first = {}
    for i in range(len(line) - 1):
        a, b = line[i], line[i + 1]
        if a.isalpha() and b.isalpha() and a != b:
            first.setdefault(a + b, i)
    if not first:
        raise ValueError("no pair")
    keys = list(first)
    i = first[keys[int(torch.randint(len(keys), (1,), generator=generator))]]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_str_replace_first", "wrong", "line.replace(ab, ba, 1): swaps the first occurrence of the bigram, not the drawn one", """
def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    ab = line[i:i + 2]
    return line.replace(ab, ab[::-1], 1)
""")
sw("out_str_replace_all", "wrong", "line.replace(ab, ba): swaps every occurrence of the bigram", """
def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    ab = line[i:i + 2]
    return line.replace(ab, ab[::-1])
""")
sw("out_whole_alpha_words", "wrong", "only words with word.isalpha(): 'love,' and \"don't\" are skipped", """
def my_swap_letters(line, generator):
    pairs, pos = [], 0
    for word in line.split(" "):
        if word.isalpha():
            pairs += [pos + k for k in range(len(word) - 1) if word[k] != word[k + 1]]
        pos += len(word) + 1
    if not pairs:
        raise ValueError("no pair")
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_both_ends_missed", "wrong", "range(1, len(line) - 2): pairs at both ends are missed", """
def my_swap_letters(line, generator):
    pairs = [i for i in range(1, len(line) - 2)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_letter_then_neighbour", "wrong", "a letter uniformly, then its right (else left) partner: not uniform over pairs", """
def my_swap_letters(line, generator):
    ok = lambda i: 0 <= i < len(line) - 1 and line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]
    letters = [k for k in range(len(line)) if ok(k) or ok(k - 1)]
    if not letters:
        raise ValueError("no pair")
    k = letters[int(torch.randint(len(letters), (1,), generator=generator))]
    i = k if ok(k) else k - 1
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_reseeds_generator", "wrong", "re-seeds the given generator with 0 on every call: always the same swap", """
def my_swap_letters(line, generator):
    generator.manual_seed(0)
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_hardcoded_examples", "wrong", "a cheater's table for the notebook's examples, first pair otherwise", """
def my_swap_letters(line, generator):
    table = {"the": "teh", "love": "lvoe", "O, I!": None, "aa": None}
    if line in table:
        if table[line] is None:
            raise ValueError("no pair")
        return table[line]
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[0]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_swaps_whole_word", "wrong", "reverses the whole word that holds the drawn pair", """
def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    s = i
    while s > 0 and line[s - 1].isalpha():
        s -= 1
    e = i + 1
    while e < len(line) and line[e].isalpha():
        e += 1
    return line[:s] + line[s:e][::-1] + line[e:]
""")

# RIGHT answers written differently (all draw only from `generator`, uniformly).
sw("out_right_rejection", "right", "rejection sampling: uniform positions until a valid pair (uniform over pairs, other draws)", """
def my_swap_letters(line, generator):
    ok = lambda i: line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]
    if not any(ok(i) for i in range(len(line) - 1)):
        raise ValueError("no pair of different adjacent letters")
    while True:
        i = int(torch.randint(len(line) - 1, (1,), generator=generator))
        if ok(i):
            return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_right_zip_slices", "right", "zip(line, line[1:]) and slices", """
def my_swap_letters(line, generator):
    cands = [i for i, (a, b) in enumerate(zip(line, line[1:]))
             if (a + b).isalpha() and a != b]
    if len(cands) == 0:
        raise ValueError(f"no swappable pair in {line!r}")
    k = torch.randint(0, len(cands), (), generator=generator).item()
    i = cands[k]
    return "".join((line[:i], line[i + 1], line[i], line[i + 2:]))
""")
sw("out_right_multinomial", "right", "torch.multinomial over equal weights", """
def my_swap_letters(line, generator):
    ok = torch.tensor([line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]
                       for i in range(len(line) - 1)], dtype=torch.float)
    if ok.numel() == 0 or ok.sum() == 0:
        raise ValueError("no pair")
    i = int(torch.multinomial(ok, 1, generator=generator))
    chars = list(line)
    chars[i:i + 2] = chars[i:i + 2][::-1]
    return "".join(chars)
""")
sw("out_right_reversed_order", "right", "lists the pairs from the end: another valid swap for a seed, same distribution", """
def my_swap_letters(line, generator):
    pairs = [i for i in reversed(range(len(line) - 1))
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_right_extra_draw", "right", "makes two draws and uses the second: consumes the generator differently, still uniform and repeatable", """
def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    _, k = torch.randint(len(pairs), (2,), generator=generator).tolist()
    i = pairs[k]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_right_python_random_seeded", "right", "seeds random.Random with a draw from the generator (arguable: the draw is from generator; repeatable and uniform)", """
import random
def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    seed = int(torch.randint(2**62, (1,), generator=generator))
    i = random.Random(seed).choice(pairs)
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_right_valueerror_subclass", "right", "raises its own subclass of ValueError (arguable: it is a ValueError)", """
class NoPairError(ValueError):
    pass

def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise NoPairError(line)
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_right_regex_lookahead", "right", "overlapping regex matches, then the isalpha test", """
import re
def my_swap_letters(line, generator):
    pairs = [m.start() for m in re.finditer(r"(?=(.)(.))", line, flags=re.S)
             if m.group(1).isalpha() and m.group(2).isalpha() and m.group(1) != m.group(2)]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[torch.randint(high=len(pairs), size=(1,), generator=generator)[0].item()]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_right_rand_floor_loop", "right", "walks the pairs with a uniform float (inverse CDF)", """
def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    u = torch.rand((), generator=generator, dtype=torch.float64).item()
    k = min(int(u * len(pairs)), len(pairs) - 1)
    i = pairs[k]
    out = list(line)
    out[i], out[i + 1] = line[i + 1], line[i]
    return "".join(out)
""")

# 10.1 - 10.3: a few more.
mt("out_random_from_one", "wrong", "randint(1, n_chars): character 0 is never the random replacement", _mask(rand_high="n_chars") .replace("torch.randint(0, n_chars", "torch.randint(1, n_chars"))
mt("out_mask_is_n_chars", "wrong", "hard-codes the blank as n_chars instead of the given mask_id", _mask().replace("inputs[to_mask] = mask_id", "inputs[to_mask] = n_chars"))
mt("out_returns_labels_first", "wrong", "returns (labels, inputs)", _mask().replace("return inputs, labels", "return labels, inputs"))
mt("out_right_bands_reordered", "right", "bands in another order: random below 0.1, unchanged 0.1-0.2, [MASK] above", """
def my_mask_tokens(ids, n_chars, mask_id, generator):
    chosen = (torch.rand(ids.shape, generator=generator) <= 0.15) & (ids < n_chars)
    v = torch.rand(ids.shape, generator=generator)
    rnd = torch.randint(n_chars, ids.shape, generator=generator, dtype=ids.dtype)
    inputs = ids.clone()
    inputs = torch.where(chosen & (v < 0.1), rnd, inputs)
    inputs = torch.where(chosen & (v >= 0.2), torch.full_like(ids, mask_id), inputs)
    labels = ids.masked_fill(~chosen, -100)
    return inputs, labels
""")
ml("out_keepdim_shape", "wrong", "returns shape (1,), not a scalar", """
def my_mlm_loss(logits, labels):
    keep = labels != -100
    lp = torch.log_softmax(logits[keep], dim=-1)
    return -lp.gather(-1, labels[keep].unsqueeze(-1)).mean(0)
""")
ml("out_right_one_hot", "right", "one_hot of the clamped labels times log_softmax, masked mean", """
def my_mlm_loss(logits, labels):
    lp = torch.log_softmax(logits, dim=-1)
    keep = labels >= 0
    oh = F.one_hot(labels.clamp(min=0), logits.shape[-1]).to(lp.dtype)
    nll = -(oh * lp).sum(-1)
    return nll[keep].mean()
""")
pb("out_fixed_T_128", "wrong", "pads to a fixed 128 columns, not the longest sequence", """
def my_pad_batch(seqs, pad_id):
    T = 128
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    mask = torch.zeros(len(seqs), T, dtype=torch.bool)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = s
        mask[b, : len(s)] = True
    return ids, mask
""")
pb("out_mask_uint8", "wrong", "key_mask as uint8, not bool", """
def my_pad_batch(seqs, pad_id):
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    mask = torch.zeros(len(seqs), T, dtype=torch.uint8)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = s
        mask[b, : len(s)] = 1
    return ids, mask
""")
pb("out_right_F_pad", "right", "F.pad each sequence with value=pad_id", """
def my_pad_batch(seqs, pad_id):
    T = max(int(s.shape[0]) for s in seqs)
    ids = torch.stack([F.pad(s.long(), (0, T - s.shape[0]), value=pad_id) for s in seqs])
    lens = torch.tensor([s.shape[0] for s in seqs])
    key_mask = torch.arange(T).expand(len(seqs), T) < lens[:, None]
    return ids, key_mask
""")
sw("out_strips_line", "wrong", "strips the line first: leading/trailing spaces are lost (\"Return ... line with one pair ... swapped\")", """
def my_swap_letters(line, generator):
    line = line.strip()
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_ten_tries_then_first", "wrong", "ten random positions, then the first pair: biased to the first pair on sparse lines (arguable: +0.7 points on a line of 7 pairs in 18)", """
def my_swap_letters(line, generator):
    ok = lambda i: line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]
    pairs = [i for i in range(len(line) - 1) if ok(i)]
    if not pairs:
        raise ValueError("no pair")
    for _ in range(10):
        i = int(torch.randint(len(line) - 1, (1,), generator=generator))
        if ok(i):
            break
    else:
        i = pairs[0]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_reseeds_global_rng", "wrong", "re-seeds the GLOBAL torch RNG from a generator draw and draws from it: repeatable, but clobbers everyone's global RNG (arguable)", """
def my_swap_letters(line, generator):
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    torch.manual_seed(int(torch.randint(2**31, (1,), generator=generator)))
    i = pairs[int(torch.randint(len(pairs), (1,)))]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]
""")
sw("out_right_unicode_category", "right", "letters by unicodedata category L* (what str.isalpha tests), swap by slicing a list", """
import unicodedata
def my_swap_letters(line, generator):
    letter = lambda c: unicodedata.category(c)[0] == "L"
    pairs = [i for i in range(len(line) - 1)
             if letter(line[i]) and letter(line[i + 1]) and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError("no pair")
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    chars = list(line)
    chars[i:i + 2] = [chars[i + 1], chars[i]]
    return "".join(chars)
""")
