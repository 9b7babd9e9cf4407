"""cuBLAS through ctypes: row-major GEMMs on GPUArrays, queued on a provider's stream.

The library is found by cuda-pathfinder and loaded once per process (loader.py).  Every
product goes through cublasGemmEx or cublasGemmStridedBatchedEx with an explicit compute type:
float16 and bfloat16 data accumulate in float32 (CUBLAS_COMPUTE_32F, on the tensor cores, with
float alpha and beta), float32 is strict FP32 unless the provider opted into TF32
(CUBLAS_COMPUTE_32F_FAST_TF32, ONNX Runtime's use_tf32), float64 uses CUBLAS_COMPUTE_64F.

cuBLAS is column-major; a C-contiguous matrix read column-major is its transpose, so the
row-major C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T with the
operands swapped, and nothing is copied.
"""
from __future__ import annotations

import ctypes

import numpy as np

from ....bfloat16 import BFLOAT16_TYPES
from ....errors import MinitrainError
from .loader import SharedLibrary, nvidia_library_path

# cublas_api.h / library_types.h
CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_64F, CUBLAS_COMPUTE_32F_FAST_TF32 = 68, 70, 77
CUDA_R_32F, CUDA_R_64F, CUDA_R_16F, CUDA_R_16BF = 0, 1, 2, 14
CUBLAS_GEMM_DEFAULT = -1

DATA_TYPE = {np.dtype(np.float16): CUDA_R_16F, np.dtype(np.float32): CUDA_R_32F, np.dtype(np.float64): CUDA_R_64F,
             **{dtype: CUDA_R_16BF for dtype in BFLOAT16_TYPES}}
INT_MAX = 2 ** 31 - 1

_p, _i, _ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
_SIGNATURES = {
    "cublasCreate_v2": [ctypes.POINTER(_p)],
    "cublasDestroy_v2": [_p],
    "cublasSetStream_v2": [_p, _p],
    "cublasGemmEx": [_p, _i, _i, _i, _i, _i, _p, _p, _i, _i, _p, _i, _i, _p, _p, _i, _i, _i, _i],
    "cublasGemmStridedBatchedEx": [_p, _i, _i, _i, _i, _i, _p, _p, _i, _i, _ll, _p, _i, _i, _ll, _p,
                                   _p, _i, _i, _ll, _i, _i, _i],
    "cublasGetStatusName": ([_i], ctypes.c_char_p),
}

library = SharedLibrary(lambda: ctypes.CDLL(nvidia_library_path("cublas", "nvidia-cublas")), _SIGNATURES)
"""The cuBLAS shared library with the entry points used here typed (loaded once)."""


class CublasError(MinitrainError, RuntimeError):
    """A cuBLAS call returned a status other than CUBLAS_STATUS_SUCCESS."""


def _check(lib, call, status):
    if status != 0:
        name = lib.cublasGetStatusName(status)
        raise CublasError(f"{call} failed with {name.decode() if name else 'status'} ({status})")


def _ptr(array, offset=0):
    return int(array.gpudata) + offset * array.dtype.itemsize


def _int(value, what):
    if value > INT_MAX:
        raise ValueError(f"cuBLAS: {what} = {value} exceeds the 32-bit limit of cublasGemmEx")
    return int(value)


