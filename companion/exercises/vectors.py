"""Checkers for the exercises of chapter 1 (dot products)."""
from __future__ import annotations

import math
import random

import numpy as np
import torch

from ._core import (StudentError, checker, close, describe, first_difference, hint, passed, require_graph, safe_float, source_facts,
                    uses_numpy, uses_torch)
from . import _diff, rules
from .rules import watch

def _sparse_cases():
    """(label, a, b): the edge classes of a sparse dot product, each named for its hint."""
    rng = random.Random(11)
    document = {f"word{i}": rng.randint(-5, 5) for i in range(1000)}
    query = {"word7": 2, "word500": -1, "absent": 4}
    cases = [
        ("the worked example [1, 2, 3] · [4, 5, 6]", {0: 1, 1: 2, 2: 3}, {0: 4, 1: 5, 2: 6}),
        ("the activity [1, 2, 3, 4] · [-4, 0, 2, 5], its zero not stored", {0: 1, 1: 2, 2: 3, 3: 4},
         {0: -4, 2: 2, 3: 5}),
        ("words as features", {"cats": 1.0, "dogs": 0.2}, {"cats": 0.7, "dogs": 0.7, "bread": 0.1}),
        ("the same features stored in another order", {"a": 1, "b": 2, "c": 3}, {"c": 10, "a": 100, "b": 1000}),
        ("a feature that the second vector does not store", {"cat": 2, "dog": 3}, {"cat": 5}),
        ("a feature that the first vector does not store", {"cat": 5}, {"dog": 3, "cat": 2}),
        ("no feature in common", {"cat": 1.5, "dog": -2.0}, {"bread": 2.0}),
        ("an empty vector", {}, {"cat": 1, "dog": 2}),
        ("two empty vectors", {}, {}),
        ("a feature stored with the value 0", {"x": 0, "y": 4}, {"x": 7, "y": -1}),
        ("negative values", {"up": -3, "down": 2, "left": -1}, {"up": -2, "down": -5, "left": 4}),
        ("keys of several types", {1: 2, "1": 3, (0, 1): -1}, {1: 5, (0, 1): 4, "one": 9}),
        ("a short query against a long document", query, document),
        ("a long document against a short query", document, query),
        ("values with more than 2 decimals", {"p": 0.1234, "q": -1.0071}, {"p": 2.3331, "q": 0.5003}),
        ("'Cat' and 'cat' as two different features", {"Cat": 1.5, "cat": 2.25}, {"Cat": 4.125, "dog": 1}),
        ("keys -1 and -2, whose hashes are equal", {-1: 3, -2: 5}, {-2: 7}),
    ]
    draw = random.Random(20261128)  # the checker's own seeded draw: the verdict is the same every run
    features = [f"f{i}" for i in range(12)]
    a = {k: round(draw.uniform(-3, 3), 3) for k in draw.sample(features, draw.randint(0, 8))}
    b = {k: round(draw.uniform(-3, 3), 3) for k in draw.sample(features, draw.randint(0, 8))}
    cases.append(("a fresh random draw", a, b))
    return cases


def _sparse_reference(a: dict, b: dict):
    products = [v * b[k] for k, v in a.items() if k in b]
    return sum(products) if all(isinstance(p, int) for p in products) else math.fsum(products)


def _is_number(x) -> bool:
    """A plain number (int or float, not bool), or a tensor/array holding exactly one number."""
    if isinstance(x, (bool, np.bool_)):
        return False
    if isinstance(x, (int, float, np.integer, np.floating)):
        return True
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return x.size == 1 if isinstance(x, np.ndarray) else (x.numel() == 1 and x.dtype != torch.bool and not x.is_complex())
    return False


def _plain_python(used: str = "") -> None:
    hint("write the sparse dot product in plain Python, without NumPy or PyTorch"
         f"{used}: a dict lookup per feature is all it takes.")


