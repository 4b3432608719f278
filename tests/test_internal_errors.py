"""A panic inside an op (a bug, never the user's input) reaches Python as a RuntimeError
naming the op, and leaves the extension usable."""

import pytest

import gradstream as gs
from gradstream import _core


def test_a_panic_becomes_a_runtime_error_naming_the_op():
    with pytest.raises(RuntimeError, match=r"_panic: internal error in gradstream \(forced\)"):
        _core._panic(gs.ones(2), "forced")
    # caught by `except Exception`, unlike pyo3's PanicException
    try:
        _core._panic(gs.ones(2), "again")
    except Exception as e:  # noqa: BLE001
        assert isinstance(e, RuntimeError)
    # the extension goes on working, autograd included
    x = gs.ones(3, requires_grad=True)
    (x * 2).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]
