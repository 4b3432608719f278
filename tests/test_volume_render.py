"""gradstream.nerf.volume_render: NeRF's raw2outputs as one fused op with its own backward.

The reference is the PyTorch composite NeRF uses (`render`, below, run on torch); the
same function run on gradstream ops is the composite the fused op is measured against.
"""

import gc

import numpy as np
import pytest
from helpers import assert_close, noncontiguous, to_torch

import gradstream as gs
from gradstream import memory
from gradstream.nerf import RenderResult, volume_render

TOL = {np.float64: (1e-10, 1e-10), np.float32: (1e-5, 1e-5)}


def render(lib, raw, z, rays_d=None, white=False):
    """NeRF's raw2outputs written with tensor ops (torch or gradstream)."""
    rgb = raw[..., :3].sigmoid()
    sigma = raw[..., 3].relu()
    dists = z[..., 1:] - z[..., :-1]
    far = lib.full((*z.shape[:-1], 1), 1e10, dtype=z.dtype)
    dists = lib.cat([dists, far], -1)
    if rays_d is not None:
        dists = dists * (rays_d * rays_d).sum(-1, keepdim=True).sqrt()
    alpha = 1.0 - (-sigma * dists).exp()
    ones = lib.ones((*alpha.shape[:-1], 1), dtype=alpha.dtype)
    trans = lib.cat([ones, 1.0 - alpha + 1e-10], -1).cumprod(-1)[..., :-1]
    w = alpha * trans
    rgb_map = (w[..., None] * rgb).sum(-2)
    depth = (w * z).sum(-1)
    acc = w.sum(-1)
    if white:
        rgb_map = rgb_map + (1.0 - acc[..., None])
    return rgb_map, depth, acc, w


def make(lead, s, dtype=np.float64, seed=0, sigma_scale=1.0):
    rng = np.random.default_rng(seed)
    raw = rng.standard_normal((*lead, s, 4))
    raw[..., 3] *= sigma_scale
    z = 2.0 + np.cumsum(rng.uniform(0.05, 0.3, (*lead, s)), -1)
    d = rng.standard_normal((*lead, 3))
    return raw.astype(dtype), z.astype(dtype), d.astype(dtype)


def upstream(lead, s, dtype, seed=1):
    rng = np.random.default_rng(seed)
    shapes = [(*lead, 3), tuple(lead), tuple(lead), (*lead, s)]
    return [rng.standard_normal(sh).astype(dtype) for sh in shapes]


def compare(torch, raw, z, d, white=False, grad_z=True, tol=None):
    """Fused gradstream vs the torch composite: four outputs, then gradients of raw, z
    and rays_d under a random upstream gradient on every output."""
    dtype = raw.dtype.type
    rtol, atol = tol or TOL[dtype]
    g_in = [gs.tensor(a, requires_grad=True) if a is not None else None for a in (raw, z, d)]
    t_in = [torch.tensor(a, requires_grad=True) if a is not None else None for a in (raw, z, d)]
    g_in[1].requires_grad_(grad_z)
    t_in[1].requires_grad_(grad_z)
    out = volume_render(*g_in, white_background=white)
    assert isinstance(out, RenderResult)
    ref = render(torch, *t_in, white=white)
    for a, b in zip(out, ref, strict=True):
        assert_close(a, b, rtol=rtol, atol=atol)
    ups = upstream(raw.shape[:-2], raw.shape[-2], dtype)
    g_loss = sum((o * gs.tensor(u)).sum() for o, u in zip(out, ups, strict=True))
    t_loss = sum((o * torch.tensor(u)).sum() for o, u in zip(ref, ups, strict=True))
    g_loss.backward()
    t_loss.backward()
    for a, b in zip(g_in, t_in, strict=True):
        if b is not None and b.requires_grad:
            assert a.grad is not None
            assert_close(a.grad, b.grad, rtol=rtol, atol=atol)
    return out


