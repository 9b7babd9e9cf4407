"""BatchNormalizationGrad fused with the gradient of the activation after the BatchNormalization
(fusion/batch_norm_activation_grad.py, the BatchNormActivationGrad op of ops/fused.py): the
fused kernel against ReluGrad or HardSwishGrad then BatchNormalizationGrad, bit for bit; its
input checks; the rule's conditions on hand-built graphs; exported ResNet and MobileNetV3
trained with the rule against the same sessions without it."""
import dataclasses

import numpy as np
import pytest
from test_fusion import op_counts

import minitrain
from minitrain import run_node
from minitrain.autodiff import build_gradient_graph
from minitrain.errors import OpAttributeError, ShapeError
from minitrain.executor import Executor
from minitrain.fusion import batch_norm_activation_grad, fuse
from minitrain.fusion.rewrite import Rewrite
from minitrain.graph import Graph
from minitrain.ops.fused import FUSED_DOMAIN
from minitrain.scheduler import schedule

MS = "com.microsoft"
GRADIENTS = {"Relu": "ReluGrad", "HardSwish": "HardSwishGrad", "Clip": "ClipGrad"}
CLIP = (-1.0, 6.0)
# planes of one channel at a time (64, 9 x 7), blocks of channels (3 x 3, 5, none), one tail
SHAPES = [(4, 3, 8, 8), (3, 5, 9, 7), (4, 6, 3, 3), (5, 7, 5), (6, 4), (2, 3, 2, 3, 2)]
OUTPUTS = ["dX", "dscale", "dbias"]


def inputs(rng, shape, dtype):
    """dZ, A (on the activations' kinks 0, -3, 3, -1 and 6, and NaN), X, scale, mean, inv_std."""
    c = shape[1]
    dz, x = rng.standard_normal(shape), rng.standard_normal(shape)
    a = rng.uniform(-5, 8, shape)
    a.flat[:6] = [0.0, -3.0, 3.0, np.nan, -1.0, 6.0]
    stats = rng.standard_normal(c), rng.standard_normal(c), rng.uniform(0.5, 2.0, c)
    return [v.astype(dtype) for v in (dz, a, x, *stats)]


def activation_gradient(activation, dz, a):
    """The unfused activation gradient node's dX."""
    if activation == "Clip":
        bounds = [np.array(b, a.dtype) for b in CLIP]
        return run_node("ClipGrad", [dz, a, *bounds], domain=FUSED_DOMAIN)[0]
    return run_node(GRADIENTS[activation], [dz, a], domain=MS)[0]


def activation_attrs(activation):
    return {"activation": activation, **({"activation_params": list(CLIP)} if activation == "Clip" else {})}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("activation", ["Relu", "HardSwish", "Clip"])
@pytest.mark.parametrize("training", [1, 0])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_kernel_is_the_two_nodes(shape, activation, training, dtype, threads, rng):
    dz, a, x, scale, mean, inv_std = inputs(rng, shape, dtype)
    dy = activation_gradient(activation, dz, a)
    attrs = {"training_mode": training}
    expected = run_node("BatchNormalizationGrad", [dy, x, scale, mean, inv_std], attrs=attrs, domain=MS)
    fused, attrs = [dz, a, x, scale, mean, inv_std], {**attrs, **activation_attrs(activation)}
    got = run_node("BatchNormActivationGrad", fused, attrs=attrs, domain=FUSED_DOMAIN)
    for name, g, e in zip(OUTPUTS, got, expected):
        assert g.dtype == dtype
        np.testing.assert_array_equal(g, e, err_msg=name)
    for name, e in zip(OUTPUTS, expected):
        one = run_node("BatchNormActivationGrad", fused, attrs=attrs, domain=FUSED_DOMAIN, outputs=[name])[0]
        np.testing.assert_array_equal(one, e, err_msg=name)


