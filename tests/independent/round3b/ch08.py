"""Exercise 8.7: beam search with an end token and length normalization."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _util import Maker, junk, sub  # noqa: E402

MODULE = "companion.exercises.decoding"
PRELUDE = """
import collections
import itertools
import math
import textwrap
import time

import matplotlib.pyplot as plt
import numpy as np
import torch

from companion import decoding
from companion.checkpoint import load_checkpoint, shipped_model_path
from companion.decoding import (
    beam_search, greedy, next_token_probs, sample, sequence_log_prob)
from companion.exercises import decoding as check
from companion.model import GPT, GPTConfig
from companion.notebook import setup
"""

BASE = '''
import math
import torch

def my_beam_search_eos(model, prompt, k, max_new, eos_id, alpha=0.0):
    T0 = len(prompt)
    beams = [(0.0, list(prompt))]
    finished = []
    for step in range(max_new):
        ids = torch.tensor([seq for _, seq in beams])
        logp = model(ids)[:, -1].double().log_softmax(-1)
        V = logp.shape[-1]
        cands = []
        for p, (s, seq) in enumerate(beams):
            for t in range(V):
                c = s + float(logp[p, t])
                if c == float("-inf"):
                    continue
                cands.append((c, p, t))
        cands.sort(key=lambda c: (-c[0], c[1], c[2]))
        alive = []
        for c, p, t in cands:
            seq = beams[p][1] + [t]
            if t == eos_id:
                finished.append((c, seq))
            else:
                alive.append((c, seq))
                if len(alive) == k:
                    break
        beams = alive
        if not beams:
            break
        if alpha == 0 and len(finished) >= k:
            kth = sorted((f[0] for f in finished), reverse=True)[k - 1]
            if beams[0][0] <= kth:
                beams = []
                break
    every = finished + beams
    every.sort(key=lambda h: h[0] / max(len(h[1]) - T0, 1) ** alpha, reverse=True)
    return every[:k]
'''

m = Maker("8.7", "beam_search_eos", MODULE, "my_beam_search_eos")
W = lambda name, why, *pairs: m.add(name, "wrong", why, sub(BASE, *pairs))  # noqa: E731

m.add("right_base", "right", "plain-list reference written from the text", BASE)
m.add("right_alive_after_early_stop", "right",
      "keeps the alive beams in the final ranking after the early stop (text: rank finished and alive together); "
      "they score at most the k-th finished, so the top k is the same",
      sub(BASE, ("                beams = []\n                break", "                break")))
m.add("right_stable_torch_sort", "right",
      "candidates ordered by a stable descending torch.sort on the flattened (parent, token) grid",
      sub(BASE,
          ("""        cands = []
        for p, (s, seq) in enumerate(beams):
            for t in range(V):
                c = s + float(logp[p, t])
                if c == float("-inf"):
                    continue
                cands.append((c, p, t))
        cands.sort(key=lambda c: (-c[0], c[1], c[2]))""",
           """        grid = torch.tensor([s for s, _ in beams], dtype=torch.float64)[:, None] + logp
        vals, idx = torch.sort(grid.flatten(), descending=True, stable=True)
        cands = [(v, i // V, i % V) for v, i in zip(vals.tolist(), idx.tolist()) if v != float("-inf")]""")))
m.add("right_numpy_scores", "right",
      "scores as np.float64 (a float subclass), length normalization with math.pow",
      sub(BASE, ("c = s + float(logp[p, t])", "c = np.float64(s) + np.float64(float(logp[p, t]))"),
          ("import math\n", "import math\nimport numpy as np\n"),
          ("h[0] / max(len(h[1]) - T0, 1) ** alpha", "h[0] / math.pow(max(len(h[1]) - T0, 1), alpha)")))

W("float32_log_softmax", "log_softmax in float32 (text: in float64, .double())",
  (".double().log_softmax(-1)", ".log_softmax(-1)"))
W("ties_reversed", "ties between equal scores taken in reverse (parent, token) order",
  ("key=lambda c: (-c[0], c[1], c[2])", "key=lambda c: (c[0], c[1], c[2]), reverse=True"))
W("ties_token_then_parent", "ties ordered by (token, parent) instead of (parent, token)",
  ("key=lambda c: (-c[0], c[1], c[2])", "key=lambda c: (-c[0], c[2], c[1])"))
W("eos_stays_in_beam", "a candidate ending with eos is recorded as finished but also goes on in the beam",
  ("                finished.append((c, seq))\n            else:\n                alive.append((c, seq))",
   "                finished.append((c, seq))\n            if True:\n                alive.append((c, seq))"))
W("hf_top_k_rule", "counts finished candidates toward the k (stops after k candidates of either kind)",
  ("                if len(alive) == k:\n                    break",
   "                pass\n            if len(alive) + len([1 for f in finished if len(f[1]) == len(seq)]) >= k:\n                break"))
W("per_beam_top_k", "keeps only each beam's k best tokens before ranking (misses candidates when an eos takes one of them)",
  ("            for t in range(V):\n", "            for t in sorted(range(V), key=lambda t: -float(logp[p, t]))[:k]:\n"))
W("early_stop_any_alpha", "applies the early stop for every alpha (text: only when alpha == 0)",
  ("if alpha == 0 and len(finished) >= k:", "if len(finished) >= k:"))
W("early_stop_best_finished", "early stop compares with the best finished score instead of the k-th best",
  ("[k - 1]\n", "[0]\n"))
W("early_stop_one_finished", "stops as soon as one hypothesis has finished and the best beam is below it",
  ("if alpha == 0 and len(finished) >= k:", "if alpha == 0 and len(finished) >= 1:"),
  ("[k - 1]\n", "[0]\n"))
W("no_early_stop", "debatable: never stops early (text requires the stop with alpha == 0; the returned top k is the same, only the work differs)",
  ("if alpha == 0 and len(finished) >= k:", "if False:"))
W("length_with_prompt", "length counts the prompt too (text: generated tokens only)",
  ("max(len(h[1]) - T0, 1)", "len(h[1])"))
W("length_without_eos", "length leaves out the end token of finished hypotheses",
  ("max(len(h[1]) - T0, 1)", "max(len(h[1]) - T0 - (h[1][-1] == eos_id), 1)"))
W("returns_normalized_score", "returns score / length**alpha as the score (text: the raw sum)",
  ("    return every[:k]", "    return [(s / max(len(t) - T0, 1) ** alpha, t) for s, t in every[:k]]"))
W("alive_never_ranked", "at max_new the beams still alive are dropped: only finished hypotheses returned (unless none)",
  ("    every = finished + beams", "    every = finished or beams"))
W("alpha_multiplies", "length normalization multiplies by length**alpha instead of dividing",
  ("h[0] / max(len(h[1]) - T0, 1) ** alpha", "h[0] * max(len(h[1]) - T0, 1) ** alpha"))
W("generated_only", "returns only the generated ids, without the prompt",
  ("    return every[:k]", "    return [(s, t[T0:]) for s, t in every[:k]]"))
W("worst_first", "returns the best k in increasing order (worst first)",
  ("    return every[:k]", "    return every[:k][::-1]"))
W("returns_all", "returns every hypothesis, not the best k",
  ("    return every[:k]", "    return every"))
W("first_position", "log-probabilities of the first position instead of the last",
  ("model(ids)[:, -1]", "model(ids)[:, 0]"))
W("sums_probabilities", "adds probabilities instead of log-probabilities",
  (".double().log_softmax(-1)", ".double().softmax(-1)"))
W("eos_last_token", "hard-codes the end token as the last id of the vocabulary, ignoring eos_id",
  ("            if t == eos_id:", "            if t == V - 1:"))
W("mutates_prompt", "extends the caller's prompt list in place (beam 0 shares it)",
  ("    beams = [(0.0, list(prompt))]", "    beams = [(0.0, prompt)]"),
  ("            seq = beams[p][1] + [t]", "            seq = beams[p][1]\n            seq += [t]\n            seq = list(seq)"))
W("tensor_scores", "returns each score as a 0-d float64 tensor instead of a number (text: plain Python lists)",
  ("    return every[:k]", "    return [(torch.tensor(s, dtype=torch.float64), t) for s, t in every[:k]]"))
W("tensor_tokens", "returns tokens as a tensor instead of a list (text: plain Python lists)",
  ("    return every[:k]", "    return [(s, torch.tensor(t)) for s, t in every[:k]]"))
W("keeps_minus_inf", "debatable: keeps impossible (-inf, probability 0) candidates as beams/hypotheses when too few finite ones (the text never says to drop them; the chapter's companion does)",
  ("                if c == float(\"-inf\"):\n                    continue\n", ""))
W("stop_after_first_eos_step", "stops the whole search at the first step where any candidate finished",
  ("        beams = alive\n", "        beams = alive\n        if finished:\n            break\n"))
W("max_new_minus_one", "runs max_new - 1 steps (off by one)",
  ("for step in range(max_new):", "for step in range(max_new - 1):"))

m.add("uses_companion_decoding", "wrong", "calls companion.decoding.beam_search and converts its result (the text forbids calling companion.decoding)",
      """
import torch
from companion.decoding import beam_search

def my_beam_search_eos(model, prompt, k, max_new, eos_id, alpha=0.0):
    result = beam_search(model, torch.tensor(prompt), max_new, k=k, eos_id=eos_id, length_penalty=alpha)
    return [(float(h.score), h.tokens.tolist()) for h in result.hypotheses]
""")
W("cache_by_args", "caches results across calls by (prompt, k, max_new, eos_id, alpha), ignoring the model",
  ("def my_beam_search_eos(model, prompt, k, max_new, eos_id, alpha=0.0):\n",
   "_MEMO = {}\n\ndef my_beam_search_eos(model, prompt, k, max_new, eos_id, alpha=0.0):\n    key = (tuple(prompt), k, max_new, eos_id, alpha)\n    if key not in _MEMO:\n        _MEMO[key] = _search(model, prompt, k, max_new, eos_id, alpha)\n    return [(s, list(t)) for s, t in _MEMO[key]]\n\ndef _search(model, prompt, k, max_new, eos_id, alpha=0.0):\n"))

m.add("right_final_ties_reversed", "right",
      "debatable: among hypotheses with equal final (normalized) scores, puts the alive beams and later ones first; the text gives no order among equal final scores",
      sub(BASE, ("    every = finished + beams\n", "    every = beams[::-1] + finished[::-1]\n")))

CASES = m.cases + junk(MODULE, {"8.7": ("beam_search_eos", "my_beam_search_eos",
                                        "model, prompt, k, max_new, eos_id, alpha=0.0")})
for _c in CASES:  # the junk helper must be called with alpha positionally (it takes *args only)
    if _c["name"] == "junk_not_implemented_deep":
        _c["source"] = _c["source"].replace("_helper(model, prompt, k, max_new, eos_id, alpha=0.0)",
                                            "_helper(model, prompt, k, max_new, eos_id, alpha)")
