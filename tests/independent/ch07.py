"""Independent red-team cases for chapter 7 (training a language model).

Written from the student notebook only: the exercise texts and the check
cells, never the checkers' code. See README.md.
"""
import textwrap

MODULE = "companion.exercises.lm"
PRELUDE = """
import inspect
import math
import re
import torch
import torch.nn.functional as F
from companion.checkpoint import load_checkpoint, shipped_model_path
from companion.data import VALIDATION_PLAYS, get_batch, load_corpus
from companion.exercises import lm as check
from companion.model import GPT, GPTConfig
"""
CASES = []


def case(exercise, checker, name, expect, why, source, call):
    CASES.append(dict(exercise=exercise, checker=checker, module=MODULE,
                      name=name, expect=expect, why=why,
                      source=textwrap.dedent(source), call=call))


# ---------------------------------------------------------------- 7.1 ----
def ce(name, expect, why, source):
    case("7.1", "cross_entropy", name, expect, why, source,
         "my_cross_entropy")


ce("F_cross_entropy", "wrong", "calls the banned F.cross_entropy", """
def my_cross_entropy(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
""")
ce("aliased_cross_entropy", "wrong", "the banned call under an alias", """
from torch.nn.functional import cross_entropy as xent
def my_cross_entropy(logits, targets):
    return xent(logits.flatten(0, 1), targets.flatten())
""")
ce("nn_CrossEntropyLoss", "wrong", "nn.CrossEntropyLoss is the same banned call", """
import torch.nn as nn
_loss = nn.CrossEntropyLoss()
def my_cross_entropy(logits, targets):
    return _loss(logits.transpose(1, 2), targets)
""")
ce("log_of_softmax", "wrong", "log(softmax): -inf at logits of +-1000", """
def my_cross_entropy(logits, targets):
    p = torch.softmax(logits, dim=-1)
    return -torch.log(p.gather(-1, targets.unsqueeze(-1))).mean()
""")
ce("sum_not_mean", "wrong", "sums over the positions", """
def my_cross_entropy(logits, targets):
    lp = torch.log_softmax(logits, dim=-1)
    return -lp.gather(-1, targets.unsqueeze(-1)).sum()
""")
ce("mean_over_batch_only", "wrong", "divides by B, not B * T", """
def my_cross_entropy(logits, targets):
    lp = torch.log_softmax(logits, dim=-1)
    return -lp.gather(-1, targets.unsqueeze(-1)).sum() / logits.shape[0]
""")
ce("no_minus", "wrong", "forgot the minus sign", """
def my_cross_entropy(logits, targets):
    lp = torch.log_softmax(logits, dim=-1)
    return lp.gather(-1, targets.unsqueeze(-1)).mean()
""")
ce("log_softmax_over_T", "wrong", "log_softmax over the time axis", """
def my_cross_entropy(logits, targets):
    lp = torch.log_softmax(logits, dim=1)
    return -lp.gather(-1, targets.unsqueeze(-1)).mean()
""")
ce("broadcast_indexing", "wrong", "lp[:, :, targets] picks a (B, T, B, T) block", """
def my_cross_entropy(logits, targets):
    lp = torch.log_softmax(logits, dim=-1)
    return -lp[:, :, targets].mean()
""")
ce("returns_float", "wrong", "returns a Python float, not a scalar tensor", """
def my_cross_entropy(logits, targets):
    lp = torch.log_softmax(logits, dim=-1)
    return -lp.gather(-1, targets.unsqueeze(-1)).mean().item()
""")
ce("per_position", "wrong", "returns the (B, T) losses", """
def my_cross_entropy(logits, targets):
    lp = torch.log_softmax(logits, dim=-1)
    return -lp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
""")
ce("bits", "wrong", "log base 2: bits, not nats", """
def my_cross_entropy(logits, targets):
    lp = torch.log_softmax(logits, dim=-1) / math.log(2)
    return -lp.gather(-1, targets.unsqueeze(-1)).mean()
""")
ce("raw_logit", "wrong", "-logit[target]: no softmax", """
def my_cross_entropy(logits, targets):
    return -logits.gather(-1, targets.unsqueeze(-1)).mean()
""")
ce("in_place_shift", "wrong", "subtracts the max from logits in place: mutates the input", """
def my_cross_entropy(logits, targets):
    logits -= logits.amax(dim=-1, keepdim=True)
    lse = logits.exp().sum(-1).log()
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return (lse - picked).mean()
""")
ce("right_logsumexp", "right", "logsumexp minus the picked logit", """
def my_cross_entropy(logits, targets):
    picked = logits.gather(2, targets[..., None])[..., 0]
    return (torch.logsumexp(logits, dim=2) - picked).mean()
""")
ce("right_one_hot", "right", "one-hot targets times log-probabilities", """
def my_cross_entropy(logits, targets):
    lp = torch.log_softmax(logits, dim=-1)
    oh = F.one_hot(targets, logits.shape[-1]).to(lp.dtype)
    return -(oh * lp).sum(-1).mean()
""")
ce("right_flat_index", "right", "flattened rows indexed with arange", """
def my_cross_entropy(logits, targets):
    V = logits.size(-1)
    lp = torch.log_softmax(logits.reshape(-1, V), dim=1)
    t = targets.reshape(-1)
    return -lp[torch.arange(t.numel()), t].mean()
""")


