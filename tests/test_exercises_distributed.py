"""The appendix's checkers (activation memory, data parallelism by hand), the simulated process
group they use, and the companion's helpers behind them (``activation_bytes``, ``launch``)."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from companion import distributed
from companion.exercises import distributed as check
from companion.grading import registry
from companion.model import GPT, GPTConfig
from test_checker_mutations_appendix import my_activation_bytes, my_data_parallel


# --- A.1 -------------------------------------------------------------------------------------------
def _saved_bytes(n_layers, B, T, d, h, V=50):
    """Bytes autograd keeps in a forward pass of the course's GPT (parameters left out)."""
    torch.manual_seed(0)
    net = GPT(GPTConfig(vocab_size=V, context_length=T, d_model=d, n_layers=n_layers, n_heads=h, bias=False))
    weights = {p.untyped_storage().data_ptr() for p in net.parameters()}
    saved = {}

    def keep(t):
        if t.untyped_storage().data_ptr() not in weights:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    idx = torch.randint(V, (B, T))
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        net(idx, idx)
    return sum(saved.values())


@pytest.mark.parametrize("B,T,d,h", [(2, 16, 32, 4), (3, 8, 48, 6)])
def test_the_count_is_the_measurement_less_the_stacked_qkv_weight(B, T, d, h):
    layer = (_saved_bytes(3, B, T, d, h) - _saved_bytes(1, B, T, d, h)) // 2
    assert layer - distributed.activation_bytes(B, T, d, h, n_layers=1) == 3 * d * d * 4


def test_the_checkers_count_is_the_companions():
    for shape in check._SHAPES:
        assert check._activation_bytes(*shape) == distributed.activation_bytes(*shape)


def test_activation_checker_verdicts():
    assert check.activation_bytes(my_activation_bytes).passed
    assert check.activation_bytes(...).status == "not attempted"
    fb = check.activation_bytes(lambda *a: float(my_activation_bytes(*a)))
    assert fb.passed  # a float is fine
    assert check.activation_bytes(lambda *a: torch.tensor(float(my_activation_bytes(*a)))).passed
    fb = check.activation_bytes(lambda *a: float("nan"))
    assert fb.status == "hint" and fb.kind == "generic"
    assert "companion" in check.activation_bytes(distributed.activation_bytes).message


# --- A.2 -------------------------------------------------------------------------------------------
def test_data_parallel_checker_verdicts():
    assert check.data_parallel(my_data_parallel).passed
    assert check.data_parallel(...).status == "not attempted"

    def stub(model, optimizer, loss_fn, batches, dist):
        raise NotImplementedError

    assert check.data_parallel(stub).status == "not attempted"
    fb = check.data_parallel(lambda m, o, lf, b, d: d.all_gather([], m))
    assert fb.status == "hint" and "stand-in for torch.distributed" in fb.message


def test_the_simulated_group_solves_the_collectives():
    """Three processes, each contributing rank + 1, then a value that depends on the first result:
    the rounds settle on what a real run gives."""
    def program(group):
        t = torch.tensor([float(group.get_rank() + 1)])
        group.all_reduce(t)  # 1 + 2 + 3 = 6 everywhere
        u = t * (group.get_rank() + 1)
        group.all_reduce(u, op=group.ReduceOp.MAX)  # 6 * 3
        v = torch.tensor([float(group.get_rank())])
        group.broadcast(v, src=2)
        return t.item(), u.item(), v.item()

    records = [None] * 3
    for _ in range(5):
        results = []
        for r in range(3):
            g = check.SimulatedGroup(r, 3, list(records))
            results.append(program(g))
            records[r] = g.calls
    assert results == [(6.0, 18.0, 2.0)] * 3
    # AVG, as gloo has it since PyTorch 2.x; an async result lands on wait(), not before
    records = [None] * 2
    for _ in range(3):
        seen = []
        for r in range(2):
            g = check.SimulatedGroup(r, 2, list(records))
            t = torch.tensor([1.0 + 3 * r])
            g.all_reduce(t, op=torch.distributed.ReduceOp.AVG)
            u = torch.tensor([1.0 + 3 * r])
            work = g.all_reduce(u, async_op=True)
            before = u.item()
            work.wait()
            seen.append((t.item(), before, u.item(), work.is_completed()))
            records[r] = g.calls
    assert seen == [(2.5, 1.0, 5.0, True), (2.5, 4.0, 5.0, True)]
    assert check.SimulatedGroup(0, 2).group.WORLD is None
    g = check.SimulatedGroup(1, 2)
    g.broadcast(torch.ones(2), src=0)
    g2 = check.SimulatedGroup(1, 2)
    g2.load_state_dict(g.state_dict())
    assert check._same_calls(g.calls, g2.calls)


