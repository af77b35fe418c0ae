from _junk import junk_cases
MODULE = "companion.exercises.positional"
PRELUDE = """import inspect
import math
import matplotlib.pyplot as plt
import torch
from companion import example
from companion.exercises import early_extra as check_more
from companion.exercises import positional as check
from companion.multihead import MultiHeadAttention
from companion.notebook import THREADS
from companion.positional import (LearnedPositionalEmbedding, SinusoidalPositionalEncoding, apply_rotary, shift_matrix, sinusoidal_encoding)
"""
M = MODULE
def C(ex, chk, fn, name, expect, why, source):
    return dict(exercise=ex, checker=chk, module=M, name=name, expect=expect, why=why, source=source, call=fn)

RT = '''
def my_read_table(P):
    import math
    P = P.double()
    T, d = P.shape
    h = d // 2
    # interleaved: column 1 is cos(0)=1 at row 0; halves: column 1 is sin(i w_1) -> 0 at row 0
    layout = "interleaved" if abs(P[0, 1].item() - 1) < 1e-6 else "halves"
    j = h - 1
    if layout == "interleaved":
        s, c = P[1, 2 * j].item(), P[1, 2 * j + 1].item()
    else:
        s, c = P[1, j].item(), P[1, j + h].item()
    w = math.atan2(s, c)
    return (math.exp(-math.log(w) * d / (2 * j)), layout)
'''
ST = '''
def my_shift_table(P, k):
    import torch
    T, d = P.shape
    Q = P.double()
    s1, c1 = Q[1, 0::2], Q[1, 1::2]
    w = torch.atan2(s1, c1)
    # angle of each pair at row 1 is w_j (w_j <= 1 < pi)
    ang = torch.arange(k, k + T, dtype=torch.float64)[:, None] * w
    out = torch.empty(T, d, dtype=torch.float64)
    out[:, 0::2] = torch.sin(ang); out[:, 1::2] = torch.cos(ang)
    return out.to(P.dtype)
'''
SC = '''
def my_score_terms(mha, x, P):
    import torch, math
    Wq, Wk = mha.q_proj.weight, mha.k_proj.weight
    bq = mha.q_proj.bias; bk = mha.k_proj.bias
    h = mha.n_heads
    B, T, d = x.shape
    dk = d // h
    with torch.no_grad():
        qc = x @ Wq.T + (bq if bq is not None else 0)
        kc = x @ Wk.T + (bk if bk is not None else 0)
        qp = P @ Wq.T; kp = P @ Wk.T
        sp = lambda t: t.reshape(*t.shape[:-2], T, h, dk).transpose(-3, -2)
        qc, kc = sp(qc), sp(kc); qp = sp(qp).unsqueeze(0).expand(B, h, T, dk); kp = sp(kp).unsqueeze(0).expand(B, h, T, dk)
        r = math.sqrt(dk)
        return (qc @ kc.transpose(-1, -2) / r, qc @ kp.transpose(-1, -2) / r,
                qp @ kc.transpose(-1, -2) / r, qp @ kp.transpose(-1, -2) / r)
'''
RB = '''
def my_rope_bug(rope, d):
    import torch
    T = 8
    x = torch.zeros(T, d, dtype=torch.float64)
    x[:, 0] = 1.0
    x[:, d - 2] = 1.0
    ref = apply_rotary(x.clone(), offset=0) if True else None
    y = rope(x.clone())
    y = y.to(torch.float64); ref = ref.to(torch.float64)
    if torch.allclose(y, ref, atol=1e-5):
        x3 = torch.zeros(T, d, dtype=torch.float64); x3[:, 1] = 1.0; x3[:, d - 1] = 1.0
        if not torch.allclose(rope(x3.clone()).double(), apply_rotary(x3.clone()).double(), atol=1e-5):
            return "not a rotation"
        if not torch.allclose(rope(x.clone(), offset=3).double(), apply_rotary(x.clone(), offset=3).double(), atol=1e-5):
            return "offset"
        return "correct"
    if torch.allclose(y, apply_rotary(x.clone()).double().clone() * 0 + torch.tensor(0.), atol=0): pass
    # clockwise: sin parts negated
    yc = ref.clone(); yc[:, 1::2] = -yc[:, 1::2]
    if torch.allclose(y, yc, atol=1e-5):
        return "clockwise"
    if y[:, 1].abs().max() < 1e-6 and y[:, d // 2].abs().max() > 1e-3:
        return "halves"
    # one member or the other
    x3 = torch.zeros(T, d, dtype=torch.float64); x3[:, 1] = 1.0; x3[:, d - 1] = 1.0
    y3 = rope(x3.clone()).double(); r3 = apply_rotary(x3.clone()).double()
    n = y.norm(dim=1)
    if (y[:, 0::2]**2 + y[:, 1::2]**2 - 1).abs().max() > 1e-4 or not torch.allclose(y3[:, 1::2].abs()**2 + y3[:, 0::2]**2, torch.ones(T, d//2, dtype=torch.float64)*(x3[:,1::2]**2), atol=1e-4):
        return "not a rotation"
    return "frequencies"
'''
CASES = [
 C("5.1","read_table","my_read_table","right_atan2_last_pair","right","atan2 on row 1, last pair", RT),
 C("5.1","read_table","my_read_table","right_list_return","right","returns a list [c, layout] instead of a tuple (debatable: text says 'the pair')", RT.replace("return (math.exp(-math.log(w) * d / (2 * j)), layout)", "return [math.exp(-math.log(w) * d / (2 * j)), layout]")),
 C("5.1","read_table","my_read_table","wrong_pair0","wrong","uses pair 0 (omega_0 = 1 always): division by zero", RT.replace("j = h - 1", "j = 0")),
 C("5.1","read_table","my_read_table","wrong_layout_swapped","wrong","layout labels swapped", RT.replace('"interleaved" if', '"halves" if').replace('else "halves"', 'else "interleaved"').replace('if layout == "interleaved"', 'if layout == "halves"')),
 C("5.1","read_table","my_read_table","wrong_acos","wrong","acos of the cosine of row 1 only: fine; but uses float32 P (no .double) and asin of sine: loses precision at large base", RT.replace("P = P.double()", "").replace("w = math.atan2(s, c)", "w = math.asin(s)")),
 C("5.1","read_table","my_read_table","wrong_hardcode_10000","wrong","always returns base 10000", RT.replace("return (math.exp(-math.log(w) * d / (2 * j)), layout)", "return (10000.0, layout)")),
 C("5.1","read_table","my_read_table","wrong_off_by_one_exponent","wrong","exponent d/(2j+2) instead of d/(2j)", RT.replace("d / (2 * j)", "d / (2 * j + 2)")),
 C("5.1","read_table","my_read_table","wrong_row_last","wrong","uses last row: angle wraps past pi for long tables", RT.replace("P[1, 2 * j].item(), P[1, 2 * j + 1].item()", "P[T-1, 2 * j].item(), P[T-1, 2 * j + 1].item()").replace("P[1, j].item(), P[1, j + h].item()", "P[T-1, j].item(), P[T-1, j + h].item()").replace("w = math.atan2(s, c)", "w = math.atan2(s, c) / (T - 1)")),
 C("5.1","read_table","my_read_table","wrong_tensor_base","wrong","returns the base as a 0-d tensor (debatable: 'as a number')", RT.replace("return (math.exp(", "return (torch.tensor(math.exp(").replace("(2 * j)), layout)", "(2 * j))), layout)").replace("import math", "import math, torch")),
 C("5.1","read_table","my_read_table","wrong_layout_upper","wrong","returns 'Interleaved' capitalised", RT.replace('"interleaved" if', '"Interleaved" if')),
 C("5.1","read_table","my_read_table","wrong_companion","wrong","builds candidate tables with sinusoidal_encoding (forbidden)", '''
def my_read_table(P):
    T, d = P.shape
    import math
    best = None
    for c in [100, 1000, 10000, 500000]:
        Q = sinusoidal_encoding(T, d, base=c) if 'base' in str(inspect.signature(sinusoidal_encoding)) else sinusoidal_encoding(T, d)
        e = (Q.double() - P.double()).abs().max().item()
        if best is None or e < best[0]: best = (e, c)
    return (float(best[1]), "interleaved")
'''),
 C("5.2","shift_table","my_shift_table","right_atan2","right","recovers angles with atan2 from row 1", ST),
 C("5.2","shift_table","my_shift_table","right_rotation_power","right","rotation by row 1 applied via angle-sum identities in float64", ST.replace("ang = torch.arange(k, k + T, dtype=torch.float64)[:, None] * w", "ang = (torch.arange(T, dtype=torch.float64)[:, None] + k) * w")),
 C("5.2","shift_table","my_shift_table","wrong_dtype_double","wrong","returns float64 regardless of P's dtype", ST.replace("return out.to(P.dtype)", "return out")),
 C("5.2","shift_table","my_shift_table","wrong_roll","wrong","torch.roll rows: wraps instead of shifting", '''
def my_shift_table(P, k):
    import torch
    return torch.roll(P, -k, dims=0)
'''),
 C("5.2","shift_table","my_shift_table","wrong_slice_rows","wrong","slices rows k.. and pads with zeros; fails for k beyond T or negative", '''
def my_shift_table(P, k):
    import torch
    out = torch.zeros_like(P)
    n = max(0, P.shape[0] - k)
    out[:n] = P[k:k+n]
    return out
'''),
 C("5.2","shift_table","my_shift_table","wrong_clockwise","wrong","shift by -k (sign error)", ST.replace("torch.arange(k, k + T", "torch.arange(-k, -k + T")),
 C("5.2","shift_table","my_shift_table","wrong_sin_cos_swapped","wrong","puts cos in even columns", ST.replace("out[:, 0::2] = torch.sin(ang); out[:, 1::2] = torch.cos(ang)", "out[:, 0::2] = torch.cos(ang); out[:, 1::2] = torch.sin(ang)")),
 C("5.2","shift_table","my_shift_table","wrong_asin","wrong","asin of row 1 sine: wrong when omega > pi/2 (omega_0 = 1 fine, but loses sign info)... and float32", ST.replace("w = torch.atan2(s1, c1)", "w = torch.asin(P[1, 0::2])")),
 C("5.2","shift_table","my_shift_table","wrong_in_place","wrong","writes the result into P in place", ST.replace("return out.to(P.dtype)", "P.copy_(out.to(P.dtype)); return P")),
 C("5.2","shift_table","my_shift_table","wrong_off_by_one","wrong","positions k+1..k+T", ST.replace("torch.arange(k, k + T", "torch.arange(k + 1, k + T + 1")),
 C("5.2","shift_table","my_shift_table","wrong_float32_math","wrong","angles in float32: k large loses precision (debatable)", ST.replace("Q = P.double()", "Q = P.float()").replace("dtype=torch.float64", "dtype=torch.float32")),
 C("5.3","score_terms","my_score_terms","right_matmul","right","explicit matmuls with per-head reshape", SC),
 C("5.3","score_terms","my_score_terms","right_einsum","right","via the Linear modules and einsum", SC.replace("qp = P @ Wq.T; kp = P @ Wk.T", "qp = torch.einsum('td,ed->te', P, Wq); kp = torch.einsum('td,ed->te', P, Wk)")),
 C("5.3","score_terms","my_score_terms","wrong_no_scale","wrong","forgets the 1/sqrt(d_k)", SC.replace("r = math.sqrt(dk)", "r = 1.0")),
 C("5.3","score_terms","my_score_terms","wrong_scale_d","wrong","divides by sqrt(d) not sqrt(d_k)", SC.replace("r = math.sqrt(dk)", "r = math.sqrt(d)")),
 C("5.3","score_terms","my_score_terms","wrong_bias_in_pos","wrong","adds the biases to the position query/key too", SC.replace("qp = P @ Wq.T; kp = P @ Wk.T", "qp = P @ Wq.T + (bq if bq is not None else 0); kp = P @ Wk.T + (bk if bk is not None else 0)")),
 C("5.3","score_terms","my_score_terms","wrong_transposed_terms","wrong","returns scores transposed (key rows)", SC.replace("return (qc @ kc.transpose(-1, -2) / r, qc @ kp.transpose(-1, -2) / r,\n                qp @ kc.transpose(-1, -2) / r, qp @ kp.transpose(-1, -2) / r)", "return tuple(t.transpose(-1, -2) for t in (qc @ kc.transpose(-1, -2) / r, qc @ kp.transpose(-1, -2) / r, qp @ kc.transpose(-1, -2) / r, qp @ kp.transpose(-1, -2) / r))")),
 C("5.3","score_terms","my_score_terms","wrong_swap_cp_pc","wrong","content-position and position-content swapped", SC.replace("return (qc @ kc.transpose(-1, -2) / r, qc @ kp.transpose(-1, -2) / r,\n                qp @ kc.transpose(-1, -2) / r,", "return (qc @ kc.transpose(-1, -2) / r, qp @ kc.transpose(-1, -2) / r,\n                qc @ kp.transpose(-1, -2) / r,")),
 C("5.3","score_terms","my_score_terms","wrong_no_weight_T","wrong","x @ W instead of x @ W.T", SC.replace("Wq, Wk = mha.q_proj.weight, mha.k_proj.weight", "Wq, Wk = mha.q_proj.weight.T, mha.k_proj.weight.T")),
 C("5.3","score_terms","my_score_terms","wrong_train_mode_left","wrong","calls mha.train() and leaves it in train mode", SC.replace("with torch.no_grad():", "mha.train()\n    with torch.no_grad():")),
 C("5.3","score_terms","my_score_terms","wrong_pp_no_batch","wrong","position-position term of shape (h, T, T), no batch dim", SC.replace("qp = sp(qp).unsqueeze(0).expand(B, h, T, dk); kp = sp(kp).unsqueeze(0).expand(B, h, T, dk)", "qp = sp(qp); kp = sp(kp)")),
 C("5.4","rope_bug","my_rope_bug","wrong_probe_bad_halves_test","wrong","my own attempt: basis probes vs apply_rotary, but its halves test is broken (probe sets features 0 and d-2 together)", RB),
 C("5.4","rope_bug","my_rope_bug","wrong_always_correct","wrong","always returns 'correct'", "def my_rope_bug(rope, d):\n    return 'correct'\n"),
 C("5.4","rope_bug","my_rope_bug","wrong_no_offset_probe","wrong","never tests offset: 'offset' bug reported 'correct'", RB.replace('return "offset"', 'return "correct"')),
 C("5.4","rope_bug","my_rope_bug","wrong_label_typo","wrong","returns 'not_a_rotation' with an underscore", RB.replace('return "not a rotation"', 'return "not_a_rotation"')),
 C("5.4","rope_bug","my_rope_bug","wrong_clockwise_as_freq","wrong","never checks clockwise; calls it frequencies", RB.replace('return "clockwise"', 'return "frequencies"')),
]
CASES += junk_cases(M, {"5.1": ("read_table","my_read_table","P"), "5.2": ("shift_table","my_shift_table","P, k"),
                        "5.3": ("score_terms","my_score_terms","mha, x, P"), "5.4": ("rope_bug","my_rope_bug","rope, d")})
