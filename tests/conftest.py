"""Shared fixtures: PyTorch is the reference where installed; tests that need it skip without it."""

import numpy as np
import pytest

import gradstream as gs

try:
    import torch
except ImportError:  # pragma: no cover - CI always installs it
    torch = None


@pytest.fixture
def torch_ref():
    """PyTorch, or a skip when it is not installed."""
    if torch is None:
        pytest.skip("PyTorch is not installed")
    return torch


@pytest.fixture(autouse=True)
def _seed():
    gs.manual_seed(0)
    np.random.seed(0)
