"""Exercise 9.8: label-smoothed cross-entropy with padding excluded."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _util import Maker, junk, sub  # noqa: E402

MODULE = "companion.exercises.seq2seq_extra"
PRELUDE = """
import json
import math
import statistics
import time

import matplotlib.pyplot as plt
import torch
from torch import nn

from companion import decoding, translation
from companion.checkpoint import load_checkpoint
from companion.data import asset_path
from companion.decoding import beam_search, greedy, sample, sequence_log_prob
from companion.exercises import seq2seq_extra as check
from companion.notebook import setup
from companion.positional import sinusoidal_encoding
from companion.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
from companion.translation import (
    TranslationTokenizer,
    chrf,
    english,
    exact_match,
    german,
    make_batch,
    next_characters,
    number_splits,
    pairs,
    translate,
)
"""

BASE = '''
import torch

def my_smoothed_loss(logits, targets, pad_id, eps):
    V = logits.shape[-1]
    logp = logits.log_softmax(dim=-1)                      # (B, T, V)
    q = torch.full_like(logp, eps / (V - 1))
    q[..., pad_id] = 0.0
    q = q.scatter_add(-1, targets.unsqueeze(-1),
                      torch.full_like(logp[..., :1], 1.0 - eps))
    per_pos = -(q * logp).sum(dim=-1)                      # (B, T)
    keep = targets != pad_id
    return per_pos[keep].sum() / keep.sum()
'''

m = Maker("9.8", "smoothed_loss", MODULE, "my_smoothed_loss")
W = lambda name, why, *pairs: m.add(name, "wrong", why, sub(BASE, *pairs))  # noqa: E731

m.add("right_base", "right", "target distribution built with scatter_add, masked mean", BASE)
m.add("right_gather_form", "right",
      "(1 - eps) * nll + eps / (V - 1) * (- sum of log p over the non-pad tokens), with gather; algebraically the same",
      '''
import torch

def my_smoothed_loss(logits, targets, pad_id, eps):
    V = logits.shape[-1]
    logp = torch.log_softmax(logits, -1)
    safe = targets.clamp(0, V - 1)
    nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    spread = -(logp.sum(-1) - logp[..., pad_id])
    per_pos = (1 - eps) * nll + eps / (V - 1) * spread
    mask = (targets != pad_id).to(logits.dtype)
    return (per_pos * mask).sum() / mask.sum()
''')
m.add("right_manual_lse_float64", "right",
      "logsumexp by hand (detached max), computed in float64, cast back to the logits' dtype",
      '''
import torch

def my_smoothed_loss(logits, targets, pad_id, eps):
    z = logits.double()
    mx = z.max(-1, keepdim=True).values.detach()
    logp = z - mx - (z - mx).exp().sum(-1, keepdim=True).log()
    V = z.shape[-1]
    onehot = torch.nn.functional.one_hot(targets, V).double()
    q = (1 - eps) * onehot + eps / (V - 1)
    q[..., pad_id] -= eps / (V - 1)
    q = q * (1 - torch.nn.functional.one_hot(torch.full_like(targets, pad_id), V).double()) + 0.0
    loss = -(q * logp).sum(-1)
    keep = targets.ne(pad_id)
    return loss.masked_select(keep).mean().to(logits.dtype)
''')
m.add("right_flatten_loop_free", "right",
      "flattens to (B*T, V) first and uses boolean indexing of rows",
      '''
import torch

def my_smoothed_loss(logits, targets, pad_id, eps):
    V = logits.size(-1)
    flat = logits.reshape(-1, V)
    y = targets.reshape(-1)
    rows = y != pad_id
    logp = flat[rows].log_softmax(-1)
    y = y[rows]
    smooth = -(logp.sum(-1) - logp[:, pad_id]) / (V - 1)
    nll = -logp[torch.arange(len(y)), y]
    return ((1 - eps) * nll + eps * smooth).mean()
''')

W("pytorch_eps_over_V", "spreads eps / V over every token, pad included (PyTorch's label_smoothing)",
  ("    q = torch.full_like(logp, eps / (V - 1))\n    q[..., pad_id] = 0.0\n",
   "    q = torch.full_like(logp, eps / V)\n"))
W("eps_over_V_minus_2", "spreads eps over the V - 2 tokens that are neither the target nor pad (another reference)",
  ("    q = torch.full_like(logp, eps / (V - 1))\n    q[..., pad_id] = 0.0\n    q = q.scatter_add(-1, targets.unsqueeze(-1),\n                      torch.full_like(logp[..., :1], 1.0 - eps))\n",
   "    q = torch.full_like(logp, eps / (V - 2))\n    q[..., pad_id] = 0.0\n    q = q.scatter(-1, targets.unsqueeze(-1), 1.0 - eps)\n"))
W("target_without_share", "the target gets only 1 - eps (not 1 - eps + eps/(V-1)): q sums to less than 1",
  ("    q = q.scatter_add(-1, targets.unsqueeze(-1),\n                      torch.full_like(logp[..., :1], 1.0 - eps))\n",
   "    q = q.scatter(-1, targets.unsqueeze(-1), 1.0 - eps)\n"))
W("pad_gets_share", "every token but the target gets eps/(V-1), pad included (q(pad) != 0)",
  ("    q[..., pad_id] = 0.0\n", ""))
W("mean_over_all_positions", "divides by all B*T positions, padding included",
  ("    return per_pos[keep].sum() / keep.sum()", "    return per_pos[keep].sum() / targets.numel()"))
W("sum_not_mean", "returns the sum over the real positions, not the mean",
  ("    return per_pos[keep].sum() / keep.sum()", "    return per_pos[keep].sum()"))
W("mean_of_row_means", "mean per row, then mean of the rows (rows with different numbers of pads weigh wrong; a pad-only row gives nan)",
  ("    return per_pos[keep].sum() / keep.sum()",
   "    return ((per_pos * keep).sum(1) / keep.sum(1)).mean()"))
W("pad_not_excluded", "averages over every position: padded targets are scored too",
  ("    return per_pos[keep].sum() / keep.sum()", "    return per_pos.mean()"))
W("softmax_then_log", "log of the softmax: -inf (then nan) for logits near +-1000",
  ("    logp = logits.log_softmax(dim=-1)", "    logp = logits.softmax(dim=-1).log()"))
W("float64_result", "computes and returns float64 for float32 logits (text: the logits' dtype)",
  ("    logp = logits.log_softmax(dim=-1)", "    logp = logits.double().log_softmax(dim=-1)"))
W("item_float", "returns a Python float: no gradient",
  ("    return per_pos[keep].sum() / keep.sum()", "    return (per_pos[keep].sum() / keep.sum()).item()"))
W("detached_tensor", "returns a new tensor built from the value: no gradient flows",
  ("    return per_pos[keep].sum() / keep.sum()",
   "    return torch.tensor((per_pos[keep].sum() / keep.sum()).item(), dtype=logits.dtype)"))
W("inplace_logits_shift", "subtracts the row max from the caller's logits in place",
  ("    logp = logits.log_softmax(dim=-1)",
   "    with torch.no_grad():\n        logits -= logits.max(-1, keepdim=True).values\n    logp = logits.log_softmax(dim=-1)"))
W("inplace_targets", "overwrites the padded targets of the caller with 0 in place",
  ("    keep = targets != pad_id", "    keep = targets != pad_id\n    targets[~keep] = 0"))
W("wrong_dim", "log_softmax over the time axis (dim=1) instead of the vocabulary",
  ("    logp = logits.log_softmax(dim=-1)", "    logp = logits.log_softmax(dim=1)"))
W("eps_roles_swapped", "gives the target eps and spreads 1 - eps (roles swapped)",
  ("    q = torch.full_like(logp, eps / (V - 1))", "    q = torch.full_like(logp, (1 - eps) / (V - 1))"),
  ("torch.full_like(logp[..., :1], 1.0 - eps)", "torch.full_like(logp[..., :1], eps)"))
W("uses_F_cross_entropy", "calls F.cross_entropy with label_smoothing (forbidden; also the wrong pad share)",
  ("    V = logits.shape[-1]\n",
   "    V = logits.shape[-1]\n    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=pad_id, label_smoothing=eps * V / (V - 1))\n"))
W("uses_F_nll_loss", "calls F.nll_loss for the target term (forbidden), the smoothing by hand",
  ("    per_pos = -(q * logp).sum(dim=-1)                      # (B, T)\n    keep = targets != pad_id\n    return per_pos[keep].sum() / keep.sum()",
   "    keep = targets != pad_id\n    nll = torch.nn.functional.nll_loss(logp.reshape(-1, V), targets.reshape(-1), ignore_index=pad_id, reduction='none').reshape(targets.shape)\n"
   "    smooth = -(logp.sum(-1) - logp[..., pad_id]) / (V - 1)\n    per_pos = (1 - eps) * nll + eps * smooth\n    return per_pos[keep].sum() / keep.sum()"))
W("pad_hardcoded_zero", "assumes pad_id is 0",
  ("    q[..., pad_id] = 0.0", "    q[..., 0] = 0.0"), ("    keep = targets != pad_id", "    keep = targets != 0"))
W("mask_targets_above_pad", "masks with targets > pad_id (works only when pad is the smallest id)",
  ("    keep = targets != pad_id", "    keep = targets > pad_id"))
W("shape_one", "returns shape (1,) instead of a scalar",
  ("    return per_pos[keep].sum() / keep.sum()", "    return (per_pos[keep].sum() / keep.sum()).reshape(1)"))
W("under_no_grad", "computes everything under torch.no_grad(): no gradient",
  ("    V = logits.shape[-1]\n    logp = logits.log_softmax(dim=-1)                      # (B, T, V)\n    q = torch.full_like(logp, eps / (V - 1))\n    q[..., pad_id] = 0.0\n    q = q.scatter_add(-1, targets.unsqueeze(-1),\n                      torch.full_like(logp[..., :1], 1.0 - eps))\n    per_pos = -(q * logp).sum(dim=-1)                      # (B, T)\n",
   "    V = logits.shape[-1]\n    with torch.no_grad():\n        logp = logits.log_softmax(dim=-1)\n        q = torch.full_like(logp, eps / (V - 1))\n        q[..., pad_id] = 0.0\n        q = q.scatter_add(-1, targets.unsqueeze(-1), torch.full_like(logp[..., :1], 1.0 - eps))\n        per_pos = -(q * logp).sum(dim=-1)\n"))
W("leaves_grad_disabled", "turns grad mode off globally and leaves it off (the loss itself is computed first)",
  ("    return per_pos[keep].sum() / keep.sum()",
   "    out = per_pos[keep].sum() / keep.sum()\n    torch.set_grad_enabled(False)\n    return out"))
W("eps_zero_special", "special-cases eps == 0 with a nan-producing branch (0/0) for eps/(V-1)/eps normalization",
  ("    q = torch.full_like(logp, eps / (V - 1))", "    q = torch.full_like(logp, eps / (V - 1)) * (eps / eps)"))

W("casts_to_float32", "computes in float32 and returns float32 for float64 logits (text: the logits' dtype)",
  ("    logp = logits.log_softmax(dim=-1)", "    logp = logits.float().log_softmax(dim=-1)"))

W("cache_by_shape", "remembers the loss per (shape, pad_id, eps) across calls and returns it again for new values",
  ("def my_smoothed_loss(logits, targets, pad_id, eps):\n", "_MEMO = {}\n\ndef my_smoothed_loss(logits, targets, pad_id, eps):\n    key = (tuple(logits.shape), pad_id, eps, logits.dtype)\n    if key not in _MEMO:\n        _MEMO[key] = _loss(logits, targets, pad_id, eps)\n    return _MEMO[key]\n\ndef _loss(logits, targets, pad_id, eps):\n"))

# the one case that leaves global state changed (grad mode) runs last, so that it cannot disturb the others
_LEAK = [c for c in m.cases if c["name"] == "leaves_grad_disabled"]
CASES = ([c for c in m.cases if c not in _LEAK]
         + junk(MODULE, {"9.8": ("smoothed_loss", "my_smoothed_loss", "logits, targets, pad_id, eps")}) + _LEAK)