def _sparse_mistakes(value: float, a: dict, b: dict, expected: float) -> list[str]:
    """The messages of the known mistakes that give ``value`` on this case (several may fit alike:
    a later case tells them apart)."""
    union = set(a) | set(b)
    shared = [k for k in a if k in b]
    candidates = (
        (sum(x * y for x, y in zip(a.values(), b.values())),
         "you paired the values by their position in the dicts (zip of the values); pair them by feature: "
         "a[k] * b[k] for the features k that both dicts store."),
        (len(shared), "you counted the shared features; add up their products a[k] * b[k]."),
        (sum(a[k] + b[k] for k in shared), "you added a[k] + b[k]; the dot product adds the products a[k] * b[k]."),
        (sum(a.get(k, 0) + b.get(k, 0) for k in union), "you added all the values; the dot product adds the "
                                                        "products a[k] * b[k] of the shared features."),
        (sum(v * b.get(k, 1) for k, v in a.items()), "a feature that a dict does not store is 0, not 1: it adds "
                                                      "nothing to the dot product."),
        (sum(a.get(k, 1) * b.get(k, 1) for k in union), "a feature that a dict does not store is 0, not 1: it adds "
                                                         "nothing to the dot product."),
    )
    # Where the answer is negative, -answer is also its absolute value: the worked example (positive)
    # came first, so a flipped sign would have failed there already.
    if expected > 0:
        candidates += ((-expected, "the sign is flipped: add the products a[k] * b[k], do not subtract them."),)
    if expected < 0:
        candidates += ((abs(expected), "you returned the absolute value: a dot product is negative when the "
                                       "vectors point apart; return the sum of the products as it is."),)
    return list(dict.fromkeys(
        message for wrong, message in candidates
        if math.isclose(value, wrong, rel_tol=1e-9, abs_tol=1e-9)
        and not math.isclose(wrong, expected, rel_tol=1e-9, abs_tol=1e-9)))


@checker("Exercise 1.1")
def sparse_dot(my_sparse_dot) -> None:
    """``my_sparse_dot(a, b)`` for two dicts (feature -> value, a feature not stored is 0), in plain Python."""
    facts = source_facts(my_sparse_dot)
    pending = ""
    with watch() as seen:
        for index, (label, a, b) in enumerate(_sparse_cases()):
            before_a, before_b = dict(a), dict(b)
            types_a, types_b = [type(v) for v in a.values()], [type(v) for v in b.values()]
            text = f"my_sparse_dot({_short_dict(a)}, {_short_dict(b)})"
            try:
                got = my_sparse_dot(a, b)
            except StudentError as exc:
                if isinstance(exc.error, KeyError) and _missing_feature(exc.error, a, b):
                    hint(f"on {label}, your code looked up a feature that a dict does not store ({exc}): a feature "
                         "that is not stored is 0. Look it up with b.get(k, 0), or skip the features that are not "
                         "in both dicts.")
                raise
            for name, now, then in (("a", a, before_a), ("b", b, before_b)):
                types = types_a if name == "a" else types_b
                if (not isinstance(now, dict) or now != then or list(now) != list(then)
                        or [type(v) for v in now.values()] != types):
                    hint(f"your function changed the dict {name} it was given ({label}): a[k] = v, a.setdefault(k, 0), "
                         "a.pop(k) or a.update(...) write into the caller's data. Read the dicts without changing them "
                         "(b.get(k, 0) leaves b as it was).")
            expected = _sparse_reference(a, b)
            if isinstance(got, (torch.Tensor, np.ndarray, np.generic)):
                _plain_python(f" (you returned {describe(got)})")
            if isinstance(got, (dict, list, tuple, set)):
                hint(f"the dot product is one number: add the products up. {text} returned {describe(got)}.")
            if not _is_number(got):
                hint(f"{text} returned {describe(got)}; expected a number.")
            value = safe_float(got)
            if value is None:
                hint(f"{text} returned {describe(got)}, expected {expected:g}.", generic=True)
            if math.isclose(value, expected, rel_tol=1e-9, abs_tol=1e-9):
                continue
            matches = _sparse_mistakes(value, a, b, expected)
            if len(matches) == 1:
                hint(f"on {label}: {matches[0]}")
            failed = f"{text} fails on {label}: it returned {value:g}, expected {expected:g}."
            if not matches:
                hint(pending or failed, generic=True)
            pending = pending or failed  # several known mistakes fit alike: a later case tells them apart
    if pending:
        hint(pending, generic=True)
    a, b = {"x": 1.5, "y": 2}, {"x": 2.0}
    first = safe_float(my_sparse_dot(a, b))
    a["x"] = 3.25  # the same dict objects, changed by the caller between two calls
    second = safe_float(my_sparse_dot(a, b))
    if first != 3.0 or second != 6.5:
        hint(f"called twice with the same dicts, changed in between (a['x'] from 1.5 to 3.25, b = {{'x': 2.0}}), "
             f"your function returned {first} then {second}, expected 3.0 then 6.5: compute from the dicts' "
             "current values each call; do not cache results by id() of the dicts.")
    if uses_numpy(seen, facts) or uses_torch(seen, facts):
        used = sorted(seen.torch_calls)[:3]
        _plain_python(f" (you called {', '.join(used)})" if used else "")
    passed("features matched by name, a feature that one vector does not store counted as 0, "
           "and the dicts left as they were.")


