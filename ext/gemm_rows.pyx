# cython: language_level=3
"""A GEMM whose rows of C are split over minitrain's OpenMP threads, each band one
single-threaded BLAS call: for products of about 1-8 million multiply-adds, too small to pay
for waking BLAS's own thread pool (which then spins and takes a core from the next kernel) but
worth both cores.  The caller holds BLAS at one thread while this runs."""
from cython.parallel cimport prange
from scipy.linalg.cython_blas cimport sgemm, dgemm

ctypedef fused real:
    float
    double


def gemm_rows(const real[:, ::1] a, const real[:, ::1] b, real[:, ::1] c, bint trans_a, bint trans_b,
              real alpha, int num_threads, bint accumulate=False):
    """c = alpha * op(a) @ op(b) (op: transpose where asked), or c += that with `accumulate`
    (c holding a bias), C-contiguous operands, rows of c in num_threads bands.  Row-major
    products are column-major ones of the transposes: c^T[:, band] = op(b)^T op(a)^T[:, band],
    with each operand read in place."""
    cdef int m = c.shape[0], n = c.shape[1]
    cdef int k = a.shape[0] if trans_a else a.shape[1]
    cdef int lda = b.shape[1], ldb = a.shape[1], ldc = n
    cdef int band, r0, rows
    cdef real beta = 1 if accumulate else 0
    cdef char tb = b'T' if trans_b else b'N'
    cdef char ta = b'T' if trans_a else b'N'
    if ((a.shape[1] if trans_a else a.shape[0]) != m or (b.shape[0] if trans_b else b.shape[1]) != n
            or (b.shape[1] if trans_b else b.shape[0]) != k):
        raise ValueError(f"gemm_rows: op(a) {tuple(a.shape)} (trans {trans_a}) times op(b) {tuple(b.shape)} "
                         f"(trans {trans_b}) does not make c {tuple(c.shape)}")
    if m == 0 or n == 0:
        return
    if k == 0:
        if not accumulate:
            c[:, :] = 0
        return
    for band in prange(num_threads, nogil=True, schedule="static", num_threads=num_threads):
        r0 = band * m // num_threads
        rows = (band + 1) * m // num_threads - r0
        if rows > 0:
            if real is float:
                sgemm(&tb, &ta, &n, &rows, &k, &alpha, &b[0, 0], &lda,
                      &a[0, 0] + (r0 if trans_a else r0 * ldb), &ldb, &beta, &c[0, 0] + r0 * ldc, &ldc)
            else:
                dgemm(&tb, &ta, &n, &rows, &k, &alpha, &b[0, 0], &lda,
                      &a[0, 0] + (r0 if trans_a else r0 * ldb), &ldb, &beta, &c[0, 0] + r0 * ldc, &ldc)


def gemm_small(const real[:, ::1] a, const real[:, ::1] b, real[:, ::1] c, bint trans_a, bint trans_b, real alpha,
               bint accumulate=False):
    """c = alpha * op(a) @ op(b), or c += that with `accumulate`, in plain loops: for products of
    a few thousand multiply-adds (a classifier's), where a BLAS call's fixed cost, its code and
    buffers out of cache in the middle of a training step, is most of the time."""
    cdef Py_ssize_t m = c.shape[0], n = c.shape[1]
    cdef Py_ssize_t k = a.shape[0] if trans_a else a.shape[1]
    cdef Py_ssize_t i, j, p
    cdef real total
    if ((a.shape[1] if trans_a else a.shape[0]) != m or (b.shape[0] if trans_b else b.shape[1]) != n
            or (b.shape[1] if trans_b else b.shape[0]) != k):
        raise ValueError(f"gemm_small: op(a) {tuple(a.shape)} (trans {trans_a}) times op(b) {tuple(b.shape)} "
                         f"(trans {trans_b}) does not make c {tuple(c.shape)}")
    with nogil:
        for i in range(m):
            for j in range(n):
                total = 0
                for p in range(k):
                    total = total + (a[p, i] if trans_a else a[i, p]) * (b[j, p] if trans_b else b[p, j])
                c[i, j] = alpha * total + c[i, j] if accumulate else alpha * total
