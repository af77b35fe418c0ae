"""The course's rules hold in grading exactly as in the notebook (issue 18, "What was measured" 6).

The student's function runs in the sandboxed kernel; the kernel's helper calls it through
``rules.observe`` and sends the Observation and the function's source as data; the grader's proxy
records them, so that the grader's checker reaches the same verdict as the notebook's check cell.
Each case is graded by the command's code and checked in this process as a notebook would check
it (the function defined here, the checker called on it), and the two must agree word for word.
"""
from __future__ import annotations

import textwrap
import warnings
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from companion.exercises import attention as attention_checks
from companion.grade import Options, grade
from companion.grading.session import Limits

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CASES = {
    "library_softmax": ["import torch", """
def my_log_softmax(x, dim=-1):
    return torch.log_softmax(x, dim=dim)
"""],
    "aliased_import": ["from torch import log_softmax as s", """
def my_log_softmax(x, dim=-1):
    return s(x, dim)
"""],
    "method_alias": ["import torch.nn.functional as nnf", """
def my_log_softmax(x, dim=-1):
    return nnf.log_softmax(x, dim=dim)
"""],
    "from_the_companion": ["from companion.attention import softmax as stable", """
def my_log_softmax(x, dim=-1):
    return stable(x, dim).log()
"""],
    "companion_inside": ["import torch", """
def my_log_softmax(x, dim=-1):
    from companion import attention
    return torch.log(attention.softmax(x, dim))
"""],
    "by_hand": ["import torch", """
def my_log_softmax(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    return x - m - torch.log(torch.exp(x - m).sum(dim=dim, keepdim=True))
"""],
}


LOG_SOFTMAX_BY_HAND = """
def my_log_softmax(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    return x - m - torch.log(torch.exp(x - m).sum(dim=dim, keepdim=True))
"""
# Issue 30: answers whose values are right but whose result cannot train (the notebook refuses
# them in require_graph: the grader must too), graded next to the cases above.
GRAPH_CASES = {
    "no_grad": ["import torch", "@torch.no_grad()" + LOG_SOFTMAX_BY_HAND],
    "detached": ["import torch", LOG_SOFTMAX_BY_HAND
                 + "\n_hand = my_log_softmax\ndef my_log_softmax(x, dim=-1):\n    return _hand(x, dim).detach()\n"],
}
ATTENTION_NO_GRAD = """
import math
import torch

def my_attention(Q, K, V):
    with torch.no_grad():
        w = torch.exp(Q @ K.T / math.sqrt(Q.shape[-1]))
        return (w / w.sum(-1, keepdim=True)) @ V
"""
ATTENTION_DETACHED = """
import math
import torch

def my_attention(Q, K, V):
    w = torch.exp(Q @ K.T / math.sqrt(Q.shape[-1]))
    return ((w / w.sum(-1, keepdim=True)) @ V).detach()
"""
# Issue 30: a student who read the grader's source replaces the observer and the source reader
# inside the kernel, so that the library's softmax goes unseen there.
TAMPERED = ["import torch", """
import companion.exercises.rules as r
import companion.grading.kernel as k
real = r.observe
def quiet(fn, *args, **kwargs):
    out, _ = real(fn, *args, **kwargs)
    return out, r.Observation(frozenset(), frozenset())
r.observe = quiet
k.source = lambda fn, limit=200_000: "def my_log_softmax(x, dim=-1):\\n    return x"
""", """
def my_log_softmax(x, dim=-1):
    return torch.log_softmax(x, dim=dim)
"""]
# The same, hidden from a scan of the code for the grader's names (a word split in two).
TAMPERED_QUIETLY = ["import torch", """
mod = __import__("companion.exer" + "cises.ru" + "les", fromlist=["x"])
real = mod.Observation
""", """
def my_log_softmax(x, dim=-1):
    return torch.log_softmax(x, dim=dim)
"""]
# Issue 30: a companion function behind a warm functools cache runs none of its module's code.
CACHED_COMPANION = ["from companion.bpe import bytes_to_unicode as my_bytes_to_unicode", "my_bytes_to_unicode()"]
# Issue 30: the book's 9.3 answer, detached and made to "require grad" again: right values, no gradient.
S2S_DETACHED = """
import math
import torch
from companion.positional import sinusoidal_encoding

def my_seq2seq_forward(model, src, tgt):
    c = model.config
    keep = src != c.pad_id

    def embed(table, ids):
        P = sinusoidal_encoding(ids.shape[1], c.d_model)
        return table(ids) * math.sqrt(c.d_model) + P

    h = embed(model.src_emb, src)
    for block in model.encoder.blocks:
        h = block(h, key_mask=keep)
    memory = model.encoder.norm(h)
    g = embed(model.tgt_emb, tgt)
    for block in model.decoder.blocks:
        g = block(g, memory, is_causal=True, memory_key_mask=keep)
    return model.head(model.decoder.norm(g)).detach().requires_grad_()
"""

