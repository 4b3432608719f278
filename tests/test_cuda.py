"""What is CUDA-specific: devices, moves, mixed-device errors, streaming into the optimizer on
the GPU, the memory counters against the driver's and PyTorch's, and the fallback to the CPU
where there is no GPU.

The tests that need a GPU skip without one (`cuda` fixture); the fallback tests run
everywhere. The rest of the suite runs on CUDA with ``GRADSTREAM_TEST_DEVICE=cuda``.
"""

from __future__ import annotations

import numpy as np
import pytest

import gradstream as gs


@pytest.fixture
def cuda():
    if not gs.cuda.is_available():
        pytest.skip("no CUDA device")
    return gs.device("cuda:0")


@pytest.fixture
def torch_cuda(torch_ref):
    if not torch_ref.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    return torch_ref


# ---------------------------------------------------------------- without a GPU


def test_fallback_without_a_gpu():
    if gs.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert gs.cuda.device_count() == 0
    assert gs.cuda.memory_allocated() == 0 and gs.cuda.max_memory_allocated() == 0
    assert gs.cuda.memory_stats() == {}
    gs.cuda.synchronize()  # nothing to wait for
    with pytest.raises(RuntimeError, match="CUDA"):
        gs.zeros(2, device="cuda")
    with pytest.raises(RuntimeError, match="CUDA"):
        gs.ones(2).to("cuda:0")
    with pytest.raises(RuntimeError, match="CUDA"):
        gs.nn.Linear(2, 2).cuda()
    # The CPU path is untouched.
    assert (gs.ones(2) + 1).tolist() == [2.0, 2.0]


def test_out_of_memory_error_is_one_class_as_torchs(torch_ref):
    """`torch.cuda.OutOfMemoryError` is `torch.OutOfMemoryError`, a RuntimeError: scripts
    catch it under either name, GPU or not."""
    torch = torch_ref
    assert (gs.cuda.OutOfMemoryError is gs.OutOfMemoryError) == (
        torch.cuda.OutOfMemoryError is torch.OutOfMemoryError
    )
    assert issubclass(gs.OutOfMemoryError, RuntimeError) == issubclass(
        torch.OutOfMemoryError, RuntimeError
    )
    with pytest.raises(gs.cuda.OutOfMemoryError):
        raise gs.OutOfMemoryError("out of memory")


def test_device_names_and_default_device():
    assert str(gs.device("cuda", 1)) == "cuda:1" and gs.device(0) == gs.device("cuda:0")
    assert gs.get_default_device() == gs.device("cpu")
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda"):
        gs.device("tpu")


# ---------------------------------------------------------------- on a GPU


def test_factories_and_moves_round_trip(cuda):
    x = gs.arange(12, dtype=gs.float32).reshape(3, 4)
    y = x.to(cuda)
    assert y.device == cuda and y.is_cuda and not x.is_cuda
    assert y.cpu().tolist() == x.tolist()
    assert gs.zeros(2, 3, device="cuda").device == cuda
    assert gs.zeros_like(y).device == cuda and gs.ones_like(x).device.type == "cpu"
    z = y.to("cpu", gs.float64)
    assert z.device.type == "cpu" and z.dtype == gs.float64
    assert y.new_zeros(2).device == cuda and y.type() == "gradstream.cuda.FloatTensor"
    # A move is differentiable: the gradient goes back to the source's device.
    a = gs.ones(3, requires_grad=True)
    (a.cuda() * 2).sum().backward()
    assert a.grad.device.type == "cpu" and a.grad.tolist() == [2.0, 2.0, 2.0]


def test_mixed_devices_raise_naming_both(cuda):
    a, b = gs.ones(3, device="cuda"), gs.ones(3)
    for f in (lambda: a + b, lambda: b * a, lambda: gs.matmul(a, b), lambda: gs.cat([a, b])):
        with pytest.raises(RuntimeError) as e:
            f()
        assert "cuda:0" in str(e.value) and "cpu" in str(e.value), str(e.value)
    # A 0-d CPU tensor joins a CUDA tensor, as a Python number does (PyTorch's rule).
    assert (a + gs.tensor(2.0)).device == cuda and (a * 3).device == cuda


