"""Provider assignment and copy nodes, on the CPU: a fake device provider whose tensors wrap
NumPy arrays serves a few ops, so the scheduler's placement (first provider with a kernel,
copies where an edge crosses memories, host-resident inputs) is checked without a GPU."""
import textwrap

import numpy as np
import pytest

import minitrain.providers as providers
from minitrain import Executor, Graph
from minitrain.ops.memcpy import ANY_TYPES
from minitrain.providers.base import Provider
from minitrain.registry import register_kernel
from minitrain.scheduler import schedule
from stubbed_cuda import run_stubbed


class FakeTensor:
    def __init__(self, array):
        self.array = np.ascontiguousarray(array)
        self.shape, self.dtype = self.array.shape, self.array.dtype


class FakeDevice(Provider):
    name = "fake"

    def from_numpy(self, array):
        return FakeTensor(np.array(array))

    def to_numpy(self, value):
        return value.array.copy()

    def is_native(self, value):
        return isinstance(value, FakeTensor)

    def empty(self, shape, dtype):
        return FakeTensor(np.empty(shape, dtype))

    def fill_zero(self, value):
        value.array.fill(0)

    def copy_into(self, dst, src):
        np.copyto(dst.array, src.array if self.is_native(src) else src)

    def synchronize(self):
        pass


PROVIDER = FakeDevice()
FLOATS = (np.float32, np.float64)


def _kernel(fn, output):
    def kernel(ctx):
        for x in ctx.inputs:
            assert x is None or isinstance(x, FakeTensor), f"{ctx.op_type} got {type(x).__name__} on the device"
        return {output: FakeTensor(fn(*[x.array for x in ctx.inputs]))}
    return kernel


register_kernel("Relu", since=6, provider="fake", dtypes=FLOATS)(_kernel(lambda x: np.maximum(x, 0), "Y"))
register_kernel("Add", since=7, provider="fake", dtypes=FLOATS)(_kernel(np.add, "C"))


@register_kernel("Reshape", since=5, provider="fake", dtypes=FLOATS, host_inputs=(1,))
def _reshape(ctx):
    assert isinstance(ctx.inputs[1], np.ndarray), "Reshape's shape must arrive in host memory"
    return {"reshaped": FakeTensor(ctx.inputs[0].array.reshape([int(d) for d in ctx.inputs[1]]))}


@register_kernel("MemcpyFromHost", provider="fake", dtypes=ANY_TYPES, host_inputs=(0,))
def _from_host(ctx):
    return {"Y": PROVIDER.from_numpy(ctx.inputs[0])}


@register_kernel("MemcpyToHost", provider="fake", dtypes=ANY_TYPES, host_outputs=("Y",))
def _to_host(ctx):
    return {"Y": PROVIDER.to_numpy(ctx.inputs[0])}


@pytest.fixture(autouse=True)
def fake_provider(monkeypatch):
    monkeypatch.setitem(providers._MODULES, "fake", __name__)


def graph():
    """relu -> Softmax (no fake kernel: falls back to the CPU) -> Add -> Reshape(shape const)."""
    g = Graph(name="mixed")
    g.add_input("x", np.float32, (2, 3))
    g.add_initializer("b", np.arange(6, dtype=np.float32).reshape(2, 3))
    g.add_initializer("shape", np.array([3, 2], dtype=np.int64))
    r = g.add_node("Relu", ["x"], ["r"])
    s = g.add_node("Softmax", [r], ["s"], {"axis": 1})
    a = g.add_node("Add", [s, "b"], ["a"])
    g.add_node("Reshape", [a, "shape"], ["y"])
    g.outputs = ["y"]
    return g


def expected(x):
    r = np.maximum(x, 0)
    e = np.exp(r - r.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True) + np.arange(6, dtype=np.float32).reshape(2, 3)).reshape(3, 2)


def test_nodes_run_on_the_first_provider_with_a_kernel_and_copies_cross_memories():
    plan = schedule(graph(), providers=["fake", "cpu"])
    placed = [(op, provider) for _, op, provider in plan.placement()]
    assert placed == [("Relu", "fake"), ("MemcpyToHost", "fake"), ("Softmax", "cpu"),
                      ("MemcpyFromHost", "fake"), ("Add", "fake"), ("Reshape", "fake")]
    assert plan.locations["x"] == "fake" and plan.locations["b"] == "fake"
    assert plan.locations["shape"] == "cpu", "a value only read from host memory stays there"
    assert "Softmax" in plan.describe() and "cpu" in plan.describe()


def test_mixed_plan_computes_what_the_cpu_plan_does():
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    mixed = Executor(schedule(graph(), providers=["fake", "cpu"]))
    np.testing.assert_allclose(mixed.run({"x": x})["y"], expected(x), rtol=1e-6)
    on_device = mixed.run({"x": FakeTensor(x)}, to_host=False)["y"]
    assert isinstance(on_device, FakeTensor), "to_host=False leaves fetches where they live"
    np.testing.assert_allclose(on_device.array, expected(x), rtol=1e-6)
    np.testing.assert_allclose(Executor(schedule(graph())).run({"x": x})["y"], expected(x), rtol=1e-6)


def test_a_cpu_plan_has_no_copies():
    plan = schedule(graph())
    assert all(provider == "cpu" for _, _, provider in plan.placement())
    assert not any(op.startswith("Memcpy") for _, op, _ in plan.placement())


def test_a_provider_list_without_host_memory_is_refused():
    assert not PROVIDER.host_memory and providers.get_provider("cpu").host_memory
    g = Graph(name="relu")
    g.add_input("x", np.float32, (2, 3))
    g.add_node("Relu", ["x"], ["y"])
    g.outputs = ["y"]
    with pytest.raises(ValueError, match=r"\['fake'\]: none keeps its values in host memory"):
        schedule(g, providers=["fake"])


def test_a_feed_of_the_wrong_dtype_is_refused():
    with pytest.raises(TypeError, match="'x' is declared float32, fed float64"):
        Executor(schedule(graph())).run({"x": np.ones((2, 3))})


def test_a_plan_for_cuda_registers_the_cuda_kernels_first():
    """schedule(graph, providers="cuda") in a fresh process, before any get_provider("cuda"),
    places the node on the device: naming the provider loads its kernels (pycuda stubbed)."""
    found = run_stubbed(textwrap.dedent("""
        import json
        import numpy as np
        from minitrain import Graph
        from minitrain.scheduler import schedule
        g = Graph(name="relu")
        g.add_input("x", np.float32, (2, 3))
        g.add_node("Relu", ["x"], ["y"])
        g.outputs = ["y"]
        print(json.dumps([provider for _, _, provider in schedule(g, providers="cuda").placement()]))
        """))
    assert found == ["cuda"]