S2S_RIGHT = S2S_DETACHED.replace(".detach().requires_grad_()", "")
# Issue 30: the logits still require a gradient, but none reaches the encoder's weights (the
# memory is detached, or computed under no_grad): the notebook's check fails it by its per-weight
# gradients; the grader only saw that the logits required a gradient.
S2S_PARTLY_DETACHED = S2S_RIGHT.replace("memory = model.encoder.norm(h)", "memory = model.encoder.norm(h).detach()")
S2S_ENCODER_NO_GRAD = S2S_RIGHT.replace(
    "    h = embed(model.src_emb, src)\n    for block in model.encoder.blocks:\n        h = block(h, key_mask=keep)\n"
    "    memory = model.encoder.norm(h)\n",
    "    with torch.no_grad():\n        h = embed(model.src_emb, src)\n        for block in model.encoder.blocks:\n"
    "            h = block(h, key_mask=keep)\n        memory = model.encoder.norm(h)\n")
assert S2S_PARTLY_DETACHED != S2S_RIGHT and S2S_ENCODER_NO_GRAD != S2S_RIGHT

CALLS_THE_MODEL = """
def my_gpt_forward(model, idx):
    logits = model(idx)
    return logits[0] if isinstance(logits, tuple) else logits
"""


def _notebook_verdict(cells: list[str], checker=attention_checks.stable_log_softmax, name: str = "my_log_softmax"):
    """What the check cell says in a notebook: the checker called on the function defined here."""
    namespace: dict = {"__name__": "notebook"}
    for source in cells:
        exec(compile(textwrap.dedent(source), "<IPY-INPUT>", "exec"), namespace)
    return checker(namespace[name])


def _write(folder: Path, name: str, chapter: int, cells: list[str]) -> None:
    nb = new_notebook(cells=[new_code_cell(textwrap.dedent(c).strip()) for c in cells])
    nb.metadata["course"] = {"chapter": chapter}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nbformat.write(nb, folder / f"{name}.ipynb")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rules") / "submissions"
    folder.mkdir()
    for name, cells in {**CASES, **GRAPH_CASES, "tampered": TAMPERED, "tampered_quietly": TAMPERED_QUIETLY}.items():
        _write(folder, name, 2, cells)
    _write(folder, "attention_no_grad", 2, [ATTENTION_NO_GRAD])
    _write(folder, "attention_detached", 2, [ATTENTION_DETACHED])
    _write(folder, "cached_companion", 11, CACHED_COMPANION)
    _write(folder, "s2s_detached", 9, [S2S_DETACHED])
    _write(folder, "s2s_partly_detached", 9, [S2S_PARTLY_DETACHED])
    # 7.2: the checker hands the student a model whose class counts its forward calls; the model
    # is rebuilt in the kernel from data, and the count comes back as data.
    nb = new_notebook(cells=[new_code_cell(CALLS_THE_MODEL)])
    nb.metadata["course"] = {"chapter": 7}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nbformat.write(nb, folder / "calls_the_model.ipynb")
    entries = grade([str(folder)], Options(out=folder.parent / "gb.csv", jobs=2, progress=False,
                                           limits=Limits(notebook=120, cell=60, call=20, exercise=60)))
    out = {Path(e["submission"]).stem: e["exercises"][0] for e in entries}
    for e in entries:
        for x in e["exercises"]:
            out[f"{Path(e['submission']).stem} {x['number']}"] = x
    exercises = next(e for e in entries if "calls_the_model" in e["submission"])["exercises"]
    out["calls_the_model"] = next(x for x in exercises if x["number"] == "7.2")  # the GPT's forward pass
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_grading_and_the_notebook_agree(graded, case):
    verdict = _notebook_verdict(CASES[case])
    got = graded[case]
    assert got["status"] == ("passed" if verdict.passed else "not yet"), (got, verdict)
    assert got["message"] == verdict.message


@pytest.mark.parametrize("case", ["library_softmax", "aliased_import", "method_alias", "from_the_companion",
                                  "companion_inside"])
