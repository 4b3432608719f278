"""Low-bit optimizer state (``state_dtype``): the codes' error bounds, the step's
equivalence in and out of backward, state_dict round trips, exact accounting and
convergence against fp32 state."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradstream as gs

pytestmark = pytest.mark.cpu_backend("the low-bit state kernels are the CPU backend's")

FORMATS = ["int8", "int4", "fp8", "bfloat16"]


def momentum_of(g: np.ndarray, state_dtype: str, block: int | None = None) -> np.ndarray:
    """SGD's momentum buffer after one step: the gradient itself, as the state codes it."""
    p = gs.nn.Parameter(gs.zeros(*g.shape))
    opt = gs.optim.SGD(
        [p], lr=0.0, momentum=0.9, state_dtype=state_dtype, block_size=block,
        min_quantized_size=0,
    )  # fmt: skip
    p.grad = gs.tensor(g)
    opt.step()
    return opt.dequantized_state(p)["momentum_buffer"].numpy()


def block_bound(x: np.ndarray, state_dtype: str, block: int) -> np.ndarray:
    """The largest error each element may have: the half gap of the signed code at the top
    of its range, times its block's absmax (relative for the float formats)."""
    flat = x.reshape(-1)
    pad = (-flat.size) % block
    blocks = np.abs(np.concatenate([flat, np.zeros(pad, flat.dtype)])).reshape(-1, block)
    amax = np.repeat(blocks.max(axis=1), block)[: flat.size].reshape(x.shape)
    if state_dtype == "int8":
        return amax * (0.9 / 64 / 2) * 1.0001
    if state_dtype == "int4":
        return amax * (0.225 / 2) * 1.0001
    if state_dtype == "fp8":  # e4m3: 3 mantissa bits, subnormals below 2^-6 of 448
        return np.abs(x) * 2.0**-4 + amax / 448 * 2.0**-9
    return np.abs(x) * 2.0**-8  # bfloat16


shapes = st.lists(st.integers(1, 70), min_size=1, max_size=3).map(tuple)