def _missing_feature(error: KeyError, a: dict, b: dict) -> bool:
    """True when the KeyError names a feature that one dict stores and the other does not."""
    try:
        key = error.args[0]
        return len(error.args) == 1 and (key in a) != (key in b)
    except Exception:  # noqa: BLE001 - an unhashable or odd key: not a lookup of a feature
        return False


def _short_dict(d: dict) -> str:
    text = repr(d) if len(d) <= 4 else f"{{... {len(d)} features}}"
    return text if len(text) <= 40 else text[:36] + "...}"


#: Library calls that compute a length or a cosine: exercise 1.2 asks for the formula, with *, sum
#: (or @) and torch.sqrt. Canonical names of rules.canonical; a name ending in "." is a prefix.
_LENGTH_SHORTCUTS = ("norm", "linalg.", "cosine_similarity", "normalize", "pairwise_distance", "cdist",
                     "dist", "renorm", "frobenius_norm", "nuclear_norm", "hypot")


def _unit(t: torch.Tensor, length: float) -> torch.Tensor:
    """Rows of t rescaled to the given length."""
    return t / t.norm(dim=-1, keepdim=True) * length


def _cosine_cases():
    """(label, a, b, eps): eps None means the default, 1e-8."""
    g = torch.Generator().manual_seed(12)

    def r(*shape, dtype=torch.float64):
        return torch.randn(*shape, generator=g, dtype=dtype)

    a = r(3, 5)
    signs = torch.stack([a[0], a[1], torch.tensor([1.0, 0, 0, 0, 0], dtype=torch.float64)])
    others = torch.stack([-2.5 * a[0], 3.0 * a[1], torch.tensor([0, 2.0, 0, 0, 0], dtype=torch.float64)])
    zero_a, zero_b = r(4, 5), r(4, 5)
    zero_a[1] = 0.0
    both_a, both_b = r(3, 4), r(3, 4)
    both_a[0], both_b[0], both_b[2] = 0.0, 0.0, 0.0
    cases = [
        ("two vectors, [3, 5] and [-2, 4]", torch.tensor([3.0, 5.0]), torch.tensor([-2.0, 4.0]), None),
        ("two vectors of width 7, float64", r(7), r(7), None),
        ("one query (d,) against 5 keys (n, d)", r(4), r(5, 4), None),
        ("a table: (n, 1, d) against (1, m, d)", r(3, 1, 6), r(1, 4, 6), None),
        ("a batch of pairs (B, n, d)", r(2, 3, 5), r(2, 3, 5), None),
        ("width 1", r(4, 1), r(4, 1), None),
        ("float32", r(6, 8, dtype=torch.float32), r(6, 8, dtype=torch.float32), None),
        ("opposite, parallel and orthogonal vectors", signs, others, None),
        ("a zero vector", zero_a, zero_b, None),
        ("zero vectors on both sides", both_a, both_b, None),
        ("vectors shorter than eps (eps = 0.5)", _unit(r(4, 3), 0.2), _unit(r(4, 3), 0.3), 0.5),
        ("eps per vector: |a| < eps < |a| |b| (eps = 0.5)", _unit(r(5, 3), 0.2), _unit(r(5, 3), 10.0), 0.5),
        ("eps per vector: |a| |b| < eps < |a|, |b| (eps = 0.5)", _unit(r(4, 3), 0.6), _unit(r(4, 3), 0.6), 0.5),
        ("a large eps (eps = 2.0), float32", _unit(r(3, 4), 1.5).float(), _unit(r(3, 4), 4.0).float(), 2.0),
        ("size-1 axes: (1, 3, 1, 4) against (2, 1, 1, 4)", r(1, 3, 1, 4), r(2, 1, 1, 4), None),
        ("a batch of one: (1, 1, 5) against (1, 5)", r(1, 1, 5), r(1, 5), None),
        ("lengths 1e-7, above the default eps 1e-8", _unit(r(4, 3), 1e-7), _unit(r(4, 3), 3e-7), None),
    ]
    draw = random.Random()  # a fresh draw each run, beside the fixed classes
    fresh = torch.Generator().manual_seed(draw.randrange(2**31))
    n, m, d = (draw.randint(1, 5) for _ in range(3))
    cases.append((f"a fresh random draw, (n, 1, d) against (m, d) with (n, m, d) = ({n}, {m}, {d})",
                  torch.randn(n, 1, d, generator=fresh, dtype=torch.float64),
                  torch.randn(m, d, generator=fresh, dtype=torch.float64), None))
    return cases


