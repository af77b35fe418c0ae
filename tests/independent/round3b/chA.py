"""Exercises A.3 (gradient accumulation) and A.4 (a mixed-precision step)."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _util import Maker, junk, sub  # noqa: E402

MODULE = "companion.exercises.distributed"
PRELUDE = """
import math
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import FancyBboxPatch
from torch.nn.parallel import DistributedDataParallel
from torch.utils._python_dispatch import TorchDispatchMode

import companion
from companion import distributed
from companion.block import count_parameters
from companion.checkpoint import load_checkpoint
from companion.data import load_corpus
from companion.exercises import distributed as check
from companion.model import GPT, GPTConfig
from companion.notebook import setup
from companion.train import CONFIGS, Trainer, named_config, windows
"""

# ----------------------------------------------------------------------------- A.3
ACC = '''
def my_accumulated_step(model, opt, loss_fn, micro_batches):
    opt.zero_grad()
    N = sum(len(y) for x, y in micro_batches)
    total = 0.0
    for x, y in micro_batches:
        loss = loss_fn(model, x, y)
        (loss * (len(y) / N)).backward()
        total += loss.item() * len(y)
    opt.step()
    return total / N
'''

a = Maker("A.3", "accumulation", MODULE, "my_accumulated_step")
AW = lambda name, why, *pairs: a.add(name, "wrong", why, sub(ACC, *pairs))  # noqa: E731

a.add("right_base", "right", "each micro-batch's mean loss weighted by len(y) / N", ACC)
a.add("right_model_zero_grad_float_tensor", "right",
      "clears with model.zero_grad(set_to_none=False), weights by x.shape[0], sums the loss as a detached tensor, float() at the end",
      '''
import torch

def my_accumulated_step(model, opt, loss_fn, micro_batches):
    model.zero_grad(set_to_none=False)
    sizes = [x.shape[0] for x, _ in micro_batches]
    N = sum(sizes)
    total = torch.zeros(())
    for (x, y), n in zip(micro_batches, sizes):
        loss = loss_fn(model, x, y)
        loss.mul(n / N).backward()
        total = total + loss.detach() * n
    opt.step()
    return float(total / N)
''')
a.add("right_sum_then_divide_grads", "right",
      "backpropagates the sum of the row losses (mean * len) and divides every .grad by N once before the step",
      '''
import torch

def my_accumulated_step(model, opt, loss_fn, micro_batches):
    for group in opt.param_groups:
        for p in group["params"]:
            p.grad = None
    N = 0
    total = 0.0
    for x, y in micro_batches:
        loss = loss_fn(model, x, y) * len(y)
        loss.backward()
        total += loss.item()
        N += len(y)
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p.grad /= N
    opt.step()
    return total / N
''')
a.add("right_numpy_float", "right", "returns the mean loss as np.float64 (a float subclass)",
      sub(ACC, ("def my_accumulated_step", "import numpy as np\n\ndef my_accumulated_step"),
          ("    return total / N", "    return np.float64(total) / N")))

AW("divide_by_count", "divides by the number of micro-batches (right only for equal sizes)",
   ("(loss * (len(y) / N)).backward()", "(loss / len(micro_batches)).backward()"))
AW("no_scaling", "backpropagates each mean loss as it is (sum of means)",
   ("(loss * (len(y) / N)).backward()", "loss.backward()"))
AW("no_zero_grad", "does not clear the caller's gradients first",
   ("    opt.zero_grad()\n", ""))
AW("step_every_micro", "steps after every micro-batch",
   ("        total += loss.item() * len(y)\n", "        total += loss.item() * len(y)\n        opt.step()\n        opt.zero_grad()\n"),
   ("    opt.step()\n    return", "    return"))
AW("zero_grad_in_loop", "clears the gradients inside the loop: only the last micro-batch counts",
   ("        loss = loss_fn(model, x, y)\n", "        opt.zero_grad()\n        loss = loss_fn(model, x, y)\n"))
AW("return_mean_of_means", "returns the unweighted mean of the micro-batch losses",
   ("    return total / N", "    return total_plain / len(micro_batches)"),
   ("    total = 0.0\n", "    total = 0.0\n    total_plain = 0.0\n"),
   ("        total += loss.item() * len(y)\n", "        total += loss.item() * len(y)\n        total_plain += loss.item()\n"))
AW("return_last_loss", "returns the last micro-batch's loss",
   ("    return total / N", "    return loss.item()"))
AW("return_tensor", "returns the mean loss as a 0-d tensor, not a Python float",
   ("    return total / N", "    return torch.tensor(total / N)"),
   ("def my_accumulated_step", "import torch\n\ndef my_accumulated_step"))
AW("return_sum", "returns the sum of the micro-batch losses",
   ("    return total / N", "    return total / N * len(micro_batches) if False else sum_losses"),
   ("    total = 0.0\n", "    total = 0.0\n    sum_losses = 0.0\n"),
   ("        total += loss.item() * len(y)\n", "        total += loss.item() * len(y)\n        sum_losses += loss.item()\n"))
AW("no_step", "forgets opt.step()",
   ("    opt.step()\n", ""))
AW("step_twice", "steps twice",
   ("    opt.step()\n", "    opt.step()\n    opt.step()\n"))
AW("weights_inverted", "weights each micro-batch by N / len(y)",
   ("(loss * (len(y) / N)).backward()", "(loss * (N / len(y))).backward()"))
AW("eval_mode_left", "puts the model in eval mode and leaves it there",
   ("    opt.zero_grad()\n", "    opt.zero_grad()\n    model.eval()\n"))
AW("one_big_batch", "concatenates the micro-batches and runs one batch (text: one micro-batch at a time; same numbers)",
   ("    for x, y in micro_batches:\n        loss = loss_fn(model, x, y)\n        (loss * (len(y) / N)).backward()\n        total += loss.item() * len(y)\n",
    "    X = torch.cat([x for x, _ in micro_batches])\n    Y = torch.cat([y for _, y in micro_batches])\n    loss = loss_fn(model, X, Y)\n    loss.backward()\n    total = loss.item() * N\n"),
   ("def my_accumulated_step", "import torch\n\ndef my_accumulated_step"))
AW("post_step_loss", "returns the loss recomputed after the step",
   ("    return total / N", "    with torch.no_grad():\n        after = sum(loss_fn(model, x, y).item() * len(y) for x, y in micro_batches)\n    return after / N"),
   ("def my_accumulated_step", "import torch\n\ndef my_accumulated_step"))
AW("pops_micro_batches", "consumes the caller's list with pop()",
   ("    for x, y in micro_batches:\n", "    while micro_batches:\n        x, y = micro_batches.pop(0)\n"))
AW("divides_twice", "weights by len(y)/N and divides again by the number of micro-batches",
   ("(loss * (len(y) / N)).backward()", "(loss * (len(y) / N) / len(micro_batches)).backward()"))
AW("skips_last", "leaves out the last micro-batch",
   ("    for x, y in micro_batches:\n", "    for x, y in micro_batches[:-1]:\n"))
AW("clips_gradients", "clips the gradient norm to 1 before the step (not asked)",
   ("    opt.step()\n", "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n    opt.step()\n"),
   ("def my_accumulated_step", "import torch\n\ndef my_accumulated_step"))
AW("reseeds_global_rng", "calls torch.manual_seed(0) inside (touches the global RNG)",
   ("    opt.zero_grad()\n", "    torch.manual_seed(0)\n    opt.zero_grad()\n"),
   ("def my_accumulated_step", "import torch\n\ndef my_accumulated_step"))
AW("grad_mode_left_off", "turns grad mode off at the end and leaves it off",
   ("    return total / N", "    torch.set_grad_enabled(False)\n    return total / N"),
   ("def my_accumulated_step", "import torch\n\ndef my_accumulated_step"))
AW("weight_by_first_size", "weights every micro-batch by the first micro-batch's size",
   ("(loss * (len(y) / N)).backward()", "(loss * (len(micro_batches[0][1]) / N)).backward()"))

a.add("right_zero_grad_after_step", "right",
      "debatable: also clears the gradients after the step (the text asks only to clear the caller's leftovers first)",
      sub(ACC, ("    opt.step()\n", "    opt.step()\n    opt.zero_grad()\n")))

# ----------------------------------------------------------------------------- A.4
AMP = '''
import torch

def my_amp_step(model, opt, scaler, loss_fn, x, y, max_norm,
                dtype=torch.bfloat16):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=dtype):
        loss = loss_fn(model, x, y)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(opt)
    scaler.update()
    return loss.item()
'''

p = Maker("A.4", "amp_step", MODULE, "my_amp_step")
PW = lambda name, why, *pairs: p.add(name, "wrong", why, sub(AMP, *pairs))  # noqa: E731

p.add("right_base", "right", "autocast forward, scale, unscale_, clip, scaler.step, update", AMP)
p.add("right_param_groups", "right",
      "clips the optimizer's parameters (param_groups), zero_grad(set_to_none=False), float(loss)",
      sub(AMP, ("    opt.zero_grad()\n", "    opt.zero_grad(set_to_none=False)\n"),
          ("torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)",
           "torch.nn.utils.clip_grad_norm_([q for gr in opt.param_groups for q in gr['params']], max_norm)"),
          ("    return loss.item()", "    return float(loss)")))
p.add("right_amp_namespace", "right",
      "torch.amp.autocast(device_type='cpu', dtype=dtype), model.zero_grad(), detached loss kept",
      sub(AMP, ("    opt.zero_grad()\n", "    model.zero_grad()\n"),
          ("    with torch.autocast(\"cpu\", dtype=dtype):", "    with torch.amp.autocast(device_type=\"cpu\", dtype=dtype):"),
          ("    scaler.scale(loss).backward()", "    value = loss.detach().float().item()\n    scaler.scale(loss).backward()"),
          ("    return loss.item()", "    return value")))

PW("clip_scaled", "clips the scaled gradients (no unscale_ before the clip; scaler.step unscales after)",
   ("    scaler.unscale_(opt)\n", ""))
PW("unscale_after_clip", "clips, then unscales",
   ("    scaler.unscale_(opt)\n    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n",
    "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.unscale_(opt)\n"))
PW("no_clip", "forgets the clipping",
   ("    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n", ""))
PW("opt_step_direct", "steps with opt.step() instead of scaler.step (steps on inf too)",
   ("    scaler.step(opt)\n", "    opt.step()\n"))
PW("no_update", "forgets scaler.update() (the scale is never halved)",
   ("    scaler.update()\n", ""))
PW("no_scale", "backpropagates the unscaled loss, then unscale_ divides by the scale",
   ("    scaler.scale(loss).backward()", "    loss.backward()"))
PW("backward_under_autocast", "runs backward and the step under autocast too (text: nothing else under it)",
   ("        loss = loss_fn(model, x, y)\n    scaler.scale(loss).backward()\n    scaler.unscale_(opt)\n    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(opt)\n    scaler.update()\n",
    "        loss = loss_fn(model, x, y)\n        scaler.scale(loss).backward()\n        scaler.unscale_(opt)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n        scaler.step(opt)\n        scaler.update()\n"))
PW("no_autocast", "forward pass in float32 (no autocast)",
   ("    with torch.autocast(\"cpu\", dtype=dtype):\n        loss = loss_fn(model, x, y)\n", "    loss = loss_fn(model, x, y)\n"))
PW("float16_hardcoded", "autocast with float16 whatever dtype says",
   ("torch.autocast(\"cpu\", dtype=dtype)", "torch.autocast(\"cpu\", dtype=torch.float16)"))
PW("returns_scaled_loss", "returns the scaled loss",
   ("    scaler.scale(loss).backward()", "    scaled = scaler.scale(loss)\n    scaled.backward()"),
   ("    return loss.item()", "    return scaled.item()"))
PW("returns_tensor", "returns the loss tensor, not a Python float",
   ("    return loss.item()", "    return loss.detach()"))
PW("no_zero_grad", "does not clear the caller's gradients first",
   ("    opt.zero_grad()\n", ""))
PW("zero_grad_after_backward", "clears the gradients after backward (the step sees none)",
   ("    scaler.unscale_(opt)\n", "    opt.zero_grad()\n    scaler.unscale_(opt)\n"))
PW("clip_norm_one", "clips to norm 1.0 instead of max_norm",
   ("clip_grad_norm_(model.parameters(), max_norm)", "clip_grad_norm_(model.parameters(), 1.0)"))
PW("clip_by_value", "clips each gradient value to max_norm instead of the norm",
   ("torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)", "torch.nn.utils.clip_grad_value_(model.parameters(), max_norm)"))
PW("update_before_step", "updates the scaler before its step",
   ("    scaler.step(opt)\n    scaler.update()\n", "    scaler.update()\n    scaler.step(opt)\n"))
PW("cuda_autocast", "autocast('cuda') on a CPU model: a disabled autocast, float32 forward",
   ("torch.autocast(\"cpu\", dtype=dtype)", "torch.autocast(\"cuda\", dtype=dtype, enabled=torch.cuda.is_available())"))
PW("inf_norm_clip", "clips the infinity norm instead of the 2-norm",
   ("clip_grad_norm_(model.parameters(), max_norm)", "clip_grad_norm_(model.parameters(), max_norm, norm_type=float('inf'))"))
PW("manual_skip_no_update", "skips the step itself when a gradient is not finite, but never updates the scaler",
   ("    scaler.step(opt)\n    scaler.update()\n",
    "    if all(torch.isfinite(q.grad).all() for q in model.parameters() if q.grad is not None):\n        opt.step()\n"))
PW("reseeds_global_rng", "calls torch.manual_seed(0) inside (touches the global RNG)",
   ("    opt.zero_grad()\n", "    torch.manual_seed(0)\n    opt.zero_grad()\n"))
PW("eval_mode_left", "puts the model in eval mode and leaves it there",
   ("    opt.zero_grad()\n", "    model.eval()\n    opt.zero_grad()\n"))
PW("manual_scale_constant", "multiplies the loss by a fixed 65536 instead of the scaler's current scale",
   ("    scaler.scale(loss).backward()", "    scaler.scale(loss)\n    (loss * 65536.0).backward()"))
PW("loss_returned_before_cast", "returns the loss computed again outside autocast (float32 forward for the value)",
   ("    return loss.item()", "    with torch.no_grad():\n        return loss_fn(model, x, y).item()"))

p.add("right_clip_scaled_by_scale", "right",
      "debatable: clips the scaled gradients to max_norm * scale and lets scaler.step unscale them: the same clipped true gradients, but the text says unscale first",
      sub(AMP, ("    scaler.unscale_(opt)\n    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n",
                "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm * scaler.get_scale())\n")))

# the one case that leaves global state changed (grad mode) runs last, so that it cannot disturb the others
_LEAK = [c for c in a.cases if c["name"] == "grad_mode_left_off"]
CASES = ([c for c in a.cases + p.cases if c not in _LEAK]
         + junk(MODULE, {"A.3": ("accumulation", "my_accumulated_step", "model, opt, loss_fn, micro_batches"),
                         "A.4": ("amp_step", "my_amp_step", "model, opt, scaler, loss_fn, x, y, max_norm, dtype=None")})
         + _LEAK)
for _c in CASES:  # the junk helper must be called with dtype positionally (it takes *args only)
    if _c["exercise"] == "A.4" and _c["name"] == "junk_not_implemented_deep":
        _c["source"] = _c["source"].replace("_helper(model, opt, scaler, loss_fn, x, y, max_norm, dtype=None)",
                                            "_helper(model, opt, scaler, loss_fn, x, y, max_norm, dtype)")
