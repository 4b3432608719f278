"""The public subpackages list their API in dir(): no names they only import to work
(`contextlib`, `dataclass`, `Iterator`, `annotations` from `from __future__`)."""

import importlib
import types

import pytest

PACKAGES = [
    "gradstream.memory",
    "gradstream.nn",
    "gradstream.optim",
    "gradstream.utils",
    "gradstream.amp",
    "gradstream.cuda",
    "gradstream.distributed",
    "gradstream.nerf",
    "gradstream.bench",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_dir_lists_the_api_and_submodules_only(name):
    module = importlib.import_module(name)
    public = [n for n in dir(module) if not n.startswith("_")]
    # Submodules are attributes of a package once imported, as torch's are.
    stray = [
        n
        for n in public
        if n not in module.__all__ and not isinstance(getattr(module, n), types.ModuleType)
    ]
    assert stray == [], f"{name} shows names that are not its API: {stray}"
    assert set(module.__all__) <= set(dir(module))


def test_memory_timeline_repr_is_one_short_line():
    from gradstream.memory.timeline import Timeline

    n = 5000
    tl = Timeline(
        time_s=[i * 1e-3 for i in range(n)],
        bytes={"parameter": [2**20] * n, "gradient": [0] * n, "activation": [i for i in range(n)]},
        phases=[("forward", 0.0, 2.0), ("backward", 2.0, 5.0)],
    )
    text = repr(tl)
    assert "\n" not in text and len(text) < 200
    assert "5000 events" in text and "2 phases" in text
    assert "'parameter'" in text and "'gradient'" not in text  # categories that held bytes
    assert f"peak {(2**20 + n - 1) / 2**20:.2f} MiB" in text
