"""A Linear layer over the last axis as PyTorch exports it (Transpose of W, MatMul, Add of the bias,
Mul by a layer scale) -> minitrain's Linear and one LinearGrad (fusion/linear.py, ops/linear.py),
and the narrow float32 GEMMs under their CPU kernels (ext/gemm_narrow.pyx): hand-built graphs fuse
with and without bias and scale and give the nodes' values, a second reader, a kept value or
another perm leaves them apart, and the exported ConvNeXt trains with four Linear and four
LinearGrad nodes to the unfused losses."""
import dataclasses

import numpy as np
import pytest
from test_fusion import op_counts
from test_gelu_fusion import assert_same_losses

import minitrain
from minitrain import run_node
from minitrain._ext import gemm_narrow
from minitrain.executor import Executor
from minitrain.fusion import fuse, fuse_forward, linear
from minitrain.fusion.rewrite import Rewrite
from minitrain.graph import Graph
from minitrain.providers.cpu import blas
from minitrain.scheduler import schedule

FUSED = "ai.minitrain.fused"


# ------------------------------------------------------------------------------ the narrow GEMMs
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("m, k, n", [(4096, 8, 16), (4096, 16, 8), (257, 3, 8), (1001, 21, 16), (300, 40, 16),
                                     (6, 17, 8), (0, 3, 8)])
def test_narrow_gemms_against_numpy(m, k, n, threads, rng):
    x, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    d, bias = rng.standard_normal((m, n)).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    x64, b64, d64 = (v.astype(np.float64) for v in (x, b, d))
    y = np.empty((m, n), np.float32)
    gemm_narrow.rows(x, b, bias, y, 0.5, threads)
    np.testing.assert_allclose(y, 0.5 * x64 @ b64 + bias, rtol=1e-5, atol=1e-5)
    scale = rng.standard_normal(n).astype(np.float32)
    gemm_narrow.rows(x, b, bias, y, 0.5, threads, scale)
    np.testing.assert_allclose(y, 0.5 * (x64 @ b64) * scale + bias, rtol=1e-5, atol=1e-5)
    gemm_narrow.rows(x, b, None, y, 1.0, threads)
    np.testing.assert_allclose(y, x64 @ b64, rtol=1e-5, atol=1e-5)
    c = np.full((k, n), np.nan, np.float32)
    gemm_narrow.tn(x, d, c, 2.0, threads)
    np.testing.assert_allclose(c, 2.0 * x64.T @ d64, rtol=1e-5, atol=1e-6 * max(m, 1))   # float32 sums of m


def test_narrow_gemms_refuse_other_widths_and_mismatched_operands():
    with pytest.raises(ValueError, match="10 wide"):
        gemm_narrow.rows(np.zeros((4, 3), np.float32), np.zeros((3, 10), np.float32), None,
                         np.zeros((4, 10), np.float32), 1.0, 1)
    with pytest.raises(ValueError, match="does not make"):
        gemm_narrow.tn(np.zeros((4, 3), np.float32), np.zeros((5, 8), np.float32), np.zeros((3, 8), np.float32),
                       1.0, 1)


