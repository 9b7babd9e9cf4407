"""Broadcasting arithmetic (Add, Sub, Mul, Div), Neg, Sum and SumToShape on CUDA against the
CPU kernels: the op table's broadcast patterns and more (ranks up to 6, scalars, both operands
broadcast), each SumToShape kernel (a block per output when the innermost axis is summed,
columns otherwise, the few-columns kernel), device inputs, misaligned device views (the unvectorised path), and bad
input raising the CPU's errors.  Every opset and non-contiguous inputs: test_op_table.py."""
import numpy as np
import pytest

from cuda_parity import DTYPES, check_parity
from minitrain import run_node

pytestmark = pytest.mark.cuda

MS = "com.microsoft"

BROADCASTS = [((2, 3), (2, 3)), ((2, 3, 4), (4,)), ((2, 3, 4), (3, 1)), ((3, 1), (1, 4)), ((4,), (2, 3, 4)),
              ((2, 1, 4), (1, 3, 1)), ((), (2, 3)), ((5,), ()), ((1, 3), (3,)), ((33, 1031), (33, 1031)),
              ((2, 1, 3, 1, 5, 2), (4, 3, 1, 5, 1)), ((8, 16, 9, 9), (16, 1, 1)), ((0, 3), (3,))]


def assert_same_error(op, inputs, **kwargs):
    """The CUDA kernel rejects `inputs` with the CPU kernel's error type and message."""
    with pytest.raises(Exception) as cpu:
        run_node(op, inputs, provider="cpu", **kwargs)
    with pytest.raises(type(cpu.value)) as gpu:
        run_node(op, inputs, provider="cuda", **kwargs)
    assert str(gpu.value) == str(cpu.value)


def divisor(rng, shape):
    """Magnitudes in [0.5, 2.5): quotients stay well inside float16's range."""
    return np.asarray(rng.uniform(0.5, 2.5, shape) * rng.choice([-1.0, 1.0], shape))


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("a_shape,b_shape", BROADCASTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_binary(op, a_shape, b_shape, dtype, rng):
    a = rng.standard_normal(a_shape)
    b = divisor(rng, b_shape) if op == "Div" else rng.standard_normal(b_shape)
    check_parity(op, [a, b], dtypes=[dtype])


@pytest.mark.parametrize("shape", [(7,), (33, 1031), (0, 4), ()])
@pytest.mark.parametrize("dtype", DTYPES)
def test_neg(shape, dtype, rng):
    check_parity("Neg", [rng.standard_normal(shape)], dtypes=[dtype])


@pytest.mark.parametrize("shapes", [[(2, 3, 4)], [(2, 3, 4), (4,)], [(2, 3, 4), (4,), (3, 1)],
                                    [(3, 1), (1, 4), (2, 3, 4)], [(5, 6)] * 4, [(1,), (7, 1), (1, 1, 9), (2, 1, 1)]])
@pytest.mark.parametrize("dtype", DTYPES)
def test_sum(shapes, dtype, rng):
    check_parity("Sum", [rng.standard_normal(s) for s in shapes], dtypes=[dtype])


SUM_TO_SHAPE = [((2, 3, 4), (4,)), ((2, 3, 4), (3, 1)), ((2, 3, 4), (1,)), ((2, 3, 4), ()), ((2, 3, 4), (2, 1, 4)),
                ((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (1, 3, 4)), ((64, 10), (10,)), ((4000, 3), (3,)),
                ((8, 16, 32, 32), (1, 16, 1, 1)), ((5, 3000), (5, 1)), ((3, 1, 5), (1, 1, 1)), ((1, 1), ()),
                ((2, 3, 4, 5, 6, 7), (3, 1, 5, 1, 1)), ((0, 4), (4,)), ((4, 0), (1, 0)),
                ((16, 32, 32, 8), (8,)), ((9000, 7), (1, 7)), ((5000, 64), (64,))]    # few columns, many rows


@pytest.mark.parametrize("x_shape,shape", SUM_TO_SHAPE)
@pytest.mark.parametrize("dtype", DTYPES)
def test_sum_to_shape(x_shape, shape, dtype, rng):
    check_parity("SumToShape", [rng.standard_normal(x_shape), np.array(shape, dtype=np.int64)], domain=MS,
                 dtypes=[dtype])


def test_device_tensors_stay_on_device(rng):
    from minitrain.providers import get_provider
    cuda = get_provider("cuda")
    a, b = rng.standard_normal((8, 3, 5)), divisor(rng, (3, 1))
    da, db = cuda.from_numpy(a), cuda.from_numpy(b)
    for op, ref in (("Add", a + b), ("Sub", a - b), ("Mul", a * b), ("Div", a / b)):
        (c,) = run_node(op, [da, db], provider="cuda")
        assert cuda.is_native(c) and c.shape == ref.shape
        np.testing.assert_allclose(cuda.to_numpy(c), ref, rtol=1e-14)
    (s,) = run_node("SumToShape", [da, np.array([3, 5], dtype=np.int64)], domain=MS, provider="cuda")
    assert cuda.is_native(s)
    np.testing.assert_allclose(cuda.to_numpy(s), a.sum(axis=0), rtol=1e-13)
    (same,) = run_node("SumToShape", [da, np.array([8, 3, 5], dtype=np.int64)], domain=MS, provider="cuda")
    assert int(same.gpudata) == int(da.gpudata)     # nothing summed: a view, as on the CPU


@pytest.mark.parametrize("dtype", DTYPES)
def test_misaligned_and_strided_device_views(dtype, rng):
    """Views one element into an allocation (no 16-byte packs) and strided device views."""
    from minitrain.providers import get_provider
    cuda = get_provider("cuda")
    a, b = rng.standard_normal(1001).astype(dtype), rng.standard_normal(1001).astype(dtype)
    da, db = cuda.from_numpy(a), cuda.from_numpy(b)
    (c,) = run_node("Mul", [da[1:], db[:-1]], provider="cuda")
    rtol = {"float16": 1e-3, "bfloat16": 8e-3}.get(dtype, 1e-12)
    np.testing.assert_allclose(cuda.to_numpy(c).astype(np.float64), (a[1:] * b[:-1]).astype(np.float64), rtol=rtol)
    (n,) = run_node("Neg", [da[3::2]], provider="cuda")
    np.testing.assert_array_equal(cuda.to_numpy(n), -a[3::2])


def test_bad_input():
    assert_same_error("Add", [np.zeros((2, 3)), np.zeros((4,))])
    assert_same_error("Div", [np.zeros((2, 3)), np.zeros((2, 3), np.float32)])
    assert_same_error("Sum", [np.zeros((2, 3)), np.zeros((3, 2))])
    assert_same_error("SumToShape", [np.zeros((2, 3)), np.array([2], dtype=np.int64)], domain=MS)
    assert_same_error("SumToShape", [np.zeros((2, 3)), np.array([1, 2, 3], dtype=np.int64)], domain=MS)