# ---------------------------------------------------------------- 7.2 ----
def fw(name, expect, why, source):
    case("7.2", "gpt_forward", name, expect, why, source, "my_gpt_forward")


fw("no_positions", "wrong", "forgets the position embeddings", """
def my_gpt_forward(model, idx):
    B, T = idx.shape
    x = model.tok_emb(idx)
    for block in model.blocks:
        x = block(x, is_causal=True)
    return model.head(model.final_norm(x))
""")
fw("positions_from_one", "wrong", "positions 1..T", """
def my_gpt_forward(model, idx):
    B, T = idx.shape
    x = model.tok_emb(idx) + model.pos_emb(torch.arange(1, T + 1) % model.pos_emb.num_embeddings)
    for block in model.blocks:
        x = block(x, is_causal=True)
    return model.head(model.final_norm(x))
""")
fw("not_causal", "wrong", "calls the blocks without the causal mask", """
def my_gpt_forward(model, idx):
    B, T = idx.shape
    x = model.tok_emb(idx) + model.pos_emb(torch.arange(T))
    for block in model.blocks:
        x = block(x)
    return model.head(model.final_norm(x))
""")
fw("no_final_norm", "wrong", "forgets model.final_norm", """
def my_gpt_forward(model, idx):
    B, T = idx.shape
    x = model.tok_emb(idx) + model.pos_emb(torch.arange(T))
    for block in model.blocks:
        x = block(x, is_causal=True)
    return model.head(x)
""")
fw("calls_model", "wrong", "calls model(idx), which the text forbids", """
def my_gpt_forward(model, idx):
    B, T = idx.shape
    return model(idx)[0]
""")
fw("calls_model_forward", "wrong", "model.forward(idx) is the same forbidden call", """
def my_gpt_forward(model, idx):
    logits, _ = model.forward(idx)
    return logits
""")
fw("ids_as_positions", "wrong", "position embeddings of the ids", """
def my_gpt_forward(model, idx):
    B, T = idx.shape
    x = model.tok_emb(idx) + model.pos_emb(idx % model.pos_emb.num_embeddings)
    for block in model.blocks:
        x = block(x, is_causal=True)
    return model.head(model.final_norm(x))
""")
fw("skips_last_block", "wrong", "blocks[:-1]", """
def my_gpt_forward(model, idx):
    B, T = idx.shape
    x = model.tok_emb(idx) + model.pos_emb(torch.arange(T))
    for block in model.blocks[:-1]:
        x = block(x, is_causal=True)
    return model.head(model.final_norm(x))
""")
fw("softmax_output", "wrong", "returns probabilities, not logits", """
def my_gpt_forward(model, idx):
    B, T = idx.shape
    x = model.tok_emb(idx) + model.pos_emb(torch.arange(T))
    for block in model.blocks:
        x = block(x, is_causal=True)
    return torch.softmax(model.head(model.final_norm(x)), dim=-1)
""")
fw("returns_tuple", "wrong", "returns (logits, None) like model()", """
def my_gpt_forward(model, idx):
    B, T = idx.shape
    x = model.tok_emb(idx) + model.pos_emb(torch.arange(T))
    for block in model.blocks:
        x = block(x, is_causal=True)
    return model.head(model.final_norm(x)), None
""")
fw("scaled_embeddings", "wrong", "multiplies the token embeddings by sqrt(d)", """
def my_gpt_forward(model, idx):
    B, T = idx.shape
    d = model.tok_emb.embedding_dim
    x = model.tok_emb(idx) * math.sqrt(d) + model.pos_emb(torch.arange(T))
    for block in model.blocks:
        x = block(x, is_causal=True)
    return model.head(model.final_norm(x))
""")
fw("norm_every_block", "wrong", "applies final_norm after every block", """
def my_gpt_forward(model, idx):
    B, T = idx.shape
    x = model.tok_emb(idx) + model.pos_emb(torch.arange(T))
    for block in model.blocks:
        x = model.final_norm(block(x, is_causal=True))
    return model.head(x)
""")
fw("blocks_reversed", "wrong", "runs the blocks last to first", """
def my_gpt_forward(model, idx):
    B, T = idx.shape
    x = model.tok_emb(idx) + model.pos_emb(torch.arange(T))
    for block in reversed(model.blocks):
        x = block(x, is_causal=True)
    return model.head(model.final_norm(x))
""")
fw("right_tied_head", "right", "uses the tied embedding matrix as the head", """
def my_gpt_forward(model, idx):
    B, T = idx.shape
    x = model.tok_emb(idx) + model.pos_emb.weight[:T]
    for block in model.blocks:
        x = block(x, is_causal=True)
    return model.final_norm(x) @ model.tok_emb.weight.T
""")
fw("right_reduce", "right", "functools.reduce over the blocks", """
import functools
def my_gpt_forward(model, idx):
    B, T = idx.shape
    pos = torch.arange(T, device=idx.device).unsqueeze(0).expand(B, T)
    x = model.tok_emb(idx) + model.pos_emb(pos)
    x = functools.reduce(lambda h, blk: blk(h, is_causal=True), model.blocks, x)
    return model.head(model.final_norm(x))
""")
fw("right_with_drop", "right", "also applies model.drop (a no-op in eval)", """
def my_gpt_forward(model, idx):
    B, T = idx.shape
    h = model.drop(model.tok_emb(idx) + model.pos_emb(torch.arange(T)))
    for i in range(len(model.blocks)):
        h = model.blocks[i](h, is_causal=True)
    h = model.final_norm(h)
    return model.head(h)
""")