def test_empty_and_int32_tensors_on_cuda(cuda, torch_ref):
    """candle's CUDA build allocates no empty buffer and has no int32 casts, copies or
    joins: gradstream's own kernels and empty views stand in."""
    torch = torch_ref
    for shape in [(0,), (3, 0), (0, 2, 5)]:
        e = gs.zeros(shape, device="cuda")
        assert e.device == cuda and e.shape == shape and e.tolist() == torch.zeros(shape).tolist()
        assert (e + 1).shape == shape and e.to(gs.int32).dtype == gs.int32
        assert e.sum().item() == 0.0 and e.cpu().shape == shape
        assert gs.tensor(np.zeros(shape, np.float32)).to(cuda).shape == shape
    v = [-3, 0, 7, 2**31 - 1]
    i = gs.tensor(v, dtype=gs.int32, device="cuda")
    assert i.tolist() == v and i.float().tolist() == [float(x) for x in v]
    assert i.to(gs.float16).tolist() == torch.tensor(v, dtype=torch.int32).half().tolist()
    assert gs.cat([i, i[:2]]).tolist() == v + v[:2]
    assert i[::2].contiguous().tolist() == v[::2]
    assert gs.ones(2, dtype=gs.int32, device="cuda").tolist() == [1, 1]
    assert gs.tensor([1.5, -2.5], device="cuda").to(gs.int64).tolist() == [1, -2]


def test_default_device_moves_factories(cuda):
    gs.set_default_device("cuda")
    try:
        assert gs.zeros(2).device == cuda and gs.tensor([1.0]).device == cuda
        assert gs.nn.Linear(2, 3).weight.device == cuda
    finally:
        gs.set_default_device("cpu")
    assert gs.zeros(2).device.type == "cpu"


def test_module_to_keeps_parameters(cuda):
    m = gs.nn.Sequential(gs.nn.Linear(4, 8), gs.nn.BatchNorm1d(8))
    params = list(m.parameters())
    m.cuda()
    assert [p is q for p, q in zip(params, m.parameters(), strict=True)] == [True] * len(params)
    assert all(p.device == cuda for p in m.parameters())
    assert all(b.device == cuda for b in m.buffers())
    m.to("cpu")
    assert all(p.device.type == "cpu" for p in m.parameters())


def _model(lib, device, seed=0):
    lib.manual_seed(seed)
    m = lib.nn.Sequential(
        lib.nn.Linear(64, 256),
        lib.nn.ReLU(),
        lib.nn.Linear(256, 256),
        lib.nn.ReLU(),
        lib.nn.Linear(256, 8),
    )
    return m.to(device)


def _same_weights(dst, src) -> None:
    for p, q in zip(dst.parameters(), src.parameters(), strict=True):
        p.data = dst_tensor(p, q.detach().cpu().numpy())


def dst_tensor(p, arr):
    return gs.tensor(arr).to(p.device)


def test_in_backward_adam_on_cuda_matches_pytorch(cuda, torch_ref):
    """Streaming on the GPU: the fused Adam inside backward gives PyTorch's parameters."""
    torch = torch_ref
    tm = _model(torch, "cpu")
    gm = _model(gs, "cuda")
    _same_weights(gm, tm)
    topt = torch.optim.Adam(tm.parameters(), lr=1e-2)
    gopt = gs.optim.Adam(gm.parameters(), lr=1e-2, in_backward=True)
    rng = np.random.default_rng(0)
    for _ in range(3):
        x, y = rng.standard_normal((32, 64), np.float32), rng.standard_normal((32, 8), np.float32)
        topt.zero_grad()
        torch.nn.functional.mse_loss(tm(torch.from_numpy(x)), torch.from_numpy(y)).backward()
        topt.step()
        gx, gy = gs.tensor(x, device="cuda"), gs.tensor(y, device="cuda")
        gs.nn.functional.mse_loss(gm(gx), gy).backward()
    assert float(gopt.state[next(iter(gm.parameters()))]["step"]) == 3.0
    for p, q in zip(gm.parameters(), tm.parameters(), strict=True):
        assert p.grad is None  # consumed by the step inside backward
        # Adam divides by sqrt(v): where a gradient is near 0, the GEMM's sums in another
        # order move an element's step by up to lr (the first GPU run: 1 in 65536, 2.6e-4).
        np.testing.assert_allclose(
            p.detach().cpu().numpy(), q.detach().numpy(), rtol=1e-4, atol=3e-4
        )


