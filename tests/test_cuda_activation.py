"""The elementwise activations and their com.microsoft gradients on CUDA against the CPU
kernels: every op and alpha that test_activation.py covers, sizes that leave pack tails, huge
and non-finite inputs (NaN handled as the CPU does), device inputs, misaligned device views
(the unvectorised path), and bad input raising the CPU's errors.  Every opset and
non-contiguous inputs: test_op_table.py."""
import numpy as np
import pytest

from cuda_parity import DTYPES, HALF_TYPES, check_parity
from minitrain import run_node
from test_cuda_elementwise import assert_same_error

pytestmark = pytest.mark.cuda

MS = "com.microsoft"
# op: (domain, gradient op, forward tensor the gradient reads)
OPS = {"Relu": ("", "ReluGrad", "X"), "Sigmoid": ("", "SigmoidGrad", "Y"), "Tanh": ("", "TanhGrad", "Y"),
       "LeakyRelu": ("", "LeakyReluGrad", "Y"), "QuickGelu": (MS, "QuickGeluGrad", "X")}
ALPHAS = {"LeakyRelu": [None, 0.2, -0.5, 0.0], "QuickGelu": [None, 1.0, -0.3]}
CASES = [(op, alpha) for op in OPS for alpha in ALPHAS.get(op, [None])]
SHAPES = [(5,), (33, 1031), (4, 1024), (2, 3, 4, 5), (0, 3)]


def attrs_of(alpha):
    return None if alpha is None else {"alpha": alpha}


@pytest.mark.parametrize("op,alpha", CASES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_and_gradient(op, alpha, shape, dtype, rng):
    domain, grad_op, reads = OPS[op]
    x = rng.standard_normal(shape) * 3
    y = check_parity(op, [x], attrs_of(alpha), domain=domain, dtypes=[dtype])[0]
    dy = rng.standard_normal(shape)
    marker = x if reads == "X" else y.astype(np.float64)
    check_parity(grad_op, [dy, marker], attrs_of(alpha), domain=MS, dtypes=[dtype])


def check_extremes(op, inputs, attrs, domain, dtype):
    """check_parity without its tolerance scaled by the largest output (here huge or inf):
    each element to the relative tolerance, tiny ones (an exp the CPU flushes to 0) absolutely."""
    device_inputs = [x.astype(dtype) for x in inputs]
    cpu_inputs = [x.astype(np.float32) for x in device_inputs] if dtype in HALF_TYPES else device_inputs
    (expected,) = run_node(op, cpu_inputs, attrs=attrs, domain=domain)
    (got,) = run_node(op, device_inputs, attrs=attrs, domain=domain, provider="cuda")
    assert got.dtype == np.dtype(dtype)
    rtol, atol = {"float16": (2e-3, 1e-6), "bfloat16": (1.6e-2, 1e-6), "float32": (1e-5, 1e-30),
                  "float64": (1e-10, 1e-300)}[dtype]
    np.testing.assert_allclose(got.astype(np.float64), expected.astype(dtype).astype(np.float64), rtol=rtol,
                               atol=atol, err_msg=f"{op} {dtype}")
    return got


@pytest.mark.parametrize("op,alpha", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_huge_and_non_finite_inputs(op, alpha, dtype):
    """The gradients read what the graph gives them: X, or the forward Y (in range)."""
    big = 6e4 if dtype == "float16" else 1e30
    x = np.array([-big, -1e4, -200, -89, -88, -1e-6, 0.0, 1e-6, 88, 89, 200, 1e4, big, np.inf, -np.inf, np.nan])
    domain, grad_op, reads = OPS[op]
    y = check_extremes(op, [x], attrs_of(alpha), domain, dtype)
    dy = np.array([1.0, -2.0, np.nan, 0.5] * 4)
    check_extremes(grad_op, [dy, x if reads == "X" else y.astype(np.float64)], attrs_of(alpha), MS, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_device_and_misaligned_inputs(dtype, rng):
    """Device inputs give device outputs; views one element into an allocation take the
    element-by-element path and agree with the 16-byte packs of aligned copies."""
    from minitrain.providers import get_provider
    cuda = get_provider("cuda")
    rtol = {"float16": 1e-3, "bfloat16": 8e-3, "float32": 1e-6, "float64": 1e-14}[dtype]
    x, dy = rng.standard_normal(4099).astype(dtype), rng.standard_normal(4099).astype(dtype)
    x_dev, dy_dev = cuda.from_numpy(x), cuda.from_numpy(dy)
    for op, (domain, grad_op, _) in OPS.items():
        (packed,) = run_node(grad_op, [cuda.from_numpy(dy[1:]), cuda.from_numpy(x[1:])], domain=MS, provider="cuda")
        (shifted,) = run_node(grad_op, [dy_dev[1:], x_dev[1:]], domain=MS, provider="cuda")
        assert cuda.is_native(packed) and cuda.is_native(shifted)
        np.testing.assert_allclose(cuda.to_numpy(shifted), cuda.to_numpy(packed), rtol=rtol, atol=1e-30)
        (y,) = run_node(op, [x_dev[1:]], domain=domain, provider="cuda")
        (expected,) = run_node(op, [x[1:]], domain=domain, provider="cuda")
        np.testing.assert_allclose(cuda.to_numpy(y), expected, rtol=rtol, atol=1e-30)


@pytest.mark.parametrize("op", sorted(OPS))
def test_bad_input(op):
    _, grad_op, _ = OPS[op]
    assert_same_error(grad_op, [np.zeros((2, 3)), np.zeros((3, 2))], domain=MS)
    assert_same_error(grad_op, [np.zeros((2, 3)), np.zeros((2, 3), dtype=np.float32)], domain=MS)
    assert_same_error(grad_op, [np.zeros((2, 3), dtype=np.int64), np.zeros((2, 3), dtype=np.int64)], domain=MS)
    assert_same_error("LeakyRelu", [np.zeros(3)], attrs={"beta": 1.0})