# ---------------------------------------------------------------- 7.5 ----
def ts(name, expect, why, source):
    case("7.5", "train_step", name, expect, why, source, "my_train_step")


_LOSS = """
def _loss(model, x, y):
    logits, _ = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
"""

ts("no_zero_grad", "wrong", "never zeroes the gradients: they accumulate", _LOSS + """
def my_train_step(model, optimizer, x, y, max_norm):
    loss = _loss(model, x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()
""")
ts("zero_grad_before_step", "wrong", "zeroes the gradients after backward: the step does nothing", _LOSS + """
def my_train_step(model, optimizer, x, y, max_norm):
    loss = _loss(model, x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.zero_grad()
    optimizer.step()
    return loss.item()
""")
ts("clip_after_step", "wrong", "clips after the step: the clipping has no effect", _LOSS + """
def my_train_step(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()
    loss = _loss(model, x, y)
    loss.backward()
    optimizer.step()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    return loss.item()
""")
ts("no_clipping", "wrong", "never clips", _LOSS + """
def my_train_step(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()
    loss = _loss(model, x, y)
    loss.backward()
    optimizer.step()
    return loss.item()
""")
ts("step_before_backward", "wrong", "steps before backward: updates with stale (zero) gradients", _LOSS + """
def my_train_step(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()
    loss = _loss(model, x, y)
    optimizer.step()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    return loss.item()
""")
ts("returns_tensor", "wrong", "returns the loss tensor, not a float", _LOSS + """
def my_train_step(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()
    loss = _loss(model, x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss
""")
ts("targets_x", "wrong", "computes the loss against x", _LOSS + """
def my_train_step(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()
    loss = _loss(model, x, x)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()
""")
ts("targets_transposed", "wrong", "flattens y.T: targets in the wrong order", """
def my_train_step(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()
    logits, _ = model(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.T.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()
""")
ts("sum_reduction", "wrong", "reduction='sum'", """
def my_train_step(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()
    logits, _ = model(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum")
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()
""")
ts("clip_value", "wrong", "clip_grad_value_ instead of the norm", _LOSS + """
def my_train_step(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()
    loss = _loss(model, x, y)
    loss.backward()
    torch.nn.utils.clip_grad_value_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()
""")
ts("model_with_targets", "wrong", "calls model(x, y); the text says model(x) alone and F.cross_entropy", """
def my_train_step(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()
    _, loss = model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()
""")
ts("no_backward", "wrong", "forgets loss.backward()", _LOSS + """
def my_train_step(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()
    loss = _loss(model, x, y)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()
""")
ts("clip_to_one", "wrong", "clips to 1.0 whatever max_norm is", _LOSS + """
def my_train_step(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()
    loss = _loss(model, x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss.item()
""")
ts("two_steps", "wrong", "calls optimizer.step() twice", _LOSS + """
def my_train_step(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()
    loss = _loss(model, x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    optimizer.step()
    return loss.item()
""")
ts("loss_after_step", "wrong", "returns the loss recomputed after the step", _LOSS + """
def my_train_step(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()
    loss = _loss(model, x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    with torch.no_grad():
        return _loss(model, x, y).item()
""")
ts("right_set_to_none", "right", "model.zero_grad(set_to_none=True), flatten(0, 1)", """
def my_train_step(model, optimizer, x, y, max_norm):
    model.zero_grad(set_to_none=True)
    logits, _ = model(x)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return float(loss)
""")
ts("right_view", "right", "view with B * T and a parameter list", """
def my_train_step(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()
    B, T = x.shape
    logits, _ = model(x)
    loss = F.cross_entropy(logits.view(B * T, -1), y.view(B * T))
    loss.backward()
    params = [p for p in model.parameters()]
    torch.nn.utils.clip_grad_norm_(params, max_norm=max_norm)
    optimizer.step()
    return loss.item()
""")
ts("right_transpose_logits", "right", "cross_entropy on (B, V, T) logits", """
def my_train_step(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()
    logits, _ = model(x)
    loss = F.cross_entropy(logits.transpose(1, 2), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()
""")


