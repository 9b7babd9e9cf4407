"""Clip's gradient fused (fusion/clip_grad.py, the ClipGrad op of ops/fused.py) on the CPU:
ClipGrad against the Less/Where/Greater/Where nodes it replaces (NaN, infinities, ties and
absent bounds included), against finite differences and PyTorch, the rule's conditions on
hand-built chains, and sessions (a ReLU6 network, an exported MobileNetV2) trained with the
rule against the same sessions without it."""
import dataclasses

import numpy as np
import pytest
from test_fusion import op_counts

import minitrain
from minitrain import nn, optim, run_node
from minitrain.errors import ShapeError
from minitrain.executor import Executor
from minitrain.fusion import clip_grad, fuse
from minitrain.fusion.rewrite import Rewrite
from minitrain.gradcheck import numeric_gradient
from minitrain.graph import Graph
from minitrain.ops.fused import FUSED_DOMAIN
from minitrain.scheduler import schedule
from minitrain.training import TrainingSession

CHAIN_OPS = ("Less", "Greater", "Where")
BOUND_CASES = [(0.0, 6.0), (-0.5, 0.25), (1.0, -1.0), (0.0, None), (None, 6.0), (None, None)]


def scalar(value, dtype):
    return None if value is None else np.array(value, dtype)


def unfused_clip_grad(dy, x, low, high):
    """ops/clip.py's gradient nodes, one at a time."""
    zero = np.zeros((), dy.dtype)
    for bound, compare in ((low, "Less"), (high, "Greater")):
        if bound is not None:
            dy = run_node("Where", [run_node(compare, [x, bound])[0], zero, dy])[0]
    return dy


def clip_grad_inputs(rng, shape, dtype, low, high):
    """dY and X with X on both bounds, NaN and both infinities among its values."""
    dy, x = rng.standard_normal(shape).astype(dtype), (rng.standard_normal(shape) * 4).astype(dtype)
    specials = [v for v in (low, high) if v is not None] + [np.nan, np.inf, -np.inf]
    if x.size:
        x.flat[:len(specials)] = specials
        dy.flat[0] = -0.0
    return dy, x


@pytest.mark.parametrize("bounds", BOUND_CASES)
@pytest.mark.parametrize("shape", [(7,), (2, 3, 5, 4), (0, 3)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_clip_grad_is_the_unfused_chain(bounds, shape, dtype, rng):
    low, high = (scalar(b, dtype) for b in bounds)
    dy, x = clip_grad_inputs(rng, shape, dtype, *bounds)
    expected = unfused_clip_grad(dy, x, low, high)
    got = run_node("ClipGrad", [dy, x, low, high], domain=FUSED_DOMAIN)[0]
    assert got.dtype == dtype and got.shape == shape
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))


def test_clip_grad_takes_views_and_one_element_bounds(rng):
    dy, x = rng.standard_normal((6, 8)), rng.standard_normal((6, 8))
    low, high = np.array([-0.3]), np.array([0.4])
    got = run_node("ClipGrad", [dy[:, ::2], x[:, 1::2], low, high], domain=FUSED_DOMAIN)[0]
    np.testing.assert_array_equal(got, unfused_clip_grad(dy[:, ::2], x[:, 1::2], low, high))


def test_clip_grad_against_finite_differences(rng):
    """dX is the gradient of sum(dY * clip(X, min, max)) in X (X away from the bounds)."""
    dy, x = rng.standard_normal((3, 4, 5)), rng.uniform(-2, 2, (3, 4, 5))
    x[np.abs(np.abs(x) - 1) < 1e-2] = 0.0
    low, high = np.array(-1.0), np.array(1.0)
    dx = run_node("ClipGrad", [dy, x, low, high], domain=FUSED_DOMAIN)[0]
    numeric = numeric_gradient(lambda a: float(np.sum(dy * run_node("Clip", [a[0], low, high])[0])), [x.copy()])
    np.testing.assert_allclose(dx, numeric, rtol=1e-6, atol=1e-8)


def test_clip_grad_against_torch(rng):
    torch = pytest.importorskip("torch")
    dy, x = rng.standard_normal((4, 3, 5)), rng.uniform(-1, 7, (4, 3, 5))
    x.flat[:2] = [0.0, 6.0]         # torch.clamp passes the gradient at the bounds too
    tx = torch.tensor(x, requires_grad=True)
    torch.clamp(tx, 0.0, 6.0).backward(torch.tensor(dy))
    got = run_node("ClipGrad", [dy, x, np.array(0.0), np.array(6.0)], domain=FUSED_DOMAIN)[0]
    np.testing.assert_array_equal(got, tx.grad.numpy())


