"""A global average pool's gradient summed with another gradient of its input
(fusion/global_average_pool_grad_add.py, the GlobalAveragePoolGradAdd op of ops/fused.py): the
fused kernel against GlobalAveragePoolGrad then Sum, bit for bit; its input checks; the rule's
conditions on hand-built graphs; an exported MobileNetV3 (whose squeeze-excitation inputs take
such sums) trained with the rule against the same session without it."""
import dataclasses

import numpy as np
import pytest
from test_fusion import op_counts

import minitrain
from minitrain import run_node
from minitrain.autodiff import build_gradient_graph
from minitrain.errors import ShapeError
from minitrain.executor import Executor
from minitrain.fusion import fuse, global_average_pool_grad_add
from minitrain.fusion.rewrite import Rewrite
from minitrain.graph import Graph
from minitrain.ops.fused import FUSED_DOMAIN
from minitrain.scheduler import schedule

MS = "com.microsoft"


def unfused(dy, a):
    spread = run_node("GlobalAveragePoolGrad", [dy, np.array(a.shape, np.int64)], domain=MS)[0]
    return run_node("Sum", [a, spread])[0]


@pytest.mark.parametrize("shape", [(4, 6, 5, 3), (3, 5, 7), (2, 3, 2, 3, 4), (2, 3, 1, 1), (16, 16, 16, 16)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_kernel_is_the_two_nodes(shape, dtype, threads, rng):
    a = rng.standard_normal(shape).astype(dtype)
    dy = rng.standard_normal(shape[:2] + (1,) * (len(shape) - 2)).astype(dtype)
    got = run_node("GlobalAveragePoolGradAdd", [dy, a], domain=FUSED_DOMAIN)[0]
    assert got.dtype == dtype and got.shape == shape
    np.testing.assert_array_equal(got, unfused(dy, a))


def test_fused_kernel_checks_its_inputs(rng):
    a = rng.standard_normal((2, 3, 4, 4))
    with pytest.raises(ShapeError, match=r"GlobalAveragePoolGradAdd.*input 'dY'.*globally pooled"):
        run_node("GlobalAveragePoolGradAdd", [rng.standard_normal((2, 4, 1, 1)), a], domain=FUSED_DOMAIN)
    with pytest.raises(ShapeError, match=r"GlobalAveragePoolGradAdd.*input 'A'"):
        run_node("GlobalAveragePoolGradAdd", [rng.standard_normal((2, 3)), a[:, :, 0, 0]], domain=FUSED_DOMAIN)


# ------------------------------------------------------------------------------ the rule on hand-built graphs
def pooled_graph(pool_first=False, keep_pool_shape=False):
    """loss = sum(W * X) + sum(V * GlobalAveragePool(X)) with X's gradient, a Sum of the two
    paths' gradients; `keep_pool_shape` also fetches X's Shape beside the pool gradient."""
    g = Graph(opset_imports={"": 13}, name="pooled")
    g.add_input("X", np.float64, ("N", 3, 4, 4))
    g.add_input("W", np.float64, ("N", 3, 4, 4))
    g.add_input("V", np.float64, ("N", 3, 1, 1))
    nodes = [("GlobalAveragePool", ["X"], ["P"]), ("Mul", ["X", "W"], ["Q"])]
    for op, inputs, outputs in (nodes[::-1] if pool_first else nodes):
        g.add_node(op, inputs, outputs)
    g.add_node("Mul", ["P", "V"], ["R"])
    g.add_node("ReduceSum", ["Q"], ["q"], {"keepdims": 0})
    g.add_node("ReduceSum", ["R"], ["r"], {"keepdims": 0})
    g.add_node("Add", ["q", "r"], ["loss"])
    g.outputs = ["loss"]
    graph, grads = build_gradient_graph(g, "loss", ["X"])
    return graph, [grads["X"]]


def pooled_feeds(rng):
    return {"X": rng.standard_normal((2, 3, 4, 4)), "W": rng.standard_normal((2, 3, 4, 4)),
            "V": rng.standard_normal((2, 3, 1, 1))}


def run_graph(graph, feeds, fetch):
    return Executor(schedule(graph, fetch, ("cpu",))).run(feeds)


@pytest.mark.parametrize("pool_first", [False, True])
def test_the_pool_gradient_and_its_sum_become_one_node(pool_first, rng):
    graph, fetch = pooled_graph(pool_first)
    before, fused = op_counts(graph), fuse(graph, fetch)
    counts = op_counts(fused)
    assert counts["GlobalAveragePoolGradAdd"] == 1 and not {"GlobalAveragePoolGrad", "Sum"} & set(counts)
    assert counts.get("Shape", 0) == before["Shape"] - 1
    feeds = pooled_feeds(rng)
    got, expected = run_graph(fused, feeds, fetch), run_graph(graph, feeds, fetch)
    np.testing.assert_array_equal(got[fetch[0]], expected[fetch[0]])


def test_a_kept_pool_gradient_stays():
    graph, fetch = pooled_graph()
    spread = next(n for n in graph.nodes if n.op_type == "GlobalAveragePoolGrad").outputs[0]
    assert "GlobalAveragePoolGradAdd" not in op_counts(fuse(graph, fetch + [spread]))


def test_a_shape_read_elsewhere_stays():
    graph, fetch = pooled_graph()
    shape = next(n for n in graph.nodes if n.op_type == "GlobalAveragePoolGrad").inputs[1]
    counts = op_counts(fuse(graph, fetch + [shape]))
    assert counts["GlobalAveragePoolGradAdd"] == 1 and counts["Shape"] == op_counts(graph)["Shape"]


def test_no_fused_node_on_another_provider_than_the_nodes(monkeypatch):
    real = Rewrite.kernel_for

    def fused_elsewhere(self, op_type, domain, dtype):
        kdef = real(self, op_type, domain, dtype)
        return dataclasses.replace(kdef, provider="cuda") if op_type == "GlobalAveragePoolGradAdd" else kdef
    monkeypatch.setattr(Rewrite, "kernel_for", fused_elsewhere)
    graph, fetch = pooled_graph()
    assert "GlobalAveragePoolGradAdd" not in op_counts(fuse(graph, fetch))


# ------------------------------------------------------------------------------ sessions
def test_exported_mobilenet_v3_fuses_and_trains_as_before(monkeypatch, rng):
    """Both squeeze-excitation inputs take their gradient from one fused node, and training gives
    the parameters of the plan without the rule."""
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from family_plans import INPUT, exported_session
    from model_families import CLASSES
    fused = exported_session("mobilenet_v3", "training", "cpu")
    assert op_counts(fused.train_plan.graph)["GlobalAveragePoolGradAdd"] == 2
    monkeypatch.setattr(minitrain.fusion, "RULES",
                        tuple(r for r in minitrain.fusion.RULES if r is not global_average_pool_grad_add))
    plain = exported_session("mobilenet_v3", "training", "cpu")
    assert "GlobalAveragePoolGradAdd" not in op_counts(plain.train_plan.graph)
    x, y = (rng.standard_normal(INPUT) * 2).astype(np.float32), rng.integers(0, CLASSES, INPUT[0])
    for _ in range(3):
        np.testing.assert_array_equal(fused.train_step(x, y), plain.train_step(x, y))
    for name, value in fused.params.items():
        np.testing.assert_array_equal(value, plain.params[name], err_msg=name)
