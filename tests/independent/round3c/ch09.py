"""Chapter 9 red-team cases: 9.9 seq2seq_step."""
import sys, pathlib
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _junk import junk_cases

MODULE = "companion.exercises.seq2seq_extra"
PRELUDE = """import json
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
from companion.positional import sinusoidal_encoding
from companion.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
from companion.train import learning_rate, make_optimizer
"""

# exercise 9.8, solved (the student's own loss, which 9.9 calls)
LOSS = '''
import torch
import torch.nn.functional as F

def my_smoothed_loss(logits, targets, pad_id, eps):
    V = logits.shape[-1]
    z = logits - logits.amax(-1, keepdim=True)
    logp = z - torch.log(torch.exp(z).sum(-1, keepdim=True))
    q = torch.full_like(logits, eps / (V - 1))
    q[..., pad_id] = 0
    q = q + (1 - eps) * F.one_hot(targets.long(), V).to(logits.dtype)
    per_pos = -(q * logp).sum(-1)
    keep = targets != pad_id
    return per_pos[keep].mean()
'''

GOOD_BODY = '''
def my_seq2seq_step(model, optimizer, src, tgt, eps, max_norm):
    model.train()
    pad = model.config.pad_id
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    logits, _ = model(src, tgt_in, src_key_mask=src != pad, tgt_key_mask=tgt_in != pad)
    loss = my_smoothed_loss(logits, tgt_out, pad, eps)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()
'''


def T(name, expect, why, body):
    return dict(exercise="9.9", checker="seq2seq_step", module=MODULE, name=name,
                expect=expect, why=why, source=(LOSS + body).strip("\n") + "\n",
                call="my_seq2seq_step")


def V(name, expect, why, old, new, count=1):
    """A variant of the good step: `old` replaced by `new`."""
    assert GOOD_BODY.count(old) >= 1, (name, old)
    return T(name, expect, why, GOOD_BODY.replace(old, new, count))


