"""The fusion rules for the patterns of exported CNN families, on the CPU: an inference
BatchNormalization folded into its Conv (fusion/conv_batch_norm.py), Conv + Clip (ReLU6) as a
FusedConv (fusion/activation.py) and HardSwishGrad with the bias gradient after it as an
ActivationGradBias (fusion/activation_grad_bias.py).  Each fused op against the unfused nodes,
each rule's conditions, and sessions with fusion on against the same sessions with it off."""
import io

import numpy as np
import pytest
from test_fusion import op_counts

import minitrain
from minitrain import nn, optim, run_node
from minitrain.errors import OpAttributeError, ShapeError
from minitrain.executor import Executor
from minitrain.fusion import fuse
from minitrain.gradcheck import numeric_gradient
from minitrain.graph import Graph
from minitrain.ops.fused import FUSED_DOMAIN
from minitrain.scheduler import schedule
from minitrain.training import TrainingSession

MS = "com.microsoft"


def clip(x, low, high):
    return run_node("Clip", [x, None if low is None else np.array(low, x.dtype),
                             None if high is None else np.array(high, x.dtype)])[0]


# ------------------------------------------------------------------------------ fused ops
@pytest.mark.parametrize("bounds", [(0.0, 6.0), (-0.5, 0.25), (1.0, -1.0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_conv_clip_is_conv_then_clip(bounds, dtype, rng):
    x = rng.standard_normal((2, 4, 7, 6)).astype(dtype)
    x[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    inputs = [x, rng.standard_normal((6, 2, 3, 3)).astype(dtype), rng.standard_normal(6).astype(dtype)]
    conv = {"group": 2, "pads": [1, 1, 1, 1]}
    expected = clip(run_node("Conv", inputs, attrs=conv)[0], *bounds)
    got = run_node("FusedConv", inputs, attrs={**conv, "activation": "Clip", "activation_params": list(bounds)},
                   domain=MS)[0]
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, expected)


def test_fused_clip_needs_its_two_bounds_and_a_conv(rng):
    x, w = rng.standard_normal((1, 2, 4, 4)), rng.standard_normal((3, 2, 3, 3))
    with pytest.raises(OpAttributeError, match=r"FusedConv.*'activation_params'=\(0.0,\).*two bounds"):
        run_node("FusedConv", [x, w], attrs={"activation": "Clip", "activation_params": [0.0]}, domain=MS)
    with pytest.raises(OpAttributeError, match=r"FusedGemm.*'activation'='Clip'"):
        run_node("FusedGemm", [x[0, 0], x[0, 1]], attrs={"activation": "Clip"}, domain=MS)
    with pytest.raises(OpAttributeError, match=r"ActivationGradBias.*'activation'='Clip'"):
        run_node("ActivationGradBias", [x, x], attrs={"activation": "Clip"}, domain=FUSED_DOMAIN)


def hard_swish_inputs(rng, shape):
    """dY and X with X's values on both kinks (-3, 3) and in every piece."""
    dy, x = rng.standard_normal(shape), rng.uniform(-5, 5, shape)
    x.flat[:2] = [-3.0, 3.0]
    return dy, x


@pytest.mark.parametrize("shape", [(6, 5), (3, 4, 7), (2, 3, 4, 5)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_activation_grad_bias_hard_swish_is_gradient_then_bias_sum(shape, dtype, rng):
    dy, x = (a.astype(dtype) for a in hard_swish_inputs(rng, shape))
    dx = run_node("HardSwishGrad", [dy, x], domain=MS)[0]
    if len(shape) == 2:
        db = run_node("SumToShape", [dx, np.array([shape[1]])], domain=MS)[0]
    else:
        w = np.zeros((shape[1], 2) + (1,) * (len(shape) - 2), dtype)
        db = run_node("ConvGrad", [dx, np.zeros((shape[0], 2) + shape[2:], dtype), w], domain=MS, outputs=["dB"])[0]
    got_dx, got_db = run_node("ActivationGradBias", [dy, x], attrs={"activation": "HardSwish"}, domain=FUSED_DOMAIN)
    np.testing.assert_array_equal(got_dx, dx)
    # the two sum in different orders: the error scales with the summed magnitudes, not the sum
    magnitude = np.abs(dx).reshape(dx.shape[0], dx.shape[1], -1).sum(axis=(0, 2))
    np.testing.assert_allclose(got_db, db, rtol=0, atol=(1e-6 if dtype == np.float32 else 1e-13) * magnitude.max())


def test_activation_grad_bias_hard_swish_against_finite_differences(rng):
    """dX and dB are the gradients of sum(dY * hard_swish(Z + b)) in Z and b."""
    dy, z = rng.standard_normal((3, 4, 5)), rng.uniform(-5, 5, (3, 4, 5))
    z[np.abs(np.abs(z) - 3) < 1e-2] = 1.0        # away from the kinks
    b = np.zeros(4)

    def loss(zz, bb):
        return float(np.sum(dy * run_node("HardSwish", [zz + bb.reshape(1, -1, 1)])[0]))
    dx, db = run_node("ActivationGradBias", [dy, z], attrs={"activation": "HardSwish"}, domain=FUSED_DOMAIN)
    np.testing.assert_allclose(dx, numeric_gradient(lambda a: loss(a[0], b), [z.copy()]), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(db, numeric_gradient(lambda a: loss(z, a[0]), [b.copy()]), rtol=1e-6, atol=1e-8)


def batch_norm_inputs(rng, channels):
    """scale, bias, mean, var of an inference BatchNormalization."""
    return [rng.standard_normal(channels), rng.standard_normal(channels), rng.standard_normal(channels),
            rng.uniform(0.2, 3.0, channels)]


@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((2, 3, 9), (4, 3, 3), {"pads": [1, 1]}),
    ((2, 4, 7, 6), (6, 2, 3, 3), {"group": 2, "strides": [2, 1]}),
    ((1, 2, 4, 5, 4), (3, 2, 2, 2, 2), {}),
])
@pytest.mark.parametrize("bias", [True, False])
def test_batch_norm_fold_gives_the_inference_batch_norm(x_shape, w_shape, attrs, bias, rng):
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    b = [rng.standard_normal(w_shape[0])] if bias else []
    stats = batch_norm_inputs(rng, w_shape[0])
    expected = run_node("BatchNormalization", [run_node("Conv", [x, w] + b, attrs=attrs)[0]] + stats,
                        attrs={"epsilon": 1e-3}, outputs=["Y"])[0]
    w_folded, b_folded = run_node("BatchNormFold", [w] + stats + b, attrs={"epsilon": 1e-3}, domain=FUSED_DOMAIN)
    np.testing.assert_allclose(run_node("Conv", [x, w_folded, b_folded], attrs=attrs)[0], expected,
                               rtol=1e-12, atol=1e-12)


def test_batch_norm_fold_checks_the_channels(rng):
    w = rng.standard_normal((4, 2, 3, 3))
    with pytest.raises(ShapeError, match=r"BatchNormFold.*input 'mean' has shape \(3,\)"):
        run_node("BatchNormFold", [w, np.ones(4), np.ones(4), np.ones(3), np.ones(4)], domain=FUSED_DOMAIN)
    with pytest.raises(ShapeError, match=r"BatchNormFold.*input 'W' .*rank 2"):
        run_node("BatchNormFold", [w[:, :, 0, 0]] + [np.ones(4)] * 4, domain=FUSED_DOMAIN)
    with pytest.raises(OpAttributeError, match=r"BatchNormFold.*'epsilon'=0.0"):
        run_node("BatchNormFold", [w] + [np.ones(4)] * 4, attrs={"epsilon": 0.0}, domain=FUSED_DOMAIN)


# ------------------------------------------------------------------------------ Conv + Clip in a graph
def conv_clip_graph(rng, opset=13, bounds=("initializer", "constant")):
    """X -> Conv -> Clip(0, 6) -> Y; each bound an initializer, a Constant node, a graph input
    or absent ("")."""
    g = Graph(opset_imports={"": opset}, name="conv_clip")
    g.add_input("X", np.float32, ("N", 2, 6, 6))
    g.add_initializer("W", rng.standard_normal((3, 2, 3, 3)).astype(np.float32) * 3)
    g.add_initializer("B", rng.standard_normal(3).astype(np.float32))
    z = g.add_node("Conv", ["X", "W", "B"], ["Z"], {"pads": [1, 1, 1, 1]})
    if opset < 11:
        g.add_node("Clip", [z], ["Y"], {"min": 0.0, "max": 6.0})
    else:
        names = []
        for value, kind in zip((0.0, 6.0), bounds):
            name = f"bound_{len(names)}"
            if kind == "initializer":
                g.add_initializer(name, np.array(value, np.float32))
            elif kind == "constant":
                g.add_node("Constant", [], [name], {"value": np.array(value, np.float32)})
            elif kind == "input":
                g.add_input(name, np.float32, ())
            names.append(name if kind else "")
        g.add_node("Clip", [z] + names, ["Y"])
    g.outputs = ["Y"]
    return g


def run_graph(graph, feeds, fetch=("Y",), fuse_on=True):
    graph = fuse(graph, list(fetch)) if fuse_on else graph
    return Executor(schedule(graph, list(fetch), ("cpu",))).run(feeds)


@pytest.mark.parametrize("opset,bounds", [(13, ("initializer", "constant")), (10, ()), (17, ("constant", "constant"))])
def test_conv_clip_fuses_where_the_bounds_are_known(opset, bounds, rng):
    graph = conv_clip_graph(rng, opset, bounds)
    fused = fuse(graph, ["Y"])
    assert op_counts(fused).get("FusedConv") == 1 and "Clip" not in op_counts(fused)
    assert next(n for n in fused.nodes if n.op_type == "FusedConv").attrs["activation_params"] == [0.0, 6.0]
    x = rng.standard_normal((3, 2, 6, 6)).astype(np.float32)
    np.testing.assert_array_equal(run_graph(graph, {"X": x})["Y"], run_graph(graph, {"X": x}, fuse_on=False)["Y"])


@pytest.mark.parametrize("bounds", [("initializer", "input"), ("", "initializer")])
def test_conv_clip_stays_for_a_fed_or_absent_bound(bounds, rng):
    assert "FusedConv" not in op_counts(fuse(conv_clip_graph(rng, 13, bounds), ["Y"]))


def test_conv_clip_stays_when_the_conv_output_is_kept(rng):
    assert "FusedConv" not in op_counts(fuse(conv_clip_graph(rng), ["Y", "Z"]))


class ReLU6(nn.Module):
    def forward(self, x):
        return x.clamp(0.0, 6.0)


class HardSwish(nn.Module):
    def forward(self, x):
        return x.builder.op("HardSwish", [x])


def session(layers, input_shape, fuse_on, lr=0.05, **kwargs):
    minitrain.random.seed(0)
    return TrainingSession(nn.Sequential(*layers()), nn.CrossEntropyLoss(), optim.SGD(lr, momentum=0.9),
                           input_shape=input_shape, fuse=fuse_on, **kwargs)


def eval_ops(s):
    """The op types of the session's inference plan (built by eval_step)."""
    executor, _, _ = s._eval_executor(with_loss=False)
    return op_counts(executor.plan.graph)


def test_conv_relu6_fuses_for_inference_and_stays_apart_in_training(rng):
    """Clip's gradient reads the Conv's output, so the training plan keeps both nodes."""
    def layers():
        return [nn.Conv2d(2, 3, 3, padding=1), ReLU6(), nn.Flatten(), nn.Linear(48, 3)]
    s = session(layers, (2, 4, 4), True)
    assert "Clip" in op_counts(s.train_plan.graph)
    assert "Clip" not in eval_ops(s) and eval_ops(s)["FusedConv"] == 1
    x, y = rng.standard_normal((4, 2, 4, 4)).astype(np.float32) * 3, rng.integers(0, 3, 4)
    plain = session(layers, (2, 4, 4), False)
    for _ in range(3):
        s.train_step(x, y)
        plain.train_step(x, y)
    np.testing.assert_array_equal(s.eval_step(x), plain.eval_step(x))


# ------------------------------------------------------------------------------ HardSwishGrad + bias gradient
@pytest.mark.parametrize("layers,input_shape,bias_gradient", [
    (lambda: [nn.Linear(6, 8), HardSwish(), nn.Linear(8, 3)], (6,), "SumToShape"),
    (lambda: [nn.Conv2d(2, 3, 3), HardSwish(), nn.Flatten(), nn.Linear(12, 3)], (2, 4, 4), "ConvGrad"),
])
def test_hard_swish_gradient_takes_the_bias_gradient(layers, input_shape, bias_gradient, rng):
    s, plain = session(layers, input_shape, True), session(layers, input_shape, False)
    graph = plain.train_plan.graph
    dx = next(n for n in graph.nodes if n.op_type == "HardSwishGrad").outputs[0]
    assert bias_gradient in {n.op_type for n in graph.consumers()[dx]}
    counts = op_counts(s.train_plan.graph)
    assert "HardSwishGrad" not in counts and counts["ActivationGradBias"] == 1
    grad = next(n for n in s.train_plan.graph.nodes if n.op_type == "ActivationGradBias")
    assert grad.attrs["activation"] == "HardSwish" and len([o for o in grad.outputs if o]) == 2
    x, y = rng.standard_normal((5,) + input_shape).astype(np.float32) * 3, rng.integers(0, 3, 5)
    for _ in range(5):
        assert s.train_step(x, y) == pytest.approx(plain.train_step(x, y), rel=1e-6)
    for name, value in s.params.items():
        np.testing.assert_allclose(value, plain.params[name], rtol=1e-5, atol=1e-6, err_msg=name)


# ------------------------------------------------------------------------------ Conv + BatchNormalization
def conv_bn_layers():
    return [nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.Relu(), nn.Conv2d(4, 3, 3, bias=False),
            nn.BatchNorm2d(3), nn.Flatten(), nn.Linear(12, 3)]


def test_inference_batch_norm_folds_into_its_conv_and_follows_training(rng):
    """The eval plan is built once; its folded weights are those of the last training step."""
    s, plain = session(conv_bn_layers, (2, 4, 4), True), session(conv_bn_layers, (2, 4, 4), False)
    x, y = rng.standard_normal((6, 2, 4, 4)).astype(np.float32), rng.integers(0, 3, 6)
    counts = eval_ops(s)
    assert counts["BatchNormFold"] == 2 and "BatchNormalization" not in counts
    assert counts["FusedConv"] == 1 and counts["Conv"] == 1           # the Relu after the first fold
    assert "BatchNormFold" not in op_counts(s.train_plan.graph)          # training mode: batch statistics
    for _ in range(3):
        for _ in range(2):
            s.train_step(x, y)
            plain.train_step(x, y)
        expected = plain.eval_step(x)
        np.testing.assert_allclose(s.eval_step(x), expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
        loss, _ = s.evaluate(x, y)
        assert loss == pytest.approx(plain.evaluate(x, y)[0], rel=1e-5)


def bn_graph(rng, training_outputs=False, opset=17):
    """X -> Conv -> BatchNormalization -> Y (with the running statistics asked for at version 9)."""
    g = Graph(opset_imports={"": opset}, name="conv_bn")
    g.add_input("X", np.float32, ("N", 2, 5, 5))
    g.add_initializer("W", rng.standard_normal((3, 2, 3, 3)).astype(np.float32))
    for name, value in zip(("scale", "bias", "mean", "var"), batch_norm_inputs(rng, 3)):
        g.add_initializer(name, value.astype(np.float32))
    g.add_node("Conv", ["X", "W"], ["Z"])
    outputs = ["Y", "running_mean", "running_var"] if training_outputs else ["Y"]
    g.add_node("BatchNormalization", ["Z", "scale", "bias", "mean", "var"], outputs, {"epsilon": 1e-3})
    g.outputs = ["Y"]
    return g


@pytest.mark.parametrize("opset", [9, 14, 17])
def test_batch_norm_fold_in_a_graph(opset, rng):
    graph = bn_graph(rng, opset=opset)
    assert op_counts(fuse(graph, ["Y"])) == {"BatchNormFold": 1, "Conv": 1}
    x = rng.standard_normal((2, 2, 5, 5)).astype(np.float32)
    np.testing.assert_allclose(run_graph(graph, {"X": x})["Y"], run_graph(graph, {"X": x}, fuse_on=False)["Y"],
                               rtol=1e-5, atol=1e-5)


def test_batch_norm_stays_in_training_mode_or_when_the_conv_output_is_kept(rng):
    assert "BatchNormFold" not in op_counts(fuse(bn_graph(rng, training_outputs=True, opset=9), ["Y"]))
    training = bn_graph(rng)
    training.nodes[-1].attrs["training_mode"] = 1
    assert "BatchNormFold" not in op_counts(fuse(training, ["Y"]))
    assert "BatchNormFold" not in op_counts(fuse(bn_graph(rng), ["Y", "Z"]))


# ------------------------------------------------------------------------------ exported families
@pytest.mark.parametrize("family", ["resnet", "mobilenet_v2"])
@pytest.mark.parametrize("opset", [13, 17])
def test_exported_family_evaluates_the_same_fused(family, opset, rng):
    """A training-mode export trained one step: the fused inference plan (BatchNorm folded,
    ReLU6 in the Conv for MobileNetV2) gives the unfused outputs."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    import onnx
    from model_families import build
    torch.manual_seed(0)
    f = io.BytesIO()
    torch.onnx.export(build(family), (torch.zeros(2, 3, 16, 16),), f, training=torch.onnx.TrainingMode.TRAINING,
                      opset_version=opset, dynamo=False, do_constant_folding=False)
    proto = onnx.load_from_string(f.getvalue())
    x, y = rng.standard_normal((4, 3, 16, 16)).astype(np.float32), rng.integers(0, 5, 4)
    outputs, plans = [], []
    for fuse_on in (False, True):
        s = TrainingSession.from_onnx(proto, nn.CrossEntropyLoss(), optim.SGD(0.1), fuse=fuse_on)
        s.train_step(x, y)
        outputs.append(s.eval_step(x))
        plans.append(eval_ops(s))
    assert "BatchNormalization" not in plans[1] and plans[1]["BatchNormFold"] == plans[0]["BatchNormalization"]
    if family == "mobilenet_v2":
        assert "Clip" not in plans[1]
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-5, atol=1e-5 * np.abs(outputs[0]).max())
