"""Softmax / LogSoftmax and their gradients (both ONNX forms) on CUDA against the CPU kernels:
test_softmax.py's shapes and axes at opsets 11 and 13, covering each kernel layout (a warp per
row for rows up to 1024 at each register width, a block per longer row, a thread per strided
line for an inner opset-13 axis), huge inputs, non-contiguous and device inputs, and bad
input raising the CPU's errors."""
import numpy as np
import pytest

from cuda_parity import DTYPES, check_parity
from minitrain import run_node
from test_cuda_elementwise import assert_same_error

pytestmark = pytest.mark.cuda

MS = "com.microsoft"
SHAPES_AXES = [((7,), 0), ((5, 130), -1), ((5, 130), 0), ((3, 4, 70), 1), ((2, 3, 4, 67), 2), ((3, 100, 2), 0),
               ((2, 3, 5), -3), ((40, 1000), -1), ((12, 3000), 1), ((9, 1), 1), ((6, 33), 1), ((6, 64), 1),
               ((5, 200), 1), ((3, 500), 1), ((3, 1024), 1), ((3, 1025), 1), ((2, 5, 3000), 1), ((0, 4), 1)]


def grad_op(op, opset):
    return f"{op}Grad" + ("" if opset < 13 else "_13")


@pytest.mark.parametrize("shape,axis", SHAPES_AXES)
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_and_gradient(shape, axis, op, opset, dtype, rng):
    x = rng.standard_normal(shape) * 4
    check_parity(op, [x], {"axis": axis}, opset=opset, dtypes=[dtype])
    (y,) = run_node(op, [x], attrs={"axis": axis}, opset=opset)
    dy = rng.standard_normal(shape)
    check_parity(grad_op(op, opset), [dy, y], {"axis": axis}, domain=MS, dtypes=[dtype])


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("width", [4, 2000])
def test_stable_for_huge_inputs(op, dtype, axis, width):
    x = np.tile(np.array([[1e4, 1e4 - 1, -1e4, 0.0], [-3e4, -3e4, -3e4, -3e4], [800, 0, -800, 1e30]]), (1, width // 4))
    x = x if axis == 1 else x.T.copy()
    check_parity(op, [x], {"axis": axis}, opset=13, dtypes=[dtype])


@pytest.mark.parametrize("shape,axis", [((4, 10), 1), ((4, 10, 3), 1), ((3, 2000), 1)])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_non_contiguous(shape, axis, op, rng):
    x = rng.standard_normal(shape)
    check_parity(op, [x], {"axis": axis}, opset=13, noncontiguous_inputs=True)
    (y,) = run_node(op, [x], attrs={"axis": axis}, opset=13)
    check_parity(grad_op(op, 13), [rng.standard_normal(shape), y], {"axis": axis}, domain=MS,
                 noncontiguous_inputs=True)


def test_device_tensors_stay_on_device(rng):
    from minitrain.providers import get_provider
    cuda = get_provider("cuda")
    x = rng.standard_normal((6, 50))
    (y,) = run_node("Softmax", [cuda.from_numpy(x)], attrs={"axis": 1}, provider="cuda")
    assert cuda.is_native(y)
    (dx,) = run_node("SoftmaxGrad_13", [cuda.from_numpy(x), y], attrs={"axis": 1}, domain=MS, provider="cuda")
    assert cuda.is_native(dx)
    y_cpu = run_node("Softmax", [x], attrs={"axis": 1})[0]
    np.testing.assert_allclose(cuda.to_numpy(y), y_cpu, rtol=1e-12)
    np.testing.assert_allclose(cuda.to_numpy(dx), run_node("SoftmaxGrad_13", [x, y_cpu], attrs={"axis": 1},
                                                           domain=MS)[0], rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("op,domain", [("Softmax", ""), ("LogSoftmax", ""), ("SoftmaxGrad", MS),
                                       ("SoftmaxGrad_13", MS), ("LogSoftmaxGrad", MS), ("LogSoftmaxGrad_13", MS)])
def test_bad_input(op, domain):
    inputs = [np.zeros((2, 3))] * (2 if domain else 1)
    assert_same_error(op, inputs, attrs={"axis": 2}, domain=domain)
    assert_same_error(op, inputs, attrs={"axis": -3}, domain=domain)
    if domain:
        assert_same_error(op, [np.zeros((2, 3)), np.zeros((3, 2))], domain=domain)
    else:
        assert_same_error(op, [np.zeros((2, 3), dtype=np.int32)])
