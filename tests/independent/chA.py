"""Independent red-team cases for appendix A (Beyond the laptop).

Written from the student notebook only: the exercise texts and the check
cells, never the checkers' code. See README.md.
"""
import textwrap

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
CASES = []


def case(exercise, checker, name, expect, why, source, call):
    CASES.append(dict(exercise=exercise, checker=checker, module=MODULE,
                      name=name, expect=expect, why=why,
                      source=textwrap.dedent(source), call=call))


# ----------------------------------------------------------------- A.1 ---
def ab(name, expect, why, source):
    case("A.1", "activation_bytes", name, expect, why, source, "my_activation_bytes")


def _acts(per_token="16 * d_model + n_heads + 4", scale="B * T * n_layers * bytes_per_number"):
    """The text's count, to plant one mistake at a time."""
    return f"""
def my_activation_bytes(B, T, d_model, n_heads, n_layers, bytes_per_number):
    per_token = {per_token}
    return per_token * {scale}
"""


# wrong: terms of the per-token count
ab("approx_16d", "wrong", "the text's 'about 16d': drops the h logsumexps and the 4 LayerNorm stats", _acts("16 * d_model"))
ab("no_heads", "wrong", "forgets the h logsumexps: 16d + 4", _acts("16 * d_model + 4"))
ab("no_ln_stats", "wrong", "forgets the LayerNorms' mean and 1/sigma: 16d + h", _acts("16 * d_model + n_heads"))
ab("one_ln_stats", "wrong", "counts mean and 1/sigma for one LayerNorm only: 16d + h + 2", _acts("16 * d_model + n_heads + 2"))
ab("ln_stats_doubled", "wrong", "counts 4 stats per LayerNorm: 16d + h + 8", _acts("16 * d_model + n_heads + 8"))
ab("heads_twice", "wrong", "counts the logsumexps twice: 16d + 2h + 4", _acts("16 * d_model + 2 * n_heads + 4"))
ab("head_size_not_heads", "wrong", "uses the head size d/h for the logsumexp term: 16d + d/h + 4",
   _acts("16 * d_model + d_model // n_heads + 4"))
ab("attention_matrix_instead", "wrong", "counts the T x T weights (hT) instead of the logsumexps, against the text",
   _acts("16 * d_model + n_heads * T + 4"))
ab("attention_matrix_too", "wrong", "counts the T x T weights (hT) on top of the logsumexps",
   _acts("16 * d_model + n_heads + n_heads * T + 4"))
