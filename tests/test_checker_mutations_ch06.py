"""Mutation registry of chapter 6 (the transformer block): see tests/mutation_harness.py."""
import torch
import torch.nn.functional as F

from companion.exercises import block as check
from mutation_harness import Exercise, Mutant, make_tests


# --- 6.1 ---------------------------------------------------------------------------------------------
def my_feed_forward(x, W1, b1, W2, b2):
    hidden = torch.relu(x @ W1 + b1)  # (n, d) @ (d, d_ff) -> (n, d_ff)
    return hidden @ W2 + b2  # (n, d_ff) @ (d_ff, d) -> (n, d)


FEED_FORWARD = [
    Mutant("no ReLU", lambda x, W1, b1, W2, b2: (x @ W1 + b1) @ W2 + b2, "ReLU between the two layers is missing"),
    Mutant("ReLU after the second layer too", lambda *a: torch.relu(my_feed_forward(*a)), "no activation after"),
    Mutant("no biases", lambda x, W1, b1, W2, b2: torch.relu(x @ W1) @ W2, "biases b1 and b2 are missing"),
    Mutant("no b1", lambda x, W1, b1, W2, b2: torch.relu(x @ W1) @ W2 + b2, "one of the two biases"),
    Mutant("no b2", lambda x, W1, b1, W2, b2: torch.relu(x @ W1 + b1) @ W2, "one of the two biases"),
    Mutant("b1 after the ReLU", lambda x, W1, b1, W2, b2: (torch.relu(x @ W1) + b1) @ W2 + b2, "add b1 before the ReLU"),
    Mutant("with the residual", lambda x, *a: x + my_feed_forward(x, *a), "residual connection is added by the block"),
    Mutant("GELU", lambda x, W1, b1, W2, b2: F.gelu(x @ W1 + b1) @ W2 + b2, "GELU"),
    Mutant("sigmoid", lambda x, W1, b1, W2, b2: torch.sigmoid(x @ W1 + b1) @ W2 + b2, "not the sigmoid"),
    Mutant("tanh", lambda x, W1, b1, W2, b2: torch.tanh(x @ W1 + b1) @ W2 + b2, "not tanh"),
    Mutant("ReLU of the negative", lambda x, W1, b1, W2, b2: torch.relu(-(x @ W1 + b1)) @ W2 + b2, "max(0, -h)"),
    Mutant("returns the hidden layer", lambda x, W1, b1, W2, b2: torch.relu(x @ W1 + b1), "hidden layer"),
    Mutant("returns None", lambda *a: None, "return a tensor"),
    Mutant("W1 transposed", lambda x, W1, b1, W2, b2: torch.relu(x @ W1.T + b1) @ W2 + b2, "RuntimeError", raised=True),
    Mutant("second layer reuses W1", lambda x, W1, b1, W2, b2: torch.relu(x @ W1 + b1) @ W1.T + b2),
]


# --- 6.2 ---------------------------------------------------------------------------------------------
def my_pre_norm_block(x, attn, ff, norm1, norm2):
    h = x + attn(norm1(x))  # the residual adds the un-normalized input
    return h + ff(norm2(h))