def test_the_library_or_the_companion_is_flagged_in_grading(graded, case):
    got = graded[case]
    assert got["status"] == "not yet" and "write the log-softmax yourself" in got["message"], got


def test_a_softmax_by_hand_passes(graded):
    assert graded["by_hand"]["status"] == "passed"


def test_calling_the_model_itself_is_seen_in_grading_as_in_the_notebook(graded):
    from companion.exercises import lm

    namespace: dict = {}
    exec(CALLS_THE_MODEL, namespace)
    verdict = lm.gpt_forward(namespace["my_gpt_forward"])
    got = graded["calls_the_model"]
    assert not verdict.passed and "you called the model itself" in verdict.message
    assert got["status"] == "not yet" and got["message"] == verdict.message, got


# ------------------------------------------------------------------------------- issue 30
@pytest.mark.parametrize("case", sorted(GRAPH_CASES))
def test_an_answer_that_cuts_the_graph_fails_in_grading_as_in_the_notebook(graded, case):
    verdict = _notebook_verdict(GRAPH_CASES[case])
    assert not verdict.passed and "no gradient flows back" in verdict.message
    got = graded[case]
    assert got["status"] == "not yet" and got["message"] == verdict.message, got


@pytest.mark.parametrize("case", ["attention_no_grad", "attention_detached"])
def test_attention_under_no_grad_or_detached_fails_in_grading_as_in_the_notebook(graded, case):
    source = {"attention_no_grad": ATTENTION_NO_GRAD, "attention_detached": ATTENTION_DETACHED}[case]
    verdict = _notebook_verdict([source], attention_checks.attention, "my_attention")
    got = graded[f"{case} 2.2"]
    assert not verdict.passed and got["status"] == "not yet" and got["message"] == verdict.message, got


def test_a_detached_forward_pass_fails_9_3_in_grading(graded):
    from companion.exercises import seq2seq_model

    verdict = _notebook_verdict([S2S_DETACHED], seq2seq_model.seq2seq_forward, "my_seq2seq_forward")
    got = graded["s2s_detached 9.3"]
    assert not verdict.passed
    assert got["status"] == "not yet" and got["points"] == 0, got


@pytest.mark.parametrize("case", ["tampered", "tampered_quietly"])
def test_replacing_the_observer_in_the_kernel_earns_nothing(graded, case):
    got = graded[case]
    assert got["status"] != "passed" and got["points"] == 0, got
    if case == "tampered":
        assert "grader's machinery" in got["message"], got


def test_a_cached_companion_function_is_the_companions(graded):
    from companion.exercises import bpe

    verdict = _notebook_verdict(CACHED_COMPANION, bpe.bytes_to_unicode, "my_bytes_to_unicode")
    got = graded["cached_companion 11.3"]
    assert not verdict.passed and "companion" in verdict.message
    assert got["status"] == "not yet" and got["points"] == 0, got
    assert "uses companion.bpe" in got["message"] and "the course's own implementation" in got["message"], got


def _gradient_verdict(gradients) -> str:
    from companion.exercises import _core

    try:
        gradients()
    except _core._Verdict as exc:  # what hint() raises inside a checker
        return exc.message
    return "passed"