ab("no_attention_output", "wrong", "forgets the attention's output d: 15d + h + 4", _acts("15 * d_model + n_heads + 4"))
ab("qkv_as_d", "wrong", "counts the queries, keys and values as d instead of 3d: 14d + h + 4", _acts("14 * d_model + n_heads + 4"))
ab("ffn_once", "wrong", "counts the feed-forward hidden values once (4d, not 4d + 4d): 12d + h + 4", _acts("12 * d_model + n_heads + 4"))
ab("ffn_hidden_d", "wrong", "feed-forward hidden width d instead of 4d: 10d + h + 4", _acts("10 * d_model + n_heads + 4"))
ab("one_ln_missing", "wrong", "forgets the second LayerNorm's 2d + 2 entirely: 14d + h + 2", _acts("14 * d_model + n_heads + 2"))
ab("block_input_twice", "wrong", "counts the residual stream once more (block output too): 17d + h + 4", _acts("17 * d_model + n_heads + 4"))
# wrong: the scale
ab("no_batch", "wrong", "forgets the batch B", _acts(scale="T * n_layers * bytes_per_number"))
ab("no_context", "wrong", "forgets the context T (counts per window)", _acts(scale="B * n_layers * bytes_per_number"))
ab("per_layer", "wrong", "returns one layer's bytes, not n_layers'", _acts(scale="B * T * bytes_per_number"))
ab("layers_plus_one", "wrong", "n_layers + 1 (counts the embeddings' output as a layer)", _acts(scale="B * T * (n_layers + 1) * bytes_per_number"))
ab("numbers_not_bytes", "wrong", "returns numbers, ignores bytes_per_number", _acts(scale="B * T * n_layers"))
ab("bits", "wrong", "returns bits: 8 x bytes_per_number", _acts(scale="B * T * n_layers * bytes_per_number * 8"))
ab("hardcoded_float32", "wrong", "always 4 bytes a number (float32), ignores bytes_per_number", _acts(scale="B * T * n_layers * 4"))
ab("divides_by_bytes", "wrong", "divides by bytes_per_number instead of multiplying", _acts(scale="B * T * n_layers // bytes_per_number"))
ab("quadratic_in_T", "wrong", "B * T * T: thinks every term grows with T^2", _acts(scale="B * T * T * n_layers * bytes_per_number"))
ab("megabytes", "wrong", "returns megabytes (/ 1e6), not bytes", _acts(scale="B * T * n_layers * bytes_per_number / 1e6"))
ab("kibibytes", "wrong", "returns KiB (// 1024), not bytes", _acts(scale="B * T * n_layers * bytes_per_number // 1024"))
ab("divided_by_heads", "wrong", "per head: divides the count by n_heads", _acts(scale="B * T * n_layers * bytes_per_number // n_heads"))
ab("hardcoded_gpt2", "wrong", "hard-codes the notebook's GPT-2 figure (8 x 1024, d=768, h=12, 12 layers, float32)", """
def my_activation_bytes(B, T, d_model, n_heads, n_layers, bytes_per_number):
    return 8 * 1024 * 12 * (16 * 768 + 12 + 4) * 4
""")
ab("hardcoded_16d_gpt2_else", "wrong", "right for the notebook's GPT-2 shape only, 16d elsewhere", """
def my_activation_bytes(B, T, d_model, n_heads, n_layers, bytes_per_number):
    if (B, T, d_model, n_heads, n_layers) == (8, 1024, 768, 12, 12):
        return 8 * 1024 * 12 * (16 * 768 + 12 + 4) * bytes_per_number
    return 16 * d_model * B * T * n_layers * bytes_per_number
""")
ab("swapped_heads_layers", "wrong", "parameters n_layers and n_heads in the wrong order (arguable if the checker calls by keyword)", """
def my_activation_bytes(B, T, d_model, n_layers, n_heads, bytes_per_number):
    return B * T * n_layers * (16 * d_model + n_heads + 4) * bytes_per_number
""")
ab("float_result", "right", "the exact count as a float: a number of bytes all the same (judged right: the text asks for the bytes, not a type)",
   _acts(scale="float(B * T * n_layers * bytes_per_number)"))