PRE_NORM = [
    Mutant("post-norm", lambda x, a, f, n1, n2: (lambda h: n2(h + f(h)))(n1(x + a(x))), "post-norm block"),
    Mutant("no residuals", lambda x, a, f, n1, n2: f(n2(a(n1(x)))), "residual connection is missing"),
    Mutant("no first residual", lambda x, a, f, n1, n2: (lambda h: h + f(n2(h)))(a(n1(x))), "residual connection is missing"),
    Mutant("no second residual", lambda x, a, f, n1, n2: f(n2(x + a(n1(x)))), "residual connection is missing"),
    Mutant("parallel sublayers", lambda x, a, f, n1, n2: x + a(n1(x)) + f(n2(x)), "not on x"),
    Mutant("adds the normalized input", lambda x, a, f, n1, n2: (lambda h: h + f(n2(h)))(n1(x) + a(n1(x))),
           "un-normalized input"),
    Mutant("norm1 twice", lambda x, a, f, n1, n2: my_pre_norm_block(x, a, f, n1, n1), "norm2 (its own scale"),
    Mutant("norms swapped", lambda x, a, f, n1, n2: my_pre_norm_block(x, a, f, n2, n1), "norm2 (its own scale"),
    Mutant("no second norm", lambda x, a, f, n1, n2: (lambda h: h + f(h))(x + a(n1(x))), "a norm is missing"),
    Mutant("no norms", lambda x, a, f, n1, n2: (lambda h: h + f(h))(x + a(x)), "a norm is missing"),
    Mutant("feed-forward first", lambda x, a, f, n1, n2: (lambda h: h + a(n1(h)))(x + f(n2(x))), "attention comes first"),
    Mutant("returns None", lambda *a: None, "return a tensor"),
    Mutant("returns h", lambda x, a, f, n1, n2: x + a(n1(x))),
    Mutant("calls attn with two arguments", lambda x, a, f, n1, n2: x + a(n1(x), n1(x)), "TypeError", raised=True),
    Mutant("doubles the residual", lambda x, a, f, n1, n2: x + my_pre_norm_block(x, a, f, n1, n2)),
]


# --- 6.3 ---------------------------------------------------------------------------------------------
def my_block_params(d_model, n_heads, d_ff):
    attention = 4 * d_model * d_model + 4 * d_model  # W_Q, W_K, W_V, W_O and biases, whatever n_heads
    feed_forward = 2 * d_model * d_ff + d_ff + d_model
    norms = 2 * 2 * d_model
    return attention + feed_forward + norms


def _count(attention=lambda d, h: 4 * d * d + 4 * d, ff=lambda d, f: 2 * d * f + f + d, norms=lambda d: 4 * d):
    return lambda d, h, f: attention(d, h) + ff(d, f) + norms(d)


BLOCK_PARAMS = [
    Mutant("d_ff = 4 d", _count(ff=lambda d, f: 2 * d * 4 * d + 4 * d + d), "use the d_ff you are given"),
    Mutant("d_ff = d", _count(ff=lambda d, f: 2 * d * d + 2 * d), "hidden layer of the feed-forward network"),
    Mutant("no LayerNorms", _count(norms=lambda d: 0), "4 d_model parameters are missing"),
    Mutant("no biases", _count(attention=lambda d, h: 4 * d * d, ff=lambda d, f: 2 * d * f), "biases are missing"),
    Mutant("no biases nor norms", _count(attention=lambda d, h: 4 * d * d, ff=lambda d, f: 2 * d * f, norms=lambda d: 0),
           "both the biases and the LayerNorm"),
    Mutant("no W_O", _count(attention=lambda d, h: 3 * d * d + 3 * d), "output projection W_O"),
    Mutant("per head full width", _count(attention=lambda d, h: h * (4 * d * d + 4 * d)), "heads share the projections"),
    Mutant("norms scale only", _count(norms=lambda d: 2 * d), "a scale and a shift"),
    Mutant("no feed-forward biases", _count(ff=lambda d, f: 2 * d * f), "feed-forward biases are missing"),
    Mutant("a fraction (true division by n_heads)", lambda d, h, f: my_block_params(d, h, f) + (d / h) % 1 + 0.5,
           "not a whole number"),
    Mutant("truncated d_head", _count(attention=lambda d, h: 3 * h * d * int(d / h * 0.9) + d * d + 4 * d)),
    Mutant("returns a string", lambda d, h, f: f"{my_block_params(d, h, f):,}", "whole number"),
    Mutant("returns None", lambda d, h, f: None, "whole number"),
    Mutant("off by one", lambda d, h, f: my_block_params(d, h, f) - 1),
    Mutant("returns a tensor of floats", lambda d, h, f: torch.tensor(my_block_params(d, h, f) + 0.25),
           "a float"),
]


EXERCISES = [
    Exercise(check.feed_forward, my_feed_forward, FEED_FORWARD),
    Exercise(check.pre_norm_block, my_pre_norm_block, PRE_NORM),
    Exercise(check.block_params, my_block_params, BLOCK_PARAMS),
]

test_reference_passes_and_enough_mutants, test_mutant_is_caught, test_specific_hints_name_their_mistake = make_tests(EXERCISES)
