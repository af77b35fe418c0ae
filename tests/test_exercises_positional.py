"""Chapter 5's checkers: right answers written in other ways pass, the references they compare with are
right (checked against the companion and PyTorch), and the rules (no companion, state left alone) hold.
The wrong answers live in tests/test_checker_mutations_ch05.py."""
import math

import pytest
import torch

from companion.exercises import positional as check
from companion.multihead import MultiHeadAttention
from companion.positional import apply_rotary, shift_matrix, sinusoidal_encoding

from test_checker_mutations_ch05 import my_read_table, my_rope_bug, my_score_terms, my_shift_table


def stub(*args):
    raise NotImplementedError


@pytest.mark.parametrize("checker", [check.read_table, check.shift_table, check.score_terms, check.rope_bug])
def test_stub_is_not_attempted(checker):
    assert checker(stub).status == "not attempted"
    assert checker(...).status == "not attempted"


# --- the references ----------------------------------------------------------------------------------
@pytest.mark.parametrize("T,d,c", [(5, 8, 10000.0), (2, 4, 100.0), (9, 6, 500000.0)])
def test_reference_table_is_the_companions(T, d, c):
    P = check._table(T, d, c)
    torch.testing.assert_close(P, sinusoidal_encoding(T, d, c=c, dtype=torch.float64))
    to_halves = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])
    torch.testing.assert_close(check._table(T, d, c, layout="halves"), P[:, to_halves])
    # the shifted table is the companion's shift matrix applied to P (for k >= 0) ...
    torch.testing.assert_close(check._table(T, d, c, start=3), P @ shift_matrix(3, d, c=c, dtype=torch.float64))
    # ... and its inverse for k < 0
    torch.testing.assert_close(check._table(T, d, c, start=-2), P @ shift_matrix(-2, d, c=c, dtype=torch.float64))


@pytest.mark.parametrize("B,T,d,h,bias", [(2, 5, 8, 2, True), (1, 1, 6, 3, False), (3, 4, 4, 4, True),
                                         (1, 7, 6, 1, False)])
def test_reference_terms_add_up_to_the_layers_weights(B, T, d, h, bias):
    torch.manual_seed(0)
    mha = MultiHeadAttention(d, h, bias=bias).double().eval()
    with torch.no_grad():  # random biases too: the default ones are zero
        for p in mha.parameters():
            p.normal_()
    x = torch.randn(B, T, d, dtype=torch.float64)
    P = check._table(T, d)
    terms = check._reference_terms(mha, x, P)
    with torch.no_grad():
        _, weights = mha(x + P, need_weights=True, average_weights=False)  # (B, h, T, T)
    torch.testing.assert_close(torch.softmax(sum(terms), dim=-1), weights)
    # the position-position term is the same for every sequence and does not involve x
    torch.testing.assert_close(terms[3], terms[3][:1].expand_as(terms[3]))
    if h > 1 and mha.d_head > 1:  # the wrong split is a different function
        assert not torch.allclose(check._reference_terms(mha, x, P, split=check._wrong_split)[0], terms[0])


@pytest.mark.parametrize("d", [2, 4, 6, 8, 64])
def test_the_suspect_ropes_are_what_they_say(d):
    g = torch.Generator().manual_seed(d)
    x = torch.randn(2, 7, d, generator=g, dtype=torch.float64)
    torch.testing.assert_close(check.Rope(d)(x, offset=3), apply_rotary(x, offset=3))
    torch.testing.assert_close(check.Rope(d, "halves")(x, offset=3), apply_rotary(x, offset=3, layout="halves"))
    torch.testing.assert_close(check.Rope(d, "frequencies", 500.0)(x, offset=3), apply_rotary(x, offset=3, base=500.0))
    torch.testing.assert_close(check.Rope(d, "offset")(x, offset=3), apply_rotary(x))
    # clockwise: the inverse rotation, so turning back with apply_rotary gives x
    back = check.Rope(d, "clockwise")(apply_rotary(x, offset=3), offset=3)
    torch.testing.assert_close(back, x)
    for kind in ("mixed halves", "mixed interleaved"):
        out = check.Rope(d, kind)(x)
        if d == 2:  # one pair: both layouts are the same, so nothing is mixed
            torch.testing.assert_close(out, apply_rotary(x))
        else:  # the two members of a pair turn by different angles: lengths change
            assert not torch.allclose(out.norm(dim=-1), x.norm(dim=-1))
    assert check.Rope(d).__repr__() == check.Rope(d, "halves").__repr__()  # nothing to read off