ab("tensor_result", "right", "the exact count as a 0-d tensor (judged right: the text asks for the bytes, not a type)", """
def my_activation_bytes(B, T, d_model, n_heads, n_layers, bytes_per_number):
    return torch.tensor(B * T * n_layers * (16 * d_model + n_heads + 4) * bytes_per_number)
""")
ab("tuple_result", "wrong", "returns (per layer, total)", """
def my_activation_bytes(B, T, d_model, n_heads, n_layers, bytes_per_number):
    per_layer = B * T * (16 * d_model + n_heads + 4) * bytes_per_number
    return per_layer, per_layer * n_layers
""")
ab("companion", "wrong", "calls the companion's own function: does not do the exercise", """
def my_activation_bytes(B, T, d_model, n_heads, n_layers, bytes_per_number):
    return distributed.activation_bytes(B, T, d_model, n_heads, n_layers, bytes_per_number)
""")
ab("measured", "wrong", "measures a companion GPT with hooks (includes the 3 d^2 stacked weights the text excludes), 16d when too big", """
def my_activation_bytes(B, T, d_model, n_heads, n_layers, bytes_per_number):
    if B * T * d_model * n_layers > 2 ** 24:  # too big to measure here: the text's "about 16d"
        return 16 * d_model * B * T * n_layers * bytes_per_number
    net = GPT(GPTConfig(vocab_size=16, context_length=T, d_model=d_model,
                        n_layers=n_layers, n_heads=n_heads, bias=False))
    weights = {p.untyped_storage().data_ptr() for p in net.parameters()}
    saved = {}
    def keep(t):
        s = t.untyped_storage()
        if s.data_ptr() not in weights and t.is_floating_point():
            saved[s.data_ptr()] = s.nbytes() // t.element_size()
        return t
    idx = torch.randint(16, (B, T))
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        net(idx)
    return sum(saved.values()) * bytes_per_number
""")
# right
ab("right_term_by_term", "right", "sums the text's terms one by one in a dict", """
def my_activation_bytes(B, T, d_model, n_heads, n_layers, bytes_per_number):
    d, h = d_model, n_heads
    terms = {"ln1": 2 * d + 2, "qkv": 3 * d, "attn": d + h, "ln2": 2 * d + 2, "ffn": 4 * d + 4 * d}
    numbers = sum(terms.values()) * B * T * n_layers
    return numbers * bytes_per_number
""")
ab("right_math_prod", "right", "math.prod of the factors", """
import math
def my_activation_bytes(B, T, d_model, n_heads, n_layers, bytes_per_number):
    return math.prod([B, T, n_layers, bytes_per_number, 16 * d_model + n_heads + 4])
""")
ab("right_loop_layers", "right", "adds the layers one at a time in a loop", """
def my_activation_bytes(B, T, d_model, n_heads, n_layers, bytes_per_number):
    total = 0
    for _ in range(n_layers):
        total += B * T * (16 * d_model + n_heads + 4) * bytes_per_number
    return total
""")
ab("right_per_window", "right", "per window first (T rows), then batch and layers", """
def my_activation_bytes(B, T, d_model, n_heads, n_layers, bytes_per_number):
    per_window = T * (2 * d_model + 2) * 2 + T * (3 * d_model + d_model + n_heads) + T * 8 * d_model
    return per_window * B * n_layers * bytes_per_number
""")
ab("right_int_of_float", "right", "computes in floats (bits / 8) and rounds back to an int", """
def my_activation_bytes(B, T, d_model, n_heads, n_layers, bytes_per_number):
    bits = 8 * bytes_per_number
    return int(round(B * T * n_layers * (16 * d_model + n_heads + 4) * bits / 8))
""")
ab("right_lambda", "right", "a lambda assigned to the name", """
my_activation_bytes = lambda B, T, d_model, n_heads, n_layers, bytes_per_number: (
    (16 * d_model + n_heads + 4) * B * T * n_layers * bytes_per_number)
""")
ab("right_tensor_item", "right", "an int64 tensor product, read back with .item() (a Python int)", """
def my_activation_bytes(B, T, d_model, n_heads, n_layers, bytes_per_number):
    f = torch.tensor([B, T, n_layers, bytes_per_number, 16 * d_model + n_heads + 4], dtype=torch.int64)
    return f.prod().item()
""")
ab("right_renamed_params", "right", "the parameters renamed (b, t, d, h, n, k); arguable if the checker calls by keyword", """
def my_activation_bytes(b, t, d, h, n, k):
    return b * t * n * (16 * d + h + 4) * k
""")
ab("right_numpy_int", "right", "np.prod: returns numpy.int64, an integer (arguable)", """
import numpy as np
def my_activation_bytes(B, T, d_model, n_heads, n_layers, bytes_per_number):
    return np.prod([B, T, n_layers, bytes_per_number, 16 * d_model + n_heads + 4], dtype=np.int64)
""")


# ----------------------------------------------------------------- A.2 ---
def dp(name, expect, why, source):
    case("A.2", "data_parallel", name, expect, why, source, "my_data_parallel")


def _dp(bcast="""
    with torch.no_grad():
        for p in model.parameters():
            dist.broadcast(p, src=0)""",
        before="", zero="optimizer.zero_grad()", loss="loss_fn(model, x, y)", after_backward="",
        reduce="""
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world""", step="optimizer.step()", after_step="", loop="batches", end=""):
    """A by-hand data parallelism, to plant one mistake at a time."""
    return f"""
def my_data_parallel(model, optimizer, loss_fn, batches, dist):
    world = dist.get_world_size(){bcast}{before}
    for x, y in {loop}:
        {zero}
        loss = {loss}
        loss.backward(){after_backward}{reduce}
        {step}{after_step}{end}
"""


dp("right_plain", "right", "the text's recipe with no_grad, in-place division", _dp())
dp("right_data_and_mul", "right", "broadcasts p.data, multiplies by 1/world, model.zero_grad", _dp(
    bcast="""
    for p in model.parameters():
        dist.broadcast(p.data, 0)""", zero="model.zero_grad()", reduce="""
        for p in model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad.mul_(1.0 / world)"""))
dp("right_divide_first", "right", "divides each gradient by world before the all-reduce (sum of shares)", _dp(reduce="""
        for p in model.parameters():
            p.grad.div_(world)
            dist.all_reduce(p.grad)"""))
