"""Custom autograd Functions: gradients, saved tensors, errors."""

import gc

import pytest

import gradstream as gs
from gradstream.autograd import Function, gradcheck


class Cube(Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return x * x * x * scale

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x * x * (3 * ctx.scale), None


def test_custom_function_gradcheck():
    x = gs.randn(3, 4, dtype=gs.float64, requires_grad=True)
    assert gradcheck(lambda t: Cube.apply(t, 2.0), (x,))


def test_custom_function_matches_builtin_ops(torch_ref):
    x = gs.tensor([0.5, -1.0, 2.0], requires_grad=True)
    y = Cube.apply(x, 1.5)
    assert y.grad_fn.name() == "CubeBackward"
    (y * gs.tensor([1.0, 2.0, 3.0])).sum().backward()
    r = torch_ref.tensor([0.5, -1.0, 2.0], requires_grad=True)
    (r**3 * 1.5 * torch_ref.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert x.grad.tolist() == pytest.approx(r.grad.tolist())


def test_no_node_without_grad():
    x = gs.ones(2)
    assert Cube.apply(x, 1.0).grad_fn is None
    with gs.no_grad():
        assert Cube.apply(gs.ones(2, requires_grad=True), 1.0).grad_fn is None


def test_second_backward_needs_retain_graph():
    x = gs.ones(2, requires_grad=True)
    y = Cube.apply(x, 1.0).sum()
    y.backward(retain_graph=True)
    y.backward()
    assert x.grad.tolist() == [6.0, 6.0]
    z = Cube.apply(x, 1.0).sum()
    z.backward()
    with pytest.raises(RuntimeError, match="second time"):
        z.backward()


def test_saved_tensor_modified_in_place_is_detected():
    x = gs.ones(2, requires_grad=True)
    h = x * 1.0
    y = Cube.apply(h, 1.0).sum()
    h.detach().fill_(3.0)  # same buffer, bumps the shared version counter
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_wrong_number_of_gradients():
    class Bad(Function):
        @staticmethod
        def forward(ctx, a, b):
            return a + b

        @staticmethod
        def backward(ctx, grad):
            return (grad,)

    y = Bad.apply(gs.ones(2, requires_grad=True), gs.ones(2, requires_grad=True)).sum()
    with pytest.raises(RuntimeError, match="incorrect number of gradients"):
        y.backward()


def test_wrong_gradient_shape():
    class Bad(Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, grad):
            return gs.ones(5)

    y = Bad.apply(gs.ones(2, 3, requires_grad=True)).sum()
    with pytest.raises(
        RuntimeError, match=r"got \[5\] but expected shape compatible with \[2, 3\]"
    ):
        y.backward()


def test_exception_in_backward_propagates_and_engine_recovers():
    class Boom(Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, grad):
            raise ValueError("boom in backward")

    x = gs.ones(3, requires_grad=True)
    gc.collect()  # other tests' garbage must not be freed inside the measurement
    before = gs.memory.memory_allocated()
    y = Boom.apply(x).sum()
    try:
        y.backward()
    except ValueError as e:  # the traceback (and the frames it holds) dies with `e`
        assert "boom in backward" in str(e)
    else:
        pytest.fail("backward did not raise")
    del y
    gc.collect()
    (x * 3).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0, 3.0]
    x.grad = None
    assert gs.memory.memory_allocated() == before


def test_forward_must_return_a_tensor():
    class NoTensor(Function):
        @staticmethod
        def forward(ctx, a):
            return 3

        @staticmethod
        def backward(ctx, grad):
            return grad

    with pytest.raises(TypeError, match="must return a Tensor"):
        NoTensor.apply(gs.ones(1, requires_grad=True))


class SavesOutput(Function):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y


def test_graphs_dropped_without_backward_free_everything():
    x = gs.ones(256, requires_grad=True)
    gc.collect()  # other tests' garbage must not be freed inside the measurement
    before = gs.memory.memory_allocated()
    for _ in range(50):
        y = SavesOutput.apply(Cube.apply(x, 2.0))
        del y
    gc.collect()
    assert gs.memory.memory_allocated() == before


def test_saving_the_output_still_gives_the_right_gradient():
    x = gs.tensor([0.0, 1.0], dtype=gs.float64, requires_grad=True)
    assert gradcheck(lambda t: SavesOutput.apply(t), (x,))