def test_fused_kernel_takes_float32_parameters_of_float64_data(rng):
    """scale and the statistics of their own type (mixed precision's form): dscale and dbias
    come back in it."""
    dz, a, x, scale, mean, inv_std = inputs(rng, (2, 3, 4, 4), np.float64)
    low = [v.astype(np.float32) for v in (scale, mean, inv_std)]
    dy = run_node("HardSwishGrad", [dz, a], domain=MS)[0]
    expected = run_node("BatchNormalizationGrad", [dy, x, *low], attrs={"training_mode": 1}, domain=MS)
    got = run_node("BatchNormActivationGrad", [dz, a, x, *low], attrs={"training_mode": 1, "activation": "HardSwish"},
                   domain=FUSED_DOMAIN)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype
        np.testing.assert_array_equal(g, e)


def test_fused_kernel_checks_its_inputs(rng):
    dz, a, x, scale, mean, inv_std = inputs(rng, (2, 3, 4, 4), np.float64)
    with pytest.raises(OpAttributeError, match=r"BatchNormActivationGrad.*'activation'='Sigmoid'.*not supported"):
        run_node("BatchNormActivationGrad", [dz, a, x, scale, mean, inv_std], attrs={"activation": "Sigmoid"},
                 domain=FUSED_DOMAIN)
    with pytest.raises(OpAttributeError, match=r"BatchNormActivationGrad.*'activation_params'.*two bounds"):
        run_node("BatchNormActivationGrad", [dz, a, x, scale, mean, inv_std], attrs={"activation": "Clip"},
                 domain=FUSED_DOMAIN)
    with pytest.raises(ShapeError, match=r"BatchNormActivationGrad.*input 'A'"):
        run_node("BatchNormActivationGrad", [dz, a[:, :, :2], x, scale, mean, inv_std], attrs={"activation": "Relu"},
                 domain=FUSED_DOMAIN)
    with pytest.raises(ShapeError, match=r"BatchNormActivationGrad.*input 'scale'"):
        run_node("BatchNormActivationGrad", [dz, a, x, scale[:2], mean, inv_std], attrs={"activation": "Relu"},
                 domain=FUSED_DOMAIN)


# ------------------------------------------------------------------------------ the rule on hand-built graphs
def bn_act_graph(activation="HardSwish", tap_bn_output=False, bounds="constants"):
    """loss = sum(W * act(BatchNormalization(X))) in training mode, with the gradients of X,
    scale and B; `tap_bn_output` adds the normalised tensor itself to the loss (a second reader
    of its gradient's path); Clip's bounds CLIP come from Constant nodes, or from initializers
    (`bounds="initializers"`)."""
    g = Graph(opset_imports={"": 15}, name="bn_act")
    g.add_input("X", np.float64, ("N", 3, 4, 4))
    g.add_input("W", np.float64, ("N", 3, 4, 4))
    for name in ("scale", "B", "mean", "var"):
        g.add_input(name, np.float64, (3,))
    g.add_node("BatchNormalization", ["X", "scale", "B", "mean", "var"], ["Y", "rm", "rv"], {"training_mode": 1})
    if activation == "Clip":
        for name, value in zip(("low", "high"), CLIP):
            if bounds == "constants":
                g.add_node("Constant", [], [name], {"value": np.array(value)})
            else:
                g.add_initializer(name, np.array(value))
        g.add_node("Clip", ["Y", "low", "high"], ["Z"])
    else:
        g.add_node(activation, ["Y"], ["Z"])
    g.add_node("Mul", ["Z", "W"], ["P"])
    if tap_bn_output:
        g.add_node("Add", ["P", "Y"], ["Q"])
    g.add_node("ReduceSum", ["Q" if tap_bn_output else "P"], ["loss"], {"keepdims": 0})
    g.outputs = ["loss"]
    graph, grads = build_gradient_graph(g, "loss", ["X", "scale", "B"])
    return graph, [grads["X"], grads["scale"], grads["B"]]


def bn_act_feeds(rng):
    feeds = {"X": rng.standard_normal((2, 3, 4, 4)) * 3, "W": rng.standard_normal((2, 3, 4, 4))}
    feeds.update(scale=rng.standard_normal(3), B=rng.standard_normal(3), mean=np.zeros(3), var=np.ones(3))
    return feeds


