"""A request past the machine's memory raises OutOfMemoryError (a RuntimeError, as
PyTorch's) naming the op and the bytes, and the process goes on: the next op works. Sizes
here are far past any machine's RAM and swap, so the refusal does not depend on what else
runs."""

from __future__ import annotations

import numpy as np
import pytest

import gradstream as gs

HUGE = 10**12  # elements: 4 TB of float32


def expanded():
    return gs.ones(1, 1).expand(10**6, 10**6)


REQUESTS = {
    "zeros": lambda: gs.zeros(HUGE),
    "ones": lambda: gs.ones(HUGE, dtype=gs.int64),
    "empty": lambda: gs.empty(10**6, 10**6),
    "full": lambda: gs.full((HUGE,), 7.0),
    "zeros_like": lambda: gs.zeros_like(expanded()),
    "rand": lambda: gs.rand(HUGE),
    "randn": lambda: gs.randn(10**6, 10**6),
    "randint": lambda: gs.randint(0, 5, (HUGE,)),
    "randperm": lambda: gs.randperm(HUGE),
    "arange": lambda: gs.arange(0, HUGE),
    "arange_float": lambda: gs.arange(0.0, 1.0, 1e-13),
    "linspace": lambda: gs.linspace(0, 1, HUGE),
    "eye": lambda: gs.eye(10**6),
    "repeat": lambda: gs.ones(3).repeat(10**6, 10**6),
    "expand_contiguous": lambda: expanded().contiguous(),
    "expand_clone": lambda: expanded().clone(),
    "matmul": lambda: gs.ones(10**6, 1) @ gs.ones(1, 10**6),
    "mm": lambda: gs.mm(gs.ones(10**6, 1), gs.ones(1, 10**6)),
    "cat": lambda: gs.cat([expanded(), expanded()]),
    "multinomial": lambda: gs.multinomial(gs.ones(4), HUGE, replacement=True),
}


@pytest.mark.parametrize("op", sorted(REQUESTS))
def test_a_huge_request_raises_and_the_next_op_works(op):
    with pytest.raises(gs.OutOfMemoryError, match=r"bytes|memory can hold") as e:
        REQUESTS[op]()
    assert isinstance(e.value, RuntimeError)
    a = np.arange(6.0).reshape(2, 3)
    x = gs.tensor(a)
    np.testing.assert_array_equal((x @ x.T).numpy(), a @ a.T)


def test_the_error_names_the_op_and_the_bytes():
    with pytest.raises(
        gs.OutOfMemoryError,
        match=r"^zeros: not enough memory: you tried to allocate 4000000000000 bytes",
    ):
        gs.zeros(HUGE)


def test_a_size_whose_bytes_overflow_is_refused():
    with pytest.raises(gs.OutOfMemoryError, match="larger than any memory can hold"):
        gs.zeros(2**40, 2**40)


def test_cuda_namespace_names_the_same_error():
    assert gs.cuda.OutOfMemoryError is gs.OutOfMemoryError