@settings(max_examples=40, deadline=None)
@given(
    shape=shapes,
    fmt=st.sampled_from(FORMATS),
    block=st.sampled_from([2, 64, 256]),
    scale=st.sampled_from([1e-30, 1e-6, 1.0, 1e6, 1e30]),
    zeros=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_a_round_trip_stays_within_its_block_bound(shape, fmt, block, scale, zeros, seed):
    rng = np.random.default_rng(seed)
    g = (rng.standard_normal(shape) * scale).astype(np.float32)
    if zeros:
        g[rng.random(shape) < 0.3] = 0.0
    back = momentum_of(g, fmt, block)
    assert back.shape == g.shape and back.dtype == np.float32
    assert np.all(np.abs(back - g) <= block_bound(g, fmt, block))
    assert np.all(back[g == 0] == 0)


@settings(max_examples=20, deadline=None)
@given(
    n=st.integers(2, 600),
    fmt=st.sampled_from(FORMATS),
    bad=st.sampled_from([np.nan, np.inf, -np.inf]),
    seed=st.integers(0, 2**31 - 1),
)
def test_a_non_finite_value_poisons_its_block_and_no_other(n, fmt, bad, seed):
    rng = np.random.default_rng(seed)
    g = rng.standard_normal(n).astype(np.float32)
    at = int(rng.integers(n))
    g[at] = bad
    back = momentum_of(g, fmt, 64)
    if fmt == "bfloat16":  # no scale: only the element itself
        np.testing.assert_array_equal(np.isnan(back) | np.isinf(back), ~np.isfinite(g))
        return
    block = np.arange(n) // 64 == at // 64
    assert np.all(np.isnan(back[block])), "never clamped to a finite value"
    assert np.all(np.isfinite(back[~block]))


def test_a_nan_gradient_reaches_the_parameter_as_in_pytorch():
    torch = pytest.importorskip("torch")
    g = np.ones(8192, np.float32)
    g[5] = np.nan
    p = gs.nn.Parameter(gs.ones(8192))
    opt = gs.optim.AdamW([p], lr=0.1, state_dtype="int8")
    tp = torch.nn.Parameter(torch.ones(8192))
    topt = torch.optim.AdamW([tp], lr=0.1)
    p.grad, tp.grad = gs.tensor(g), torch.tensor(g)
    opt.step()
    topt.step()
    np.testing.assert_array_equal(np.isnan(p.detach().numpy()), np.isnan(tp.detach().numpy()))


def model(seed=0, width=96):
    gs.manual_seed(seed)
    return gs.nn.Sequential(
        gs.nn.Linear(16, width), gs.nn.Tanh(), gs.nn.Linear(width, width), gs.nn.Tanh(),
        gs.nn.Linear(width, 4),
    )  # fmt: skip


def batches(n, seed=1):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((16, 4)).astype(np.float32)
    out = []
    for _ in range(n):
        x = rng.standard_normal((32, 16)).astype(np.float32)
        out.append((gs.tensor(x), gs.tensor(np.tanh(x @ w))))
    return out


def weights(m):
    return [p.detach().numpy().copy() for p in m.parameters()]


OPTIMIZERS = [
    ("AdamW", dict(lr=1e-2, state_dtype="int8")),
    ("AdamW", dict(lr=1e-2, state_dtype="int4", amsgrad=True)),
    ("Adam", dict(lr=1e-2, state_dtype="fp8", weight_decay=0.1)),
    ("Adam", dict(lr=1e-2, state_dtype="bfloat16")),
    ("SGD", dict(lr=5e-2, momentum=0.9, nesterov=True, state_dtype="int8")),
    ("SGD", dict(lr=5e-2, state_dtype="int8")),  # no momentum: no state at all
    ("AdamW4bit", dict(lr=1e-2)),
]


@pytest.mark.parametrize(("name", "kw"), OPTIMIZERS)
def test_in_backward_and_step_give_bit_identical_parameters(name, kw):
    m1, m2 = model(), model()
    kw = dict(kw, min_quantized_size=64) if "state_dtype" in kw else dict(kw, min_8bit_size=64)
    o1 = getattr(gs.optim, name)(m1.parameters(), **kw)
    o2 = getattr(gs.optim, name)(m2.parameters(), in_backward=True, **kw)
    s1 = gs.optim.lr_scheduler.StepLR(o1, step_size=2, gamma=0.5)
    s2 = gs.optim.lr_scheduler.StepLR(o2, step_size=2, gamma=0.5)
    for x, y in batches(5):
        gs.nn.functional.mse_loss(m1(x), y).backward()
        o1.step()
        o1.zero_grad()
        s1.step()
        gs.nn.functional.mse_loss(m2(x), y).backward()
        s2.step()
    for a, b in zip(weights(m1), weights(m2), strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(weights(m1)[2], weights(model())[2]), "the steps moved it"


def test_accumulation_and_global_clipping_in_backward_match_the_standard_mode():
    m1, m2 = model(), model()
    kw = dict(lr=1e-2, state_dtype="int8", min_quantized_size=64)
    o1 = gs.optim.AdamW(m1.parameters(), **kw)
    o2 = gs.optim.AdamW(m2.parameters(), in_backward=True, **kw).accumulate(2)
    data = batches(4)
    for i in range(0, 4, 2):
        for x, y in data[i : i + 2]:
            gs.nn.functional.mse_loss(m1(x), y).backward()
            gs.nn.functional.mse_loss(m2(x), y).backward()
        o1.step()
        o1.zero_grad()
        assert len(o2.stepped_in_backward()) == len(weights(m2))
    np.testing.assert_array_equal(weights(m1)[0], weights(m2)[0])
    m3, m4 = model(), model()
    o3 = gs.optim.AdamW(m3.parameters(), **kw)
    o4 = gs.optim.AdamW(m4.parameters(), in_backward=True, **kw).clip_grad(
        max_norm=0.05, global_norm=True
    )
    for x, y in data:
        gs.nn.functional.mse_loss(m3(x), y).backward()
        gs.nn.utils.clip_grad_norm_(m3.parameters(), 0.05)
        o3.step()
        o3.zero_grad()
        o4.backward(gs.nn.functional.mse_loss(m4(x), y))
    for a, b in zip(weights(m3), weights(m4), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("fmt", FORMATS)
def test_state_dict_round_trips_bit_for_bit(fmt, tmp_path):
    m1 = model()
    kw = dict(lr=1e-2, state_dtype=fmt, min_quantized_size=64)
    o1 = gs.optim.AdamW(m1.parameters(), **kw)
    data = batches(6)
    for x, y in data[:3]:
        gs.nn.functional.mse_loss(m1(x), y).backward()
        o1.step()
        o1.zero_grad()
    path = tmp_path / "opt.pt"
    gs.save({"model": m1.state_dict(), "opt": o1.state_dict()}, path)
    saved = gs.load(path)
    m2 = model(seed=5)
    m2.load_state_dict(saved["model"])
    o2 = gs.optim.AdamW(m2.parameters(), **kw)
    o2.load_state_dict(saved["opt"])
    sd1, sd2 = o1.state_dict()["state"], o2.state_dict()["state"]
    for i in sd1:
        assert sd1[i].keys() == sd2[i].keys()
        for k, v in sd1[i].items():
            if isinstance(v, gs.Tensor):
                np.testing.assert_array_equal(v.numpy(), sd2[i][k].numpy())
            else:
                assert v == sd2[i][k]
    for x, y in data[3:]:
        for m, o in ((m1, o1), (m2, o2)):
            gs.nn.functional.mse_loss(m(x), y).backward()
            o.step()
            o.zero_grad()
    for a, b in zip(weights(m1), weights(m2), strict=True):
        np.testing.assert_array_equal(a, b)


def test_state_dict_layout_names_codes_and_scales():
    p = gs.nn.Parameter(gs.randn(64, 300))
    small = gs.nn.Parameter(gs.randn(10))
    opt = gs.optim.AdamW4bit([p, small])
    (p.sum() + small.sum()).backward()
    opt.step()
    s = opt.state_dict()["state"]
    big = s[0]
    assert big["state_dtype"] == "int4" and big["block_size"] == 128
    assert big["exp_avg"].dtype == gs.uint8 and tuple(big["exp_avg"].shape) == (9600,)
    assert tuple(big["exp_avg_absmax"].shape) == (150,)  # 19200 / 128
    assert tuple(big["exp_avg_sq_row_max"].shape) == (64,)
    assert tuple(big["exp_avg_sq_col_max"].shape) == (300,)
    assert s[1]["exp_avg"].dtype == gs.float32  # under min_8bit_size: dense, as bitsandbytes
    assert "state_dtype" not in s[1]


def test_quantised_state_is_counted_as_optimizer_state_to_the_byte():
    n = 64 * 1000
    p = gs.nn.Parameter(gs.randn(64, 1000))
    before = gs.memory.memory_by_category()["optimizer_state"]
    opt = gs.optim.AdamW8bit([p])
    p.sum().backward()
    opt.step()
    # two moments: one byte per element and a float32 absmax per block of 256
    want = 2 * (n + 4 * -(-n // 256))
    assert gs.memory.memory_by_category()["optimizer_state"] - before == want
    opt4 = gs.optim.AdamW4bit([gs.nn.Parameter(gs.randn(64, 1000))])
    q = opt4.param_groups[0]["params"][0]
    before = gs.memory.memory_by_category()["optimizer_state"]
    q.sum().backward()
    opt4.step()
    want4 = (n // 2 + 4 * (n // 128)) + (n // 2 + 4 * (64 + 1000))
    assert gs.memory.memory_by_category()["optimizer_state"] - before == want4


def test_bad_arguments_raise_pytorch_style_errors():
    p = gs.nn.Parameter(gs.randn(5000))
    with pytest.raises(ValueError, match="state_dtype"):
        gs.optim.Adam([p], state_dtype="int3")
    with pytest.raises(ValueError, match="block_size"):
        gs.optim.Adam([p], state_dtype="int8", block_size=3)
    with pytest.raises(ValueError, match="min_quantized_size"):
        gs.optim.Adam([p], state_dtype="int8", min_quantized_size=-1)
    with pytest.raises(TypeError):
        gs.optim.RMSprop([p], state_dtype="int8")
    with pytest.raises(NotImplementedError, match="percentile_clipping"):
        gs.optim.AdamW8bit([p], percentile_clipping=5)
    opt = gs.optim.Adam([p], state_dtype="int8")
    p.sum().backward()
    opt.step()
    opt.param_groups[0]["state_dtype"] = "int4"
    with pytest.raises(ValueError, match=r"held int8 in blocks of 256.*int4"):
        opt.step()
    assert opt.state_dict()["state"][0]["state_dtype"] == "int8"  # untouched


def test_a_dense_state_dict_does_not_load_as_codes():
    p = gs.nn.Parameter(gs.randn(5000))
    dense = gs.optim.Adam([p])
    p.sum().backward()
    dense.step()
    low = gs.optim.Adam([p], state_dtype="int8")
    low.load_state_dict(dense.state_dict())
    with pytest.raises(ValueError, match="held dense.*int8"):
        low.step()


def _train(opt_factory, steps=200, seed=0):
    """The bench's mlp task at a small size: Linear + ReLU layers, MSE to a fixed random
    teacher; the mean loss of the last 20 steps."""
    rng = np.random.default_rng(seed)
    gs.manual_seed(seed)
    width = 128
    m = gs.nn.Sequential(
        gs.nn.Linear(32, width), gs.nn.ReLU(), gs.nn.Linear(width, width), gs.nn.ReLU(),
        gs.nn.Linear(width, 8),
    )  # fmt: skip
    teacher = rng.standard_normal((32, 8)).astype(np.float32) / 4
    opt = opt_factory(m.parameters())
    losses = []
    for _ in range(steps):
        x = rng.standard_normal((64, 32)).astype(np.float32)
        y = np.sin(x @ teacher)
        loss = gs.nn.functional.mse_loss(m(gs.tensor(x)), gs.tensor(y))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return float(np.mean(losses[-20:]))


@pytest.mark.parametrize(("fmt", "tolerance"), [("int8", 0.02), ("int4", 0.05), ("fp8", 0.05)])
def test_low_bit_adamw_converges_within_its_tolerance_of_fp32(fmt, tolerance):
    def opt(ps, fmt=None):
        return gs.optim.AdamW(ps, lr=2e-3, state_dtype=fmt, min_quantized_size=1024)

    ref = _train(opt)
    low = _train(lambda ps: opt(ps, fmt))
    first = _train(lambda ps: opt(ps), steps=1)
    assert ref < 0.5 * first, "the task trains"
    assert abs(low - ref) <= tolerance * ref, (fmt, low, ref)