def run_graph(graph, feeds, fetch):
    return Executor(schedule(graph, fetch, ("cpu",))).run(feeds)


@pytest.mark.parametrize("activation", ["Relu", "HardSwish", "Clip"])
def test_activation_and_batch_norm_gradients_become_one_node(activation, rng):
    graph, fetch = bn_act_graph(activation)
    fused = fuse(graph, fetch)
    counts = op_counts(fused)
    assert counts["BatchNormActivationGrad"] == 1
    assert not {"BatchNormalizationGrad", GRADIENTS[activation]} & set(counts)
    node = next(n for n in fused.nodes if n.op_type == "BatchNormActivationGrad")
    assert node.attrs["activation"] == activation and node.attrs["training_mode"] == 1 and node.outputs == fetch
    assert node.attrs.get("activation_params") == (list(CLIP) if activation == "Clip" else None)
    feeds = bn_act_feeds(rng)
    got, expected = run_graph(fused, feeds, fetch), run_graph(graph, feeds, fetch)
    for name in fetch:
        np.testing.assert_array_equal(got[name], expected[name])


def test_an_activation_gradient_read_elsewhere_stays():
    graph, fetch = bn_act_graph(tap_bn_output=True)
    counts = op_counts(fuse(graph, fetch))
    assert "BatchNormActivationGrad" not in counts and counts["BatchNormalizationGrad"] == 1


def test_a_kept_activation_gradient_stays():
    graph, fetch = bn_act_graph()
    grad = next(n for n in graph.nodes if n.op_type == "HardSwishGrad")
    assert "BatchNormActivationGrad" not in op_counts(fuse(graph, fetch + [grad.outputs[0]]))


def test_clip_bounds_that_may_be_trained_stay():
    graph, fetch = bn_act_graph("Clip", bounds="initializers")
    counts = op_counts(fuse(graph, fetch))
    assert "BatchNormActivationGrad" not in counts and counts["ClipGrad"] == 1


def test_another_activation_stays():
    graph, fetch = bn_act_graph("Sigmoid")
    assert "BatchNormActivationGrad" not in op_counts(fuse(graph, fetch))


def test_no_fused_node_on_another_provider_than_the_nodes(monkeypatch):
    real = Rewrite.kernel_for

    def fused_elsewhere(self, op_type, domain, dtype):
        kdef = real(self, op_type, domain, dtype)
        return dataclasses.replace(kdef, provider="cuda") if op_type == "BatchNormActivationGrad" else kdef
    monkeypatch.setattr(Rewrite, "kernel_for", fused_elsewhere)
    graph, fetch = bn_act_graph()
    assert "BatchNormActivationGrad" not in op_counts(fuse(graph, fetch))


# ------------------------------------------------------------------------------ sessions
@pytest.mark.parametrize("family,pairs", [("resnet", 2), ("mobilenet_v2", 5), ("mobilenet_v3", 5)])
def test_exported_families_fuse_and_train_as_before(family, pairs, monkeypatch, rng):
    """Each BatchNormalization's gradient after an activation is fused, and training gives the
    parameters of the plan without the rule."""
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from family_plans import INPUT, exported_session
    from model_families import CLASSES
    fused = exported_session(family, "training", "cpu")
    assert op_counts(fused.train_plan.graph)["BatchNormActivationGrad"] == pairs
    monkeypatch.setattr(minitrain.fusion, "RULES",
                        tuple(r for r in minitrain.fusion.RULES if r is not batch_norm_activation_grad))
    plain = exported_session(family, "training", "cpu")
    assert "BatchNormActivationGrad" not in op_counts(plain.train_plan.graph)
    x, y = (rng.standard_normal(INPUT) * 2).astype(np.float32), rng.integers(0, CLASSES, INPUT[0])
    for _ in range(3):
        np.testing.assert_array_equal(fused.train_step(x, y), plain.train_step(x, y))
    for name, value in fused.params.items():
        np.testing.assert_array_equal(value, plain.params[name], err_msg=name)
