"""A vector broadcast over a tensor on the CPU (minitrain._ext.broadcast): Add, Sub and Mul of a
per-channel or squeeze-excitation vector against NumPy, and Mul's gradient fused
(fusion/mul_grad.py, the MulGrad op of ops/fused.py) against the Mul, Identity, Shape and
SumToShape nodes it replaces, finite differences and PyTorch; the rule's conditions on
hand-built graphs, and an exported MobileNetV3 trained with the rule against the same session
without it."""
import dataclasses

import numpy as np
import pytest
from test_fusion import op_counts

import minitrain
from minitrain import run_node
from minitrain.autodiff import build_gradient_graph
from minitrain.errors import ShapeError
from minitrain.executor import Executor
from minitrain.fusion import fuse, mul_grad
from minitrain.fusion.rewrite import Rewrite
from minitrain.gradcheck import numeric_gradient
from minitrain.graph import Graph
from minitrain.ops.fused import FUSED_DOMAIN
from minitrain.scheduler import schedule

# (the tensor's shape, the vector's): a squeeze-excitation gate, a per-channel vector, a vector
# of the middle axes, a long bias of the last axis (inner 1), odd sizes for the vector tails
VECTOR_SHAPES = [((4, 6, 5, 3), (4, 6, 1, 1)), ((3, 5, 4, 4), (1, 5, 1, 1)), ((2, 3, 4, 5), (3, 4, 1)),
                 ((7, 33), (33,)), ((3, 17, 9), (17, 1))]


def unfused_mul_grad(dy, a, b):
    """ops/elementwise.py's gradient nodes of Mul(A, B), one at a time."""
    return [run_node("SumToShape", [run_node("Mul", [dy, other])[0], np.array(like.shape, np.int64)],
                     domain="com.microsoft")[0] for other, like in ((b, a), (a, b))]