def test_clip_grad_checks_its_inputs(rng):
    dy = rng.standard_normal((2, 3))
    with pytest.raises(ShapeError, match=r"ClipGrad.*'dY' \(2, 3\) and 'X' \(3, 2\)"):
        run_node("ClipGrad", [dy, dy.T, np.array(0.0)], domain=FUSED_DOMAIN)
    with pytest.raises(ShapeError, match=r"ClipGrad.*input 'max' has shape \(2,\); expected a scalar"):
        run_node("ClipGrad", [dy, dy, None, np.ones(2)], domain=FUSED_DOMAIN)


# ------------------------------------------------------------------------------ the rule on hand-built chains
def chain_graph(bounds=("Less", "Greater"), zero=0.0, second_x=False):
    """dY, X -> Where(Less(X, min), zero, dY) -> Where(Greater(X, max), zero, .) -> dX, the
    comparisons in the order of `bounds`; with `second_x` the second one reads another input X2."""
    g = Graph(opset_imports={"": 13}, name="clip_grad_chain")
    g.add_input("dY", np.float32, ("N", 3, 4))
    g.add_input("X", np.float32, ("N", 3, 4))
    g.add_input("X2", np.float32, ("N", 3, 4))
    g.add_initializer("min", np.array(0.0, np.float32))
    g.add_node("Constant", [], ["max"], {"value": np.array(6.0, np.float32)})
    g.add_initializer("zero", np.array(zero, np.float32))
    passed = "dY"
    for k, compare in enumerate(bounds):
        x = "X2" if second_x and k else "X"
        g.add_node(compare, [x, "min" if compare == "Less" else "max"], [f"mask{k}"])
        passed = g.add_node("Where", [f"mask{k}", "zero", passed], [f"dX{k}"])
    g.outputs = [passed]
    return g


def run_chain(graph, feeds, fetch, rules_on=True):
    plan_graph = fuse(graph, fetch) if rules_on else graph
    return Executor(schedule(plan_graph, fetch, ("cpu",))).run(feeds)


def chain_feeds(rng):
    dy, x = clip_grad_inputs(rng, (2, 3, 4), np.float32, 0.0, 6.0)
    return {"dY": dy, "X": x, "X2": np.flip(x).copy()}


@pytest.mark.parametrize("bounds", [("Less", "Greater"), ("Greater", "Less"), ("Less",), ("Greater",)])
def test_the_chain_becomes_one_clip_grad(bounds, rng):
    graph = chain_graph(bounds)
    fetch = [graph.outputs[0]]
    fused = fuse(graph, fetch)
    assert op_counts(fused) == {"ClipGrad": 1, "Constant": 1}
    node = fused.nodes[-1]
    expected_bounds = ["min" if "Less" in bounds else "", "max" if "Greater" in bounds else ""]
    assert node.inputs[:2] == ["dY", "X"] and node.inputs[2:] == (expected_bounds if expected_bounds[1]
                                                                  else expected_bounds[:1])
    feeds = chain_feeds(rng)
    got, expected = run_chain(graph, feeds, fetch)[fetch[0]], run_chain(graph, feeds, fetch, False)[fetch[0]]
    np.testing.assert_array_equal(got, expected)


def test_comparisons_of_other_inputs_fuse_apart(rng):
    graph = chain_graph(second_x=True)
    fused = fuse(graph, ["dX1"])
    assert [n.inputs[:2] for n in fused.nodes if n.op_type == "ClipGrad"] == [["dY", "X"], ["dX0", "X2"]]
    feeds = chain_feeds(rng)
    np.testing.assert_array_equal(run_chain(graph, feeds, ["dX1"])["dX1"],
                                  run_chain(graph, feeds, ["dX1"], False)["dX1"])


@pytest.mark.parametrize("fetch", [["dX1", "mask0"], ["dX1", "mask1"], ["dX1", "dX0"]])
def test_kept_values_stay(fetch, rng):
    """A fetched mask keeps its comparison and Where unfused; a fetched partial dX splits the chain."""
    fused = fuse(chain_graph(), fetch)
    counts = op_counts(fused)
    if fetch[1] == "dX0":
        assert counts["ClipGrad"] == 2 and not set(CHAIN_OPS) & set(counts)
    else:
        assert counts.get("ClipGrad", 0) == 1 and counts["Where"] == 1
    feeds = chain_feeds(rng)
    got, expected = run_chain(chain_graph(), feeds, fetch), run_chain(chain_graph(), feeds, fetch, False)
    for name in fetch:
        np.testing.assert_array_equal(got[name], expected[name])


