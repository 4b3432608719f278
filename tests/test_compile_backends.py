"""`compile` returns the model as it is; `backends` answers for this build."""

import warnings

import pytest

import gradstream as gs


def test_compile_returns_the_model_and_notes_it_once():
    m = gs.nn.Linear(3, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert gs.compile(m) is m
        assert gs.compile(m, mode="max-autotune") is m
    notes = [w for w in caught if "eagerly" in str(w.message)]
    assert len(notes) <= 1
    x = gs.ones(4, 3)
    assert gs.compile()(m)(x).shape == (4, 2)

    @gs.compile
    def f(t):
        return t * 2

    assert f(gs.ones(2)).tolist() == [2.0, 2.0]
    with pytest.raises(RuntimeError, match="callable"):
        gs.compile(3)


def test_backends_answer_for_this_build(torch_ref):
    assert gs.backends.cuda.is_built() is False
    assert gs.backends.cudnn.is_available() is False
    assert gs.backends.mps.is_available() is False and gs.backends.mps.is_built() is False
    assert gs.backends.mkldnn.is_available() is False
    assert gs.backends.openmp.is_available() is False
    # the switches scripts set exist with PyTorch's defaults
    for name in ("enabled", "benchmark", "deterministic"):
        assert getattr(gs.backends.cudnn, name) == getattr(torch_ref.backends.cudnn, name)
    assert gs.backends.cuda.matmul.allow_tf32 == torch_ref.backends.cuda.matmul.allow_tf32