def _mlp_args(world, steps=2, rows=3):
    batches = check._batches(7, world, steps, rows)
    args = []
    for r in range(world):
        net = check._model(7 + r)
        args.append((net, torch.optim.Adam(net.parameters(), lr=0.05), check._loss, [b[r] for b in batches]))
    return args, batches


@pytest.mark.slow
def test_launch_runs_two_gloo_processes_like_the_simulation():
    """The reference on two real gloo processes (distributed.launch) ends where the checker's
    simulation and one process on the whole batch end."""
    args, batches = _mlp_args(2)
    real = distributed.launch(my_data_parallel, args)
    simulated, _ = _mlp_args(2)
    records = [None, None]
    for _ in range(20):
        finals = []
        for r, (net, opt, loss, shares) in enumerate(_mlp_args(2)[0]):
            g = check.SimulatedGroup(r, 2, list(records))
            my_data_parallel(net, opt, loss, shares, g)
            records[r] = g.calls
            finals.append(check._flat(net))
    one = check._single_process(7, "adam", batches)
    for r in range(2):
        torch.testing.assert_close(check._flat(real[r][0]), one, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(check._flat(real[r][0]), finals[r], rtol=1e-5, atol=1e-6)


def _raises(model, optimizer, loss_fn, batches, dist):
    raise ValueError("broken on purpose")


@pytest.mark.slow
def test_launch_reports_an_error_of_a_process_with_its_traceback():
    args, _ = _mlp_args(2)
    with pytest.raises(RuntimeError, match="broken on purpose"):
        distributed.launch(_raises, args)


def test_launch_refuses_what_it_cannot_send():
    with pytest.raises(TypeError, match="defined with def"):
        distributed.launch(print, [()])
    with pytest.raises(ValueError, match="one tuple of arguments per process"):
        distributed.launch(_raises, [])

    def outer():
        x = 1

        def inner(dist):
            return x
        return inner

    with pytest.raises(ValueError, match="enclosing function"):
        distributed.launch(outer(), [()])


# --- the appendix in the registry ------------------------------------------------------------------
def test_the_appendix_is_chapter_A():
    from pathlib import Path

    from companion import grade, student

    assert registry.file_chapter(Path("appendix_beyond_the_laptop.ipynb")) == "A"
    assert registry.file_chapter(Path("07_x.ipynb")) == 7
    assert sorted(["A", 13, 2], key=registry.order) == [2, 13, "A"]
    assert student.is_chapter(Path("appendix_x.ipynb")) and not student.is_chapter(Path("intro.ipynb"))
    assert student.chapters()[-1].name == "appendix_beyond_the_laptop.ipynb"
    assert grade._chapter_argument("a") == "A" and grade._chapter_argument("7") == 7
    chapters = registry.load()
    assert [ex.number for ex in chapters["A"].exercises] == ["A.1", "A.2", "A.3", "A.4"]
    assert chapters["A"].module == "companion.exercises.distributed"


def test_accumulation_and_amp_step():
    """A.3 and A.4: the appendix's answers pass, stubs are "not attempted", a branch left as
    NotImplementedError is reported with its input, and the A.4 check really overflows once."""
    from test_checker_mutations_appendix import my_accumulated_step, my_amp_step

    assert check.accumulation(my_accumulated_step).passed
    assert check.amp_step(my_amp_step).passed

    def stub(*args):
        raise NotImplementedError

    assert check.accumulation(stub).status == "not attempted"
    assert check.amp_step(stub).status == "not attempted"

    def many_not_written(model, opt, loss_fn, micro_batches):
        if len(micro_batches) > 2:
            raise NotImplementedError
        return my_accumulated_step(model, opt, loss_fn, micro_batches)

    fb = check.accumulation(many_not_written)
    assert fb.status == "hint" and "2, 5, 1 rows" in fb.message and "NotImplementedError" in fb.message, fb

    def equal_weights_right_when_equal(model, opt, loss_fn, micro_batches):  # right for equal sizes only
        opt.zero_grad()
        for x, y in micro_batches:
            (loss_fn(model, x, y) / len(micro_batches)).backward()
        opt.step()
        return 0.0

    fb = check.accumulation(equal_weights_right_when_equal)
    assert fb.status == "hint" and "averaged the micro-batches' mean losses" in fb.message, fb

    import torch
    from torch import nn

    rows, kind, seed, scale, max_norm = check._AMP_CASES[-1]
    assert scale is None  # the overflowing case: the reference skips the step and halves the scale
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16)
    weights, _, scaler = check._accumulated(seed, kind, check._micro_batches(seed, (rows,)), amp=torch.bfloat16,
                                            max_norm=max_norm, scaler=scaler, overflow=True)
    assert torch.equal(weights, check._flat(check._Recorder(seed).net)) and scaler.get_scale() == 2.0 ** 15
    assert isinstance(check._Recorder(seed), nn.Module)