def test_a_mask_read_elsewhere_stays():
    graph = chain_graph()
    graph.add_node("Cast", ["mask0"], ["outside"], {"to": 1})
    graph.outputs.append("outside")
    counts = op_counts(fuse(graph, list(graph.outputs)))
    assert counts["Less"] == 1 and counts["ClipGrad"] == 1


@pytest.mark.parametrize("zero", [-0.0, 1.0])
def test_a_where_of_another_value_than_zero_stays(zero):
    assert "ClipGrad" not in op_counts(fuse(chain_graph(zero=zero), ["dX1"]))


def test_no_clip_grad_on_another_provider_than_the_chain(monkeypatch):
    real = Rewrite.kernel_for

    def clip_grad_elsewhere(self, op_type, domain, dtype):
        kdef = real(self, op_type, domain, dtype)
        return dataclasses.replace(kdef, provider="cuda") if op_type == "ClipGrad" else kdef
    monkeypatch.setattr(Rewrite, "kernel_for", clip_grad_elsewhere)
    assert op_counts(fuse(chain_graph(), ["dX1"]))["Where"] == 2


# ------------------------------------------------------------------------------ sessions
def without_clip_grad_rule(monkeypatch):
    monkeypatch.setattr(minitrain.fusion, "RULES", tuple(r for r in minitrain.fusion.RULES if r is not clip_grad))


class ReLU6(nn.Module):
    def forward(self, x):
        return x.clamp(0.0, 6.0)


class LowerClamp(nn.Module):
    def forward(self, x):
        return x.clamp(min=-0.5)


def relu6_layers():
    return [nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), ReLU6(), nn.Conv2d(4, 3, 3), LowerClamp(),
            nn.Flatten(), nn.Linear(12, 3)]


def relu6_session():
    minitrain.random.seed(0)
    return TrainingSession(nn.Sequential(*relu6_layers()), nn.CrossEntropyLoss(), optim.SGD(0.05, momentum=0.9),
                           input_shape=(2, 4, 4))


def assert_same_training(fused, plain, x, y, steps=3):
    for _ in range(steps):
        assert fused.train_step(x, y) == plain.train_step(x, y)
    for name, value in fused.params.items():
        np.testing.assert_array_equal(value, plain.params[name], err_msg=name)


def test_relu6_and_clamp_gradients_fuse_and_train_the_same(monkeypatch, rng):
    fused = relu6_session()
    counts = op_counts(fused.train_plan.graph)
    assert counts["ClipGrad"] == 2 and not set(CHAIN_OPS) & set(counts)
    without_clip_grad_rule(monkeypatch)
    plain = relu6_session()
    assert "ClipGrad" not in op_counts(plain.train_plan.graph)
    x, y = rng.standard_normal((5, 2, 4, 4)).astype(np.float32) * 3, rng.integers(0, 3, 5)
    assert_same_training(fused, plain, x, y)


def test_exported_mobilenet_v2_relu6_gradient_fuses(monkeypatch, rng):
    """MobileNetV2's ReLU6 exported as Clip: each Clip's gradient is one ClipGrad (or, after a
    BatchNormalization, inside its BatchNormActivationGrad), and training gives the parameters
    of the plan without the rule."""
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from family_plans import INPUT, exported_session
    from model_families import CLASSES
    fused = exported_session("mobilenet_v2", "training", "cpu")
    counts = op_counts(fused.train_plan.graph)
    in_batch_norm = sum(n.op_type == "BatchNormActivationGrad" and n.attrs["activation"] == "Clip"
                        for n in fused.train_plan.graph.nodes)
    assert counts.get("ClipGrad", 0) + in_batch_norm == counts["Clip"] > 0 and not set(CHAIN_OPS) & set(counts)
    without_clip_grad_rule(monkeypatch)
    plain = exported_session("mobilenet_v2", "training", "cpu")
    assert op_counts(plain.train_plan.graph)["Where"] == 2 * counts["Clip"]
    x, y = (rng.standard_normal(INPUT) * 2).astype(np.float32), rng.integers(0, CLASSES, INPUT[0])
    assert_same_training(fused, plain, x, y)