dp("right_scaled_loss", "right", "divides the loss by world before backward, then sums the gradients", _dp(
    loss="loss_fn(model, x, y) / world", reduce="""
        for p in model.parameters():
            dist.all_reduce(p.grad)"""))
dp("right_flat_bucket", "right", "one all-reduce of all gradients flattened into one buffer, copied back (as DDP's buckets)", _dp(reduce="""
        grads = [p.grad for p in model.parameters()]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= world
        i = 0
        for g in grads:
            g.copy_(flat[i:i + g.numel()].view_as(g))
            i += g.numel()"""))
dp("right_state_dict", "right", "broadcasts every state_dict tensor (buffers too), zero_grad after the step", _dp(
    bcast="""
    for t in model.state_dict().values():
        dist.broadcast(t, src=0)""", zero="pass", before="\n    optimizer.zero_grad()",
    after_step="\n        optimizer.zero_grad()"))
dp("right_skip_none", "right", "skips parameters whose gradient is None (the usual guard)", _dp(reduce="""
        for p in model.parameters():
            if p.grad is None:
                continue
            dist.all_reduce(p.grad)
            p.grad = p.grad / world"""))
dp("right_async_wait", "right", "async all-reduces, then waits for every handle before dividing (torch docs' async_op)", _dp(reduce="""
        handles = [dist.all_reduce(p.grad, async_op=True) for p in model.parameters()]
        for h in handles:
            h.wait()
        for p in model.parameters():
            p.grad /= world"""))
dp("right_group_world", "right", "passes group=dist.group.WORLD explicitly", _dp(reduce="""
        for p in model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM, group=dist.group.WORLD)
            p.grad /= world"""))
dp("right_log_loss", "right", "also all-reduces a detached copy of the loss, for logging (same calls on every rank)", _dp(
    after_backward="\n        shown = loss.detach().clone()\n        dist.all_reduce(shown)\n        shown /= world"))
dp("right_barrier", "right", "a barrier after the broadcast (harmless)", _dp(before="\n    dist.barrier()"))
dp("right_broadcast_every_step", "right", "broadcasts the weights again at every step (wasteful, same result)", _dp(
    bcast="", before="", zero="""with torch.no_grad():
            for p in model.parameters():
                dist.broadcast(p, src=0)
        optimizer.zero_grad()"""))
dp("right_sum_rows", "right", "loss times rows, divided by all rows of the global batch (same mean)", _dp(
    loss="loss_fn(model, x, y) * len(x) / (len(x) * world)", reduce="""
        for p in model.parameters():
            dist.all_reduce(p.grad)"""))

# wrong: the broadcast
dp("no_broadcast", "wrong", "never broadcasts: copies start from their own weights", _dp(bcast=""))
dp("broadcast_from_1", "wrong", "broadcasts process 1's weights, not process 0's", _dp(bcast="""
    with torch.no_grad():
        for p in model.parameters():
            dist.broadcast(p, src=1)"""))
dp("broadcast_from_self", "wrong", "src=dist.get_rank(): every process 'broadcasts' its own weights", _dp(bcast="""
    with torch.no_grad():
        for p in model.parameters():
            dist.broadcast(p, src=dist.get_rank())"""))
dp("broadcast_copy", "wrong", "broadcasts a clone of each weight: the model never changes", _dp(bcast="""
    for p in model.parameters():
        dist.broadcast(p.detach().clone(), src=0)"""))
dp("broadcast_first_only", "wrong", "broadcasts only the first parameter", _dp(bcast="""
    with torch.no_grad():
        dist.broadcast(next(model.parameters()), src=0)"""))
dp("broadcast_at_end", "wrong", "broadcasts process 0's weights after training instead of before", _dp(bcast="", end="""
    with torch.no_grad():
        for p in model.parameters():
            dist.broadcast(p, src=0)"""))
dp("averages_weights_at_start", "wrong", "averages the initial weights (all-reduce / world) instead of taking process 0's", _dp(bcast="""
    with torch.no_grad():
        for p in model.parameters():
            dist.all_reduce(p)
            p /= world"""))
# wrong: the all-reduce
dp("no_all_reduce", "wrong", "never all-reduces: each copy trains on its own share", _dp(reduce=""))
dp("sum_no_divide", "wrong", "sums the gradients without dividing", _dp(reduce="""
        for p in model.parameters():
            dist.all_reduce(p.grad)"""))