def test_suspect_rope_refuses_bad_input_with_the_argument_named():
    rope = check.Rope(4)
    with pytest.raises(ValueError, match=r"`x` must have shape \(T, 4\)"):
        rope(torch.ones(4))
    with pytest.raises(TypeError, match="`x` must hold floats"):
        rope(torch.ones(3, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="`x` must be a torch.Tensor"):
        rope([[1.0] * 4])
    with pytest.raises(ValueError, match="`offset` must be an integer >= 0"):
        rope(torch.ones(3, 4), offset=-1)


# --- right answers written differently pass -------------------------------------------------------------
def read_with_asin(P):
    """The layout from where the 1s of row 0 sit; the base from pair 1's sine, any dtype."""
    T, d = P.shape
    row0, row1 = P[0].tolist(), P[1].tolist()
    if row0[1] > 0.5:
        layout, sine = "interleaved", row1[2]
    else:
        layout, sine = "halves", row1[1]
    omega_1 = math.asin(sine)  # omega_1 = c**(-2/d) < 1 < pi/2
    return torch.tensor(omega_1, dtype=torch.float64) ** (-d / 2), layout


def read_by_fit(P):
    """A least-squares fit of log omega_j against 2j/d over every pair."""
    T, d = P.shape
    Q = P.detach().double()
    layout = "interleaved" if torch.allclose(Q[0, :2], torch.tensor([0.0, 1.0], dtype=torch.float64)) else "halves"
    if layout == "halves":
        Q = torch.stack([Q[:, : d // 2], Q[:, d // 2:]], dim=-1).reshape(T, d)
    omega = torch.atan2(Q[1, 0::2], Q[1, 1::2])  # (d/2,)
    x = torch.arange(0, d, 2, dtype=torch.float64) / d
    slope = (x * omega.log()).sum() / (x * x).sum()  # log omega = -x log c
    return float(torch.exp(-slope)), layout


def shift_by_composition(P, k):
    """Compose the rotation of row 1 |k| times (by squaring), transpose it for k < 0."""
    T, d = P.shape
    Q = P.detach().double()
    M1 = torch.zeros(d, d, dtype=torch.float64)
    for j in range(d // 2):
        s, c = Q[1, 2 * j], Q[1, 2 * j + 1]
        M1[2 * j:2 * j + 2, 2 * j:2 * j + 2] = torch.stack([torch.stack([c, -s]), torch.stack([s, c])])
    M = torch.linalg.matrix_power(M1, abs(k))
    return (Q @ (M if k >= 0 else M.T)).to(P.dtype)


def shift_with_complex(P, k):
    """Each pair as sin + i cos... turned with complex numbers: cos + i sin, multiplied by e^{-ik omega}."""
    Q = P.detach().double()
    z = torch.complex(Q[:, 1::2], Q[:, 0::2])  # cos + i sin = e^{i t omega}
    step = z[1] ** k  # e^{i k omega}: powers of row 1
    moved = z * step
    out = torch.empty_like(Q)
    out[:, 0::2], out[:, 1::2] = moved.imag, moved.real
    return out.to(P.dtype)


def terms_with_einsum(mha, x, P):
    h, dh = mha.n_heads, mha.d_head
    Wq = mha.q_proj.weight.detach().view(h, dh, -1)  # (h, dh, d)
    Wk = mha.k_proj.weight.detach().view(h, dh, -1)
    bq = mha.q_proj.bias.detach().view(h, dh) if mha.q_proj.bias is not None else torch.zeros(h, dh, dtype=x.dtype)
    bk = mha.k_proj.bias.detach().view(h, dh) if mha.k_proj.bias is not None else torch.zeros(h, dh, dtype=x.dtype)
    B = x.shape[0]
    qx = torch.einsum("btd,hed->bhte", x.detach(), Wq) + bq[None, :, None]
    kx = torch.einsum("btd,hed->bhte", x.detach(), Wk) + bk[None, :, None]
    qp = torch.einsum("td,hed->hte", P, Wq).expand(B, -1, -1, -1)
    kp = torch.einsum("td,hed->hte", P, Wk).expand(B, -1, -1, -1)
    s = dh ** -0.5
    return [s * torch.einsum("bhie,bhje->bhij", a, b) for a, b in ((qx, kx), (qx, kp), (qp, kx), (qp, kp))]


def terms_by_differences(mha, x, P):
    """From the layer's own projections only: q(x + P) - q(x) is the position part (linearity)."""
    B, T, d = x.shape
    h, dh = mha.n_heads, mha.d_head
    with torch.no_grad():
        q_all, k_all = mha.q_proj(x + P), mha.k_proj(x + P)
        q_x, k_x = mha.q_proj(x), mha.k_proj(x)
    heads = lambda y: y.view(B, T, h, dh).transpose(1, 2)  # noqa: E731
    qx, kx, qp, kp = heads(q_x), heads(k_x), heads(q_all - q_x), heads(k_all - k_x)
    return tuple((a @ b.transpose(-1, -2)) / dh ** 0.5 for a, b in ((qx, kx), (qx, kp), (qp, kx), (qp, kp)))


def rope_bug_by_comparison(rope, d):
    """Against apply_rotary (the text allows it) and its variants; randomness from an own generator."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(9, d, generator=g, dtype=torch.float64)
    out = rope(x, offset=2)
    if torch.allclose(out, apply_rotary(x, offset=2)):
        return "correct"
    if torch.allclose(out, apply_rotary(x, offset=2, layout="halves")):
        return "halves"
    if torch.allclose(out, apply_rotary(x)):
        return "offset"
    if not torch.allclose(out.norm(dim=-1), x.norm(dim=-1)):
        return "not a rotation"
    if torch.allclose(apply_rotary(out, offset=2), x):  # turning back counterclockwise undoes it
        return "clockwise"
    return "frequencies"


@pytest.mark.parametrize("checker,right", [
    (check.read_table, read_with_asin), (check.read_table, read_by_fit),
    (check.shift_table, shift_by_composition), (check.shift_table, shift_with_complex),
    (check.score_terms, terms_with_einsum), (check.score_terms, terms_by_differences),
    (check.rope_bug, rope_bug_by_comparison),
], ids=lambda v: getattr(v, "__name__", ""))
def test_right_answers_written_differently_pass(checker, right):
    fb = checker(right)
    assert fb.passed, fb


def test_the_companion_is_refused_where_the_exercise_says_so():
    def shift_via_companion(P, k):
        from companion.positional import sinusoidal_encoding as table
        T, d = P.shape
        full = table(T + abs(k) * 2 + 1, d, dtype=torch.float64)  # base 10000 only: wrong anyway
        return my_shift_table(P, k)

    fb = check.shift_table(shift_via_companion)
    assert not fb.passed and "companion" in fb.message


def test_checker_restores_grad_mode_and_random_state_it_reports():
    torch.manual_seed(123)
    state = torch.get_rng_state()
    fb = check.rope_bug(lambda rope, d: (torch.randn(2), my_rope_bug(rope, d))[1])
    assert "global random" in fb.message
    assert torch.equal(torch.get_rng_state(), state)

    def off(P, k):
        torch.set_grad_enabled(False)
        return my_shift_table(P, k)

    fb = check.shift_table(off)
    assert "gradient tracking off" in fb.message and torch.is_grad_enabled()


def test_the_references_pass_and_leave_the_caller_alone():
    torch.manual_seed(7)
    state = torch.get_rng_state()
    for checker, ref in ((check.read_table, my_read_table), (check.shift_table, my_shift_table),
                         (check.score_terms, my_score_terms), (check.rope_bug, my_rope_bug)):
        assert checker(ref).passed
    assert torch.equal(torch.get_rng_state(), state) and torch.is_grad_enabled()


def test_a_rope_bug_answer_that_crashes_on_the_suspect_is_the_students_error():
    fb = check.rope_bug(lambda rope, d: rope(torch.ones(d)) and "correct")
    assert fb.status == "hint" and fb.kind == "raised" and "shape (T," in fb.message + fb.details
