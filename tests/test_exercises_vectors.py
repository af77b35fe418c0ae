"""The chapter 1 checkers: the right answer passes, each recognized mistake gets its hint."""
import math

import torch

from companion.exercises import vectors as check


def stub(*args):
    raise NotImplementedError


def test_dot_by_hand():
    def right(a, b):
        if len(a) != len(b):
            raise ValueError("lengths differ")
        return sum(x * y for x, y in zip(a, b))

    assert check.dot_by_hand(right).passed
    assert check.dot_by_hand(stub).status == "not attempted"
    assert check.dot_by_hand(...).status == "not attempted"
    no_length_check = lambda a, b: sum(x * y for x, y in zip(a, b))
    assert "did not raise ValueError" in check.dot_by_hand(no_length_check).message
    assert "add them up" in check.dot_by_hand(lambda a, b: [x * y for x, y in zip(a, b)]).message
    assert "multiplied the sums" in check.dot_by_hand(lambda a, b: sum(a) * sum(b)).message
    assert "added all the numbers" in check.dot_by_hand(lambda a, b: sum(a) + sum(b)).message
    off_by_one = lambda a, b: sum(a[i] * b[i] for i in range(len(a) - 1))
    assert "skips one position" in check.dot_by_hand(off_by_one).message
    crash = check.dot_by_hand(lambda a, b: a @ b)
    assert crash.status == "hint" and "TypeError" in crash.message


def test_cosine():
    right = lambda a, b: (a @ b) / (a.norm() * b.norm())
    assert check.cosine(right).passed
    assert check.cosine(stub).status == "not attempted"
    assert "raw dot product" in check.cosine(lambda a, b: a @ b).message
    assert "both lengths" in check.cosine(lambda a, b: (a @ b) / a.norm()).message
    assert "squared length" in check.cosine(lambda a, b: (a @ b) / ((a @ a) * (b @ b))).message
    assert "angle itself" in check.cosine(lambda a, b: torch.arccos(right(a, b))).message


def test_all_pairs():
    assert check.all_pairs(lambda Q, K: Q @ K.T).passed
    assert check.all_pairs(stub).status == "not attempted"
    assert "transpose" in check.all_pairs(lambda Q, K: K @ Q.T).message
    assert "(d, d)" in check.all_pairs(lambda Q, K: Q.T @ Q).message
    assert "exercise 1.4" in check.all_pairs(lambda Q, K: Q @ K.T / math.sqrt(Q.shape[-1])).message
    assert "return a tensor" in check.all_pairs(lambda Q, K: (Q @ K.T).tolist()).message


def test_scaled_scores():
    assert check.scaled_scores(lambda Q, K: Q @ K.T / math.sqrt(Q.shape[-1])).passed
    assert check.scaled_scores(stub).status == "not attempted"
    assert "raw scores" in check.scaled_scores(lambda Q, K: Q @ K.T).message
    assert "divided by d" in check.scaled_scores(lambda Q, K: Q @ K.T / Q.shape[-1]).message
    assert "number of vectors" in check.scaled_scores(lambda Q, K: Q @ K.T / math.sqrt(Q.shape[0])).message


def test_feedback_text_is_one_clear_line():
    text = repr(check.scaled_scores(lambda Q, K: Q @ K.T / math.sqrt(Q.shape[-1])))
    assert text.startswith("✅ Exercise 1.4 passed:")
    assert repr(check.scaled_scores(stub)).startswith("⏳ Exercise 1.4 not attempted yet:")
    assert repr(check.scaled_scores(lambda Q, K: Q @ K.T)).startswith("❌ Exercise 1.4 not yet:")