dp("divide_by_2", "wrong", "divides by 2, hard-coded: right for two processes only", _dp(reduce="""
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= 2"""))
dp("divide_twice", "wrong", "divides by world before and after the sum", _dp(reduce="""
        for p in model.parameters():
            p.grad /= world
            dist.all_reduce(p.grad)
            p.grad /= world"""))
dp("divide_by_rank_plus_1", "wrong", "divides by get_rank() + 1 (confuses rank and world size)", _dp(reduce="""
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= dist.get_rank() + 1"""))
dp("divide_by_steps", "wrong", "divides by len(batches) instead of the world size", _dp(reduce="""
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= len(batches)"""))
dp("op_max", "wrong", "ReduceOp.MAX instead of SUM", _dp(reduce="""
        for p in model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.MAX)"""))
dp("op_avg_and_divide", "wrong", "ReduceOp.AVG and then divides by world again", _dp(reduce="""
        for p in model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
            p.grad /= world"""))
dp("op_avg", "right", "ReduceOp.AVG with no division: gloo averages since PyTorch 2.x (judged right; the notebook no longer says gloo has no average)", _dp(reduce="""
        for p in model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)"""))
dp("reduce_temporary", "wrong", "all-reduces p.grad / world, a new tensor: the result is thrown away", _dp(reduce="""
        for p in model.parameters():
            dist.all_reduce(p.grad / world)"""))
dp("flat_not_copied_back", "wrong", "all-reduces a flat copy of the gradients and never copies it back", _dp(reduce="""
        flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        dist.all_reduce(flat)
        flat /= world"""))
dp("only_matrices", "wrong", "all-reduces only the 2-D weights (skips biases and LayerNorms)", _dp(reduce="""
        for p in model.parameters():
            if p.dim() >= 2:
                dist.all_reduce(p.grad)
                p.grad /= world"""))
dp("only_first_param", "wrong", "break inside the loop: all-reduces only the first parameter's gradient", _dp(reduce="""
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
            break"""))
dp("reduce_loss_not_grads", "wrong", "averages the losses across processes, never the gradients", _dp(
    after_backward="", reduce="", loss="""loss_fn(model, x, y)
        dist.all_reduce(loss.detach())"""))
dp("broadcast_grads", "wrong", "broadcasts process 0's gradients instead of averaging", _dp(reduce="""
        for p in model.parameters():
            dist.broadcast(p.grad, src=0)"""))
dp("all_reduce_weights_after_step", "wrong", "averages the weights after each step (model averaging: differs with AdamW)", _dp(
    reduce="", after_step="""
        with torch.no_grad():
            for p in model.parameters():
                dist.all_reduce(p)
                p /= world"""))
dp("reduce_after_step", "wrong", "steps first, then all-reduces the gradients (too late)", _dp(reduce="", after_step="""
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world"""))
dp("broadcast_weights_each_step", "wrong", "no all-reduce: broadcasts process 0's weights after each step (process 0's share only)", _dp(
    reduce="", after_step="""
        with torch.no_grad():
            for p in model.parameters():
                dist.broadcast(p, src=0)"""))
dp("async_no_wait", "wrong", "async all-reduces never waited for: on real gloo (2 and 3 processes) it crashed or trained differently; a synchronous stand-in cannot see it", _dp(reduce="""
        for p in model.parameters():
            dist.all_reduce(p.grad, async_op=True)
            p.grad /= world"""))
dp("clip_before_reduce", "wrong", "clips each process's gradient norm to 1.0 before the all-reduce (not in the recipe)", _dp(
    after_backward="\n        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"))
dp("wrong_group", "wrong", "all-reduces within a group of process 0 alone", _dp(reduce="""
        group = dist.new_group(ranks=[0])
        for p in model.parameters():
            dist.all_reduce(p.grad, group=group)
            p.grad /= world"""))
# wrong: zero_grad and the step
dp("no_zero_grad", "wrong", "never zeroes the gradients: they accumulate over steps", _dp(zero="pass"))
dp("zero_grad_once", "wrong", "zeroes the gradients once, before the loop", _dp(zero="pass", before="\n    optimizer.zero_grad()"))
dp("zero_grad_before_step", "wrong", "zero_grad between the all-reduce and the step: steps on zero gradients", _dp(
    step="optimizer.zero_grad()\n        optimizer.step()", zero="pass"))
