"""The CPU provider's GEMM (providers/cpu/blas.py): BLAS on its own threads, or its rows split
over the OpenMP threads (ext/gemm_rows.pyx), against NumPy for every transpose and dtype."""
import numpy as np
import pytest

import minitrain
from minitrain._ext import gemm_rows
from minitrain.providers.cpu import blas


def _operands(rng, m, n, k, trans_a, trans_b, dtype):
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(dtype)
    return a, b, (a.T if trans_a else a) @ (b.T if trans_b else b)


@pytest.fixture
def two_threads():
    old = minitrain.get_num_threads()
    minitrain.set_num_threads(2)
    yield
    minitrain.set_num_threads(old)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("m,n,k", [(64, 120, 400), (7, 5, 3), (1, 9, 4), (33, 1, 17)])
def test_split_rows_match_numpy(m, n, k, trans_a, trans_b, dtype, rng, two_threads, monkeypatch):
    """Every product here runs in gemm_rows, split over the threads (its threshold lowered)
    where it has a row per thread, in one band otherwise (a single row); odd row counts
    included; the result is what NumPy's product gives."""
    calls, split = [], gemm_rows.gemm_rows
    monkeypatch.setattr(blas, "SPLIT_GEMM_MACS", 1)
    monkeypatch.setattr(blas, "SMALL_GEMM_MACS", 0)
    monkeypatch.setattr(blas._rows, "gemm_rows", lambda *args: calls.append(args[-1]) or split(*args))
    a, b, want = _operands(rng, m, n, k, trans_a, trans_b, dtype)
    got = blas.gemm(a, b, trans_a, trans_b, alpha=0.5)
    assert calls == [2 if m >= 2 else 1]       # bands
    assert got.shape == (m, n) and got.flags.c_contiguous
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, 0.5 * want, rtol=tol, atol=tol * k)


@pytest.mark.parametrize("threads", [1, 3])
def test_bands_cover_every_row(threads, rng):
    a, b, want = _operands(rng, 10, 6, 5, False, True, np.float64)
    c = np.full((10, 6), np.nan)
    gemm_rows.gemm_rows(a, b, c, False, True, 1.0, threads)
    np.testing.assert_allclose(c, want, rtol=1e-12)


def test_empty_depth_gives_zeros(rng):
    c = np.full((4, 3), np.nan, dtype=np.float32)
    gemm_rows.gemm_rows(np.zeros((4, 0), np.float32), np.zeros((0, 3), np.float32), c, False, False, 1.0, 2)
    assert not c.any()


def test_mismatched_shapes_are_refused():
    with pytest.raises(ValueError, match="does not make c"):
        gemm_rows.gemm_rows(np.zeros((4, 5)), np.zeros((6, 3)), np.zeros((4, 3)), False, False, 1.0, 2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (False, True), (True, False), (True, True)])
def test_small_products_run_in_plain_loops(trans_a, trans_b, dtype, monkeypatch):
    """A product below SMALL_GEMM_MACS (a classifier's) is gemm_small's, with or without a bias."""
    calls, small = [], gemm_rows.gemm_small
    monkeypatch.setattr(blas._rows, "gemm_small", lambda *args: calls.append(args[-1]) or small(*args))
    rng = np.random.default_rng(3)
    a = rng.standard_normal((8, 16) if trans_a else (16, 8)).astype(dtype)
    b = rng.standard_normal((10, 8) if trans_b else (8, 10)).astype(dtype)
    bias = rng.standard_normal(10).astype(dtype)
    want = 0.5 * (a.T if trans_a else a) @ (b.T if trans_b else b)
    np.testing.assert_allclose(blas.gemm(a, b, trans_a, trans_b, alpha=0.5), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(blas.gemm(a, b, trans_a, trans_b, alpha=0.5, bias=bias), want + bias, rtol=1e-5,
                               atol=1e-5)
    assert calls == [False, True]
    with pytest.raises(ValueError, match="does not make"):
        gemm_rows.gemm_small(a, b, np.zeros((3, 3), dtype), trans_a, trans_b, 1.0)
