"""The gradient graph builder: paths, fan-out accumulation, stop-gradient, pruning, deep graphs."""
import numpy as np
import pytest

from minitrain import Executor, Graph
from minitrain.autodiff import build_gradient_graph
from minitrain.errors import GraphError
from minitrain.gradcheck import gradcheck_graph
from minitrain.scheduler import schedule


def mlp_graph(rng, batch=6, sizes=(5, 7, 4), dtype=np.float64):
    g = Graph(name="mlp")
    g.add_input("x", dtype, ("N", sizes[0]))
    g.add_input("labels", np.int64, ("N",))
    h = "x"
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        g.add_initializer(f"w{i}", rng.standard_normal((fan_out, fan_in)).astype(dtype) / np.sqrt(fan_in))
        g.add_initializer(f"b{i}", rng.standard_normal(fan_out).astype(dtype) * 0.1)
        h = g.add_node("Gemm", [h, f"w{i}", f"b{i}"], attrs={"transB": 1})
        if i < len(sizes) - 2:
            h = g.add_node("Relu", [h])
    loss = g.add_node("SoftmaxCrossEntropyLoss", [h, "labels"], outputs=["loss", ""])
    g.outputs.append(loss)
    feeds = {"x": rng.standard_normal((batch, sizes[0])).astype(dtype),
             "labels": rng.integers(0, sizes[-1], batch)}
    return g, feeds


def test_mlp_gradients_match_finite_differences(rng):
    g, feeds = mlp_graph(rng)
    gradcheck_graph(g, feeds, ["w0", "b0", "w1", "b1", "x"])


def test_gradient_graph_keeps_forward_graph_untouched(rng):
    g, _ = mlp_graph(rng)
    before = [(n.op_type, list(n.outputs)) for n in g.nodes]
    build_gradient_graph(g, "loss", ["w0"])
    assert [(n.op_type, list(n.outputs)) for n in g.nodes] == before


def test_fan_out_gradients_are_summed(rng):
    g = Graph()
    g.add_initializer("w", rng.standard_normal((3,)))
    g.add_input("x", np.float64, (2, 3))
    a = g.add_node("Mul", ["x", "w"])
    b = g.add_node("Mul", [a, "w"])           # w read twice
    c = g.add_node("Add", [a, b])             # a read twice
    g.outputs.append(c)
    full, grads = build_gradient_graph(g, c, ["w"], seeds={c: g.add_input("seed", np.float64, (2, 3))})
    sums = [n for n in full.nodes if n.op_type == "Sum"]
    assert len(sums) == 2                     # one for a, one for w
    gradcheck_graph(g, {"x": rng.standard_normal((2, 3))}, ["w"])


def test_second_backward_pass_does_not_double_count(rng):
    g, feeds = mlp_graph(rng)
    full, grads = build_gradient_graph(g, "loss", ["w0"])
    executor = Executor(schedule(full, [grads["w0"]]))
    first = executor.run(feeds)[grads["w0"]]
    second = executor.run(feeds)[grads["w0"]]
    np.testing.assert_array_equal(first, second)


def test_stop_gradient_on_a_value_and_on_an_edge(rng):
    g = Graph()
    g.add_initializer("w", rng.standard_normal((3,)))
    g.add_input("x", np.float64, (2, 3))
    a = g.add_node("Mul", ["x", "w"], name="mul1")
    b = g.add_node("Mul", [a, "w"], name="mul2")
    g.outputs.append(b)
    seed = g.add_input("seed", np.float64, (2, 3))
    feeds = {"x": rng.standard_normal((2, 3)), "seed": rng.standard_normal((2, 3))}
    x, w, s = feeds["x"], g.initializers["w"], feeds["seed"]

    # stop at value a: only the direct use of w in mul2 contributes, d/dw (a*w) = a
    full, grads = build_gradient_graph(g, b, ["w"], seeds={b: seed}, stop_gradients=[a])
    got = Executor(schedule(full, [grads["w"]])).run(feeds)[grads["w"]]
    np.testing.assert_allclose(got, (s * x * w).sum(0))
    assert not any(n.op_type == "Sum" for n in full.nodes)

    # cut the edge mul2 <- w (input 1): only the path through a contributes, d/dw = x * w
    full, grads = build_gradient_graph(g, b, ["w"], seeds={b: seed}, stop_gradients=[("mul2", 1)])
    got = Executor(schedule(full, [grads["w"]])).run(feeds)[grads["w"]]
    np.testing.assert_allclose(got, (s * x * w).sum(0))


def test_no_gradient_nodes_for_values_nobody_differentiates(rng):
    g, _ = mlp_graph(rng)
    g.add_initializer("unused", np.ones(3))
    full, grads = build_gradient_graph(g, "loss", ["w1", "unused"])
    assert grads["unused"] is None
    # only w1 is asked for: no gradient flows into the first layer or into x
    produced = {o for n in full.nodes[len(g.nodes):] for o in n.outputs}
    assert not any(name.startswith(("w0_grad", "b0_grad", "x_grad")) for name in produced)
    first_layer_grads = [n for n in full.nodes[len(g.nodes):] if "w0" in n.inputs or "x" in n.inputs]
    assert not first_layer_grads


def test_scalar_loss_required_without_seed(rng):
    g = Graph()
    g.add_input("x", np.float64, (2, 3))
    g.outputs.append(g.add_node("Relu", ["x"]))
    with pytest.raises(GraphError, match="seed"):
        build_gradient_graph(g, g.outputs[0], ["x"])


def test_op_without_gradient_is_reported(rng):
    g = Graph()
    g.add_input("x", np.float64, (2, 3))
    s = g.add_node("Shape", ["x"])
    g.outputs.append(s)
    full, grads = build_gradient_graph(g, s, ["x"], seeds={s: s})
    assert grads["x"] is None       # Shape's output is an int tensor: no gradient path


def test_five_thousand_node_chain():
    g = Graph(name="chain")
    g.add_input("x", np.float32, (4,))
    h = "x"
    for _ in range(5000):
        h = g.add_node("Relu", [h])
    loss = g.add_node("SoftmaxCrossEntropyLoss", [g.add_node("Reshape", [h, g.add_initializer("s", np.array([1, 4]))]),
                                                  g.add_initializer("l", np.array([2]))], outputs=["loss", ""])
    g.outputs.append(loss)
    full, grads = build_gradient_graph(g, loss, ["x"])
    plan = schedule(full)
    assert len(plan.steps) > 10000
    x = np.array([0.5, 1.0, 2.0, -1.0], np.float32)
    out = Executor(plan).run({"x": x})
    p = np.exp(np.maximum(x, 0)) / np.exp(np.maximum(x, 0)).sum()
    expected = (p - np.eye(4)[2]) * (x > 0)
    np.testing.assert_allclose(out[grads["x"]], expected, rtol=1e-5)