class CublasHandle:
    """One cuBLAS handle, created once and bound to `stream` (a pycuda Stream); `use_tf32`
    lets float32 products run on TF32 tensor cores."""

    def __init__(self, stream, use_tf32=False):
        self.lib = library()
        self.use_tf32 = bool(use_tf32)
        self.stream = stream
        handle = _p()
        _check(self.lib, "cublasCreate_v2", self.lib.cublasCreate_v2(ctypes.byref(handle)))
        self.handle = handle
        _check(self.lib, "cublasSetStream_v2", self.lib.cublasSetStream_v2(self.handle, _p(stream.handle)))

    def __del__(self):
        handle, self.handle = getattr(self, "handle", None), None
        if handle is not None and handle.value:
            try:
                self.lib.cublasDestroy_v2(handle)
            except Exception:   # interpreter shutdown: the library or context may be gone
                pass

    def compute_type(self, dtype):
        """The cublasComputeType_t that a product of `dtype` data runs with."""
        dtype = np.dtype(dtype)
        if dtype == np.float64:
            return CUBLAS_COMPUTE_64F
        if dtype == np.float32 and self.use_tf32:
            return CUBLAS_COMPUTE_32F_FAST_TF32
        return CUBLAS_COMPUTE_32F

    def _scalars(self, dtype, alpha, beta):
        scalar = ctypes.c_double if np.dtype(dtype) == np.float64 else ctypes.c_float
        return scalar(alpha), scalar(beta)

    def _operands(self, a, b, c, trans_a, trans_b):
        """(m, n, k) of the row-major product and the leading dimensions of a, b, c."""
        rows_a, cols_a = a.shape[-2:]
        rows_b, cols_b = b.shape[-2:]
        m, k = (cols_a, rows_a) if trans_a else (rows_a, cols_a)
        k2, n = (cols_b, rows_b) if trans_b else (rows_b, cols_b)
        if k != k2 or c.shape[-2:] != (m, n):
            raise ValueError(f"cuBLAS: op(A) {m}x{k}, op(B) {k2}x{n} and C {c.shape[-2:]} do not fit")
        if not (a.dtype == b.dtype == c.dtype):
            raise TypeError(f"cuBLAS: operands of different dtypes {a.dtype}, {b.dtype}, {c.dtype}")
        return m, n, k, max(1, cols_a), max(1, cols_b), max(1, n)

    def gemm(self, a, b, c, trans_a=False, trans_b=False, alpha=1.0, beta=0.0, offsets=(0, 0, 0)):
        """c = alpha * op(a) @ op(b) + beta * c for C-contiguous 2-D GPUArrays (the last two
        dims are used; `offsets` are element offsets into a, b, c)."""
        m, n, k, lda, ldb, ldc = self._operands(a, b, c, trans_a, trans_b)
        if m == 0 or n == 0:
            return
        al, be = self._scalars(c.dtype, alpha, beta)
        dt = DATA_TYPE[np.dtype(c.dtype)]
        status = self.lib.cublasGemmEx(
            self.handle, CUBLAS_OP_T if trans_b else CUBLAS_OP_N, CUBLAS_OP_T if trans_a else CUBLAS_OP_N,
            _int(n, "n"), _int(m, "m"), _int(k, "k"), ctypes.byref(al),
            _ptr(b, offsets[1]), dt, _int(ldb, "ldb"), _ptr(a, offsets[0]), dt, _int(lda, "lda"),
            ctypes.byref(be), _ptr(c, offsets[2]), dt, _int(ldc, "ldc"),
            self.compute_type(c.dtype), CUBLAS_GEMM_DEFAULT)
        _check(self.lib, "cublasGemmEx", status)

    def gemm_strided_batched(self, a, b, c, batch, strides, trans_a=False, trans_b=False, alpha=1.0,
                             beta=0.0, offsets=(0, 0, 0)):
        """For i < batch: c[i] = alpha * op(a[i]) @ op(b[i]) + beta * c[i], where matrix i of an
        operand starts `strides` elements after matrix i - 1 (0: the same matrix for every i)
        from its element offset in `offsets`; the matrices' shapes are the last two dims."""
        m, n, k, lda, ldb, ldc = self._operands(a, b, c, trans_a, trans_b)
        if m == 0 or n == 0 or batch == 0:
            return
        al, be = self._scalars(c.dtype, alpha, beta)
        dt = DATA_TYPE[np.dtype(c.dtype)]
        status = self.lib.cublasGemmStridedBatchedEx(
            self.handle, CUBLAS_OP_T if trans_b else CUBLAS_OP_N, CUBLAS_OP_T if trans_a else CUBLAS_OP_N,
            _int(n, "n"), _int(m, "m"), _int(k, "k"), ctypes.byref(al),
            _ptr(b, offsets[1]), dt, _int(ldb, "ldb"), int(strides[1]),
            _ptr(a, offsets[0]), dt, _int(lda, "lda"), int(strides[0]),
            ctypes.byref(be), _ptr(c, offsets[2]), dt, _int(ldc, "ldc"), int(strides[2]),
            _int(batch, "batch"), self.compute_type(c.dtype), CUBLAS_GEMM_DEFAULT)
        _check(self.lib, "cublasGemmStridedBatchedEx", status)
