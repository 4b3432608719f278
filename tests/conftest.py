"""Shared fixtures: PyTorch is the reference where installed; tests that need it skip without it."""

import numpy as np
import pytest
from hypothesis import settings

import gradstream as gs

# The property tests draw the same examples on every run (CI must not turn red on a new
# random draw); `pytest --hypothesis-profile=explore` draws fresh ones, and `long` many more.
settings.register_profile("fixed", derandomize=True, deadline=None)
settings.register_profile("explore", deadline=None)
settings.register_profile("long", max_examples=1000, deadline=None)
settings.load_profile("fixed")

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