fw("no_grad", "wrong", "runs under torch.no_grad(): the logits cannot train the model (medium severity)", """
@torch.no_grad()
def my_gpt_forward(model, idx):
    B, T = idx.shape
    x = model.tok_emb(idx) + model.pos_emb(torch.arange(T))
    for block in model.blocks:
        x = block(x, is_causal=True)
    return model.head(model.final_norm(x))
""")


# ---------------------------------------------------------------- 7.3 ----
def lr(name, expect, why, source):
    case("7.3", "lr_schedule", name, expect, why, source, "my_lr")


lr("right_nanogpt_style", "right", "the phases in another order, cosine written as 1 - sin^2 form", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step >= max_steps:
        return min_lr
    if step >= warmup:
        ratio = (step - warmup) / (max_steps - warmup)
        coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
        return min_lr + coeff * (peak_lr - min_lr)
    return peak_lr * (step + 1) / warmup
""")
lr("ramp_from_zero", "wrong", "step / warmup: the first step has rate 0", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * step / warmup
    if step >= max_steps:
        return min_lr
    t = (step - warmup) / (max_steps - warmup)
    return min_lr + 0.5 * (1 + math.cos(math.pi * t)) * (peak_lr - min_lr)
""")
lr("no_floor_clamp", "wrong", "the cosine goes on after max_steps", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    t = (step - warmup) / (max_steps - warmup)
    return min_lr + 0.5 * (1 + math.cos(math.pi * t)) * (peak_lr - min_lr)
""")
lr("decay_to_zero", "wrong", "forgets min_lr in the cosine", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    if step >= max_steps:
        return min_lr
    t = (step - warmup) / (max_steps - warmup)
    return 0.5 * (1 + math.cos(math.pi * t)) * peak_lr
""")


