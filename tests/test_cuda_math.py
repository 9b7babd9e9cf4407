"""Gemm and MatMul on CUDA (cuBLAS) against the CPU kernels: every transpose, alpha, beta and C
broadcast, empty dims, MatMul's 1-D operands and broadcast batch dims (folded into one GEMM,
strided-batched, and mixed broadcasting), device inputs, bad input raising the CPU's errors,
and the TF32 math mode as an opt-in.  Every opset and non-contiguous inputs:
test_op_table.py."""
import numpy as np
import pytest

from cuda_parity import DTYPES, HALF_TYPES, check_parity
from minitrain import run_node
from minitrain.providers import get_provider

pytestmark = pytest.mark.cuda

GEMM_CASES = [  # a shape, b shape, C shape (None: absent), attributes
    ((3, 4), (4, 5), None, {}),
    ((4, 3), (4, 5), (5,), {"transA": 1, "alpha": 0.7, "beta": 1.5}),
    ((3, 4), (5, 4), (3, 5), {"transB": 1, "alpha": -2.0}),
    ((4, 3), (5, 4), (3, 1), {"transA": 1, "transB": 1, "beta": 0.5}),
    ((3, 4), (4, 5), (1,), {"beta": 2.0}),
    ((3, 4), (4, 5), (), {}),
    ((3, 4), (4, 5), (1, 5), {"beta": 0.0}),
    ((64, 130), (130, 33), (33,), {"alpha": 0.5}),
    ((0, 4), (4, 5), (5,), {}),
    ((3, 0), (0, 5), (3, 5), {"beta": 3.0}),
    ((3, 0), (0, 5), None, {}),
    ((3, 4), (4, 0), None, {}),
]
MATMUL_CASES = [
    ((3, 4), (4, 5)),
    ((2, 3, 4), (4, 5)),            # B one matrix: A's batch folds into rows
    ((2, 3, 4), (2, 4, 5)),         # strided-batched
    ((1, 3, 4), (2, 4, 5)),         # A broadcast: stride 0
    ((3, 4), (2, 2, 4, 5)),
    ((2, 1, 3, 4), (1, 3, 4, 5)),   # mixed broadcasting: a loop of strided-batched calls
    ((2, 3, 1, 3, 4), (3, 2, 4, 5)),
    ((4,), (4, 5)),
    ((3, 4), (4,)),
    ((4,), (4,)),
    ((4,), (2, 4, 5)),
    ((2, 3, 4), (4,)),
    ((2, 3, 0), (2, 0, 5)),
    ((2, 0, 4), (4, 5)),
]


def _inputs(rng, shapes):
    return [None if s is None else rng.standard_normal(s) for s in shapes]


@pytest.mark.parametrize("case", range(len(GEMM_CASES)))
@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm(case, dtype, rng):
    a, b, c, attrs = GEMM_CASES[case]
    check_parity("Gemm", _inputs(rng, [a, b, c]), attrs, dtypes=[dtype])


@pytest.mark.parametrize("a_shape,b_shape", MATMUL_CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul(a_shape, b_shape, dtype, rng):
    check_parity("MatMul", _inputs(rng, [a_shape, b_shape]), dtypes=[dtype])


def test_device_inputs_give_device_outputs(rng):
    cuda = get_provider("cuda")
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 5))
    (y,) = run_node("MatMul", [cuda.from_numpy(a), cuda.from_numpy(b)], provider="cuda")
    assert cuda.is_native(y)
    np.testing.assert_allclose(cuda.to_numpy(y), a @ b, rtol=1e-12)
    (z,) = run_node("Gemm", [y.reshape(6, 5), cuda.from_numpy(b)], attrs={"transB": 1}, provider="cuda")
    assert cuda.is_native(z)
    np.testing.assert_allclose(cuda.to_numpy(z), (a @ b).reshape(6, 5) @ b.T, rtol=1e-12)


@pytest.mark.parametrize("op,inputs,attrs", [
    ("Gemm", [np.ones((3, 4)), np.ones((5, 4))], {}),
    ("Gemm", [np.ones((3, 4)), np.ones((4, 5)), np.ones((2, 5))], {}),
    ("Gemm", [np.ones((3, 4, 1)), np.ones((4, 5))], {}),
    ("MatMul", [np.ones((3, 4)), np.ones((5, 6))], None),
    ("MatMul", [np.ones((2, 3, 4)), np.ones((3, 4, 5))], None),
    ("MatMul", [np.ones(()), np.ones((3,))], None),
])
def test_bad_input_raises_the_cpu_error(op, inputs, attrs):
    with pytest.raises(Exception) as cpu:
        run_node(op, inputs, attrs=attrs)
    with pytest.raises(type(cpu.value)) as gpu:
        run_node(op, inputs, attrs=attrs, provider="cuda")
    assert str(gpu.value) == str(cpu.value)


def test_tf32_is_an_opt_in(rng):
    from minitrain.providers.cuda.libs.cublas import (CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32,
                                                      CUBLAS_COMPUTE_64F)
    strict = get_provider("cuda").for_session()
    tf32 = get_provider("cuda").for_session(use_tf32=True)
    assert strict.blas.compute_type(np.float32) == CUBLAS_COMPUTE_32F
    assert strict.blas.compute_type(np.float16) == CUBLAS_COMPUTE_32F
    assert tf32.blas.compute_type(np.float32) == CUBLAS_COMPUTE_32F_FAST_TF32
    for half in HALF_TYPES:
        assert strict.blas.compute_type(half) == tf32.blas.compute_type(half) == CUBLAS_COMPUTE_32F
    assert tf32.blas.compute_type(np.float64) == CUBLAS_COMPUTE_64F
    a, b = rng.standard_normal((64, 256)).astype(np.float32), rng.standard_normal((256, 32)).astype(np.float32)
    (y,) = run_node("Gemm", [a, b], provider=tf32)
    np.testing.assert_allclose(y, a @ b, rtol=2e-2, atol=2e-2 * np.abs(a @ b).max())


@pytest.mark.parametrize("op", ["MatMul", "Gemm"])
@pytest.mark.parametrize("dtype", HALF_TYPES)
def test_sixteen_bit_products_accumulate_in_float32(op, dtype):
    """Sums of 4096 ones: accumulating in the 16-bit type would stop at 256 (bfloat16) or 2048
    (float16), where adding 1 no longer changes the sum."""
    a, b = np.ones((2, 4096), dtype), np.ones((4096, 3), dtype)
    (y,) = run_node(op, [a, b], provider="cuda")
    assert y.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(y.astype(np.float64), np.full((2, 3), 4096.0))
