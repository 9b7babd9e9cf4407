"""bfloat16 on the host (minitrain/bfloat16.py): its arrays pass the schemas' and the registry's
dtype checks and reach a kernel registered for them (a fake device provider here, the CUDA
provider on a GPU), autodiff treats bfloat16 values as differentiable, and the CPU provider,
which has no bfloat16 kernel, refuses them with an error that says where they run."""
import numpy as np
import pytest

from minitrain import Graph, run_node
from minitrain.autodiff import build_gradient_graph
from minitrain.bfloat16 import BFLOAT16, is_float
from minitrain.errors import KernelNotFoundError
from minitrain.ops.schema import FLOAT_TYPES, GRAPH_FLOAT_TYPES
from minitrain.providers.base import Provider
from minitrain.registry import register_kernel, registered_kernels

pytestmark = pytest.mark.skipif(BFLOAT16 is None, reason="ml_dtypes is not installed")


class HostDevice(Provider):
    """A device provider whose tensors are NumPy arrays: what a kernel receives is what the
    registry and the schema let through."""
    name = "bf16-device"

    def from_numpy(self, array):
        return np.array(array)

    def to_numpy(self, value):
        return np.array(value)

    def is_native(self, value):
        return isinstance(value, np.ndarray)

    def empty(self, shape, dtype):
        return np.empty(shape, dtype)

    def fill_zero(self, value):
        value.fill(0)

    def copy_into(self, dst, src):
        np.copyto(dst, src)

    def synchronize(self):
        pass


DEVICE = HostDevice()
received = []


@register_kernel("Relu", since=6, provider=DEVICE.name, dtypes=(np.float32, BFLOAT16))
def _relu(ctx):
    received.append(ctx.dtype)
    x = ctx.inputs[0]
    return {"Y": np.maximum(x.astype(np.float32), 0).astype(x.dtype)}


def test_bfloat16_is_a_float_type_of_graphs_but_not_of_the_cpu():
    assert is_float(BFLOAT16) and is_float(np.float16) and not is_float(np.int32)
    assert BFLOAT16 in GRAPH_FLOAT_TYPES and BFLOAT16 not in FLOAT_TYPES
    assert not [k for k in registered_kernels() if k.provider == "cpu" and BFLOAT16 in k.type_constraints["T"]]


def test_bfloat16_arrays_reach_a_kernel_registered_for_them():
    x = np.array([-1.5, 0.0, 2.0, 3.140625], np.float32).astype(BFLOAT16)
    received.clear()
    (y,) = run_node("Relu", [x], provider=DEVICE)
    assert received == [BFLOAT16]
    assert y.dtype == BFLOAT16
    np.testing.assert_array_equal(y.astype(np.float32), [0.0, 0.0, 2.0, 3.140625])


@pytest.mark.parametrize("op,inputs", [
    ("Relu", [np.ones(3)]),
    ("Conv", [np.ones((1, 1, 3, 3)), np.ones((1, 1, 2, 2))]),
    ("Gemm", [np.ones((2, 3)), np.ones((3, 4))]),
])
def test_bfloat16_on_the_cpu_is_refused_naming_the_dtype_and_the_cuda_provider(op, inputs):
    with pytest.raises(KernelNotFoundError, match=f"'{op}'.*provider 'cpu' dtype bfloat16.*'cuda' provider only"):
        run_node(op, [x.astype(BFLOAT16) for x in inputs])


def test_autodiff_differentiates_through_bfloat16_values():
    g = Graph(name="bf16")
    g.add_input("x", BFLOAT16, (2, 3))
    g.add_initializer("w", np.ones((3, 4), np.float32).astype(BFLOAT16))
    g.add_node("MatMul", ["x", "w"], ["y"])
    g.add_node("ReduceSum", ["y"], ["loss"], {"keepdims": 0})
    g.outputs = ["loss"]
    _, grads = build_gradient_graph(g, "loss", ["w"])
    assert grads["w"] is not None, "no gradient reaches w through the bfloat16 MatMul"