# ---------------------------------------------------------------- 7.4 ----
def gr(name, expect, why, source):
    case("7.4", "param_groups", name, expect, why, source, "my_param_groups")


gr("right_named", "right", "sorts named_parameters by dim() into two dicts", """
def my_param_groups(model, weight_decay):
    groups = [{"params": [], "weight_decay": weight_decay},
              {"params": [], "weight_decay": 0.0}]
    for name, p in model.named_parameters():
        groups[0 if p.dim() >= 2 else 1]["params"].append(p)
    return groups
""")
gr("by_bias_name", "wrong", "excludes only names ending in bias: LayerNorm gains decayed", """
def my_param_groups(model, weight_decay):
    named = list(model.named_parameters())
    return [{"params": [p for n, p in named if not n.endswith("bias")], "weight_decay": weight_decay},
            {"params": [p for n, p in named if n.endswith("bias")], "weight_decay": 0.0}]
""")
gr("all_decayed", "wrong", "one group with everything", """
def my_param_groups(model, weight_decay):
    return [{"params": list(model.parameters()), "weight_decay": weight_decay}]
""")
gr("walks_modules", "wrong", "collects the tied weight twice by walking the modules", """
def my_param_groups(model, weight_decay):
    decay, rest = [], []
    for m in model.modules():
        for p in m.parameters(recurse=False):
            (decay if p.ndim >= 2 else rest).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": rest, "weight_decay": 0.0}]
""")


# ---------------------------------------------------------------- 7.6 ----
def ev(name, expect, why, source):
    case("7.6", "evaluate", name, expect, why, source, "my_evaluate")


ev("right_weighted_means", "right", "weights each batch's mean by its token count", """
@torch.no_grad()
def my_evaluate(model, batches):
    mode = model.training
    model.eval()
    num = den = 0.0
    for x, y in batches:
        logits, _ = model(x)
        n = y.numel()
        num += F.cross_entropy(logits.flatten(0, 1), y.flatten()).item() * n
        den += n
    model.train(mode)
    return num / den
""")
ev("mean_of_means", "wrong", "averages the batch means", """
@torch.no_grad()
def my_evaluate(model, batches):
    mode = model.training
    model.eval()
    means = [F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten()).item() for x, y in batches]
    model.train(mode)
    return sum(means) / len(means)
""")
ev("no_eval_mode", "wrong", "forgets model.eval(): dropout on", """
def my_evaluate(model, batches):
    total = count = 0
    with torch.no_grad():
        for x, y in batches:
            logits, _ = model(x)
            total += F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
            count += y.numel()
    return total / count
""")
ev("train_after", "wrong", "always calls model.train() at the end", """
def my_evaluate(model, batches):
    model.eval()
    total = count = 0
    with torch.no_grad():
        for x, y in batches:
            logits, _ = model(x)
            total += F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
            count += y.numel()
    model.train()
    return total / count
""")