@pytest.mark.skipif(not gemm_narrow.FAST, reason="a build without AVX keeps these products on BLAS")
def test_blas_gemm_runs_wide_row_products_on_the_narrow_kernels(monkeypatch, rng):
    calls, rows, tn = [], gemm_narrow.rows, gemm_narrow.tn
    monkeypatch.setattr(blas._narrow, "rows", lambda *args: calls.append("rows") or rows(*args))
    monkeypatch.setattr(blas._narrow, "tn", lambda *args: calls.append("tn") or tn(*args))
    a, b = rng.standard_normal((512, 16)).astype(np.float32), rng.standard_normal((16, 8)).astype(np.float32)
    bias, scale = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    np.testing.assert_allclose(blas.gemm(a, b, bias=bias, scale=scale), (a @ b) * scale + bias, rtol=1e-5, atol=1e-5)
    d = rng.standard_normal((512, 8)).astype(np.float32)
    np.testing.assert_allclose(blas.gemm(a, d, trans_a=True, alpha=0.5), 0.5 * a.T @ d, rtol=1e-5, atol=1e-4)
    blas.gemm(a[:100], b)                                       # too few rows: BLAS
    blas.gemm(a.astype(np.float64), b.astype(np.float64))       # float64: BLAS
    blas.gemm(a, rng.standard_normal((16, 10)).astype(np.float32))       # 10 wide: BLAS
    assert calls == ["rows", "tn"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("large", [False, True])
def test_blas_gemm_adds_a_bias_row(dtype, large, rng):
    """The bias written into the product before the GEMM adds to it, and a scale of its columns,
    on every path of gemm."""
    m, k, n = (600, 300, 70) if large else (40, 6, 10)
    a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((n, k)).astype(dtype)
    bias, scale = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
    got = blas.gemm(a, b, trans_b=True, alpha=2.0, bias=bias)
    np.testing.assert_allclose(got, 2.0 * a @ b.T + bias, rtol=1e-4, atol=1e-4)
    got = blas.gemm(a, b, trans_b=True, alpha=2.0, bias=bias, scale=scale)
    np.testing.assert_allclose(got, 2.0 * (a @ b.T) * scale + bias, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------ the kernels
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x_shape, n", [((2, 16, 16, 8), 16), ((3, 300, 16), 8), ((5, 7), 3)])
def test_linear_kernels_against_numpy(x_shape, n, dtype, rng):
    x = rng.standard_normal(x_shape).astype(dtype)
    w, bias = rng.standard_normal((n, x_shape[-1])).astype(dtype), rng.standard_normal(n).astype(dtype)
    scale = rng.standard_normal(n).astype(dtype)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for b, s in ((bias, scale), (bias, None), (None, scale), (None, None)):
        y = run_node("Linear", [x, w, b, s], domain=FUSED)[0]
        z = x64 @ w64.T + (0.0 if b is None else b)
        np.testing.assert_allclose(y, z * (1.0 if s is None else s), rtol=tol, atol=tol)
        dy = rng.standard_normal(y.shape).astype(dtype)
        dx, dw, db, ds = run_node("LinearGrad", [dy, x, w, b, s], domain=FUSED)
        dz = dy.astype(np.float64) * (1.0 if s is None else s)
        rows_dz, rows_x = dz.reshape(-1, n), x64.reshape(-1, x_shape[-1])
        np.testing.assert_allclose(dx, dz @ w64, rtol=tol, atol=tol)
        np.testing.assert_allclose(dw, rows_dz.T @ rows_x, rtol=tol * 10, atol=tol * 10)
        np.testing.assert_allclose(db, rows_dz.sum(axis=0), rtol=tol * 10, atol=tol * 10)
        np.testing.assert_allclose(ds, (dy * z).reshape(-1, n).sum(axis=0), rtol=tol * 10, atol=tol * 10)
    only_dw = run_node("LinearGrad", [dy, x, w], domain=FUSED, outputs=["dW"])
    assert len(only_dw) == 1 and only_dw[0].shape == w.shape


def test_linear_refuses_mismatched_inputs():
    with pytest.raises(minitrain.errors.ShapeError, match="last dim"):
        run_node("Linear", [np.zeros((2, 3, 4)), np.zeros((5, 3))], domain=FUSED)
    with pytest.raises(minitrain.errors.ShapeError, match="'B'"):
        run_node("Linear", [np.zeros((2, 3, 4)), np.zeros((5, 4)), np.zeros(4)], domain=FUSED)
    with pytest.raises(minitrain.errors.ShapeError, match="'dY'"):
        run_node("LinearGrad", [np.zeros((2, 3, 4)), np.zeros((2, 3, 4)), np.zeros((5, 4))], domain=FUSED)


# ------------------------------------------------------------------------------ the rule
def linear_graph(bias=True, perm=(1, 0), bias_first=False, x_shape=("N", 5, 4), outputs=6, scale=False):
    """Y = MatMul(X, Transpose(W)) (+ B) (* S), as PyTorch exports a Linear layer on an N-D input
    (with a layer scale after it)."""
    graph = Graph(opset_imports={"": 17}, name="linear_pattern")
    graph.add_input("X", np.float32, x_shape)
    graph.add_input("W", np.float32, (outputs, 4))
    graph.add_node("Transpose", ["W"], ["WT"], {"perm": list(perm)} if perm is not None else {})
    last = "P"
    graph.add_node("MatMul", ["X", "WT"], [last])
    if bias:
        graph.add_input("B", np.float32, (outputs,))
        graph.add_node("Add", ["B", last] if bias_first else [last, "B"], ["Q"])
        last = "Q"
    if scale:
        graph.add_input("S", np.float32, (outputs,))
        graph.add_node("Mul", ["S", last] if bias_first else [last, "S"], ["R"])
        last = "R"
    graph.add_node("Identity", [last], ["Y"])
    graph.outputs = ["Y"]
    return graph


def run_graph(graph, feeds):
    return Executor(schedule(graph, ["Y"], ("cpu",))).run(feeds)["Y"]


@pytest.mark.parametrize("scale", [False, True])
@pytest.mark.parametrize("bias, bias_first", [(True, False), (True, True), (False, False)])
@pytest.mark.parametrize("perm", [(1, 0), None])
def test_transpose_matmul_bias_and_scale_become_one_linear(bias, bias_first, perm, scale, rng):
    graph = linear_graph(bias, perm, bias_first, scale=scale)
    fused = fuse_forward(graph)
    assert op_counts(fused) == {"Linear": 1, "Identity": 1}
    assert fused.nodes[0].inputs[2:] == (["B"] if bias else [""] if scale else []) + (["S"] if scale else [])
    feeds = {"X": rng.standard_normal((3, 5, 4)).astype(np.float32), "W": rng.standard_normal((6, 4)).astype(np.float32)}
    feeds.update({name: rng.standard_normal(6).astype(np.float32) for name, used in (("B", bias), ("S", scale))
                  if used})
    np.testing.assert_allclose(run_graph(fused, feeds), run_graph(graph, feeds), rtol=1e-6, atol=1e-6)
    assert op_counts(fuse(graph)) == {"Linear": 1, "Identity": 1}


def test_what_does_not_fit_stays():
    assert "Linear" not in op_counts(fuse_forward(linear_graph(perm=(0, 1), outputs=4)))
    assert "Linear" not in op_counts(fuse_forward(linear_graph(), ["Y", "WT"]))
    assert op_counts(fuse_forward(linear_graph(), ["Y", "P"])) == {"Linear": 1, "Add": 1, "Identity": 1}
    assert op_counts(fuse_forward(linear_graph(scale=True), ["Y", "Q"])) == {"Linear": 1, "Mul": 1, "Identity": 1}
    second = linear_graph()
    second.add_node("Relu", ["WT"], ["R"])
    second.outputs.append("R")
    assert "Linear" not in op_counts(fuse_forward(second))
    two_d = linear_graph(x_shape=("N", 4))
    assert op_counts(fuse_forward(two_d)) == {"Linear": 1, "Identity": 1}
    vector = linear_graph(x_shape=(4,))
    assert "Linear" not in op_counts(fuse_forward(vector))


@pytest.mark.parametrize("moved", ["Linear", "LinearGrad"])
def test_no_linear_where_it_or_its_gradient_runs_elsewhere(moved, monkeypatch):
    real = Rewrite.kernel_for

    def elsewhere(self, op_type, domain, dtype):
        kdef = real(self, op_type, domain, dtype)
        return dataclasses.replace(kdef, provider="cuda") if op_type == moved else kdef
    monkeypatch.setattr(Rewrite, "kernel_for", elsewhere)
    assert "Linear" not in op_counts(fuse_forward(linear_graph()))


def test_exported_convnext_trains_to_the_unfused_losses(monkeypatch, rng):
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from family_plans import INPUT, exported_session
    from model_families import CLASSES
    fused = exported_session("convnext", "training", "cpu")
    counts = op_counts(fused.train_plan.graph)
    assert counts["Linear"] == counts["LinearGrad"] == 4 and not {"MatMul", "Mul", "MulGrad"} & set(counts)
    monkeypatch.setattr(minitrain.fusion, "FORWARD_RULES",
                        tuple(r for r in minitrain.fusion.FORWARD_RULES if r is not linear))
    monkeypatch.setattr(minitrain.fusion, "RULES", tuple(r for r in minitrain.fusion.RULES if r is not linear))
    plain = exported_session("convnext", "training", "cpu")
    assert op_counts(plain.train_plan.graph)["MatMul"] == 4
    x, y = rng.standard_normal(INPUT).astype(np.float32), rng.integers(0, CLASSES, INPUT[0])
    assert_same_losses(fused, plain, x, y)