@pytest.mark.parametrize("case", ["right", "partly_detached", "encoder_no_grad", "detached"])
def test_9_3s_per_weight_gradients_are_the_same_in_the_grader_as_in_the_notebook(case):
    """Issue 30: a result of the student's function comes back to the grader with its backward pass
    relayed to the kernel (where its graph is), so a checker's ``backward()`` gives each of the
    grader's weights the gradient the student's code gives it, as in the notebook: 9.3's own helpers
    (``_gradients``, ``_compare_gradients``) reach the same gradients and the same verdict on the
    function running in the kernel as on the function defined here. Before, every weight of the
    grader's model got no gradient from a call into the kernel."""
    import torch

    from companion.exercises import seq2seq_model as m
    from companion.grading.sandbox import Sandbox, release
    from companion.grading.session import StudentKernel, kernel_env

    source = {"right": S2S_RIGHT, "partly_detached": S2S_PARTLY_DETACHED, "encoder_no_grad": S2S_ENCODER_NO_GRAD,
              "detached": S2S_DETACHED}[case]
    namespace: dict = {}
    exec(compile(textwrap.dedent(source), "<IPY-INPUT>", "exec"), namespace)
    local = namespace["my_seq2seq_forward"]
    shape = dict(vocab_size=13, context_length=16, d_model=8, n_heads=2, n_encoder_layers=2, n_decoder_layers=2,
                 d_ff=16)
    model, src, tgt = m._forward_case(93, (7, 4, 2), 5, 0, t_lens=(5, 3, 4), **shape)
    real = tgt != model.config.pad_id
    with torch.no_grad():
        want = model(src, tgt)[0]
    weight = torch.randn(want.shape, generator=torch.Generator().manual_seed(95)) * real[..., None]
    _, reference = m._gradients(model, lambda: model(src, tgt)[0], weight)
    sandbox = Sandbox.detect().reserve(1)
    sk = StudentKernel([(0, textwrap.dedent(source))], sandbox, 0, kernel_env(), Limits(notebook=120, cell=60))
    try:
        sk.run()
        remote = sk.lookup("my_seq2seq_forward")
        _, in_grader = m._gradients(model, lambda: remote(model, src.clone(), tgt.clone()), weight)
        _, in_notebook = m._gradients(model, lambda: local(model, src.clone(), tgt.clone()), weight)
        verdicts = [_gradient_verdict(lambda g=g: m._compare_gradients(g, reference) if g is not None else
                                      m.hint("no gradient reaches the model's weights"))
                    for g in (in_grader, in_notebook)]
    finally:
        sk.close()
        release(sandbox)
    if case == "detached":  # a leaf made inside the call comes back without requires_grad: no gradient at all
        assert in_grader is None and not any(g is not None for g in in_notebook.values())
        assert verdicts[0] != "passed" and verdicts[1] != "passed"
        return
    assert (in_grader is None) == (in_notebook is None)
    if in_notebook is not None:
        assert in_grader.keys() == in_notebook.keys()
        for name, g in in_notebook.items():
            assert (in_grader[name] is None) == (g is None), name
            if g is not None:
                # the kernel's environment is cleared: it may run other CPU kernels (ATEN_CPU_CAPABILITY)
                torch.testing.assert_close(in_grader[name], g, rtol=1e-4, atol=1e-5)
    assert verdicts[0] == verdicts[1]
    assert (verdicts[1] == "passed") == (case == "right"), verdicts


def test_a_partly_detached_forward_pass_fails_9_3_in_grading_as_in_the_notebook(graded):
    from companion.exercises import seq2seq_model

    verdict = _notebook_verdict([S2S_PARTLY_DETACHED], seq2seq_model.seq2seq_forward, "my_seq2seq_forward")
    assert not verdict.passed
    got = graded["s2s_partly_detached 9.3"]
    assert got["status"] == "not yet" and got["message"] == verdict.message, got


ROTARY_HALF_DETACHED = '''
from companion.positional import apply_rotary

def my_rotary_qk(q, k, offset):
    return apply_rotary(q, offset=offset), apply_rotary(k, offset=offset).detach()
'''
ROTARY_RIGHT = '''
from companion.positional import apply_rotary

def my_rotary_qk(q, k, offset):
    return apply_rotary(q, offset=offset), apply_rotary(k, offset=offset)
'''


@pytest.mark.parametrize("source", [ROTARY_RIGHT, ROTARY_HALF_DETACHED], ids=["right", "keys detached"])
def test_a_pair_result_has_its_gradients_checked_in_the_grader_as_in_the_notebook(source):
    """Issue 30: each item of a tuple result (5.6's rotated queries and keys, 3.2's q, k and v) comes
    back with its backward pass relayed to the kernel, so the checker's gradient test runs in the
    grader as in the notebook. Before, a pair came back as data and 5.6 skipped its gradients there:
    keys detached inside the student's function passed in the grader and failed in the notebook."""
    from companion.exercises import early_extra
    from companion.grading.sandbox import Sandbox, release
    from companion.grading.session import StudentKernel, kernel_env

    namespace: dict = {}
    exec(compile(textwrap.dedent(source), "<IPY-INPUT>", "exec"), namespace)
    in_notebook = early_extra.rotary_qk(namespace["my_rotary_qk"])
    sandbox = Sandbox.detect().reserve(1)
    sk = StudentKernel([(0, textwrap.dedent(source))], sandbox, 0, kernel_env(), Limits(notebook=120, cell=60))
    try:
        sk.run()
        in_grader = early_extra.rotary_qk(sk.lookup("my_rotary_qk"))
    finally:
        sk.close()
        release(sandbox)
    assert (in_grader.status, in_grader.message) == (in_notebook.status, in_notebook.message)
    assert in_grader.passed == (source is ROTARY_RIGHT)
