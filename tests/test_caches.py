"""The shape-keyed caches are bounded LRUs with one setting (minitrain.set_cache_limit,
MINITRAIN_CACHE_LIMIT), stay correct when they evict, and take lookups from several threads."""
import threading

import numpy as np
import pytest

import minitrain
from minitrain import Executor, Graph, caches, inference, run_node
from minitrain.ops import conv_geometry
from minitrain.providers import plan_cache
from minitrain.providers.cpu import conv as cpu_conv
from minitrain.scheduler import schedule

MS = "com.microsoft"


@pytest.fixture
def limit():
    """set_cache_limit for the test, the old limit restored after it."""
    old = minitrain.cache_limit()
    yield minitrain.set_cache_limit
    minitrain.set_cache_limit(old)


def test_lru_keeps_the_most_recently_used(limit):
    limit(3)
    cache = caches.LRUCache("test")
    for k in "abc":
        cache.put(k, k.upper())
    assert cache.get("a") == "A"            # a is now the most recent: b goes first
    cache.put("d", "D")
    assert [cache.get(k) for k in "abcd"] == ["A", None, "C", "D"]
    built = []
    assert cache.get_or_build("e", lambda: built.append(1) or "E") == "E"
    assert cache.get_or_build("e", lambda: built.append(1) or "E") == "E"
    assert built == [1] and len(cache) == 3


def test_lookups_race_evictions_safely(limit):
    """Lookups take no lock: with threads putting and evicting around them, a lookup gives the
    entry of its key or None, never another's entry or an error."""
    limit(2)
    cache, errors = caches.LRUCache("test race"), []

    def work(seed):
        try:
            for i in range(20000):
                key = (seed * 7 + i) % 5
                value = cache.get(key)
                assert value is None or value == key * 10
                if value is None:
                    cache.put(key, key * 10)
        except Exception as e:      # reported by the main thread
            errors.append(e)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(cache) <= 2


def test_set_cache_limit_trims_now_and_scales(limit):
    limit(8)
    plain, scaled = caches.LRUCache("test plain"), caches.LRUCache("test scaled", scale=2)
    for i in range(20):
        plain.put(i, i)
        scaled.put(i, i)
    assert (len(plain), len(scaled)) == (8, 16)
    limit(2)
    assert (len(plain), len(scaled)) == (2, 4)
    assert plain.get(19) == 19 and plain.get(17) is None


def test_kernel_caches_stay_bounded_and_correct(limit, rng):
    limit(2)
    w = rng.standard_normal((4, 3, 3, 3))
    for size in range(6, 14):
        x = rng.standard_normal((2, 3, size, size))
        (y,) = run_node("Conv", [x, w], attrs={"pads": [1, 1, 1, 1]})
        (dx,) = run_node("ConvGrad", [np.ones_like(y), x, w], domain=MS, outputs=["dX"],
                         attrs={"pads": [1, 1, 1, 1]})
        strided = {"pads": [1, 1, 1, 1], "strides": [2, 2]}      # its data gradient has a plan of its own
        half = (size - 1) // 2 + 1
        (dxs,) = run_node("ConvGrad", [np.ones((2, 4, half, half)), x, w], domain=MS, outputs=["dX"], attrs=strided)
        (p,) = run_node("AveragePool", [x], attrs={"kernel_shape": [3, 3], "strides": [2, 2]})
        # a direct sum of one output point of each, against the cached plans' results
        assert np.isclose(y[1, 2, 0, 0], np.sum(x[1, :, :2, :2] * w[2, :, 1:, 1:]))
        assert np.isclose(dx[0, 1, 0, 0], np.sum(w[:, 1, :2, :2]))
        assert np.isclose(dxs[0, 1, 0, 0], np.sum(w[:, 1, 1, 1]))
        assert np.isclose(p[1, 0, 0, 0], x[1, 0, :3, :3].mean())
    for cache in (cpu_conv.direct_plan.cache, cpu_conv.data_grad_plan.cache, conv_geometry._cached.cache,
                  plan_cache._PLANS):
        assert 0 < len(cache) <= 2, cache.name
    assert len(inference._CHECKED) <= 2 * inference._CHECKED.scale


def test_step_output_shapes_bounded(limit, rng):
    limit(2)
    g = Graph()
    g.add_input("x", np.float64, ("N", 2, 8, 8))
    g.outputs.append(g.add_node("MaxPool", ["x"], attrs={"kernel_shape": [2, 2], "strides": [2, 2]}))
    ex = Executor(schedule(g))
    for n in range(1, 6):
        x = rng.standard_normal((n, 2, 8, 8))
        (y,) = ex.run({"x": x}).values()
        np.testing.assert_array_equal(y, x.reshape(n, 2, 4, 2, 4, 2).max(axis=(3, 5)))
    step = ex.plan.steps[0]
    assert len(step._shape_cache) == 2
    assert step.output_shapes({"N": 5}) == {"Y": (5, 2, 4, 4)}


def test_clear_caches_empties_them(rng):
    run_node("Conv", [rng.standard_normal((2, 3, 6, 6)), rng.standard_normal((4, 3, 3, 3))])
    assert len(cpu_conv.direct_plan.cache) > 0
    minitrain.clear_caches()
    assert len(cpu_conv.direct_plan.cache) == 0 and len(inference._CHECKED) == 0