CASES = [
T("right_text", "right", "the step as the text lists it", GOOD_BODY),
V("right_model_zero_grad", "right", "model.zero_grad() instead of optimizer.zero_grad(), before the forward",
  "    model.train()\n", "    model.train()\n    model.zero_grad(set_to_none=True)\n"),
V("right_grad_none_manual", "right", "sets every p.grad = None by hand instead of zero_grad()",
  "    optimizer.zero_grad()\n", "    for p in model.parameters():\n        p.grad = None\n"),
V("right_manual_clip", "right", "clips by hand with the same rule as clip_grad_norm_ (coef = max_norm / (norm + 1e-6), capped at 1)",
  "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n",
  "    grads = [p.grad for p in model.parameters() if p.grad is not None]\n"
  "    total = torch.sqrt(sum((g.detach() ** 2).sum() for g in grads))\n"
  "    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)\n"
  "    for g in grads:\n        g.mul_(coef)\n"),
T("right_float_before_backward", "right", "float(loss) taken before backward, returned at the end",
  GOOD_BODY.replace("    optimizer.zero_grad()\n", "    value = float(loss)\n    optimizer.zero_grad()\n").replace("    return loss.item()", "    return value")),
V("right_narrow", "right", "cuts tgt with narrow() instead of slicing",
  "tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]",
  "n = tgt.shape[1]\n    tgt_in, tgt_out = tgt.narrow(1, 0, n - 1), tgt.narrow(1, 1, n - 1)"),
V("right_no_tgt_mask", "right", "debatable: leaves out tgt_key_mask (step 3 asks for it, but the text shows it changes no scored position: same loss and gradients)",
  ", tgt_key_mask=tgt_in != pad", ""),
V("right_default_src_mask", "right", "debatable: leaves src_key_mask to the model's default (src != pad_id), the same mask",
  "src_key_mask=src != pad, ", ""),
# ------------- wrong
V("no_train_mode", "wrong", "never calls model.train(): a model arriving in eval mode trains without dropout",
  "    model.train()\n", ""),
T("restores_eval", "wrong", "restores the caller's mode at the end (text: leave it in training mode)",
  GOOD_BODY.replace("    model.train()\n", "    was_training = model.training\n    model.train()\n").replace(
  "    return loss.item()", "    model.train(was_training)\n    return loss.item()")),
V("eval_at_end", "wrong", "calls model.eval() at the end", "    return loss.item()", "    model.eval()\n    return loss.item()"),
T("train_after_forward", "wrong", "model.train() only after the forward: the first forward runs in eval mode",
  GOOD_BODY.replace("    model.train()\n", "").replace("    optimizer.zero_grad()\n", "    model.train()\n    optimizer.zero_grad()\n")),
V("no_shift", "wrong", "no teacher-forcing shift: reads and scores the whole tgt",
  "tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]", "tgt_in, tgt_out = tgt, tgt"),
V("shift_reversed", "wrong", "reads tgt without its first column, scored on tgt without its last",
  "tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]", "tgt_in, tgt_out = tgt[:, 1:], tgt[:, :-1]"),
V("mask_torch_convention", "wrong", "masks in torch.nn's convention (True at padding) for the source",
  "src_key_mask=src != pad", "src_key_mask=src == pad"),
V("mask_pad0", "wrong", "masks with id 0 instead of model.config.pad_id (pad_id 3 breaks)",
  "    pad = model.config.pad_id\n", "    pad = 0\n"),
V("loss_pad0_only", "wrong", "passes pad_id=0 to the loss (masks use the right pad)",
  "my_smoothed_loss(logits, tgt_out, pad, eps)", "my_smoothed_loss(logits, tgt_out, 0, eps)"),
V("src_mask_all_true", "wrong", "source mask keeps every position (padding attended)",
  "src_key_mask=src != pad", "src_key_mask=torch.ones_like(src, dtype=torch.bool)"),
V("eps_fixed", "wrong", "hard-codes eps = 0.1", "my_smoothed_loss(logits, tgt_out, pad, eps)",
  "my_smoothed_loss(logits, tgt_out, pad, 0.1)"),
V("eps_zero", "wrong", "ignores eps: plain cross-entropy", "my_smoothed_loss(logits, tgt_out, pad, eps)",
  "my_smoothed_loss(logits, tgt_out, pad, 0.0)"),
V("model_builtin_loss", "wrong", "uses the model's own loss (plain cross-entropy, no smoothing)",
  "    logits, _ = model(src, tgt_in, src_key_mask=src != pad, tgt_key_mask=tgt_in != pad)\n    loss = my_smoothed_loss(logits, tgt_out, pad, eps)\n",
  "    _, loss = model(src, tgt_in, tgt_out, src_key_mask=src != pad, tgt_key_mask=tgt_in != pad)\n"),
V("torch_label_smoothing", "wrong", "F.cross_entropy(label_smoothing=eps, ignore_index=pad): eps/V on every token, pad included, not 9.8's loss",
  "    loss = my_smoothed_loss(logits, tgt_out, pad, eps)\n",
  "    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1), ignore_index=pad, label_smoothing=eps)\n"),
V("row_mean_of_means", "wrong", "averages each row's mean loss (rows of different lengths weigh the same)",
  "    loss = my_smoothed_loss(logits, tgt_out, pad, eps)\n",
  "    loss = sum(my_smoothed_loss(logits[i:i + 1], tgt_out[i:i + 1], pad, eps) for i in range(len(src))) / len(src)\n"),
V("per_sequence_norm", "wrong", "sum over real tokens divided by the batch size, not by the token count",
  "    loss = my_smoothed_loss(logits, tgt_out, pad, eps)\n",
  "    loss = my_smoothed_loss(logits, tgt_out, pad, eps) * (tgt_out != pad).sum() / len(src)\n"),
V("no_zero_grad", "wrong", "never zeroes the gradients: stale ones add up",
  "    optimizer.zero_grad()\n", ""),
T("zero_grad_at_end", "wrong", "zeroes the gradients after the step instead of before: the stale ones of the first call add in",
  GOOD_BODY.replace("    optimizer.zero_grad()\n", "").replace("    return loss.item()", "    optimizer.zero_grad()\n    return loss.item()")),
V("zero_grad_after_backward", "wrong", "zero_grad between backward and step: the step sees no gradient",
  "    optimizer.zero_grad()\n    loss.backward()\n", "    loss.backward()\n    optimizer.zero_grad()\n"),
V("no_clip", "wrong", "no gradient clipping",
  "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n", ""),
V("clip_value", "wrong", "clip_grad_value_ (each entry) instead of the total norm",
  "clip_grad_norm_(model.parameters(), max_norm)", "clip_grad_value_(model.parameters(), max_norm)"),
V("clip_fixed_1", "wrong", "clips at 1.0, ignoring max_norm",
  "clip_grad_norm_(model.parameters(), max_norm)", "clip_grad_norm_(model.parameters(), 1.0)"),
V("clip_inf_norm", "wrong", "clips the max-abs norm (norm_type=inf), not the 2-norm",
  "clip_grad_norm_(model.parameters(), max_norm)", "clip_grad_norm_(model.parameters(), max_norm, norm_type=float('inf'))"),
T("clip_per_parameter", "wrong", "clips each parameter's gradient norm separately, not the total",
  GOOD_BODY.replace("    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n",
                    "    for p in model.parameters():\n        if p.grad is not None:\n            torch.nn.utils.clip_grad_norm_([p], max_norm)\n")),
V("clip_before_backward", "wrong", "clips before backward (clips nothing useful)",
  "    loss.backward()\n    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n",
  "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    loss.backward()\n"),
V("clip_after_step", "wrong", "clips after the optimizer's step",
  "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    optimizer.step()\n",
  "    optimizer.step()\n    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n"),
V("clip_decoder_only", "wrong", "clips only the decoder's parameters",
  "clip_grad_norm_(model.parameters(), max_norm)", "clip_grad_norm_(model.decoder.parameters(), max_norm)"),
V("no_step", "wrong", "forgets optimizer.step()", "    optimizer.step()\n", ""),
V("step_twice", "wrong", "calls optimizer.step() twice", "    optimizer.step()\n", "    optimizer.step()\n    optimizer.step()\n"),
V("scaled_backward", "wrong", "backpropagates 2 * loss (returns the right loss); AdamW is nearly scale-invariant, clipping is not",
  "    loss.backward()\n", "    (2 * loss).backward()\n"),
V("returns_tensor", "wrong", "returns the loss tensor, not a Python float", "    return loss.item()", "    return loss"),
V("returns_detached_tensor", "wrong", "returns loss.detach(), a 0-d tensor, not a float", "    return loss.item()", "    return loss.detach()"),
T("returns_loss_after_step", "wrong", "returns the loss recomputed after the step",
  GOOD_BODY.replace("    return loss.item()",
                    "    with torch.no_grad():\n        logits2, _ = model(src, tgt_in, src_key_mask=src != pad, tgt_key_mask=tgt_in != pad)\n"
                    "        return my_smoothed_loss(logits2, tgt_out, pad, eps).item()")),
V("manual_seed", "wrong", "calls torch.manual_seed(0) inside the step (resets the caller's generator)",
  "    model.train()\n", "    model.train()\n    torch.manual_seed(0)\n"),
T("shuffles_rows", "wrong", "shuffles the batch's rows with torch.randperm (draws from the global generator)",
  GOOD_BODY.replace("    pad = model.config.pad_id\n",
                    "    pad = model.config.pad_id\n    perm = torch.randperm(src.shape[0])\n    src, tgt = src[perm], tgt[perm]\n")),
V("new_optimizer", "wrong", "makes its own AdamW instead of the optimizer given",
  "    model.train()\n", "    model.train()\n    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)\n"),
V("lr_override", "wrong", "sets every group's lr to 1e-3", "    optimizer.step()\n",
  "    for g in optimizer.param_groups:\n        g['lr'] = 1e-3\n    optimizer.step()\n"),
T("manual_sgd", "wrong", "updates the parameters by hand (p -= 0.01 * grad) instead of optimizer.step()",
  GOOD_BODY.replace("    optimizer.step()\n",
                    "    with torch.no_grad():\n        for p in model.parameters():\n            if p.grad is not None:\n                p -= 0.01 * p.grad\n")),
T("skip_first_step", "wrong", "special-cases the first call: no optimizer step then (a 'warm-up')",
  "_calls = [0]\n" + GOOD_BODY.replace("    optimizer.step()\n",
                                        "    _calls[0] += 1\n    if _calls[0] > 1:\n        optimizer.step()\n")),
V("ne_inplace_src", "wrong", "typo src.ne_(pad) for the mask: overwrites the caller's src with 0/1",
  "    logits, _ = model(src, tgt_in, src_key_mask=src != pad,",
  "    src_mask = src.ne(pad)\n    src.ne_(pad)\n    logits, _ = model(src, tgt_in, src_key_mask=src_mask,"),
V("mutates_tgt_pad", "wrong", "writes into the caller's tgt: the padding of tgt_out set to pad again through a view (value kept, in-place write)",
  "    loss = my_smoothed_loss(logits, tgt_out, pad, eps)\n",
  "    tgt_out[tgt_out == pad] = pad\n    loss = my_smoothed_loss(logits, tgt_out, pad, eps)\n"),
V("tgt_mask_from_out", "wrong", "debatable: target mask built from tgt_out (marks the </s> read by the decoder as padding); no scored position sees it, so no effect",
  "tgt_key_mask=tgt_in != pad", "tgt_key_mask=tgt_out != pad"),
V("no_grad_forward", "wrong", "runs the forward under torch.no_grad(): backward fails",
  "    logits, _ = model(", "    with torch.no_grad():\n        logits, _ = model("),
V("notimpl_batch_one", "wrong", "raises NotImplementedError for a batch of one", "    model.train()\n",
  "    if src.shape[0] == 1:\n        raise NotImplementedError('batch of one')\n    model.train()\n"),
V("eps_on_V_not_Vm1", "wrong", "smoothing eps / V over every token (pad included) written inline, not 9.8's loss",
  "    loss = my_smoothed_loss(logits, tgt_out, pad, eps)\n",
  "    logp = torch.log_softmax(logits, -1)\n    keep = tgt_out != pad\n"
  "    nll = -logp.gather(-1, tgt_out.unsqueeze(-1)).squeeze(-1)\n"
  "    smooth = -logp.mean(-1)\n"
  "    loss = ((1 - eps) * nll + eps * smooth)[keep].mean()\n"),

V("manual_seed_1234", "wrong", "calls torch.manual_seed(1234) inside the step (replaces the caller's generator state)",
  "    model.train()\n", "    model.train()\n    torch.manual_seed(1234)\n"),
V("draws_rng_unused", "wrong", "draws torch.rand(1) (unused) from the global generator", "    model.train()\n",
  "    model.train()\n    _ = torch.rand(1)\n"),
V("grad_mode_left_off", "wrong", "turns grad mode off after the step and leaves it off", "    return loss.item()",
  "    torch.set_grad_enabled(False)\n    return loss.item()"),
T("returns_eval_loss", "wrong", "returns a loss measured in eval mode (no dropout) before the step, for 'clean' logging",
  GOOD_BODY.replace("    model.train()\n",
                    "    model.eval()\n    with torch.no_grad():\n        lg, _ = model(src, tgt[:, :-1], src_key_mask=src != model.config.pad_id)\n"
                    "        logged = my_smoothed_loss(lg, tgt[:, 1:], model.config.pad_id, eps).item()\n    model.train()\n")
           .replace("    return loss.item()", "    return logged")),
V("right_zero_grad_both_ends", "right", "debatable: zeroes the gradients at the start and again at the end (the text asks nothing of the gradients after the step)",
  "    return loss.item()", "    optimizer.zero_grad()\n    return loss.item()"),
V("right_loss_float64", "right", "debatable: computes the loss in float64 (logits.double()), more precise",
  "my_smoothed_loss(logits, tgt_out, pad, eps)", "my_smoothed_loss(logits.double(), tgt_out, pad, eps)"),
T("right_builtin_when_eps0", "right", "debatable: for eps = 0 uses the model's own loss (plain cross-entropy over the non-pad targets, 9.8's loss at eps 0)",
  GOOD_BODY.replace("    logits, _ = model(src, tgt_in, src_key_mask=src != pad, tgt_key_mask=tgt_in != pad)\n    loss = my_smoothed_loss(logits, tgt_out, pad, eps)\n",
                    "    logits, builtin = model(src, tgt_in, tgt_out, src_key_mask=src != pad, tgt_key_mask=tgt_in != pad)\n"
                    "    loss = builtin if eps == 0 else my_smoothed_loss(logits, tgt_out, pad, eps)\n")),
]


CASES += junk_cases(MODULE, {"9.9": ("seq2seq_step", "my_seq2seq_step", "model, optimizer, src, tgt, eps, max_norm")})

# Cases that leave torch's grad mode off go last, after the junk battery (the runner does not restore it, and neither
# does the checker, so every later case would be checked with grad mode off), followed by one
# right answer checked after them: what a student sees after fixing such a cell in a notebook.
_MOVE = {'grad_mode_left_off'}
CASES = [c for c in CASES if c["name"] not in _MOVE] + [c for c in CASES if c["name"] in _MOVE]
CASES.append(T("right_after_grad_off", "right", "right_text again, checked right after grad_mode_left_off left grad mode off in the kernel (a notebook where the student then fixed the cell)", GOOD_BODY))