# ---------------------------------------------------------------- 7.7 ----
_PIECES = '''
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    if step >= max_steps:
        return min_lr
    t = (step - warmup) / (max_steps - warmup)
    return min_lr + 0.5 * (1 + math.cos(math.pi * t)) * (peak_lr - min_lr)

def my_param_groups(model, weight_decay):
    ps = list(model.parameters())
    return [{"params": [p for p in ps if p.ndim >= 2], "weight_decay": weight_decay},
            {"params": [p for p in ps if p.ndim < 2], "weight_decay": 0.0}]

def my_train_step(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()
    logits, _ = model(x)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()

@torch.no_grad()
def my_evaluate(model, batches):
    mode = model.training
    model.eval()
    tot = n = 0
    for x, y in batches:
        tot += F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten(), reduction="sum").item()
        n += y.numel()
    model.train(mode)
    return tot / n
'''


def lp(name, expect, why, source):
    case("7.7", "train_loop", name, expect, why, _PIECES + source, "my_train")


lp("right_while_loop", "right", "a while loop, the rate set through a helper", """
def my_train(model, next_batch, val_batches, cfg):
    opt = torch.optim.AdamW(my_param_groups(model, cfg.weight_decay), lr=cfg.learning_rate,
                            betas=(cfg.beta1, cfg.beta2))
    losses, evals, step = [], [], 0
    def set_lr(value):
        for g in opt.param_groups:
            g["lr"] = value
    while step < cfg.max_steps:
        set_lr(my_lr(step, cfg.max_steps, cfg.warmup, cfg.learning_rate, cfg.min_lr))
        x, y = next_batch()
        losses.append(my_train_step(model, opt, x, y, cfg.grad_clip))
        step += 1
        if step % cfg.eval_interval == 0:
            evals.append((step, my_evaluate(model, val_batches)))
    return losses, evals
""")
lp("lr_never_set", "wrong", "AdamW at the peak rate throughout", """
def my_train(model, next_batch, val_batches, cfg):
    opt = torch.optim.AdamW(my_param_groups(model, cfg.weight_decay), lr=cfg.learning_rate,
                            betas=(cfg.beta1, cfg.beta2))
    losses, evals = [], []
    for step in range(cfg.max_steps):
        x, y = next_batch()
        losses.append(my_train_step(model, opt, x, y, cfg.grad_clip))
        if (step + 1) % cfg.eval_interval == 0:
            evals.append((step + 1, my_evaluate(model, val_batches)))
    return losses, evals
""")
lp("default_betas", "wrong", "AdamW with PyTorch's default betas", """
def my_train(model, next_batch, val_batches, cfg):
    opt = torch.optim.AdamW(my_param_groups(model, cfg.weight_decay), lr=cfg.learning_rate)
    losses, evals = [], []
    for step in range(cfg.max_steps):
        for g in opt.param_groups:
            g["lr"] = my_lr(step, cfg.max_steps, cfg.warmup, cfg.learning_rate, cfg.min_lr)
        x, y = next_batch()
        losses.append(my_train_step(model, opt, x, y, cfg.grad_clip))
        if (step + 1) % cfg.eval_interval == 0:
            evals.append((step + 1, my_evaluate(model, val_batches)))
    return losses, evals
""")
lp("sgd", "wrong", "plain SGD instead of AdamW", """
def my_train(model, next_batch, val_batches, cfg):
    opt = torch.optim.SGD(my_param_groups(model, cfg.weight_decay), lr=cfg.learning_rate)
    losses, evals = [], []
    for step in range(cfg.max_steps):
        for g in opt.param_groups:
            g["lr"] = my_lr(step, cfg.max_steps, cfg.warmup, cfg.learning_rate, cfg.min_lr)
        x, y = next_batch()
        losses.append(my_train_step(model, opt, x, y, cfg.grad_clip))
        if (step + 1) % cfg.eval_interval == 0:
            evals.append((step + 1, my_evaluate(model, val_batches)))
    return losses, evals
""")


