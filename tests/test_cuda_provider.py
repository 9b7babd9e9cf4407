"""The CUDA provider itself: device tensors, copies both ways in every element type, the
session's own stream and pool, the primary context, and placement of a mixed plan."""
import numpy as np
import pytest

from minitrain import Executor, Graph, run_node
from minitrain.bfloat16 import BFLOAT16_TYPES
from minitrain.ops.schema import schema
from minitrain.providers import get_provider
from minitrain.registry import register_kernel
from minitrain.scheduler import schedule

pytestmark = pytest.mark.cuda

DTYPES = [np.float16, *BFLOAT16_TYPES, np.float32, np.float64, np.int64, np.bool_]


@pytest.fixture(scope="module")
def cuda():
    return get_provider("cuda")


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_zeros_and_copy_into(cuda, dtype):
    a = (np.arange(24).reshape(2, 3, 4) % 3).astype(dtype)
    d = cuda.from_numpy(a)
    assert cuda.is_native(d) and not cuda.is_native(a)
    assert d.shape == a.shape and d.dtype == a.dtype
    np.testing.assert_array_equal(cuda.to_numpy(d), a)
    z = cuda.zeros(a.shape, dtype)
    np.testing.assert_array_equal(cuda.to_numpy(z), np.zeros_like(a))
    cuda.copy_into(z, d)
    np.testing.assert_array_equal(cuda.to_numpy(z), a)
    cuda.copy_into(z, np.zeros_like(a))
    np.testing.assert_array_equal(cuda.to_numpy(z), np.zeros_like(a))


@pytest.mark.parametrize("dtype", DTYPES)
def test_uploads_and_fetches_in_every_element_type(cuda, dtype):
    """The pinned rings of capture/uploads.py (small and large arrays) and capture/fetch.py."""
    for shape in ((3,), (40, 50)):
        a = (np.arange(np.prod(shape)).reshape(shape) % 7).astype(dtype)
        up = cuda.uploaded(lambda: a, shape, dtype)
        assert up.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(cuda.to_numpy(up), a)
        fetched = cuda.fetch_async({"a": cuda.from_numpy(a)})["a"]
        assert fetched.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(fetched, a)


def test_non_contiguous_and_empty_arrays(cuda):
    a = np.arange(40, dtype=np.float32).reshape(5, 8)[:, ::2]
    np.testing.assert_array_equal(cuda.to_numpy(cuda.from_numpy(a)), a)
    empty = cuda.from_numpy(np.zeros((0, 3), np.float32))
    assert cuda.to_numpy(empty).shape == (0, 3)
    assert cuda.to_numpy(cuda.from_numpy(np.float64(2.5))) == 2.5


def test_a_session_provider_has_its_own_stream_and_pool_in_the_primary_context(cuda):
    import pycuda.driver as driver
    session = cuda.for_session()
    assert session.stream is not cuda.stream and session.pool is not cuda.pool
    assert session.context is cuda.context
    assert driver.Context.get_current() is not None
    freed = session.from_numpy(np.ones(1 << 20, np.float32))
    del freed
    assert session.pool.held_blocks >= 1, "a freed block returns to the session's pool"


def test_host_copies_are_nodes_of_the_plan(cuda):
    g = Graph(name="copies")
    g.add_input("x", np.float32, (2, 3))
    g.add_initializer("shape", np.array([3, 2], np.int64))
    g.add_node("Reshape", ["x", "shape"], ["y"])
    g.outputs = ["y"]
    plan = schedule(g, providers="cuda")
    assert [p for _, _, p in plan.placement()] == ["cuda"], plan.describe()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = Executor(plan).run({"x": x})["y"]
    np.testing.assert_array_equal(out, x.reshape(3, 2))


def test_run_node_keeps_device_tensors_on_the_device(cuda):
    x = np.linspace(-1, 1, 10).astype(np.float32)
    (y,) = run_node("Relu", [cuda.from_numpy(x)], provider="cuda")
    assert cuda.is_native(y)
    np.testing.assert_array_equal(cuda.to_numpy(y), np.maximum(x, 0))
    (y,) = run_node("Relu", [x], provider="cuda")
    assert isinstance(y, np.ndarray)


TEST_DOMAIN = "test.cpu_only"


@schema("CpuOnlyDouble", domain=TEST_DOMAIN, inputs=["X"], outputs=["Y"])
def _infer_cpu_only(ctx):
    """Y = 2 X, an op only the CPU serves (to exercise the fallback)."""
    return [ctx.out(ctx.shape(0))]


@register_kernel("CpuOnlyDouble", domain=TEST_DOMAIN)
def _cpu_only_double(ctx):
    assert isinstance(ctx.inputs[0], np.ndarray)
    return {"Y": 2 * ctx.inputs[0]}


def test_an_op_only_the_cpu_serves_falls_back_with_copies(cuda):
    g = Graph(opset_imports={TEST_DOMAIN: 1}, name="fallback")
    g.add_input("x", np.float32, ("N", 4))
    r = g.add_node("Relu", ["x"], ["r"])
    d = g.add_node("CpuOnlyDouble", [r], ["d"], domain=TEST_DOMAIN)
    g.add_node("Sigmoid", [d], ["y"])
    g.outputs = ["y"]
    plan = schedule(g, providers="cuda")
    assert [(op, p) for _, op, p in plan.placement()] == [
        ("Relu", "cuda"), ("MemcpyToHost", "cuda"), ("CpuOnlyDouble", "cpu"), ("MemcpyFromHost", "cuda"),
        ("Sigmoid", "cuda")], plan.describe()
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    out = Executor(plan).run({"x": x}, to_host=False)["y"]
    assert cuda.is_native(out)
    np.testing.assert_allclose(cuda.to_numpy(out), 1 / (1 + np.exp(-2 * np.maximum(x, 0))), rtol=1e-6)
