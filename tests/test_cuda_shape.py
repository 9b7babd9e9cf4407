"""Identity, Flatten, Reshape, Shape and Transpose on CUDA against the CPU kernels; the views
share their input's device memory as the CPU's share host memory; make_contiguous (the strided
gather behind every non-contiguous device input) on views of every kind and element type."""
import numpy as np
import pytest

from cuda_parity import DTYPES, check_parity
from minitrain import run_node
from minitrain.bfloat16 import BFLOAT16_TYPES
from test_cuda_elementwise import assert_same_error

pytestmark = pytest.mark.cuda


@pytest.fixture(scope="module")
def cuda():
    from minitrain.providers import get_provider
    return get_provider("cuda")


CASES = [("Identity", (2, 3, 4), {}, None), ("Identity", (), {}, None),
         ("Flatten", (2, 3, 4), {"axis": 0}, None), ("Flatten", (2, 3, 4), {"axis": 1}, None),
         ("Flatten", (2, 3, 4), {"axis": 3}, None), ("Flatten", (2, 3, 4), {"axis": -1}, None),
         ("Flatten", (0, 3, 4), {"axis": 1}, None), ("Flatten", (2, 3, 4), {}, 9),
         ("Reshape", (2, 3, 4), [4, -1], None), ("Reshape", (2, 3, 4), [0, -1], None),
         ("Reshape", (2, 3, 4), [2, 3, 4], None), ("Reshape", (2, 3, 4), [-1], None),
         ("Reshape", (0, 4), [0, 2, 2], None), ("Reshape", (2, 3, 4), [6, 4], 5),
         ("Shape", (2, 3, 4), {}, None), ("Shape", (), {}, None), ("Shape", (0, 5), {}, None),
         ("Transpose", (2, 3, 4), {"perm": [2, 0, 1]}, None), ("Transpose", (2, 3, 4), {}, None),
         ("Transpose", (2, 3, 4), {"perm": [0, 1, 2]}, None), ("Transpose", (1, 5, 1, 7), {"perm": [1, 0, 3, 2]}, None),
         ("Transpose", (2, 3, 2, 3, 2, 3, 2, 2), {"perm": [7, 5, 3, 1, 0, 2, 4, 6]}, None),
         ("Transpose", (64, 33), {"perm": [1, 0]}, None), ("Transpose", (0, 3), {"perm": [1, 0]}, None)]


def case_inputs(op, shape, arg, rng):
    x = rng.standard_normal(shape)
    if op == "Reshape":
        return [x, np.array(arg, dtype=np.int64)], None
    return [x], arg


@pytest.mark.parametrize("op,shape,arg,opset", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_parity(op, shape, arg, opset, dtype, rng):
    inputs, attrs = case_inputs(op, shape, arg, rng)
    check_parity(op, inputs, attrs, opset=opset, dtypes=[dtype])


@pytest.mark.parametrize("op,shape,arg,opset", [c for c in CASES if c[1] and 0 not in c[1]])
def test_non_contiguous(op, shape, arg, opset, rng):
    inputs, attrs = case_inputs(op, shape, arg, rng)
    check_parity(op, inputs, attrs, opset=opset, noncontiguous_inputs=True)


def test_reshape_allowzero(rng):
    x = rng.standard_normal((0, 4))
    check_parity("Reshape", [x, np.array([4, 0], dtype=np.int64)], {"allowzero": 1}, opset=14)


def test_views_share_device_memory(cuda, rng):
    x = rng.standard_normal((2, 3, 4))
    dx = cuda.from_numpy(x)
    (same,) = run_node("Identity", [dx], provider="cuda")
    assert same is dx
    (flat,) = run_node("Flatten", [dx], provider="cuda")
    (shaped,) = run_node("Reshape", [dx, np.array([4, -1], dtype=np.int64)], provider="cuda")
    for y, shape in ((flat, (2, 12)), (shaped, (4, 6))):
        assert cuda.is_native(y) and y.shape == shape and int(y.gpudata) == int(dx.gpudata)
        np.testing.assert_array_equal(cuda.to_numpy(y), x.reshape(shape))
    (s,) = run_node("Shape", [dx], provider="cuda")
    assert isinstance(s, np.ndarray) and s.dtype == np.int64 and list(s) == [2, 3, 4]
    (t,) = run_node("Transpose", [dx], attrs={"perm": [1, 2, 0]}, provider="cuda")
    assert cuda.is_native(t) and int(t.gpudata) != int(dx.gpudata)
    np.testing.assert_array_equal(cuda.to_numpy(t), x.transpose(1, 2, 0))


VIEWS = [lambda a: a[:, ::2], lambda a: a[::-1], lambda a: a[1:, 2:7], lambda a: a.transpose((2, 0, 1)),
         lambda a: a[::-2, :, ::-3], lambda a: a[:, 0], lambda a: a.T[1:]]


@pytest.mark.parametrize("dtype", [np.float16, *BFLOAT16_TYPES, np.float32, np.float64, np.int64, np.int32, np.bool_])
@pytest.mark.parametrize("view", range(len(VIEWS)))
def test_make_contiguous(cuda, dtype, view, rng):
    from minitrain.providers.cuda.layout import make_contiguous
    a = (rng.standard_normal((6, 10, 9)) * 5).astype(dtype)
    v = VIEWS[view](cuda.from_numpy(a))
    dense = make_contiguous(cuda, v)
    assert dense.flags.c_contiguous and dense.dtype == a.dtype
    np.testing.assert_array_equal(cuda.to_numpy(dense), VIEWS[view](a))
    np.testing.assert_array_equal(cuda.to_numpy(v), VIEWS[view](a))      # to_numpy gathers too


def test_make_contiguous_high_rank(cuda, rng):
    """Nine dims that merge to at most eight; ten unmergeable dims are refused by name."""
    a = rng.standard_normal((2,) * 10)
    d = cuda.from_numpy(a)
    v = d.transpose((1, 0, 2, 3, 4, 5, 6, 7, 9, 8))[:, :, :, :, :, :, :, :, :, 1:]
    np.testing.assert_array_equal(cuda.to_numpy(v), a.transpose((1, 0, 2, 3, 4, 5, 6, 7, 9, 8))[..., 1:])
    with pytest.raises(ValueError, match="at most 8 dims"):
        cuda.to_numpy(d.transpose((1, 0, 3, 2, 5, 4, 7, 6, 9, 8)))


def test_bad_input():
    x = np.zeros((2, 3, 4))
    assert_same_error("Reshape", [x, np.array([5, -1], dtype=np.int64)])
    assert_same_error("Reshape", [x, np.array([-1, -1], dtype=np.int64)])
    assert_same_error("Transpose", [x], attrs={"perm": [0, 0, 1]})
    assert_same_error("Flatten", [x], attrs={"axis": 4})