# ---------------------------------------------------------------- junk ---
# The same battery of junk answers for every exercise (see _junk.py).
import pathlib as _pathlib
import sys as _sys

_sys.path.insert(0, str(_pathlib.Path(__file__).resolve().parent))
from _junk import junk_cases  # noqa: E402

CASES += junk_cases(MODULE, {
    "7.1": ("cross_entropy", "my_cross_entropy", "logits, targets"),
    "7.2": ("gpt_forward", "my_gpt_forward", "model, idx"),
    "7.3": ("lr_schedule", "my_lr", "step, max_steps, warmup, peak_lr, min_lr"),
    "7.4": ("param_groups", "my_param_groups", "model, weight_decay"),
    "7.5": ("train_step", "my_train_step", "model, optimizer, x, y, max_norm"),
    "7.6": ("evaluate", "my_evaluate", "model, batches"),
    "7.7": ("train_loop", "my_train", "model, next_batch, val_batches, cfg"),
})


# ------------------------------------------------------------- batch 2 ---
ce("numpy_loss", "wrong", "computes the loss in NumPy and wraps it: no gradient", """
import numpy as np
def my_cross_entropy(logits, targets):
    z = logits.detach().numpy()
    z = z - z.max(-1, keepdims=True)
    lp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    picked = np.take_along_axis(lp, targets.numpy()[..., None], -1)
    return torch.tensor(-picked.mean())
""")
ce("getattr_cross_entropy", "wrong", "the banned call fetched with getattr", """
def my_cross_entropy(logits, targets):
    fn = getattr(F, "cross" + "_entropy")
    return fn(logits.flatten(0, 1), targets.flatten())
""")
ce("label_smoothing_manual", "wrong", "mixes in 10% of the mean log-probability (label smoothing)", """
def my_cross_entropy(logits, targets):
    lp = torch.log_softmax(logits, dim=-1)
    nll = -lp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return (0.9 * nll - 0.1 * lp.mean(-1)).mean()
""")
ce("right_nll_loss", "right", "F.nll_loss on log_softmax (only F.cross_entropy is banned)", """
def my_cross_entropy(logits, targets):
    lp = torch.log_softmax(logits, dim=-1)
    return F.nll_loss(lp.reshape(-1, lp.size(-1)), targets.reshape(-1))
""")
fw("positions_arange_B", "wrong", "torch.arange(B) for the positions (B and T confused)", """
def my_gpt_forward(model, idx):
    B, T = idx.shape
    pos = torch.arange(B).unsqueeze(1).expand(B, T) % model.pos_emb.num_embeddings
    x = model.tok_emb(idx) + model.pos_emb(pos)
    for block in model.blocks:
        x = block(x, is_causal=True)
    return model.head(model.final_norm(x))
""")
ts("zero_grad_at_end", "wrong", "zeroes the gradients after the step instead of first", _LOSS + """
def my_train_step(model, optimizer, x, y, max_norm):
    loss = _loss(model, x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()
""")
ts("norm_type_1", "wrong", "clips the L1 norm", _LOSS + """
def my_train_step(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()
    loss = _loss(model, x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, norm_type=1)
    optimizer.step()
    return loss.item()
""")
ts("ignore_index_0", "wrong", "ignore_index=0 drops a real token from the loss", """
def my_train_step(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()
    logits, _ = model(x)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=0)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()
""")
ts("label_smoothing", "wrong", "label_smoothing=0.1", """
def my_train_step(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()
    logits, _ = model(x)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), label_smoothing=0.1)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()
""")
