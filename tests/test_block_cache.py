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

import gradstream as gs
from gradstream import _core, memory

MIN = 64 << 10  # the smallest cached block, bytes


def stats():
    """(cached bytes, hits, misses, enabled)"""
    cached, _slack, hits, misses, enabled = _core._block_cache_stats()
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


def test_a_miss_gives_back_at_least_what_it_asks_before_mapping():
    """Reserved bytes (live + cached) never grow while the cache holds enough to give back."""
    blocks = [gs.ones(MIN // 4 * k) for k in (1, 2, 3)]  # 1, 2, 3 × 4 MIN bytes
    while blocks:  # freed in this order: the smallest first, the oldest
        blocks.pop(0)
    cached0 = stats()[0]
    assert cached0 == 6 * MIN
    reserved0 = memory.memory_reserved()
    misses0 = stats()[2]
    big = gs.ones(MIN // 4 * 7)  # no cached block has this size, or half of it
    assert stats()[2] == misses0 + 1
    # The oldest blocks went back until >= 7 MIN bytes were released: 4 + 8 + 12 MIN.
    assert stats()[0] == 0
    # More was asked than the cache held: everything went back first, so what is held is
    # what is live, as without a cache.
    assert memory.memory_reserved() == memory.memory_allocated()
    assert memory.memory_allocated() - reserved0 <= 7 * MIN
    del big


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
        "print(_core._block_cache_stats())"
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