# ---------------------------------------------------------------- parity with torch


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("with_dir", [False, True])
@pytest.mark.parametrize("white", [False, True])
@pytest.mark.parametrize("lead", [(7,), (2, 3)])
def test_matches_torch(torch_ref, dtype, with_dir, white, lead):
    raw, z, d = make(lead, 9, dtype)
    out = compare(torch_ref, raw, z, d if with_dir else None, white=white)
    assert tuple(out.rgb_map.shape) == (*lead, 3)
    assert tuple(out.depth_map.shape) == lead
    assert tuple(out.acc_map.shape) == lead
    assert tuple(out.weights.shape) == (*lead, 9)
    want = gs.float64 if dtype is np.float64 else gs.float32
    assert out.rgb_map.dtype == out.weights.dtype == want


def test_parallel_path(torch_ref):
    """Enough rays that both kernels split the work over rayon tasks."""
    raw, z, d = make((600,), 64)
    compare(torch_ref, raw, z, d, white=True)


def test_noncontiguous_inputs(torch_ref):
    raw, z, d = make((6,), 5)

    # The views are not leaves; check values and the leaves' gradients through them.
    g_in = [gs.tensor(a, requires_grad=True) for a in (raw, z, d)]
    views = [
        g_in[0].permute(2, 1, 0).contiguous().permute(2, 1, 0),
        noncontiguous(g_in[1]),
        noncontiguous(g_in[2]),
    ]
    assert not views[0].is_contiguous() and not views[1].is_contiguous()
    out = volume_render(*views)
    t_in = [torch_ref.tensor(a, requires_grad=True) for a in (raw, z, d)]
    ref = render(torch_ref, *t_in)
    ups = upstream((6,), 5, np.float64)
    sum((o * gs.tensor(u)).sum() for o, u in zip(out, ups, strict=True)).backward()
    sum((o * torch_ref.tensor(u)).sum() for o, u in zip(ref, ups, strict=True)).backward()
    for a, b in zip(out, ref, strict=True):
        assert_close(a, b, rtol=1e-10, atol=1e-10)
    for a, b in zip(g_in, t_in, strict=True):
        assert_close(a.grad, b.grad, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_zero_density(torch_ref, dtype):
    """sigma = 0 everywhere (negative or exactly zero densities): nothing is opaque, and the
    relu passes no gradient to the density, while the last sample's 1e10 distance still
    makes d alpha / d sigma huge."""
    raw, z, d = make((5,), 6, dtype)
    raw[..., 3] = -np.abs(raw[..., 3])
    raw[0, :, 3] = 0.0
    out = compare(torch_ref, raw, z, d, white=True)
    assert not out.acc_map.detach().numpy().any()
    assert np.allclose(out.rgb_map.detach().numpy(), 1.0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_saturated_alpha(torch_ref, dtype):
    """Huge densities: alpha is exactly 1, the transmittance collapses to powers of 1e-10."""
    raw, z, d = make((5,), 6, dtype)
    raw[..., 3] = 1e4 + np.abs(raw[..., 3])
    out = compare(torch_ref, raw, z, d, tol=(1e-6, 1e-12) if dtype is np.float32 else None)
    w = out.weights.detach().numpy()
    assert np.all(w[:, 0] == 1.0)
    assert np.all(w[:, 1:] < 1e-9)


def test_single_sample(torch_ref):
    raw, z, d = make((4,), 1)
    compare(torch_ref, raw, z, d, white=True, grad_z=False)


def test_raw_only_needs_grad(torch_ref):
    """z_vals and rays_d without grad: only raw gets a gradient."""
    raw, z, d = make((4,), 5)
    r = gs.tensor(raw, requires_grad=True)
    zt, dt = gs.tensor(z), gs.tensor(d)
    out = volume_render(r, zt, dt)
    out.rgb_map.sum().backward()
    assert r.grad is not None and zt.grad is None and dt.grad is None
    tr = torch_ref.tensor(raw, requires_grad=True)
    render(torch_ref, tr, torch_ref.tensor(z), torch_ref.tensor(d))[0].sum().backward()
    assert_close(r.grad, tr.grad, rtol=1e-10, atol=1e-10)


def test_gradcheck():
    raw, z, d = make((3,), 4, seed=3)
    raw[0, 1, 3] = -0.5  # one density behind the relu
    ins = [gs.tensor(a, requires_grad=True) for a in (raw, z, d)]
    for white in (False, True):
        assert gs.autograd.gradcheck(
            lambda r, zz, dd, w=white: tuple(volume_render(r, zz, dd, white_background=w)), ins
        )


def test_noise():
    """raw_noise_std adds N(0, std^2) to the density before the relu, drawn from the
    global generator: the same draws as `randn` of shape raw.shape[:-1] times std."""
    raw, z, _ = make((4,), 6)
    r = gs.tensor(raw, requires_grad=True)
    gs.manual_seed(7)
    out = volume_render(r, gs.tensor(z), raw_noise_std=0.5)
    gs.manual_seed(7)
    noise = gs.randn(4, 6, dtype=gs.float64).numpy() * 0.5
    noisy = raw.copy()
    noisy[..., 3] += noise
    r2 = gs.tensor(noisy, requires_grad=True)
    ref = volume_render(r2, gs.tensor(z))
    for a, b in zip(out, ref, strict=True):
        assert_close(a, b, rtol=1e-12, atol=1e-12)
    out.weights.sum().backward()
    ref.weights.sum().backward()
    assert_close(r.grad, r2.grad, rtol=1e-12, atol=1e-12)


def test_noise_gradient():
    """The kernel's noise input (private API) gets the density's gradient when it asks."""
    raw, z, d = make((3,), 4, seed=5)
    noise = np.random.default_rng(2).standard_normal((3, 4))
    ins = [gs.tensor(a, requires_grad=True) for a in (raw, z, d, noise)]
    assert gs.autograd.gradcheck(lambda r, zz, dd, n: gs._core._volume_render(r, zz, dd, n), ins)


def test_half_dtype(torch_ref):
    """bfloat16 inputs compute in float32 and come back as bfloat16."""
    raw, z, d = make((4,), 5, np.float32)
    bf = [gs.tensor(a).to(gs.bfloat16) for a in (raw, z, d)]
    bf[0].requires_grad_(True)
    out = volume_render(*bf)
    assert out.rgb_map.dtype == gs.bfloat16
    ref = render(torch_ref, *[to_torch(t.float()) for t in bf])
    for a, b in zip(out, ref, strict=True):
        assert_close(a.float(), b, rtol=2e-2, atol=2e-2)
    out.rgb_map.sum().backward()
    assert bf[0].grad.dtype == gs.bfloat16


def test_no_graph_without_grad():
    raw, z, d = make((3,), 4)
    out = volume_render(gs.tensor(raw), gs.tensor(z), gs.tensor(d))
    assert out.weights.grad_fn is None
    with gs.no_grad():
        out = volume_render(gs.tensor(raw, requires_grad=True), gs.tensor(z))
    assert out.weights.grad_fn is None


# ---------------------------------------------------------------- double backward


def test_double_backward_raises():
    raw, z, d = make((3,), 4)
    r = gs.tensor(raw, requires_grad=True)
    out = volume_render(r, gs.tensor(z), gs.tensor(d))
    (g,) = gs.autograd.grad(out.rgb_map.sum(), [r], create_graph=True)
    # The first-order gradient is right even under create_graph ...
    r2 = gs.tensor(raw, requires_grad=True)
    volume_render(r2, gs.tensor(z), gs.tensor(d)).rgb_map.sum().backward()
    assert_close(g.detach(), r2.grad, rtol=0, atol=0)
    # ... but differentiating it again is refused, not silently zero.
    assert g.requires_grad
    with pytest.raises(RuntimeError, match="double backward"):
        g.sum().backward()


# ---------------------------------------------------------------- memory


def test_saves_only_its_inputs():
    """Between forward and backward the op holds nothing beyond its inputs and its one
    (R, 5 + S) output: the saved tensors are the inputs themselves."""
    r_, s = 256, 32
    raw, z, d = make((r_,), s, np.float32)
    ins = [gs.tensor(a, requires_grad=True) for a in (raw, z, d)]
    gc.collect()
    start = memory.memory_allocated()
    out = volume_render(*ins)
    assert memory.memory_allocated() - start == r_ * (5 + s) * 4
    # The inputs now count as saved activations; no new buffer does.
    assert memory.memory_by_category()["activation"] >= sum(t.nbytes for t in ins)
    del out
    gc.collect()
    assert memory.memory_allocated() == start


def composite_held(r_, s):
    raw, z, d = make((r_,), s, np.float32)
    ins = [gs.tensor(a, requires_grad=True) for a in (raw, z, d)]
    gc.collect()
    start = memory.memory_allocated()
    out = render(gs, *ins)
    return memory.memory_allocated() - start, out


def test_leaner_than_composite():
    """The composite of gradstream ops holds several (R, S) intermediates for its backward;
    the fused op holds its output alone."""
    r_, s = 256, 32
    held, _ = composite_held(r_, s)
    fused = r_ * (5 + s) * 4
    assert held > 8 * fused  # 401,408 bytes against 37,888 when this was written


def test_backward_peak():
    """During backward the only buffers besides the inputs' gradients are the output's
    (R, 5 + S) gradient, into which the four views' gradients accumulate: the kernel's
    recomputation lives in raw's gradient buffer, per ray."""
    r_, s = 256, 32
    raw, z, d = make((r_,), s, np.float32)
    ins = [gs.tensor(a, requires_grad=True) for a in (raw, z, d)]
    out = volume_render(*ins)
    loss = gs.cat([out.rgb_map.sum(-1), out.depth_map, out.acc_map, out.weights.sum(-1)]).sum()
    gc.collect()
    with memory.track() as m:
        loss.backward()
    grads = sum(t.grad.nbytes for t in ins)
    assert m.net == grads
    row = r_ * (5 + s) * 4
    assert m.peak_increase == grads + row


# ---------------------------------------------------------------- bad input


def t(*shape, dtype=gs.float32):
    return gs.zeros(*shape, dtype=dtype)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((t(4, 5, 3), t(4, 5)), r"raw must have shape \(\.\.\., S, 4\).*\[4, 5, 3\]"),
        ((t(4), t(4)), r"raw must have shape.*\[4\]"),
        ((t(4, 5, 4), t(4, 6)), r"z_vals must have shape.*\[4, 5\].*\[4, 6\]"),
        ((t(4, 5, 4), t(4, 5), t(4, 2)), r"rays_d must have shape \[4, 3\].*\[4, 2\]"),
        ((t(4, 5, 4), t(4, 5), t(5, 3)), r"rays_d must have shape \[4, 3\].*\[5, 3\]"),
        ((t(4, 0, 4), t(4, 0)), r"at least one sample.*\[4, 0, 4\]"),
    ],
)
def test_bad_shapes(args, match):
    with pytest.raises(RuntimeError, match=match) as e:
        volume_render(*args)
    assert "volume_render" in str(e.value)


def test_mixed_dtypes():
    with pytest.raises(RuntimeError, match=r"volume_render.*float32.*float64"):
        volume_render(t(4, 5, 4), t(4, 5, dtype=gs.float64))
    with pytest.raises(RuntimeError, match=r"volume_render.*rays_d float64 \[4, 3\]"):
        volume_render(t(4, 5, 4), t(4, 5), t(4, 3, dtype=gs.float64))


def test_integer_dtype():
    with pytest.raises(RuntimeError, match=r"volume_render: expected floating point.*int64"):
        volume_render(t(4, 5, 4, dtype=gs.int64), t(4, 5, dtype=gs.int64))


def test_not_a_tensor():
    with pytest.raises(TypeError, match="'z_vals' must be Tensor, not list"):
        volume_render(t(4, 5, 4), [1.0] * 5)
