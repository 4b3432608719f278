"""The cache of freed large blocks (src/block_cache.rs): reuse by exact size, zeroed
requests served zeroed, the rule that keeps it from raising the peak, empty_cache, the
switch, and threads. Counters here are the cache's own, so the checks are exact."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradstream as gs
from gradstream import _core, memory

pytestmark = pytest.mark.cpu_backend("the block cache is the CPU allocator's")


MIN = 64 << 10  # the smallest cached block, bytes


def stats():
    """(cached bytes, hits, misses, enabled)"""
    cached, _slack, hits, misses, enabled, _resident, _moved = _core._block_cache_stats()
    return cached, hits, misses, enabled


@pytest.fixture(autouse=True)
def fresh_cache():
    memory.empty_cache()
    yield
    memory.empty_cache()


def test_a_freed_block_is_reused_for_the_same_size():
    n = MIN // 4 * 4  # 4 MIN bytes of float32
    x = gs.ones(n)
    del x
    cached, hits0, _, enabled = stats()
    assert enabled
    assert cached == 4 * n
    assert memory.memory_reserved() == memory.memory_allocated() + 4 * n
    y = gs.full((n,), 3.0)
    cached, hits1, _, _ = stats()
    assert hits1 == hits0 + 1
    assert cached == 0
    assert float(y.sum()) == 3.0 * n


def test_small_blocks_are_not_cached():
    x = gs.ones(MIN // 4 - 1)
    del x
    assert stats()[0] == 0


def test_zeros_from_a_reused_block_are_zero():
    x = gs.full((512, 512), 7.0)  # 1 MiB
    del x
    hits0 = stats()[1]
    z = gs.zeros(512, 512)
    assert stats()[1] == hits0 + 1
    np.testing.assert_array_equal(z.numpy(), np.zeros((512, 512), np.float32))


H = 256  # each block's header, bytes


def resident():
    """(live, cached, high-water mark): resident bytes of large blocks in use, of cached
    blocks, and the mark the cache keeps their sum under."""
    return _core._block_cache_stats()[5]


def test_a_miss_gives_back_the_oldest_blocks_until_it_fits_under_the_high_water_mark():
    live0 = resident()[0]  # the fixture's empty_cache() set the mark to this
    blocks = [gs.ones(MIN // 4 * k) for k in (4, 1, 1)]  # 4, 1 and 1 MIN bytes
    assert resident() == (live0 + 6 * MIN + 3 * H, 0, live0 + 6 * MIN + 3 * H)
    while blocks:  # freed oldest first: the 4 MIN block is the oldest cached
        blocks.pop(0)
    assert resident() == (live0, 6 * MIN + 3 * H, live0 + 6 * MIN + 3 * H)
    misses0 = stats()[2]
    x = gs.ones(MIN // 4 * 5)  # 5 MIN bytes: no cached block of that size or of at most twice
    assert stats()[2] == misses0 + 1
    # Room left under the mark: MIN + 2H. The 4 MIN block and then one 1 MIN block went.
    assert stats()[0] == MIN
    assert resident() == (live0 + 5 * MIN + H, MIN + H, live0 + 6 * MIN + 3 * H)
    y = gs.ones(MIN // 4 * 3)  # 3 MIN more: past the mark, so it rises and nothing is kept
    assert stats()[0] == 0
    assert resident() == (live0 + 8 * MIN + 2 * H, 0, live0 + 8 * MIN + 2 * H)
    del x, y


P = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def mapping(n: int) -> int:
    """The bytes a block of `n` data bytes maps: its header and data, in whole pages."""
    return -(-(H + n) // P) * P


def moved() -> int:
    """Bytes of pages moved from given-back blocks into new ones, since the start."""
    return _core._block_cache_stats()[6]


linux_only = pytest.mark.skipif(sys.platform != "linux", reason="pages move with Linux's mremap")


@linux_only
def test_a_miss_moves_the_start_of_the_oldest_cached_block_and_keeps_its_rest():
    """A miss takes its pages from the cached blocks, oldest first, instead of faulting in
    fresh ones; what the last block has left stays cached, a block of its own."""
    x = gs.full((MIN // 4 * 8,), 7.0)
    del x
    moved0, misses0 = moved(), stats()[2]
    y = gs.zeros(MIN // 4 * 3)  # no cached block of 3 to 6 MIN: a miss
    assert stats()[2] == misses0 + 1
    assert moved() - moved0 == mapping(3 * MIN)
    rest = mapping(8 * MIN) - mapping(3 * MIN) - H
    assert stats()[0] == rest
    assert not y.numpy().any()  # the moved pages held 7.0s
    hits0 = stats()[1]
    z = gs.full((rest // 4,), 2.0)  # the rest, at its size: a hit
    assert stats()[1] == hits0 + 1
    assert stats()[0] == 0
    np.testing.assert_array_equal(z.numpy()[[0, -1]], [2.0, 2.0])
    del y, z


@linux_only
def test_a_miss_gathers_the_pages_of_several_blocks_and_gives_them_on_whole():
    blocks = [gs.full((MIN // 4 * k,), float(k)) for k in (2, 3, 1)]
    del blocks
    moved0 = moved()
    big = gs.full((MIN // 4 * 12,), 5.0)  # past every cached block: a miss that takes all three
    assert moved() - moved0 == sum(mapping(k * MIN) for k in (2, 3, 1))
    assert stats()[0] == 0
    assert (float(big.min()), float(big.max())) == (5.0, 5.0)
    del big
    assert stats()[0] == 12 * MIN
    moved0 = moved()
    z = gs.zeros(MIN // 4 * 13)  # the gathered block, moved piece by piece, then fresh pages
    assert moved() - moved0 == mapping(12 * MIN)
    assert not z.numpy().any()


@linux_only
@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["full", "zeros", "free"]), st.integers(1, 40), st.integers()),
        min_size=1,
        max_size=40,
    )
)
def test_moved_pages_never_alias_a_live_tensor(steps):
    """Any sequence of large allocations (filled or zeroed) and frees, in sizes that split
    and gather blocks: every live tensor keeps its own values."""
    held: list = []
    for i, (kind, quarters, which) in enumerate(steps):
        n = MIN // 16 * quarters + which % 7  # float32s: from a quarter of MIN to 10 MIN
        if kind == "free" and held:
            held.pop(which % len(held))
        elif kind == "zeros":
            held.append((gs.zeros(n), 0.0))
        else:
            held.append((gs.full((n,), float(i + 1)), float(i + 1)))
        for t, v in held:
            a = t.numpy()
            assert a.min() == v and a.max() == v


def test_empty_cache_lowers_the_mark_to_what_is_live():
    keep = gs.ones(MIN // 4 * 2)
    x = gs.ones(MIN // 4 * 8)
    del x
    live, cached, high = resident()
    assert cached == 8 * MIN + H and high == live + cached
    memory.empty_cache()
    assert resident() == (live, 0, live)
    y = gs.ones(MIN // 4)
    del y
    z = gs.ones(MIN // 4 * 3)  # a new mark of live + 3 MIN: the 1 MIN block cannot stay
    assert stats()[0] == 0
    assert resident() == (live + 3 * MIN + H, 0, live + 3 * MIN + H)
    del keep, z


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(1, 12), st.integers(0, 7)),
        min_size=1,
        max_size=30,
    )
)
def test_held_bytes_never_pass_the_most_ever_live(steps):
    """Any sequence of large allocations and frees: live + cached never passes the most
    bytes live at once since the last empty_cache(), which is the peak without a cache."""
    memory.empty_cache()
    live0 = resident()[0]
    most = live0
    held: list = []
    for alloc, pages, which in steps:
        if alloc or not held:
            n = MIN // 4 + pages * 1024 + which  # float32s; sizes near and past page bounds
            held.append(gs.full((n,), float(pages)))
        else:
            held.pop(which % len(held))
        live, cached, high = resident()
        most = max(most, live)
        assert high == most
        assert live + cached <= high
    for t in held:
        assert float(t[-1]) == float(t[0])


def test_a_smaller_request_takes_the_smallest_block_of_at_most_twice_its_size():
    blocks = [gs.ones(MIN // 4 * k) for k in (4, 3, 8)]  # 4, 3 and 8 MIN bytes
    while blocks:
        blocks.pop(0)
    hits0 = stats()[1]
    x = gs.full((MIN // 4 * 2 + 1,), 2.0)  # just over 2 MIN bytes: the 3 MIN block
    assert stats()[1] == hits0 + 1
    assert stats()[0] == 12 * MIN
    slack = _core._block_cache_stats()[1]
    assert slack == 3 * MIN - 4 * (MIN // 4 * 2 + 1)
    assert memory.memory_reserved() == memory.memory_allocated() + stats()[0] + slack
    del x
    assert _core._block_cache_stats()[1] == 0
    assert stats()[0] == 15 * MIN


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux's /proc")
def test_the_idle_tail_of_a_larger_block_is_handed_back_to_the_system():
    """A best-fit hit keeps the block's address range but not the pages past the request, so
    the slack costs no memory; the block serves its full size again afterwards."""
    n = 16 << 20  # 64 MiB of float32
    x = gs.ones(n)
    del x
    rss_cached = _rss_bytes()  # the 64 MiB block is cached, resident
    half = n // 2 + (1 << 18)  # 33 MiB: the 64 MiB block, with 31 MiB idle
    y = gs.full((half,), 3.0)
    assert _core._block_cache_stats()[1] == 4 * (n - half)
    tail = 4 * (n - half)
    assert rss_cached - _rss_bytes() >= tail * 3 // 4
    np.testing.assert_array_equal(y.numpy()[-3:], np.full(3, 3.0, np.float32))
    del y
    hits0 = stats()[1]
    z = gs.zeros(n)  # the same block at its full size: the tail reads as zeros again
    assert stats()[1] == hits0 + 1
    assert not z.numpy().any()
    w = gs.full((n,), 5.0)
    np.testing.assert_array_equal(w.numpy()[::4096], np.full(n // 4096, 5.0, np.float32))
    del z, w


def test_faulting_in_a_handed_back_tail_first_gives_back_other_blocks():
    """Pages a hit will touch that its block no longer holds count like a new mapping: the
    cache first gives back as many bytes of other cached blocks."""
    a = gs.ones(MIN // 4 * 8)  # 8 MIN bytes
    del a
    b = gs.ones(MIN // 4 * 5)  # 5 MIN bytes: served by the 8 MIN block, 3 MIN handed back
    old = gs.ones(MIN // 4 * 3)  # 3 MIN bytes, a block of its own
    del old  # cached first: the oldest
    del b  # the 8 MIN block, cached holding 5 MIN
    assert stats()[0] == 11 * MIN
    hits0 = stats()[1]
    c = gs.ones(MIN // 4 * 8)  # the 8 MIN block at full size again: 3 MIN more pages
    assert stats()[1] == hits0 + 1
    assert stats()[0] == 0  # the 3 MIN block went back to make room for them
    np.testing.assert_array_equal(c.numpy()[::1024], np.ones(MIN // 4 * 8 // 1024, np.float32))
    del c


def test_empty_cache_gives_everything_back():
    xs = [gs.ones(MIN) for _ in range(3)]
    del xs
    assert stats()[0] == 3 * 4 * MIN
    memory.empty_cache()
    assert stats()[0] == 0
    assert memory.memory_reserved() == memory.memory_allocated()


def test_memory_stats_report_the_cache():
    x = gs.ones(MIN)
    del x
    s = memory.memory_stats()
    assert s["block_cache.cached_bytes"] == 4 * MIN
    assert s["reserved_bytes.all.current"] == s["allocated_bytes.all.current"] + 4 * MIN


def test_switched_off_by_the_environment():
    code = (
        "import gradstream as gs; from gradstream import _core\n"
        "x = gs.ones(1 << 20); del x\n"
        "print(_core._block_cache_stats()[:5])"
    )
    env = dict(os.environ, GRADSTREAM_BLOCK_CACHE="0")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "(0, 0, 0, 0, False)"


def test_switching_off_at_run_time_gives_blocks_back():
    x = gs.ones(MIN)
    del x
    _core._set_block_cache(False)
    try:
        assert stats()[0] == 0
        y = gs.ones(MIN)
        del y
        assert stats()[0] == 0
    finally:
        _core._set_block_cache(True)


def test_threads_allocating_and_freeing_large_blocks_get_correct_results():
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(20):
            a = rng.standard_normal((256, 300)).astype(np.float32)
            t = gs.tensor(a) * 2.0 + 1.0
            if not np.allclose(t.numpy(), a * 2.0 + 1.0):
                errors.append(seed)
            del t

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