def test_at_most_one_gradient_alive_in_backward(cuda):
    """The exact counter on the device sees one parameter's gradient at a time."""
    m = _model(gs, "cuda")
    opt = gs.optim.Adam(m.parameters(), lr=0.1, in_backward=True)
    largest = max(p.numel() * 4 for p in m.parameters())
    x = gs.randn(32, 64, device="cuda")
    loss = m(x).square().mean()
    gs.memory.reset_peak_memory_stats(cuda)
    loss.backward()
    peak = gs.memory.max_memory_by_category(cuda)["gradient"]
    assert 0 < peak <= largest, (peak, largest)
    assert gs.memory.memory_by_category(cuda)["gradient"] == 0
    assert float(opt.state[next(iter(m.parameters()))]["step"]) == 1.0


def test_grad_consumer_gets_cuda_gradients(cuda):
    m = _model(gs, "cuda")
    seen = []
    m(gs.randn(4, 64, device="cuda")).sum().backward(
        grad_consumer=lambda p, g: seen.append((g.device, g.shape == p.shape))
    )
    assert seen and all(d == cuda and same for d, same in seen)


def test_memory_counters_against_the_driver_and_pytorch(cuda, torch_cuda):
    torch = torch_cuda
    gs.cuda.synchronize()
    base, (free0, _) = gs.cuda.memory_allocated(), gs.cuda.mem_get_info()
    x = gs.empty(64, 1024, 1024, device="cuda")  # 256 MiB
    gs.cuda.synchronize()
    assert gs.cuda.memory_allocated() - base == 256 << 20
    free1, total = gs.cuda.mem_get_info()
    assert free0 - free1 >= 256 << 20 and total > free0  # the driver saw at least as much
    assert gs.cuda.memory_reserved() >= gs.cuda.memory_allocated()
    del x
    assert gs.cuda.memory_allocated() == base
    # The same model's parameters weigh the same in both libraries' counters.
    before_t, before_g = torch.cuda.memory_allocated(), gs.cuda.memory_allocated()
    tm, gm = _model(torch, "cuda"), _model(gs, "cuda")
    t_bytes = torch.cuda.memory_allocated() - before_t
    g_bytes = gs.cuda.memory_allocated() - before_g
    assert g_bytes == sum(p.numel() * 4 for p in gm.parameters())
    assert abs(t_bytes - g_bytes) <= 512 * len(list(tm.parameters()))  # PyTorch rounds to 512


def test_dlpack_exchanges_cuda_memory_in_place(cuda, torch_cuda):
    torch = torch_cuda
    g = gs.arange(6, dtype=gs.float32, device="cuda")
    t = torch.from_dlpack(g)
    assert t.device.type == "cuda" and t.tolist() == g.tolist()
    t.mul_(2)  # writes gradstream's buffer
    torch.cuda.synchronize()
    assert g.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    back = gs.from_dlpack(torch.arange(4.0, device="cuda"))
    assert back.device == cuda and back.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_per_process_memory_fraction_raises_out_of_memory(cuda):
    _, total = gs.cuda.mem_get_info()
    used = gs.cuda.memory_allocated()
    gs.cuda.set_per_process_memory_fraction((used + (64 << 20)) / total)
    try:
        with pytest.raises(gs.OutOfMemoryError, match="out of memory"):
            gs.empty(128, 1024, 1024, device="cuda")
    finally:
        gs.cuda.set_per_process_memory_fraction(1.0)


def test_autocast_cuda_runs_products_in_half(cuda):
    a = gs.randn(8, 8, device="cuda")
    with gs.autocast("cuda", dtype=gs.bfloat16):
        assert (a @ a).dtype == gs.bfloat16
    assert (a @ a).dtype == gs.float32
    # Autocast on one device type leaves the other's tensors alone.
    with gs.autocast("cuda"):
        c = gs.randn(4, 4)
        assert (c @ c).dtype == gs.float32


def test_checkpoint_and_saved_tensor_offload_on_cuda(cuda):
    from gradstream.autograd.graph import save_on_cpu
    from gradstream.utils.checkpoint import checkpoint

    m = _model(gs, "cuda")
    x = gs.randn(16, 64, device="cuda", requires_grad=True)
    ref = gs.autograd.grad(m(x).sum(), [x])[0]
    got = gs.autograd.grad(checkpoint(m, x, use_reentrant=False).sum(), [x])[0]
    np.testing.assert_allclose(got.cpu().numpy(), ref.cpu().numpy(), rtol=1e-5, atol=1e-6)
    with save_on_cpu():
        off = gs.autograd.grad(m(x).sum(), [x])[0]
    np.testing.assert_allclose(off.cpu().numpy(), ref.cpu().numpy(), rtol=1e-5, atol=1e-6)