@pytest.mark.parametrize("shapes", VECTOR_SHAPES)
@pytest.mark.parametrize("op,ufunc", [("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_broadcast_vector_is_numpys(shapes, op, ufunc, dtype, threads, rng):
    x, v = (rng.standard_normal(s).astype(dtype) for s in shapes)
    for args in ((x, v), (v, x)):
        got = run_node(op, list(args))[0]
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, ufunc(*args))


def test_broadcast_vector_takes_views(rng):
    x, v = rng.standard_normal((4, 6, 10, 3)), rng.standard_normal((4, 6, 1, 2))
    np.testing.assert_array_equal(run_node("Mul", [x[:, :, ::2], v[..., :1]])[0], x[:, :, ::2] * v[..., :1])


@pytest.mark.parametrize("shapes", VECTOR_SHAPES + [((2, 3), (3,)), ((2, 3), (2, 3)), ((3,), (2, 3))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mul_grad_is_the_unfused_nodes(shapes, dtype, threads, rng):
    """dA bit for bit; dB to the rounding of a sum in another order."""
    a_shape, b_shape = shapes
    out_shape = np.broadcast_shapes(a_shape, b_shape)
    dy, a, b = (rng.standard_normal(s).astype(dtype) for s in (out_shape, a_shape, b_shape))
    expected_da, expected_db = unfused_mul_grad(dy, a, b)
    da, db = run_node("MulGrad", [dy, a, b], domain=FUSED_DOMAIN)
    assert da.dtype == db.dtype == dtype and da.shape == a_shape and db.shape == b_shape
    np.testing.assert_array_equal(da, expected_da)
    np.testing.assert_allclose(db, expected_db, rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=(1e-5 if dtype == np.float32 else 1e-12) * np.abs(dy).sum())
    assert np.array_equal(run_node("MulGrad", [dy, a, b], domain=FUSED_DOMAIN, outputs=["dB"])[0], db)
    assert np.array_equal(run_node("MulGrad", [dy, a, b], domain=FUSED_DOMAIN, outputs=["dA"])[0], da)


def test_mul_grad_takes_views_and_empty_tensors(rng):
    dy, a, b = rng.standard_normal((3, 4, 8)), rng.standard_normal((3, 4, 8)), rng.standard_normal((3, 4, 2))
    got = run_node("MulGrad", [dy[..., ::2], a[..., 1::2], b[..., :1]], domain=FUSED_DOMAIN)
    for g, e in zip(got, unfused_mul_grad(dy[..., ::2], a[..., 1::2], b[..., :1])):
        np.testing.assert_allclose(g, e, rtol=1e-13, atol=1e-13)
    da, db = run_node("MulGrad", [np.ones((0, 3, 2)), np.ones((0, 3, 2)), np.ones((1, 3, 1))], domain=FUSED_DOMAIN)
    assert da.shape == (0, 3, 2) and np.array_equal(db, np.zeros((1, 3, 1)))


def test_mul_grad_against_finite_differences(rng):
    """dA, dB: the gradients of sum(dY * A * B) in A and B, float64 central differences."""
    dy, a, b = rng.standard_normal((2, 3, 4, 4)), rng.standard_normal((2, 3, 4, 4)), rng.standard_normal((2, 3, 1, 1))
    da, db = run_node("MulGrad", [dy, a, b], domain=FUSED_DOMAIN)

    def loss(x, y):
        return float(np.sum(dy * run_node("Mul", [x, y])[0]))
    np.testing.assert_allclose(da, numeric_gradient(lambda p: loss(p[0], b), [a.copy()]), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(db, numeric_gradient(lambda p: loss(a, p[0]), [b.copy()]), rtol=1e-6, atol=1e-8)


def test_mul_grad_against_torch(rng):
    torch = pytest.importorskip("torch")
    dy, a, b = rng.standard_normal((4, 8, 5, 5)), rng.standard_normal((4, 8, 5, 5)), rng.standard_normal((4, 8, 1, 1))
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (ta * tb).backward(torch.tensor(dy))
    da, db = run_node("MulGrad", [dy, a, b], domain=FUSED_DOMAIN)
    np.testing.assert_allclose(da, ta.grad.numpy(), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(db, tb.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_mul_grad_checks_its_inputs(rng):
    dy = rng.standard_normal((2, 3, 4))
    with pytest.raises(ShapeError, match=r"MulGrad.*input 'B' \(2, 4\) does not broadcast to input 'dY' \(2, 3, 4\)"):
        run_node("MulGrad", [dy, dy, rng.standard_normal((2, 4))], domain=FUSED_DOMAIN)


def test_broadcast_kernels_refuse_buffers_that_do_not_fit():
    from minitrain._ext import broadcast
    x = np.ones(12)
    with pytest.raises(ValueError, match=r"no binary op 'div'"):
        broadcast.binary("div", x, x[:3], x, 4, 3, 1, False, 1)
    with pytest.raises(ValueError, match=r"layout \(2, 3, 2\) does not match buffers of 12 and 4"):
        broadcast.binary("mul", x, x[:4], x, 2, 3, 2, False, 1)
    with pytest.raises(ValueError, match=r"mul_grad: buffers of 12 \(dy\), 6 \(a\)"):
        broadcast.mul_grad(x, x[:6], x[:3], None, x[:3].copy(), 2, 3, 2, 1)
    with pytest.raises(TypeError, match="'a' must not be None"):
        broadcast.mul_grad(x, None, x[:3], None, None, 2, 3, 2, 1)


# ------------------------------------------------------------------------------ the rule on hand-built graphs
def gated_graph(gate_first=False, gate_shape=("N", 3, 1, 1)):
    """loss = sum(W * X * S) for X (N, 3, 4, 4) and a gate S, with the gradients of X and S."""
    g = Graph(opset_imports={"": 13}, name="gated")
    g.add_input("X", np.float64, ("N", 3, 4, 4))
    g.add_input("S", np.float64, gate_shape)
    g.add_input("W", np.float64, ("N", 3, 4, 4))
    g.add_node("Mul", ["S", "X"] if gate_first else ["X", "S"], ["Y"])
    g.add_node("Mul", ["Y", "W"], ["Z"])
    g.add_node("ReduceSum", ["Z"], ["loss"], {"keepdims": 0})
    g.outputs = ["loss"]
    graph, grads = build_gradient_graph(g, "loss", ["X", "S"])
    return graph, [grads["X"], grads["S"]]


def gated_feeds(rng, gate_shape=(2, 3, 1, 1)):
    return {"X": rng.standard_normal((2, 3, 4, 4)), "S": rng.standard_normal(gate_shape),
            "W": rng.standard_normal((2, 3, 4, 4))}


def run_graph(graph, feeds, fetch):
    return Executor(schedule(graph, fetch, ("cpu",))).run(feeds)


@pytest.mark.parametrize("gate_first", [False, True])
def test_the_gradient_of_a_gate_becomes_one_mul_grad(gate_first, rng):
    graph, fetch = gated_graph(gate_first)
    fused = fuse(graph, fetch)
    counts, before = op_counts(fused), op_counts(graph)
    assert counts["MulGrad"] == 1 and "SumToShape" not in counts and counts["Identity"] == before["Identity"] - 1
    node = next(n for n in fused.nodes if n.op_type == "MulGrad")
    assert node.inputs[1:] == ["X", "S"] and node.outputs == fetch
    feeds = gated_feeds(rng)
    got, expected = run_graph(fused, feeds, fetch), run_graph(graph, feeds, fetch)
    for name in fetch:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-13, atol=1e-13)


def test_a_gate_of_the_full_shape_stays(rng):
    graph, fetch = gated_graph(gate_shape=("N", 3, 4, 4))
    assert "MulGrad" not in op_counts(fuse(graph, fetch))


def test_a_kept_product_stays():
    graph, fetch = gated_graph()
    summed = next(n for n in graph.nodes if n.op_type == "SumToShape" and n.inputs[1] != "")
    assert "MulGrad" not in op_counts(fuse(graph, fetch + [summed.inputs[0]]))


def test_no_mul_grad_on_another_provider_than_the_nodes(monkeypatch):
    real = Rewrite.kernel_for

    def mul_grad_elsewhere(self, op_type, domain, dtype):
        kdef = real(self, op_type, domain, dtype)
        return dataclasses.replace(kdef, provider="cuda") if op_type == "MulGrad" else kdef
    monkeypatch.setattr(Rewrite, "kernel_for", mul_grad_elsewhere)
    graph, fetch = gated_graph()
    assert "MulGrad" not in op_counts(fuse(graph, fetch))


# ------------------------------------------------------------------------------ sessions
def test_exported_mobilenet_v3_gate_gradients_fuse(monkeypatch, rng):
    """Each squeeze-excitation Mul's gradient is one MulGrad, and training gives the parameters
    of the plan without the rule (to the rounding of the gate gradients' sums)."""
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from family_plans import INPUT, exported_session
    from model_families import CLASSES
    fused = exported_session("mobilenet_v3", "training", "cpu")
    counts = op_counts(fused.train_plan.graph)
    assert counts["MulGrad"] == 2 and "SumToShape" not in {n.op_type for n in fused.train_plan.graph.nodes
                                                           if n.name.startswith("Mul")}
    monkeypatch.setattr(minitrain.fusion, "RULES", tuple(r for r in minitrain.fusion.RULES if r is not mul_grad))
    plain = exported_session("mobilenet_v3", "training", "cpu")
    assert "MulGrad" not in op_counts(plain.train_plan.graph)
    x, y = (rng.standard_normal(INPUT) * 2).astype(np.float32), rng.integers(0, CLASSES, INPUT[0])
    for _ in range(3):
        np.testing.assert_allclose(fused.train_step(x, y), plain.train_step(x, y), rtol=1e-5)
    for name, value in fused.params.items():
        np.testing.assert_allclose(value, plain.params[name], rtol=1e-4, atol=1e-5, err_msg=name)
