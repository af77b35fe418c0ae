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


# ============================================================= batch 3 ===
# Outside red team (out_*): written from the student notebook only.

# ---------------------------------------------------------------- 7.3 ----
_COS = "min_lr + 0.5 * (peak_lr - min_lr) * (1 + math.cos(math.pi * (step - warmup) / (max_steps - warmup)))"


def lr3(name, expect, why, source):
    lr("out_" + name, expect, why, source)


lr3("peak_at_W", "wrong", "ramp (s+1)/(W+1): the peak is never reached before the cosine", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * (step + 1) / (warmup + 1)
    if step >= max_steps:
        return min_lr
    return """ + _COS + """
""")
lr3("ramp_to_W_minus_1", "wrong", "ramp s/(W-1): rate 0 at step 0 (the text forbids it)", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * step / max(warmup - 1, 1)
    if step >= max_steps:
        return min_lr
    return """ + _COS + """
""")
lr3("warmup_le", "wrong", "step <= warmup: step W gets (W+1)/W of the peak", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step <= warmup:
        return peak_lr * (step + 1) / warmup
    if step >= max_steps:
        return min_lr
    return """ + _COS + """
""")
lr3("cosine_from_zero", "wrong", "cosine over [0, S] instead of [W, S]", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    if step >= max_steps:
        return min_lr
    t = step / max_steps
    return min_lr + 0.5 * (peak_lr - min_lr) * (1 + math.cos(math.pi * t))
""")
lr3("span_S_minus_W_minus_1", "wrong", "cosine reaches the floor at S-1, not S", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    if step >= max_steps - 1:
        return min_lr
    t = (step - warmup) / (max_steps - warmup - 1)
    return min_lr + 0.5 * (peak_lr - min_lr) * (1 + math.cos(math.pi * t))
""")
lr3("span_max_steps", "wrong", "divides by max_steps instead of max_steps - warmup", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    if step >= max_steps:
        return min_lr
    t = (step - warmup) / max_steps
    return min_lr + 0.5 * (peak_lr - min_lr) * (1 + math.cos(math.pi * t))
""")
lr3("cos_step_plus_one", "wrong", "the cosine counts from s+1: step W is already below the peak", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    if step >= max_steps:
        return min_lr
    t = (step + 1 - warmup) / (max_steps - warmup)
    return min_lr + 0.5 * (peak_lr - min_lr) * (1 + math.cos(math.pi * t))
""")
lr3("zero_after_end", "wrong", "returns 0 after max_steps instead of the floor", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    if step >= max_steps:
        return 0.0
    return """ + _COS + """
""")
lr3("linear_decay", "wrong", "linear decay instead of the cosine", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    if step >= max_steps:
        return min_lr
    t = (step - warmup) / (max_steps - warmup)
    return peak_lr - (peak_lr - min_lr) * t
""")
lr3("linear_decay_no_clamp", "wrong", "linear decay carried on: negative after max_steps", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    t = (step - warmup) / (max_steps - warmup)
    return peak_lr - peak_lr * t
""")
lr3("int_division", "wrong", "(step + 1) // warmup: 0 during the warm-up", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * ((step + 1) // warmup)
    if step >= max_steps:
        return min_lr
    return """ + _COS + """
""")
lr3("degrees", "wrong", "cos of 180 * t (degrees fed to a radian cosine)", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    if step >= max_steps:
        return min_lr
    t = (step - warmup) / (max_steps - warmup)
    return min_lr + 0.5 * (peak_lr - min_lr) * (1 + math.cos(180 * t))
""")
lr3("radians_of_pi_t", "wrong", "math.radians(pi * t): a cosine that barely moves", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    if step >= max_steps:
        return min_lr
    t = (step - warmup) / (max_steps - warmup)
    return min_lr + 0.5 * (peak_lr - min_lr) * (1 + math.cos(math.radians(math.pi * t)))
""")
lr3("hard_coded_notebook", "wrong", "hard-codes the notebook's 600 steps, 30 warm-up, 3e-3 and 3e-4", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    max_steps, warmup, peak_lr, min_lr = 600, 30, 3e-3, 3e-4
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    if step >= max_steps:
        return min_lr
    return """ + _COS + """
""")
lr3("hard_coded_floor", "wrong", "floor hard-coded to peak / 10", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    min_lr = peak_lr / 10
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    if step >= max_steps:
        return min_lr
    return """ + _COS + """
""")
lr3("no_half", "wrong", "forgets the 1/2: starts at 2 * peak - min", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    if step >= max_steps:
        return min_lr
    t = (step - warmup) / (max_steps - warmup)
    return min_lr + (peak_lr - min_lr) * (1 + math.cos(math.pi * t))
""")
lr3("full_cosine", "wrong", "cos(2 pi t): down and back up to the peak", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    if step >= max_steps:
        return min_lr
    t = (step - warmup) / (max_steps - warmup)
    return min_lr + 0.5 * (peak_lr - min_lr) * (1 + math.cos(2 * math.pi * t))
""")
lr3("sine", "wrong", "sin instead of cos", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    if step >= max_steps:
        return min_lr
    t = (step - warmup) / (max_steps - warmup)
    return min_lr + 0.5 * (peak_lr - min_lr) * (1 + math.sin(math.pi * t))
""")
lr3("peak_not_minus_min", "wrong", "min + cos term * peak: starts at peak + min", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    if step >= max_steps:
        return min_lr
    t = (step - warmup) / (max_steps - warmup)
    return min_lr + 0.5 * peak_lr * (1 + math.cos(math.pi * t))
""")
lr3("ramp_from_min", "wrong", "ramps from min_lr to the peak, not from 0", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return min_lr + (peak_lr - min_lr) * (step + 1) / warmup
    if step >= max_steps:
        return min_lr
    return """ + _COS + """
""")
lr3("no_warmup", "wrong", "the peak from step 0: no ramp", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr
    if step >= max_steps:
        return min_lr
    return """ + _COS + """
""")
lr3("trainer_ramp", "wrong", "the Trainer's ramp s/W with a tiny first step, one step behind", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * max(step, 2e-8) / warmup
    if step >= max_steps:
        return min_lr
    return """ + _COS + """
""")
lr3("floor_at_S_minus_1", "wrong", "floor from step S-1 on", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    if step >= max_steps - 1:
        return min_lr
    return """ + _COS + """
""")
lr3("swapped_peak_min", "wrong", "peak_lr and min_lr swapped in the cosine: rises to the peak", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    if step >= max_steps:
        return min_lr
    t = (step - warmup) / (max_steps - warmup)
    return peak_lr + 0.5 * (min_lr - peak_lr) * (1 + math.cos(math.pi * t))
""")
lr3("exponential", "wrong", "exponential decay from peak to floor instead of a cosine", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    if step >= max_steps:
        return min_lr
    t = (step - warmup) / (max_steps - warmup)
    return peak_lr * (min_lr / peak_lr) ** t if min_lr > 0 else peak_lr * (1 - t)
""")
lr3("stateful_counter", "wrong", "counts its own calls instead of reading step", """
_calls = [0]
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    s = _calls[0]
    _calls[0] += 1
    if s < warmup:
        return peak_lr * (s + 1) / warmup
    if s >= max_steps:
        return min_lr
    t = (s - warmup) / (max_steps - warmup)
    return min_lr + 0.5 * (peak_lr - min_lr) * (1 + math.cos(math.pi * t))
""")
lr3("rounded", "wrong", "rounds the rate to 5 decimals", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        v = peak_lr * (step + 1) / warmup
    elif step >= max_steps:
        v = min_lr
    else:
        v = """ + _COS + """
    return round(v, 5)
""")
lr3("tensor_result", "wrong", "returns a 0-d tensor, not a float (arguable: same value)", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    s = torch.tensor(float(step), dtype=torch.float64)
    if step < warmup:
        return peak_lr * (s + 1) / warmup
    if step >= max_steps:
        return torch.tensor(min_lr, dtype=torch.float64)
    t = (s - warmup) / (max_steps - warmup)
    return min_lr + 0.5 * (peak_lr - min_lr) * (1 + torch.cos(math.pi * t))
""")
lr3("right_float32_math", "right", "computes in float32: off by ~1e-8 relative (arguable: a precision the text does not fix)", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    f = lambda v: torch.tensor(v, dtype=torch.float32)
    if step < warmup:
        return (f(peak_lr) * (step + 1) / warmup).item()
    if step >= max_steps:
        return f(min_lr).item()
    t = f(step - warmup) / (max_steps - warmup)
    return (f(min_lr) + 0.5 * (f(peak_lr) - f(min_lr)) * (1 + torch.cos(math.pi * t))).item()
""")
lr3("from_companion", "wrong", "imports the companion's answer (does not do the exercise)", """
from companion.train import step_learning_rate as my_lr
""")
lr3("right_cos_squared", "right", "0.5 (1 + cos x) written as cos^2(x / 2)", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return (step + 1) * (peak_lr / warmup)
    if step >= max_steps:
        return min_lr
    frac = (step - warmup) / (max_steps - warmup)
    return min_lr + (peak_lr - min_lr) * math.cos(math.pi * frac / 2) ** 2
""")
lr3("right_clamped_progress", "right", "clamps the progress to 1 instead of a floor branch", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    if max_steps <= warmup:
        return min_lr
    p = min(1.0, (step - warmup) / (max_steps - warmup))
    return min_lr + 0.5 * (peak_lr - min_lr) * (1.0 + math.cos(math.pi * p))
""")
lr3("right_lerp", "right", "peak + (min - peak) * (1 - cos) / 2, with numpy", """
import numpy as np
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return float(peak_lr * (step + 1) / warmup)
    if step >= max_steps:
        return float(min_lr)
    x = (step - warmup) / (max_steps - warmup)
    return float(peak_lr + (min_lr - peak_lr) * (1 - np.cos(np.pi * x)) / 2)
""")
lr3("right_lru_cache", "right", "a pure function memoized with lru_cache, ternaries", """
import functools
@functools.lru_cache(maxsize=None)
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    decay = lambda s: min_lr + (peak_lr - min_lr) * (1 + math.cos(math.pi * (s - warmup) / (max_steps - warmup))) / 2
    return peak_lr * (step + 1) / warmup if step < warmup else (min_lr if step >= max_steps else decay(step))
""")
lr3("right_torch_schedulers", "right", "steps PyTorch's LinearLR + CosineAnnealingLR (the text names them) in closed form", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    # LinearLR(start_factor=1/W, total_iters=W-1) then CosineAnnealingLR(T_max=S-W, eta_min)
    if step < warmup:
        start = 1.0 / warmup
        factor = start + (1.0 - start) * (step / (warmup - 1) if warmup > 1 else 1.0)
        return peak_lr * factor
    T_cur = min(step, max_steps) - warmup
    T_max = max_steps - warmup
    if T_max == 0:
        return min_lr
    return min_lr + (peak_lr - min_lr) * (1 + math.cos(math.pi * T_cur / T_max)) / 2
""")
lr3("right_gt_clamp", "right", "floor only for step > S: at S the cosine gives the floor exactly", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    if step > max_steps or max_steps == warmup:
        return min_lr
    return """ + _COS + """
""")


# ---------------------------------------------------------------- 7.4 ----
def gr4(name, expect, why, source):
    gr("out_" + name, expect, why, source)


_G2 = """
def _two(decay, rest, weight_decay):
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": rest, "weight_decay": 0.0}]
"""

gr4("weight_suffix", "wrong", "decays every name ending in 'weight': LayerNorm gains decayed", _G2 + """
def my_param_groups(model, weight_decay):
    named = list(model.named_parameters())
    return _two([p for n, p in named if n.endswith("weight")],
                [p for n, p in named if not n.endswith("weight")], weight_decay)
""")
gr4("norm_or_bias_names", "wrong", "spares names with 'norm' or 'bias': GPT-2's ln_1/ln_f gains decayed", _G2 + """
def my_param_groups(model, weight_decay):
    decay, rest = [], []
    for n, p in model.named_parameters():
        (rest if ("norm" in n or n.endswith("bias")) else decay).append(p)
    return _two(decay, rest, weight_decay)
""")
gr4("ln_norm_bias_names", "wrong", "a name heuristic (ln/norm/bias) instead of the rule on dimensions (arguable: right on these names)", _G2 + """
def my_param_groups(model, weight_decay):
    decay, rest = [], []
    for n, p in model.named_parameters():
        spare = "bias" in n or "norm" in n or "ln_" in n or n.startswith("ln")
        (rest if spare else decay).append(p)
    return _two(decay, rest, weight_decay)
""")
gr4("spare_embeddings_type", "wrong", "spares nn.Embedding tables (the text decays them)", _G2 + """
import torch.nn as nn
def my_param_groups(model, weight_decay):
    emb = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    ps = list(model.parameters())
    return _two([p for p in ps if p.ndim >= 2 and id(p) not in emb],
                [p for p in ps if p.ndim < 2 or id(p) in emb], weight_decay)
""")
gr4("spare_emb_names", "wrong", "spares names containing 'emb'", _G2 + """
def my_param_groups(model, weight_decay):
    named = list(model.named_parameters())
    return _two([p for n, p in named if p.ndim >= 2 and "emb" not in n],
                [p for n, p in named if p.ndim < 2 or "emb" in n], weight_decay)
""")
gr4("spare_pos_emb", "wrong", "spares the position table only", _G2 + """
def my_param_groups(model, weight_decay):
    named = list(model.named_parameters())
    pos = lambda n: "pos" in n or "wpe" in n
    return _two([p for n, p in named if p.ndim >= 2 and not pos(n)],
                [p for n, p in named if p.ndim < 2 or pos(n)], weight_decay)
""")
gr4("remove_duplicate_false", "wrong", "named_parameters(remove_duplicate=False): the tied matrix twice", _G2 + """
def my_param_groups(model, weight_decay):
    named = list(model.named_parameters(remove_duplicate=False))
    return _two([p for _, p in named if p.ndim >= 2],
                [p for _, p in named if p.ndim < 2], weight_decay)
""")
gr4("head_in_both", "wrong", "adds the head's weight to the no-decay group as well", _G2 + """
import torch.nn as nn
def my_param_groups(model, weight_decay):
    ps = list(model.parameters())
    heads = [m.weight for n, m in model.named_modules() if isinstance(m, nn.Linear) and m.weight.shape[0] > m.weight.shape[1] and ("head" in n)]
    return _two([p for p in ps if p.ndim >= 2], [p for p in ps if p.ndim < 2] + heads, weight_decay)
""")
gr4("linear_only", "wrong", "decays nn.Linear weights only: the position table is left out", _G2 + """
import torch.nn as nn
def my_param_groups(model, weight_decay):
    decay, seen = [], set()
    for m in model.modules():
        if isinstance(m, nn.Linear) and id(m.weight) not in seen:
            seen.add(id(m.weight)); decay.append(m.weight)
    return _two(decay, [p for p in model.parameters() if p.ndim == 1], weight_decay)
""")
gr4("requires_grad_filter", "wrong", "drops frozen parameters (the text: every parameter of named_parameters(); arguable)", _G2 + """
def my_param_groups(model, weight_decay):
    ps = [p for p in model.parameters() if p.requires_grad]
    return _two([p for p in ps if p.dim() >= 2], [p for p in ps if p.dim() < 2], weight_decay)
""")
gr4("key_wd", "wrong", "key 'wd' instead of 'weight_decay': AdamW uses its default 0.01", """
def my_param_groups(model, weight_decay):
    ps = list(model.parameters())
    return [{"params": [p for p in ps if p.ndim >= 2], "wd": weight_decay},
            {"params": [p for p in ps if p.ndim < 2], "wd": 0.0}]
""")
gr4("no_key_in_rest", "wrong", "no weight_decay key in the second group: AdamW's default 0.01 decays it", """
def my_param_groups(model, weight_decay):
    ps = list(model.parameters())
    return [{"params": [p for p in ps if p.ndim >= 2], "weight_decay": weight_decay},
            {"params": [p for p in ps if p.ndim < 2]}]
""")
gr4("key_param_singular", "wrong", "key 'param' instead of 'params'", """
def my_param_groups(model, weight_decay):
    ps = list(model.parameters())
    return [{"param": [p for p in ps if p.ndim >= 2], "weight_decay": weight_decay},
            {"param": [p for p in ps if p.ndim < 2], "weight_decay": 0.0}]
""")
gr4("ndim_gt_2", "wrong", "p.ndim > 2: the matrices are not decayed", _G2 + """
def my_param_groups(model, weight_decay):
    ps = list(model.parameters())
    return _two([p for p in ps if p.ndim > 2], [p for p in ps if p.ndim <= 2], weight_decay)
""")
gr4("ndim_eq_2", "wrong", "p.ndim == 2: a 3-D or 4-D weight would not be decayed (arguable: undetectable without one)", _G2 + """
def my_param_groups(model, weight_decay):
    ps = list(model.parameters())
    return _two([p for p in ps if p.ndim == 2], [p for p in ps if p.ndim != 2], weight_decay)
""")
gr4("ndim_ne_1", "wrong", "p.ndim != 1: a 0-d parameter would be decayed (arguable: only with a scalar parameter)", _G2 + """
def my_param_groups(model, weight_decay):
    ps = list(model.parameters())
    return _two([p for p in ps if p.ndim != 1], [p for p in ps if p.ndim == 1], weight_decay)
""")
gr4("hard_coded_decay", "wrong", "weight decay hard-coded to 0.1", _G2 + """
def my_param_groups(model, weight_decay):
    ps = list(model.parameters())
    return _two([p for p in ps if p.ndim >= 2], [p for p in ps if p.ndim < 2], 0.1)
""")
gr4("swapped_values", "wrong", "weight_decay on the 1-D group, 0 on the matrices", """
def my_param_groups(model, weight_decay):
    ps = list(model.parameters())
    return [{"params": [p for p in ps if p.ndim >= 2], "weight_decay": 0.0},
            {"params": [p for p in ps if p.ndim < 2], "weight_decay": weight_decay}]
""")
gr4("order_swapped", "right", "the no-decay group first: judged right, the text lists the two groups' contents but never says which comes first, and AdamW (and the loop of 7.7, which sets the lr of every group) does not depend on the order", """
def my_param_groups(model, weight_decay):
    ps = list(model.parameters())
    return [{"params": [p for p in ps if p.ndim < 2], "weight_decay": 0.0},
            {"params": [p for p in ps if p.ndim >= 2], "weight_decay": weight_decay}]
""")
gr4("dict_of_groups", "wrong", "returns a dict of groups, not a list", """
def my_param_groups(model, weight_decay):
    ps = list(model.parameters())
    return {"decay": {"params": [p for p in ps if p.ndim >= 2], "weight_decay": weight_decay},
            "no_decay": {"params": [p for p in ps if p.ndim < 2], "weight_decay": 0.0}}
""")
gr4("one_group_per_param", "wrong", "one dict per parameter instead of two groups", """
def my_param_groups(model, weight_decay):
    return [{"params": [p], "weight_decay": weight_decay if p.ndim >= 2 else 0.0}
            for p in model.parameters()]
""")
gr4("three_groups", "wrong", "a third group for the embeddings (the text asks for two)", """
import torch.nn as nn
def my_param_groups(model, weight_decay):
    emb = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    ps = list(model.parameters())
    return [{"params": [p for p in ps if p.ndim >= 2 and id(p) not in emb], "weight_decay": weight_decay},
            {"params": [p for p in ps if id(p) in emb], "weight_decay": weight_decay},
            {"params": [p for p in ps if p.ndim < 2], "weight_decay": 0.0}]
""")
gr4("names_not_tensors", "wrong", "lists parameter names, not the parameters", _G2 + """
def my_param_groups(model, weight_decay):
    named = list(model.named_parameters())
    return _two([n for n, p in named if p.ndim >= 2], [n for n, p in named if p.ndim < 2], weight_decay)
""")
gr4("state_dict_tensors", "wrong", "takes the tensors of state_dict(): detached copies that never get a gradient", _G2 + """
def my_param_groups(model, weight_decay):
    sd = model.state_dict()
    return _two([t for t in sd.values() if t.ndim >= 2], [t for t in sd.values() if t.ndim < 2], weight_decay)
""")
gr4("cloned_params", "wrong", "clones the parameters: the optimizer updates copies", _G2 + """
def my_param_groups(model, weight_decay):
    ps = [torch.nn.Parameter(p.detach().clone()) for p in model.parameters()]
    return _two([p for p in ps if p.ndim >= 2], [p for p in ps if p.ndim < 2], weight_decay)
""")
gr4("first_block_only", "wrong", "walks model.blocks[0] and the embeddings only: later blocks left out", _G2 + """
def my_param_groups(model, weight_decay):
    mods = [m for n, m in model.named_children() if n != "blocks"]
    blocks = getattr(model, "blocks", None)
    if blocks is not None and len(blocks):
        mods.append(blocks[0])
    ps, seen = [], set()
    for m in mods:
        for p in m.parameters():
            if id(p) not in seen:
                seen.add(id(p)); ps.append(p)
    if not ps:
        ps = list(model.parameters())[:-2]
    return _two([p for p in ps if p.ndim >= 2], [p for p in ps if p.ndim < 2], weight_decay)
""")
gr4("spare_tied_head", "wrong", "spares the tied matrix (the text: decayed once)", _G2 + """
def my_param_groups(model, weight_decay):
    tied = set()
    ws = [m.weight for m in model.modules() if hasattr(m, "weight") and isinstance(m.weight, torch.Tensor)]
    for i, a in enumerate(ws):
        if any(a is b for b in ws[:i]):
            tied.add(id(a))
    ps = list(model.parameters())
    return _two([p for p in ps if p.ndim >= 2 and id(p) not in tied],
                [p for p in ps if p.ndim < 2 or id(p) in tied], weight_decay)
""")
gr4("from_companion", "wrong", "copies the groups of companion.train.make_optimizer (does not do the exercise)", """
from companion.train import make_optimizer, TrainConfig
def my_param_groups(model, weight_decay):
    opt = make_optimizer(model, TrainConfig(weight_decay=weight_decay, device="cpu"))
    return [{"params": list(g["params"]), "weight_decay": g["weight_decay"]} for g in opt.param_groups]
""")
gr4("right_modules_dedup", "right", "walks the modules, deduplicating by id", _G2 + """
def my_param_groups(model, weight_decay):
    decay, rest, seen = [], [], set()
    for mod in model.modules():
        for p in mod.parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            (decay if len(p.shape) >= 2 else rest).append(p)
    return _two(decay, rest, weight_decay)
""")
gr4("right_buckets", "right", "a dict of buckets keyed by a bool, weight decay 0 as an int", """
def my_param_groups(model, weight_decay):
    buckets = {True: [], False: []}
    for _, p in model.named_parameters():
        buckets[p.dim() >= 2].append(p)
    return [dict(params=buckets[True], weight_decay=weight_decay),
            dict(params=buckets[False], weight_decay=0)]
""")
gr4("right_sorted_ids", "right", "dedups through a dict keyed by id, frozen parameters kept", """
def my_param_groups(model, weight_decay):
    uniq = {}
    for m in model.modules():
        for _, p in m.named_parameters(recurse=False):
            uniq.setdefault(id(p), p)
    decay = [p for p in uniq.values() if p.ndim > 1]
    rest = [p for p in uniq.values() if p.ndim <= 1]
    return [{"weight_decay": weight_decay, "params": decay}, {"weight_decay": 0.0, "params": rest}]
""")
gr4("right_itertools", "right", "itertools filterfalse over parameters(), tuple-free", """
import itertools
def my_param_groups(model, weight_decay):
    is_vec = lambda p: p.ndim < 2
    return [{"params": list(itertools.filterfalse(is_vec, model.parameters())), "weight_decay": weight_decay},
            {"params": list(filter(is_vec, model.parameters())), "weight_decay": 0.0}]
""")
gr4("right_numel_shape", "right", "tests len(p.size()) and writes float(weight_decay)", """
def my_param_groups(model, weight_decay):
    d, nd = [], []
    for p in model.parameters():
        if len(p.size()) < 2:
            nd.append(p)
        else:
            d.append(p)
    return [{"params": d, "weight_decay": float(weight_decay)}, {"params": nd, "weight_decay": 0.0}]
""")


# ---------------------------------------------------------------- 7.6 ----
def ev6(name, expect, why, source):
    ev("out_" + name, expect, why, source)


ev6("no_no_grad", "wrong", "eval mode but no torch.no_grad(): every activation kept for a backward", """
def my_evaluate(model, batches):
    was = model.training
    model.eval()
    tot, n = 0.0, 0
    for x, y in batches:
        logits, _ = model(x)
        tot += F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
        n += y.numel()
    model.train(was)
    return tot / n
""")
ev6("detach_instead", "wrong", "detaches the logits after a forward with gradients on", """
def my_evaluate(model, batches):
    was = model.training
    model.eval()
    tot, n = 0.0, 0
    for x, y in batches:
        logits = model(x)[0].detach()
        tot += F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
        n += y.numel()
    model.train(was)
    return tot / n
""")
ev6("freeze_params", "wrong", "requires_grad_(False) on the parameters instead of no_grad, never undone", """
def my_evaluate(model, batches):
    was = model.training
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    tot, n = 0.0, 0
    for x, y in batches:
        logits, _ = model(x)
        tot += F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
        n += y.numel()
    model.train(was)
    return tot / n
""")
ev6("stays_eval", "wrong", "leaves the model in evaluation mode", """
@torch.no_grad()
def my_evaluate(model, batches):
    model.eval()
    tot, n = 0.0, 0
    for x, y in batches:
        logits, _ = model(x)
        tot += F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
        n += y.numel()
    return tot / n
""")
ev6("flag_only_restore", "wrong", "restores with model.training = was: the submodules stay in eval mode", """
@torch.no_grad()
def my_evaluate(model, batches):
    was = model.training
    model.eval()
    tot, n = 0.0, 0
    for x, y in batches:
        logits, _ = model(x)
        tot += F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
        n += y.numel()
    model.training = was
    return tot / n
""")
ev6("restore_before_loop", "wrong", "puts the mode back before the loop: evaluates in training mode", """
@torch.no_grad()
def my_evaluate(model, batches):
    was = model.training
    model.eval()
    model.train(was)
    tot, n = 0.0, 0
    for x, y in batches:
        logits, _ = model(x)
        tot += F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
        n += y.numel()
    return tot / n
""")
ev6("eval_after_first", "wrong", "calls model.eval() after the first batch: that batch in training mode", """
@torch.no_grad()
def my_evaluate(model, batches):
    was = model.training
    tot, n = 0.0, 0
    for x, y in batches:
        logits, _ = model(x)
        model.eval()
        tot += F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
        n += y.numel()
    model.train(was)
    return tot / n
""")
ev6("sum_not_mean", "wrong", "returns the total loss, not the mean", """
@torch.no_grad()
def my_evaluate(model, batches):
    was = model.training
    model.eval()
    tot = 0.0
    for x, y in batches:
        tot += F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten(), reduction="sum").item()
    model.train(was)
    return tot
""")
ev6("bits", "wrong", "bits instead of nats", """
@torch.no_grad()
def my_evaluate(model, batches):
    was = model.training
    model.eval()
    tot = n = 0
    for x, y in batches:
        tot += F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten(), reduction="sum").item()
        n += y.numel()
    model.train(was)
    return tot / n / math.log(2)
""")
ev6("perplexity", "wrong", "returns exp(loss), the perplexity", """
@torch.no_grad()
def my_evaluate(model, batches):
    was = model.training
    model.eval()
    tot = n = 0
    for x, y in batches:
        tot += F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten(), reduction="sum").item()
        n += y.numel()
    model.train(was)
    return math.exp(tot / n)
""")
ev6("per_window_mean", "wrong", "mean of the windows' means: windows of different lengths weigh the same", """
@torch.no_grad()
def my_evaluate(model, batches):
    was = model.training
    model.eval()
    per_window = []
    for x, y in batches:
        logits, _ = model(x)
        nll = F.cross_entropy(logits.transpose(1, 2), y, reduction="none")  # (B, T)
        per_window += nll.mean(dim=1).tolist()
    model.train(was)
    return sum(per_window) / len(per_window)
""")
ev6("weight_by_B", "wrong", "weights each batch mean by its number of windows, not tokens", """
@torch.no_grad()
def my_evaluate(model, batches):
    was = model.training
    model.eval()
    tot = n = 0
    for x, y in batches:
        tot += F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten()).item() * y.shape[0]
        n += y.shape[0]
    model.train(was)
    return tot / n
""")
ev6("first_batch_size", "wrong", "divides by len(batches) * the first batch's size", """
@torch.no_grad()
def my_evaluate(model, batches):
    was = model.training
    model.eval()
    tot = 0
    for x, y in batches:
        tot += F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten(), reduction="sum").item()
    model.train(was)
    return tot / (len(batches) * batches[0][1].numel())
""")
ev6("first_batch_only", "wrong", "scores only the first batch", """
@torch.no_grad()
def my_evaluate(model, batches):
    was = model.training
    model.eval()
    x, y = batches[0]
    loss = F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten()).item()
    model.train(was)
    return loss
""")
ev6("drops_last_batch", "wrong", "skips the last (shorter) batch", """
@torch.no_grad()
def my_evaluate(model, batches):
    was = model.training
    model.eval()
    tot = n = 0
    for x, y in (batches[:-1] if len(batches) > 1 else batches):
        tot += F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten(), reduction="sum").item()
        n += y.numel()
    model.train(was)
    return tot / n
""")
ev6("last_batch_only", "wrong", "returns the loss of the last batch (overwrites instead of adding)", """
@torch.no_grad()
def my_evaluate(model, batches):
    was = model.training
    model.eval()
    for x, y in batches:
        loss = F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten()).item()
    model.train(was)
    return loss
""")
ev6("returns_tensor", "wrong", "returns a tensor, not a Python float", """
@torch.no_grad()
def my_evaluate(model, batches):
    was = model.training
    model.eval()
    tot = torch.zeros(())
    n = 0
    for x, y in batches:
        tot = tot + F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten(), reduction="sum")
        n += y.numel()
    model.train(was)
    return tot / n
""")
ev6("x_as_targets", "wrong", "scores the model against x, not y", """
@torch.no_grad()
def my_evaluate(model, batches):
    was = model.training
    model.eval()
    tot = n = 0
    for x, y in batches:
        tot += F.cross_entropy(model(x)[0].flatten(0, 1), x.flatten(), reduction="sum").item()
        n += y.numel()
    model.train(was)
    return tot / n
""")
ev6("targets_transposed", "wrong", "flattens y.T: targets in the wrong order", """
@torch.no_grad()
def my_evaluate(model, batches):
    was = model.training
    model.eval()
    tot = n = 0
    for x, y in batches:
        tot += F.cross_entropy(model(x)[0].flatten(0, 1), y.T.flatten(), reduction="sum").item()
        n += y.numel()
    model.train(was)
    return tot / n
""")
ev6("log10", "wrong", "log base 10", """
@torch.no_grad()
def my_evaluate(model, batches):
    was = model.training
    model.eval()
    tot = n = 0
    for x, y in batches:
        tot += F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten(), reduction="sum").item()
        n += y.numel()
    model.train(was)
    return tot / n / math.log(10)
""")
ev6("last_position_only", "wrong", "scores only the last position of each window", """
@torch.no_grad()
def my_evaluate(model, batches):
    was = model.training
    model.eval()
    tot = n = 0
    for x, y in batches:
        logits, _ = model(x)
        tot += F.cross_entropy(logits[:, -1], y[:, -1], reduction="sum").item()
        n += y.shape[0]
    model.train(was)
    return tot / n
""")
ev6("model_with_targets_window", "wrong", "calls model(x[:, :-1]) (drops a position, against the text)", """
@torch.no_grad()
def my_evaluate(model, batches):
    was = model.training
    model.eval()
    tot = n = 0
    for x, y in batches:
        logits, _ = model(x[:, :-1]) if x.shape[1] > 1 else model(x)
        yy = y[:, :-1] if x.shape[1] > 1 else y
        tot += F.cross_entropy(logits.flatten(0, 1), yy.flatten(), reduction="sum").item()
        n += yy.numel()
    model.train(was)
    return tot / n
""")
ev6("label_smoothing", "wrong", "label_smoothing=0.1 in the evaluation", """
@torch.no_grad()
def my_evaluate(model, batches):
    was = model.training
    model.eval()
    tot = n = 0
    for x, y in batches:
        tot += F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten(), reduction="sum", label_smoothing=0.1).item()
        n += y.numel()
    model.train(was)
    return tot / n
""")
ev6("train_then_eval", "wrong", "model.train() then model.eval() at the end: always leaves it in eval mode (swapped)", """
@torch.no_grad()
def my_evaluate(model, batches):
    was = model.training
    model.train()
    tot = n = 0
    for x, y in batches:
        tot += F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten(), reduction="sum").item()
        n += y.numel()
    model.eval()
    return tot / n
""")
ev6("zero_grad_side_effect", "wrong", "calls model.zero_grad(): wipes the caller's gradients (a side effect; arguable, the text does not mention it)", """
@torch.no_grad()
def my_evaluate(model, batches):
    was = model.training
    model.eval()
    model.zero_grad(set_to_none=True)
    tot = n = 0
    for x, y in batches:
        tot += F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten(), reduction="sum").item()
        n += y.numel()
    model.train(was)
    return tot / n
""")
ev6("set_grad_enabled_off", "wrong", "torch.set_grad_enabled(False) and never back on: gradients stay off for the caller's training (added by the checker fix)", """
def my_evaluate(model, batches):
    was = model.training
    model.eval()
    torch.set_grad_enabled(False)
    tot = n = 0
    for x, y in batches:
        tot += F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten(), reduction="sum").item()
        n += y.numel()
    model.train(was)
    return tot / n
""")
ev6("right_set_grad_enabled_restored", "right", "torch.set_grad_enabled(False), then back to what it was in a finally (added by the checker fix)", """
def my_evaluate(model, batches):
    was, grad_was = model.training, torch.is_grad_enabled()
    model.eval()
    torch.set_grad_enabled(False)
    try:
        tot = n = 0
        for x, y in batches:
            tot += F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten(), reduction="sum").item()
            n += y.numel()
    finally:
        torch.set_grad_enabled(grad_was)
        model.train(was)
    return tot / n
""")
ev6("from_companion", "wrong", "imports the companion's answer (does not do the exercise)", """
from companion.train import held_out_loss as my_evaluate
""")
ev6("right_cat_none", "right", "reduction='none', every token's loss concatenated, try/finally", """
def my_evaluate(model, batches):
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            losses = [F.cross_entropy(model(x)[0].reshape(-1, model(x)[0].shape[-1]), y.reshape(-1), reduction="none")
                      for x, y in batches]
        return torch.cat(losses).double().mean().item()
    finally:
        model.train(was)
""")
ev6("right_manual_logsoftmax", "right", "log_softmax and gather by hand, restore only when it was training", """
def my_evaluate(model, batches):
    training = model.training
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for x, y in batches:
            lp = torch.log_softmax(model(x)[0], dim=-1)
            total -= lp.gather(-1, y.unsqueeze(-1)).sum().item()
            count += y.shape[0] * y.shape[1]
    if training:
        model.train()
    return total / count
""")
ev6("right_inference_mode", "right", "torch.inference_mode() instead of no_grad (arguable: stricter than asked)", """
def my_evaluate(model, batches):
    was = model.training
    model.eval()
    s, n = 0.0, 0
    with torch.inference_mode():
        for x, y in batches:
            logits, _ = model(x)
            s += F.cross_entropy(logits.transpose(1, 2), y, reduction="sum").item()
            n += y.numel()
    model.train(mode=was)
    return s / n
""")
ev6("right_tensor_accum", "right", "accumulates in float64 tensors, converts at the end", """
@torch.no_grad()
def my_evaluate(model, batches):
    mode = model.training
    model.train(False)
    total = torch.zeros((), dtype=torch.float64)
    count = torch.zeros((), dtype=torch.long)
    for x, y in batches:
        logits, _ = model(x)
        total += F.cross_entropy(logits.flatten(0, 1).double(), y.flatten(), reduction="sum")
        count += y.numel()
    model.train(mode)
    return float(total / count)
""")
ev6("right_set_grad_enabled", "right", "torch.set_grad_enabled(False) as a context, nll_loss", """
def my_evaluate(model, batches):
    prev = model.training
    model.eval()
    with torch.set_grad_enabled(False):
        sums = [F.nll_loss(torch.log_softmax(model(x)[0], -1).flatten(0, 1), y.flatten(), reduction="sum").item()
                for x, y in batches]
        ns = [y.numel() for _, y in batches]
    model.train(prev)
    return sum(sums) / sum(ns)
""")


# ---------------------------------------------------------------- 7.7 ----
_LOOP = '''
def my_train(model, next_batch, val_batches, cfg):
    opt = torch.optim.AdamW(my_param_groups(model, cfg.weight_decay), lr=cfg.learning_rate,
                            betas=(cfg.beta1, cfg.beta2))
    losses, evals = [], []
    for step in range(cfg.max_steps):
        for g in opt.param_groups:
            g["lr"] = my_lr(step, cfg.max_steps, cfg.warmup, cfg.learning_rate, cfg.min_lr)
        x, y = next_batch()
        losses.append(my_train_step(model, opt, x, y, cfg.grad_clip))
        if (step + 1) % cfg.eval_interval == 0:
            evals.append((step + 1, my_evaluate(model, val_batches)))
    return losses, evals
'''


def lp7(name, expect, why, source="", edits=(), extra=""):
    """A loop case: the template with (old, new) edits, or its own source."""
    if not source:
        source = _LOOP
        for old, new in edits:
            assert old in source, (name, old)
            source = source.replace(old, new)
    lp("out_" + name, expect, why, extra + source)


_LR_LINE = 'g["lr"] = my_lr(step, cfg.max_steps, cfg.warmup, cfg.learning_rate, cfg.min_lr)'
_EVAL = '''        if (step + 1) % cfg.eval_interval == 0:
            evals.append((step + 1, my_evaluate(model, val_batches)))
'''
_STEP = "losses.append(my_train_step(model, opt, x, y, cfg.grad_clip))"

lp7("template_sanity", "right", "the plain loop (the template the wrong cases below edit)")
lp7("lr_step_plus_one", "wrong", "my_lr(step + 1): the schedule one step ahead",
    edits=[("my_lr(step,", "my_lr(step + 1,")])
lp7("lr_after_step", "wrong", "sets the rate after the step: step s runs at the rate of s - 1",
    edits=[('''        for g in opt.param_groups:
            ''' + _LR_LINE + "\n", ""),
           (_STEP, _STEP + '''
        for g in opt.param_groups:
            g["lr"] = my_lr(step + 1, cfg.max_steps, cfg.warmup, cfg.learning_rate, cfg.min_lr)''')])
lp7("lr_first_group_only", "wrong", "sets the rate of the first group only",
    edits=[('''        for g in opt.param_groups:
            ''' + _LR_LINE, '''        g = opt.param_groups[0]
        ''' + _LR_LINE)])
lp7("lr_in_defaults", "wrong", "writes opt.defaults['lr'], which the groups never read",
    edits=[('''        for g in opt.param_groups:
            ''' + _LR_LINE, '''        opt.defaults["lr"] = my_lr(step, cfg.max_steps, cfg.warmup, cfg.learning_rate, cfg.min_lr)''')])
lp7("lr_args_swapped", "wrong", "my_lr(step, warmup, max_steps, ...): arguments swapped",
    edits=[("my_lr(step, cfg.max_steps, cfg.warmup,", "my_lr(step, cfg.warmup, cfg.max_steps,")])
lp7("lr_peak_min_swapped", "wrong", "passes min_lr as the peak and the peak as the floor",
    edits=[("cfg.learning_rate, cfg.min_lr)", "cfg.min_lr, cfg.learning_rate)")])
lp7("lr_floor_hard_coded", "wrong", "floor hard-coded to a tenth of the peak",
    edits=[("cfg.learning_rate, cfg.min_lr)", "cfg.learning_rate, cfg.learning_rate / 10)")])
lp7("one_step_short", "wrong", "range(1, max_steps): one step short",
    edits=[("range(cfg.max_steps)", "range(1, cfg.max_steps)")])
lp7("one_step_extra", "wrong", "range(max_steps + 1): one step too many",
    edits=[("range(cfg.max_steps)", "range(cfg.max_steps + 1)")])
lp7("eval_zero_based", "wrong", "evaluates when step % interval == 0 (before the step, from step 0)",
    edits=[(_EVAL, '''        if step % cfg.eval_interval == 0:
            evals.append((step, my_evaluate(model, val_batches)))
''')])
lp7("eval_step_index", "wrong", "records the 0-based step index, not the steps done",
    edits=[("evals.append((step + 1,", "evals.append((step,")])
lp7("eval_before_step", "wrong", "evaluates before the step of the same index",
    edits=[(_EVAL, ""), ("        x, y = next_batch()\n", '''        if step and step % cfg.eval_interval == 0:
            evals.append((step, my_evaluate(model, val_batches)))
        x, y = next_batch()
''')])
lp7("eval_extra_at_end", "wrong", "always adds an evaluation at the end (extra pair when max_steps is no multiple)",
    edits=[("    return losses, evals", '''    if not evals or evals[-1][0] != cfg.max_steps:
        evals.append((cfg.max_steps, my_evaluate(model, val_batches)))
    return losses, evals''')])
lp7("eval_at_start", "wrong", "adds an evaluation (0, loss) before training",
    edits=[("    losses, evals = [], []", "    losses, evals = [], [(0, my_evaluate(model, val_batches))]")])
lp7("eval_train_mode", "wrong", "its own evaluation without model.eval()", extra='''
@torch.no_grad()
def my_evaluate(model, batches):
    tot = n = 0
    for x, y in batches:
        tot += F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten(), reduction="sum").item()
        n += y.numel()
    return tot / n
''')
lp7("eval_leaves_eval_mode", "wrong", "its evaluation leaves the model in eval mode: training goes on without dropout", extra='''
@torch.no_grad()
def my_evaluate(model, batches):
    model.eval()
    tot = n = 0
    for x, y in batches:
        tot += F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten(), reduction="sum").item()
        n += y.numel()
    return tot / n
''')
lp7("eval_first_val_batch", "wrong", "evaluates on val_batches[0] only",
    edits=[("my_evaluate(model, val_batches)", "my_evaluate(model, val_batches[:1])")])
lp7("eval_on_train_batch", "wrong", "evaluates on the current training batch",
    edits=[("my_evaluate(model, val_batches)", "my_evaluate(model, [(x, y)])")])
lp7("evals_bare_losses", "wrong", "evals holds the losses without their step counts",
    edits=[("evals.append((step + 1, my_evaluate(model, val_batches)))", "evals.append(my_evaluate(model, val_batches))")])
lp7("returns_swapped", "wrong", "returns (evals, losses)",
    edits=[("    return losses, evals", "    return evals, losses")])
lp7("returns_dict", "wrong", "returns a dict instead of the pair",
    edits=[("    return losses, evals", '    return {"losses": losses, "evals": evals}')])
lp7("evals_as_dict", "wrong", "evals as a dict {step: loss}, not a list of pairs",
    edits=[("    return losses, evals", "    return losses, dict(evals)")])
lp7("same_batch", "wrong", "draws one batch before the loop and reuses it",
    edits=[("        x, y = next_batch()\n", ""), ("    losses, evals = [], []", "    losses, evals = [], []\n    x, y = next_batch()")])
lp7("two_batches_per_step", "wrong", "calls next_batch() twice per step (skips every other batch)",
    edits=[("        x, y = next_batch()\n", "        next_batch()\n        x, y = next_batch()\n")])
lp7("reseeds_global_rng", "wrong", "torch.manual_seed(0) inside the loop: resets the caller's global RNG (dropout repeats)",
    edits=[("        x, y = next_batch()\n", "        torch.manual_seed(0)\n        x, y = next_batch()\n")])
lp7("optimizer_per_step", "wrong", "builds a new AdamW every step: Adam's moments lost", source='''
def my_train(model, next_batch, val_batches, cfg):
    losses, evals = [], []
    for step in range(cfg.max_steps):
        opt = torch.optim.AdamW(my_param_groups(model, cfg.weight_decay),
                                lr=my_lr(step, cfg.max_steps, cfg.warmup, cfg.learning_rate, cfg.min_lr),
                                betas=(cfg.beta1, cfg.beta2))
        x, y = next_batch()
        losses.append(my_train_step(model, opt, x, y, cfg.grad_clip))
        if (step + 1) % cfg.eval_interval == 0:
            evals.append((step + 1, my_evaluate(model, val_batches)))
    return losses, evals
''')
lp7("no_groups_all_decayed", "wrong", "AdamW(model.parameters(), weight_decay=...): biases and gains decayed",
    edits=[("my_param_groups(model, cfg.weight_decay), lr=cfg.learning_rate,",
            "model.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay,")])
lp7("no_groups_default_decay", "wrong", "AdamW(model.parameters()): PyTorch's default decay 0.01 on everything",
    edits=[("my_param_groups(model, cfg.weight_decay), lr=cfg.learning_rate,", "model.parameters(), lr=cfg.learning_rate,")])
lp7("betas_swapped", "wrong", "betas=(beta2, beta1)",
    edits=[("betas=(cfg.beta1, cfg.beta2)", "betas=(cfg.beta2, cfg.beta1)")])
lp7("decay_hard_coded", "wrong", "weight decay hard-coded to 0.1",
    edits=[("my_param_groups(model, cfg.weight_decay)", "my_param_groups(model, 0.1)")])
lp7("clip_hard_coded", "wrong", "clips to 1.0 whatever cfg.grad_clip is",
    edits=[("x, y, cfg.grad_clip)", "x, y, 1.0)")])
lp7("no_clip", "wrong", "max_norm=inf: never clips",
    edits=[("x, y, cfg.grad_clip)", "x, y, float('inf'))")])
lp7("no_zero_grad", "wrong", "its own step without zero_grad: gradients accumulate", extra='''
def my_train_step(model, optimizer, x, y, max_norm):
    logits, _ = model(x)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()
''')
lp7("clip_after_step", "wrong", "its own step clips after optimizer.step()", extra='''
def my_train_step(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()
    logits, _ = model(x)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
    loss.backward()
    optimizer.step()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    return loss.item()
''')
lp7("lambdalr_step_first", "wrong", "LambdaLR stepped before the optimizer: the schedule one step ahead", source='''
def my_train(model, next_batch, val_batches, cfg):
    opt = torch.optim.AdamW(my_param_groups(model, cfg.weight_decay), lr=cfg.learning_rate,
                            betas=(cfg.beta1, cfg.beta2))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: my_lr(s, cfg.max_steps, cfg.warmup, cfg.learning_rate, cfg.min_lr) / cfg.learning_rate)
    losses, evals = [], []
    for step in range(cfg.max_steps):
        sched.step()
        x, y = next_batch()
        losses.append(my_train_step(model, opt, x, y, cfg.grad_clip))
        if (step + 1) % cfg.eval_interval == 0:
            evals.append((step + 1, my_evaluate(model, val_batches)))
    return losses, evals
''')
lp7("losses_only_at_evals", "wrong", "records the loss only at evaluation steps",
    edits=[("        " + _STEP, "        loss = my_train_step(model, opt, x, y, cfg.grad_clip)"),
           ("            evals.append((step + 1, my_evaluate(model, val_batches)))",
            "            losses.append(loss)\n            evals.append((step + 1, my_evaluate(model, val_batches)))")])
lp7("from_companion", "wrong", "calls the companion's short_run (does not do the exercise)", source='''
from companion.train import short_run
def my_train(model, next_batch, val_batches, cfg):
    return short_run(model, next_batch, val_batches, cfg)
''')
lp7("right_lambdalr", "right", "LambdaLR built on my_lr, stepped after each optimizer step", source='''
def my_train(model, next_batch, val_batches, cfg):
    opt = torch.optim.AdamW(my_param_groups(model, cfg.weight_decay), lr=cfg.learning_rate,
                            betas=(cfg.beta1, cfg.beta2))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: my_lr(s, cfg.max_steps, cfg.warmup, cfg.learning_rate, cfg.min_lr) / cfg.learning_rate)
    losses, evals = [], []
    for step in range(cfg.max_steps):
        x, y = next_batch()
        losses.append(my_train_step(model, opt, x, y, cfg.grad_clip))
        sched.step()
        if (step + 1) % cfg.eval_interval == 0:
            evals.append((step + 1, my_evaluate(model, val_batches)))
    return losses, evals
''')
lp7("right_one_based", "right", "counts steps done from 1, no lr at construction, g.update", source='''
def my_train(model, next_batch, val_batches, cfg):
    opt = torch.optim.AdamW(my_param_groups(model, cfg.weight_decay), betas=(cfg.beta1, cfg.beta2))
    losses, evals = [], []
    for done in range(1, cfg.max_steps + 1):
        rate = my_lr(done - 1, cfg.max_steps, cfg.warmup, cfg.learning_rate, cfg.min_lr)
        for group in opt.param_groups:
            group.update(lr=rate)
        batch = next_batch()
        losses.append(my_train_step(model, opt, *batch, max_norm=cfg.grad_clip))
        if cfg.eval_interval and done % cfg.eval_interval == 0:
            evals.append((done, my_evaluate(model, val_batches)))
    return losses, evals
''')
lp7("right_inline_step", "right", "its own inline step (set_to_none, F.cross_entropy on (B, V, T) logits as 7.5 accepts), divmod for the evals", source='''
def my_train(model, next_batch, val_batches, cfg):
    params = my_param_groups(model, cfg.weight_decay)
    opt = torch.optim.AdamW(params, lr=0.0, betas=(cfg.beta1, cfg.beta2))
    losses, evals = [], []
    for s in range(cfg.max_steps):
        lr_now = my_lr(s, cfg.max_steps, cfg.warmup, cfg.learning_rate, cfg.min_lr)
        for g in opt.param_groups:
            g["lr"] = lr_now
        x, y = next_batch()
        opt.zero_grad(set_to_none=True)
        logits, _ = model(x)
        loss = F.cross_entropy(logits.transpose(1, 2), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        losses.append(loss.item())
        q, r = divmod(s + 1, cfg.eval_interval)
        if r == 0:
            evals.append((s + 1, my_evaluate(model, val_batches)))
    return losses, evals
''')
lp7("right_tuple_out", "right", "builds tuples with zip at the end, evaluation steps precomputed", source='''
def my_train(model, next_batch, val_batches, cfg):
    opt = torch.optim.AdamW(my_param_groups(model, cfg.weight_decay), lr=cfg.learning_rate,
                            betas=(cfg.beta1, cfg.beta2))
    eval_at = set(range(cfg.eval_interval, cfg.max_steps + 1, cfg.eval_interval))
    losses, at, vals = [], [], []
    step = 0
    for _ in range(cfg.max_steps):
        for g in opt.param_groups:
            g["lr"] = my_lr(step, cfg.max_steps, cfg.warmup, cfg.learning_rate, cfg.min_lr)
        losses.append(my_train_step(model, opt, *next_batch(), cfg.grad_clip))
        step += 1
        if step in eval_at:
            at.append(step)
            vals.append(my_evaluate(model, val_batches))
    return losses, list(zip(at, vals))
''')
lp7("right_bound_method", "right", "the schedule via functools.partial, optimizer from a kwargs dict", source='''
import functools
def my_train(model, next_batch, val_batches, cfg):
    kw = dict(lr=cfg.learning_rate, betas=(cfg.beta1, cfg.beta2))
    opt = torch.optim.AdamW(my_param_groups(model, cfg.weight_decay), **kw)
    sched = functools.partial(my_lr, max_steps=cfg.max_steps, warmup=cfg.warmup,
                              peak_lr=cfg.learning_rate, min_lr=cfg.min_lr)
    losses, evals = [], []
    for i in range(cfg.max_steps):
        for g in opt.param_groups:
            g["lr"] = sched(i)
        xb, yb = next_batch()
        losses.append(my_train_step(model, opt, xb, yb, cfg.grad_clip))
        if (i + 1) % cfg.eval_interval == 0:
            evals.append((i + 1, my_evaluate(model, val_batches)))
    return losses, evals
''')


# ------------------------------------------------------ 7.1, 7.2, 7.5 ----
ce("out_clamped_log_softmax", "wrong", "log(softmax.clamp_min(1e-30)): finite but wrong at logits of +-1000", """
def my_cross_entropy(logits, targets):
    p = torch.softmax(logits, dim=-1).clamp_min(1e-30)
    return -torch.log(p).gather(-1, targets.unsqueeze(-1)).mean()
""")
ce("out_naive_logsumexp", "wrong", "log(sum(exp(logits))) without the max: inf at 1000", """
def my_cross_entropy(logits, targets):
    lse = torch.log(torch.exp(logits).sum(-1))
    return (lse - logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)).mean()
""")
ce("out_detached", "wrong", "detaches the result: no gradient reaches the logits", """
def my_cross_entropy(logits, targets):
    lp = torch.log_softmax(logits.detach(), dim=-1)
    return -lp.gather(-1, targets.unsqueeze(-1)).mean()
""")
ce("out_mean_all_logprobs", "wrong", "mean of every log-probability, not the target's", """
def my_cross_entropy(logits, targets):
    return -torch.log_softmax(logits, dim=-1).mean()
""")
ce("right_out_manual_shift", "right", "subtracts the row max out of place, then logsumexp by hand", """
def my_cross_entropy(logits, targets):
    z = logits - logits.max(dim=-1, keepdim=True).values
    lse = z.exp().sum(dim=-1).log()
    return (lse - z.gather(-1, targets.unsqueeze(-1)).squeeze(-1)).sum() / targets.numel()
""")
fw("out_fresh_layer_norm", "wrong", "F.layer_norm without the model's learned gain and bias", """
def my_gpt_forward(model, idx):
    B, T = idx.shape
    x = model.tok_emb(idx) + model.pos_emb(torch.arange(T))
    for block in model.blocks:
        x = block(x, is_causal=True)
    return model.head(F.layer_norm(x, (x.shape[-1],)))
""")
fw("out_double_residual", "wrong", "adds a residual around blocks that already have theirs", """
def my_gpt_forward(model, idx):
    B, T = idx.shape
    x = model.tok_emb(idx) + model.pos_emb(torch.arange(T))
    for block in model.blocks:
        x = x + block(x, is_causal=True)
    return model.head(model.final_norm(x))
""")
fw("out_positions_reversed", "wrong", "positions T-1 ... 0", """
def my_gpt_forward(model, idx):
    B, T = idx.shape
    x = model.tok_emb(idx) + model.pos_emb(torch.arange(T).flip(0))
    for block in model.blocks:
        x = block(x, is_causal=True)
    return model.head(model.final_norm(x))
""")
fw("out_last_position", "wrong", "returns only the last position's logits", """
def my_gpt_forward(model, idx):
    B, T = idx.shape
    x = model.tok_emb(idx) + model.pos_emb(torch.arange(T))
    for block in model.blocks:
        x = block(x, is_causal=True)
    return model.head(model.final_norm(x))[:, -1, :]
""")
fw("right_out_einsum", "right", "einsum against the head's weight, positions broadcast by indexing", """
def my_gpt_forward(model, idx):
    B, T = idx.shape
    h = model.tok_emb.weight[idx] + model.pos_emb.weight[torch.arange(T, device=idx.device)][None]
    for blk in model.blocks:
        h = blk(h, is_causal=True)
    h = model.final_norm(h)
    return torch.einsum("btd,vd->btv", h, model.head.weight)
""")
ts("out_clip_before_backward", "wrong", "clips before backward: the fresh gradient is not clipped", _LOSS + """
def my_train_step(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()
    loss = _loss(model, x, y)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    loss.backward()
    optimizer.step()
    return loss.item()
""")
ts("out_divide_by_B", "wrong", "divides the mean loss by B again", _LOSS + """
def my_train_step(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()
    loss = _loss(model, x, y) / x.shape[0]
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()
""")
ts("out_half_norm", "wrong", "clips to max_norm / 2", _LOSS + """
def my_train_step(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()
    loss = _loss(model, x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm / 2)
    optimizer.step()
    return loss.item()
""")
ts("out_no_grad_forward", "wrong", "forward under torch.no_grad(): backward fails or does nothing", """
def my_train_step(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()
    with torch.no_grad():
        logits, _ = model(x)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten()).requires_grad_()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()
""")
ts("right_out_zero_after_forward", "right", "zeroes the gradients after the forward pass, as the Trainer does ('anywhere before backward() is right')", """
def my_train_step(model, optimizer, x, y, max_norm):
    logits = model(x)[0]
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
    optimizer.zero_grad(set_to_none=False)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.detach().item()
""")


# ------------------------------------------------------------- batch 3b ---
lr3("progress_first", "wrong", "computes the progress before branching: ZeroDivisionError when max_steps == warmup (arguable: an edge case)", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    t = (step - warmup) / (max_steps - warmup)
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    if step >= max_steps:
        return min_lr
    return min_lr + 0.5 * (peak_lr - min_lr) * (1 + math.cos(math.pi * t))
""")
lr3("clamp_until_2S", "wrong", "floor only up to 2 * max_steps; beyond, the cosine climbs again", """
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    if max_steps <= step < 2 * max_steps:
        return min_lr
    t = (step - warmup) / (max_steps - warmup) if max_steps > warmup else 1.0
    return min_lr + 0.5 * (peak_lr - min_lr) * (1 + math.cos(math.pi * t))
""")
gr4("linear_embedding_types", "wrong", "decays nn.Linear/nn.Embedding weights by type, not by dimensions (a Conv1D or other 2-D weight is spared; arguable on these models)", _G2 + """
import torch.nn as nn
def my_param_groups(model, weight_decay):
    decay_ids = {id(m.weight) for m in model.modules() if isinstance(m, (nn.Linear, nn.Embedding))}
    ps = list(model.parameters())
    return _two([p for p in ps if id(p) in decay_ids], [p for p in ps if id(p) not in decay_ids], weight_decay)
""")
lp7("eval_with_grad", "wrong", "its evaluation has no torch.no_grad() (7.6's rule), numbers unchanged", extra='''
def my_evaluate(model, batches):
    mode = model.training
    model.eval()
    tot = n = 0
    for x, y in batches:
        tot += F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten(), reduction="sum").item()
        n += y.numel()
    model.train(mode)
    return tot / n
''')
lp7("no_final_eval", "wrong", "skips the evaluation after the last step",
    edits=[("if (step + 1) % cfg.eval_interval == 0:", "if (step + 1) % cfg.eval_interval == 0 and step + 1 < cfg.max_steps:")])
lp7("warmup_as_fraction", "wrong", "treats cfg.warmup as a fraction of the run (the text: in steps)",
    edits=[("my_lr(step, cfg.max_steps, cfg.warmup,", "my_lr(step, cfg.max_steps, max(1, int(cfg.warmup * cfg.max_steps)),")])
lp7("eps_1e_6", "wrong", "AdamW with eps=1e-6 (the chapter's eps is 1e-8, PyTorch's default; arguable for 7.7's text)",
    edits=[("betas=(cfg.beta1, cfg.beta2))", "betas=(cfg.beta1, cfg.beta2), eps=1e-6)")])
lp7("right_model_train_first", "right", "puts the model in training mode first and names the groups' rate once per step",
    edits=[("    losses, evals = [], []", "    model.train()\n    losses, evals = [], []")])