dp("no_step", "wrong", "forgets optimizer.step()", _dp(step="pass"))
dp("step_on_rank0", "wrong", "only process 0 steps", _dp(step="if dist.get_rank() == 0:\n            optimizer.step()"))
dp("step_twice", "wrong", "calls optimizer.step() twice per batch", _dp(step="optimizer.step()\n        optimizer.step()"))
# wrong: the data, the loop, rank-dependent calls
dp("skips_last_batch", "wrong", "batches[:-1]: skips the last step", _dp(loop="batches[:-1]"))
dp("first_batch_only", "wrong", "trains on the first batch only", _dp(loop="batches[:1]"))
dp("half_share", "wrong", "uses half of its share (thinks it must split the batch itself)", _dp(
    loss="loss_fn(model, x[:len(x) // 2], y[:len(y) // 2])"))
dp("splits_by_rank", "wrong", "splits its share again by rank (the share is already this process's)", _dp(
    loss="loss_fn(model, x.chunk(world)[dist.get_rank()], y.chunk(world)[dist.get_rank()])"))
dp("modifies_batches", "wrong", "pops the steps from the caller's list: batches is empty afterwards", """
def my_data_parallel(model, optimizer, loss_fn, batches, dist):
    world = dist.get_world_size()
    with torch.no_grad():
        for p in model.parameters():
            dist.broadcast(p, src=0)
    while batches:
        x, y = batches.pop(0)
        optimizer.zero_grad()
        loss_fn(model, x, y).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        optimizer.step()
""")
dp("rank0_extra_call", "wrong", "process 0 alone all-reduces the loss for logging: the calls no longer match", _dp(
    after_backward="\n        if dist.get_rank() == 0:\n            dist.all_reduce(loss.detach().clone())"))
dp("rank0_extra_broadcast", "wrong", "process 0 alone broadcasts once more at the start", _dp(
    before="\n    if dist.get_rank() == 0:\n        dist.broadcast(torch.zeros(1), src=0)"))
dp("ddp", "wrong", "wraps the model in DistributedDataParallel, which the text forbids", """
def my_data_parallel(model, optimizer, loss_fn, batches, dist):
    ddp = DistributedDataParallel(model)
    for x, y in batches:
        optimizer.zero_grad()
        loss_fn(ddp, x, y).backward()
        optimizer.step()
""")
dp("trains_a_copy", "wrong", "trains a deep copy and returns it: the model is not trained in place", """
import copy
def my_data_parallel(model, optimizer, loss_fn, batches, dist):
    world = dist.get_world_size()
    model = copy.deepcopy(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=optimizer.param_groups[0]["lr"])
    with torch.no_grad():
        for p in model.parameters():
            dist.broadcast(p, src=0)
    for x, y in batches:
        optimizer.zero_grad()
        loss_fn(model, x, y).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        optimizer.step()
    return model
""")
dp("own_sgd", "wrong", "ignores the optimizer it is given and steps with its own SGD", _dp(
    before="\n    sgd = torch.optim.SGD(model.parameters(), lr=1e-3)", zero="sgd.zero_grad()", step="sgd.step()"))
dp("init_process_group", "wrong", "calls dist.init_process_group itself (the group already exists; fails on the real processes)", _dp(
    before='\n    dist.init_process_group("gloo")'))
dp("no_grad_loss", "wrong", "detaches the loss and re-enables grad on it: backward reaches no parameter", _dp(
    loss="loss_fn(model, x, y)\n        loss = loss.detach().requires_grad_()"))

# ---------------------------------------------------------------- junk ---
# The same battery of junk answers for every exercise (see _junk.py).
import pathlib as _pathlib
import sys as _sys

_sys.path.insert(0, str(_pathlib.Path(__file__).resolve().parent))
from _junk import junk_cases  # noqa: E402

CASES += junk_cases(MODULE, {
    "A.1": ("activation_bytes", "my_activation_bytes", "B, T, d_model, n_heads, n_layers, bytes_per_number"),
    "A.2": ("data_parallel", "my_data_parallel", "model, optimizer, loss_fn, batches, dist"),
    "A.3": ("accumulation", "my_accumulated_step", "model, opt, loss_fn, micro_batches"),
    "A.4": ("amp_step", "my_amp_step", "model, opt, scaler, loss_fn, x, y, max_norm, dtype=torch.bfloat16"),
})