def _cosine_parts(a: torch.Tensor, b: torch.Tensor):
    """a · b, |a| and |b| along the last axis, broadcast, in float64."""
    a64, b64 = a.detach().double(), b.detach().double()
    return (a64 * b64).sum(-1), (a64 * a64).sum(-1).sqrt(), (b64 * b64).sum(-1).sqrt()


def _cosine_reference(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    dot, na, nb = _cosine_parts(a, b)
    return (dot / (na.clamp_min(eps) * nb.clamp_min(eps))).to(torch.promote_types(a.dtype, b.dtype))


def _tolerance(dtype: torch.dtype) -> dict:
    return dict(rtol=1e-9, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-5)


def _cosine_mistakes(got: torch.Tensor, a, b, eps: float, label: str) -> list[str]:
    """Hints for the results that a known mistake gives on this case: specific ones end the check
    here; the list returned holds the messages of every known mistake that fits (several fit alike
    on some cases: then a later case tells them apart)."""
    dot, na, nb = _cosine_parts(a, b)
    right = dot / (na.clamp_min(eps) * nb.clamp_min(eps))
    shape = tuple(right.shape)
    if tuple(got.shape) == shape + (1,) and close(got.squeeze(-1), right, rtol=1e-4, atol=1e-5):
        hint(f"the values are right, but the result has shape {tuple(got.shape)} ({label}): the cosine of two "
             f"vectors is one number, so the last axis goes away, {shape}: sum without keepdim.")
    full = torch.broadcast_shapes(a.shape, b.shape)
    if tuple(got.shape) == tuple(full) and len(full) > len(shape):
        hint(f"the result has one number per component ({label}), shape {tuple(got.shape)}: add the products "
             "up along the last axis into one number per pair of vectors.")
    if tuple(got.shape) != shape:
        return []
    g = got.detach().double()
    if bool(torch.isnan(g).any()) and not bool(torch.isnan(right).any()):
        hint(f"nan on {label}: a zero vector has length 0, and 0 / 0 is nan. The rule of the exercise divides "
             "by max(|a|, eps) · max(|b|, eps), so a zero vector scores 0 with every vector.")
    with np.errstate(all="ignore"):
        candidates = (
            (dot, "that is the raw dot product: divide it by the two lengths."),
            (dot / na.clamp_min(eps), "divide by both lengths, |a| and |b|, not just one of them."),
            (dot / nb.clamp_min(eps), "divide by both lengths, |a| and |b|, not just one of them."),
            (dot / (na.clamp_min(eps) ** 2 * nb.clamp_min(eps) ** 2),
             "a length is the square root of a · a; you used the squared length."),
            (dot / (na.clamp_min(eps) + nb.clamp_min(eps)),
             "divide by the product of the lengths |a| · |b|, not their sum."),
            (dot / (na * nb + eps), "eps is a floor under each length, max(|a|, eps), not an amount added to the "
                                    "product."),
            (dot / ((na + eps) * (nb + eps)), "eps is a floor under each length, max(|a|, eps), not an amount added "
                                              "to it."),
            (dot / ((na ** 2 + eps ** 2).sqrt() * (nb ** 2 + eps ** 2).sqrt()),
             "eps is a floor under each length, max(|a|, eps), not sqrt(|a|² + eps²)."),
            (dot / (na * nb).clamp_min(eps), "the floor applies to each length separately: max(|a|, eps) · "
                                             "max(|b|, eps), not max(|a| |b|, eps)."),
            (dot / (na.clamp_min(1e-8) * nb.clamp_min(1e-8)), "use the eps you are given: the check calls "
                                                              "my_cosine(a, b, eps) with other values than 1e-8."),
            (-right, "the sign is wrong: the cosine is negative when the angle is wider than 90°."),
            (right.abs(), "the sign is wrong: the cosine is negative when the angle is wider than 90°; do not take "
                          "its absolute value."),
            (1 - right, "that is the cosine distance, 1 - cos; return the cosine itself."),
            (torch.arccos(right.clamp(-1, 1)), "you returned the angle itself; the exercise asks for its cosine."),
        )
    tol = _tolerance(torch.promote_types(a.dtype, b.dtype))
    return list(dict.fromkeys(message for wrong, message in candidates
                              if close(g, wrong, **tol) and not close(wrong, right, **tol)))


@checker("Exercise 1.2")
def cosine_batch(my_cosine) -> None:
    """``my_cosine(a, b, eps=1e-8)``: the cosine along the last axis of two broadcastable tensors,
    dividing by max(|a|, eps) · max(|b|, eps)."""
    classes = [("", False, False), (", with requires_grad", True, False), (", under torch.no_grad()", False, True)]
    pending = ""
    with watch() as seen:
        for index, (label, a, b, eps) in enumerate(_cosine_cases()):
            args = (a, b) if eps is None else (a, b, eps)
            for extra, grad, no_grad in classes if index in (3, 8) else classes[:1]:
                where = label + extra
                text = (f"my_cosine(a {tuple(a.shape)}, b {tuple(b.shape)}"
                        + (")" if eps is None else f", eps={eps})"))
                try:
                    got = _diff.call(my_cosine, args, where, grad=grad, no_grad=no_grad, name="my_cosine",
                                     first=index == 0 and not extra)
                except StudentError as exc:
                    message = str(exc.error)
                    if isinstance(exc.error, RuntimeError) and ("mat" in message or "size" in message
                                                                or "dimension" in message):
                        hint(f"the shapes do not fit for {text} ({where}): @ is a matrix product. Pair the vectors "
                             "along the last axis with an elementwise product, a * b, which broadcasts, then "
                             ".sum(-1).")
                    raise
                got = _diff.real_tensor(got, text)
                expected = _cosine_reference(a, b, 1e-8 if eps is None else eps)
                matches = []
                if not (got.dtype == expected.dtype and close(got, expected, **_tolerance(expected.dtype))):
                    matches = _cosine_mistakes(got, a, b, 1e-8 if eps is None else eps, where)
                    if len(matches) == 1:
                        hint(f"on {where}: {matches[0]}")
                if not matches and _diff.same_values(got, expected, where, text):
                    continue
                if matches:  # several known mistakes fit this case alike: a later case tells them apart
                    pending = pending or f"{text} fails on {where}: {first_difference(got, expected)}."
                    continue
                _diff.generic(got, expected, where, text)
    if pending:
        hint(pending, generic=True)
    shortcuts = seen.called(*_LENGTH_SHORTCUTS)
    if shortcuts or uses_numpy(seen, source_facts(my_cosine)):
        used = ", ".join(shortcuts) if shortcuts else "NumPy"
        hint(f"the values are right, but the exercise asks for the formula, with *, sum and torch.sqrt, and you "
             f"used {used}: the length of each vector is torch.sqrt((a * a).sum(-1)).")
    with torch.enable_grad():  # a caller who left grad mode off gets it back when the block ends
        require_graph(my_cosine, (torch.tensor([[3.0, 5.0], [1.0, -1.0]]), torch.tensor([-2.0, 4.0])))
    passed("the cosine along the last axis, for any shapes that broadcast; a zero vector scores 0 with "
           "every vector instead of nan, as in torch.nn.functional.cosine_similarity.")


def _pairs_cases():
    """(label, Q, K) with Q (n, B, d) and K (m, B, d): sequence first, as nn.MultiheadAttention's default."""
    g = torch.Generator().manual_seed(13)
    cases = []
    for label, (n, m, B, d), dtype in (
            ("the first example", (4, 5, 3, 6), torch.float32),
            ("the first example's shapes with new values", (4, 5, 3, 6), torch.float32),
            ("n = m (a transposed result looks right in shape)", (4, 4, 2, 3), torch.float64),
            ("a batch of one", (3, 5, 1, 4), torch.float64),
            ("one query", (1, 6, 2, 5), torch.float32),
            ("one key", (5, 1, 3, 2), torch.float64),
            ("width 1", (3, 4, 2, 1), torch.float64),
            ("n = B (the sequence and batch axes look alike)", (3, 5, 3, 4), torch.float64),
            ("odd sizes", (7, 3, 5, 9), torch.float32)):
        cases.append((f"{label}, {dtype}", torch.randn(n, B, d, generator=g, dtype=dtype),
                      torch.randn(m, B, d, generator=g, dtype=dtype)))
    draw = random.Random()  # fresh every run, and not the caller's global random state
    fresh = torch.Generator().manual_seed(draw.randrange(2**31))
    n, m, B, d = (draw.randint(1, 7) for _ in range(4))
    cases.append((f"a fresh random draw (n, m, B, d) = ({n}, {m}, {B}, {d})",
                  torch.randn(n, B, d, generator=fresh, dtype=torch.float64),
                  torch.randn(m, B, d, generator=fresh, dtype=torch.float64)))
    return cases


def _pairs_reference(Q, K):
    return torch.einsum("nbd,mbd->bnm", Q, K)


@checker("Exercise 1.3")
def all_pairs(my_all_scores) -> None:
    """``my_all_scores(Q, K)`` for Q (n, B, d), K (m, B, d), sequence first: the (B, n, m) scores."""
    cases = _pairs_cases()
    classes = [("", False, False)] + [(", with requires_grad", True, False), (", under torch.no_grad()", False, True)]
    for index, (label, Q, K) in enumerate(cases):
        for extra, grad, no_grad in classes if index in (1, 3) else classes[:1]:
            where = label + extra
            text = f"my_all_scores(Q {tuple(Q.shape)}, K {tuple(K.shape)})"
            try:
                got = _diff.call(my_all_scores, (Q, K), where, grad=grad, no_grad=no_grad, name="my_all_scores",
                                 first=index == 0 and not extra)
            except StudentError as exc:
                if isinstance(exc.error, RuntimeError) and ("size" in str(exc.error) or "dimension" in str(exc.error)):
                    hint(f"the shapes do not fit for {text} ({where}): Q is (n, B, d) and K is (m, B, d), both "
                         "sequence first, so a product over their last two axes pairs the wrong axes. Bring the "
                         "batch axis of both to the front (Q.transpose(0, 1) is (B, n, d), K.transpose(0, 1) is "
                         "(B, m, d)), then transpose K's last two axes, or use einsum('nbd,mbd->bnm', Q, K).")
                raise
            got = _diff.real_tensor(got, text)
            expected = _pairs_reference(Q, K)
            if _diff.same_values(got, expected, where, text, "S"):
                if grad and not got.requires_grad and not rules.is_remote(my_all_scores):
                    hint("the values are right, but no gradient flows back to Q and K: compute with torch "
                         "operations on the tensors you are given (no .detach(), .numpy(), torch.tensor(...)).")
                continue
            if index == 1 and tuple(got.shape) == tuple(expected.shape) and close(got, _pairs_reference(*cases[0][1:])):
                hint(f"called again with the same shapes and new values ({where}), your function returned the "
                     "scores of the earlier call: it keeps results between calls. Compute from the Q and K it is "
                     "given, every time.")
            _pairs_mistakes(got, Q, K, where)
            _diff.generic(got, expected, where, text, "S")
    passed("S[b] = Q[:, b] K[:, b]ᵀ for every sequence b: the sequence-first layout moved to batch-first "
           "in one product.")


def _pairs_mistakes(got, Q, K, where):
    n, B, d = Q.shape
    m = K.shape[0]
    right = _pairs_reference(Q, K)
    shape = tuple(got.shape)
    if shape == (n, B, m) and close(got, right.permute(1, 0, 2)):
        hint(f"the values are right but in the order (n, B, m) ({where}): put the batch axis first, (B, n, m), "
             "as every later chapter expects.")
    if shape == (B, m, n) and n != m or (shape == (B, n, m) and n == m and close(got, right.transpose(1, 2))):
        hint(f"the result is transposed ({where}): S[b, i, j] is query i against key j, so rows are queries "
             "(n) and columns keys (m).")
    if shape == (B, n, m) and close(got, right / math.sqrt(d)):
        hint("this exercise asks for the raw scores; the scaling by sqrt(d) comes later in the chapter.")
    if shape == (B, n, m) and close(got, -right):
        hint("the sign is flipped: S = Q Kᵀ.")
    if shape in ((n, B, B), (B, B)) or (len(shape) == 3 and shape[1:] == (B, B)):
        hint(f"your result pairs the batch entries with each other ({where}): you treated the first axis as "
             "the batch. Here Q is (n, B, d), sequence first: move the batch axis to the front "
             "(Q.transpose(0, 1)) before the product, or use einsum('nbd,mbd->bnm', Q, K).")
    if shape == (B, d, d) or shape == (d, d):
        hint(f"your result is (d, d) per sequence ({where}): that is Qᵀ K. Transpose K instead, so that the "
             "features are summed over: (B, n, d) @ (B, d, m).")
    if len(shape) == 3 and shape == (B, n, m):
        qs = Q.transpose(0, 1)
        if close(got, qs @ qs.transpose(1, 2)) and not close(Q, K):
            hint("you compared the queries with themselves; the columns are the keys K.")




def _scale_cases():
    """(label, d, var_q, var_k): widths 1, odd and large; equal and unequal variances; number types."""
    draw = random.Random()  # a fresh draw each run, beside the fixed classes
    return [
        ("unit variances, d = 16", 16, 1.0, 1.0),
        ("nn.Linear's queries and keys (variance 1/3 each), d = 64", 64, 1 / 3, 1 / 3),
        ("width 1", 1, 2.0, 0.8),
        ("an odd width and unequal variances", 9, 4.0, 0.25),
        ("integer variances", 25, 2, 3),
        ("NumPy numbers", np.int64(12), np.float64(0.2), np.float64(4.0)),
        ("a wide head", 1024, 0.01, 0.04),
        ("a fresh random draw", draw.randint(1, 300), round(draw.uniform(0.05, 4), 3), round(draw.uniform(0.05, 4), 3)),
    ]


def _measured_variance(d: int, var_q: float, var_k: float, scale: float, n: int = 20_000) -> float:
    g = torch.Generator().manual_seed(14)
    q = torch.randn(n, d, generator=g, dtype=torch.float64) * math.sqrt(var_q)
    k = torch.randn(n, d, generator=g, dtype=torch.float64) * math.sqrt(var_k)
    return float(((q * k).sum(-1) / scale).var())


@checker("Exercise 1.4")
def scaled_scores(my_scale) -> None:
    """``my_scale(d, var_q, var_k)``: the number to divide q · k by so that its variance is 1."""
    pending = ""
    for label, d, vq, vk in _scale_cases():
        text = f"my_scale({d}, {float(vq):.4g}, {float(vk):.4g})"
        got = _diff.call(my_scale, (d, vq, vk), label, name="my_scale", first=label.startswith("unit"))
        if isinstance(got, torch.Tensor) and (got.is_meta or got.numel() != 1):
            hint(f"wrong type: {text} should return one number; it returned {describe(got)}.")
        value = safe_float(got)
        if value is None or isinstance(got, (list, tuple, str)):
            hint(f"wrong type: {text} should return one number (the scale); it returned {describe(got)}.")
        d_, vq_, vk_ = float(d), float(vq), float(vk)
        right = math.sqrt(d_ * vq_ * vk_)
        if math.isclose(value, right, rel_tol=1e-6):
            continue
        if math.isclose(value, -right, rel_tol=1e-6):
            hint(f"{text} ({label}) returned {value:.4g}: the scale is a standard deviation, a positive number "
                 "(dividing by a negative one flips every score's sign).")
        matches = []
        for wrong, message in (
                (math.sqrt(d_), "that is sqrt(d), right only for unit variances: each product q_i k_i has variance "
                                "var_q · var_k, so the sum of d of them has variance d · var_q · var_k."),
                (d_ * vq_ * vk_, "that is the variance of q · k; divide by its standard deviation, the square root."),
                (math.sqrt(d_) * vq_ * vk_, "the variances go under the square root too: the spread of q · k is "
                                            "sqrt(d · var_q · var_k)."),
                (math.sqrt(d_ * (vq_ + vk_)), "the variance of a product of independent zero-mean numbers is the "
                                              "product of their variances, not the sum."),
                (math.sqrt(d_) * (vq_ + vk_) / 2, "the variance of a product of independent zero-mean numbers is "
                                                  "the product of their variances."),
                (d_, "dividing by d makes the variance 1/d · var_q var_k; the spread grows like sqrt(d)."),
                (1 / right, "that is 1 / scale, the factor to multiply by; return the number to divide by."),
                (math.sqrt(d_ * vq_), "the keys' variance var_k counts as much as the queries'."),
                (math.sqrt(d_ * vk_), "the queries' variance var_q counts as much as the keys'.")):
            if math.isclose(value, wrong, rel_tol=1e-6) and not math.isclose(wrong, right, rel_tol=1e-6):
                matches.append(message)
        if len(matches) == 1:
            hint(f"{text} ({label}) returned {value:.4g}: {matches[0]}")
        pending = pending or (f"{text} ({label}) returned {value:.4g}; the scores would then have variance "
                              f"{d_ * vq_ * vk_ / value ** 2 if value else float('inf'):.3g}, not 1.")
        if not matches:  # no known mistake fits: say how far off it is
            hint(pending, generic=True)
    if pending:  # several mistakes fit every wrong case alike
        hint(pending, generic=True)
    lines = []
    for d, vq, vk in ((64, 1 / 3, 1 / 3), (256, 1.0, 0.25)):
        scale = safe_float(my_scale(d, vq, vk))
        lines.append(f"d = {d}, variances {vq:.3g} and {vk:.3g}: measured variance "
                     f"{_measured_variance(d, vq, vk, scale):.2f}")
    passed("measured on 20,000 random pairs with your scale: " + "; ".join(lines) + ".")
