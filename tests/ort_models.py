"""Small CNNs as ONNX models, and their onnxruntime-training artifacts, for the tests and the
bench that compare minitrain's training API with ONNX Runtime's.

Each model is a (name, builder) whose builder returns (ModelProto, loss, optimizer, input
shape, label kind); `generate(...)` writes the four artifacts into a folder.  ONNX Runtime
1.19.2 has no gradient for GlobalMaxPool nor NegativeLogLikelihoodLoss (generate_artifacts
fails: "The gradient builder has not been registered"), so no model here uses them.

ONNX Runtime 1.19.2 loads models of IR version 10 at most, while onnx 1.23 stamps the models
it makes with its own newest IR version (14): the source model is given IR version 8 (what
opset 17 needs), and generate_artifacts keeps it for the training and eval models; the
optimizer model, which onnxblock builds itself, is rewritten with IR version 8 after
generation.
"""
import numpy as np
import pytest
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 8
OPSET = 17


def _model(name, nodes, x_shape, y_shape, weights):
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", *x_shape])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", *y_shape])],
        [numpy_helper.from_array(w.astype(np.float32), n) for n, w in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


def _weights(rng, **shapes):
    return {name.replace("_", "."): rng.normal(0, 1 / np.sqrt(np.prod(shape[1:])), shape)
            for name, shape in shapes.items()}


def conv1d_global_avg(rng):
    """1-D: Conv -> Relu -> MaxPool -> GlobalAveragePool -> Flatten -> Gemm."""
    w = _weights(rng, conv_w=(6, 2, 3), fc_w=(5, 6))
    w["conv.b"], w["fc.b"] = rng.normal(0, 0.1, 6), np.zeros(5)
    nodes = [helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], pads=[1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2], strides=[2]),
             helper.make_node("GlobalAveragePool", ["p"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["y"], transB=1)]
    return _model("conv1d_global_avg", nodes, (2, 16), (5,), w), (2, 16), 5


def conv1d_mean(rng):
    """1-D with x.mean(-1) as ReduceMean, then Gemm."""
    w = _weights(rng, conv_w=(4, 3, 5), fc_w=(3, 4))
    w["conv.b"], w["fc.b"] = np.zeros(4), np.zeros(3)
    nodes = [helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], strides=[2]),
             helper.make_node("Tanh", ["c"], ["t"]),
             helper.make_node("ReduceMean", ["t"], ["m"], axes=[-1], keepdims=0),
             helper.make_node("Gemm", ["m", "fc.w", "fc.b"], ["y"], transB=1)]
    return _model("conv1d_mean", nodes, (3, 20), (3,), w), (3, 20), 3


def conv2d_bn(rng):
    """2-D: Conv (no bias: BatchNorm's mean takes it away, and its gradient is rounding noise
    that AdamW would amplify) -> BatchNormalization -> Relu -> MaxPool -> Flatten -> Gemm."""
    w = _weights(rng, conv_w=(4, 1, 3, 3), fc_w=(6, 64))
    w.update({"fc.b": np.zeros(6), "bn.scale": np.ones(4), "bn.bias": np.zeros(4)})
    frozen = {"bn.mean": np.zeros(4), "bn.var": np.ones(4)}
    nodes = [helper.make_node("Conv", ["x", "conv.w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["b"]),
             helper.make_node("Relu", ["b"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["y"], transB=1)]
    return _model("conv2d_bn", nodes, (1, 8, 8), (6,), {**w, **frozen}), (1, 8, 8), 6


def conv2d_dropout(rng):
    """2-D: Conv (stride 2) -> Sigmoid -> Dropout -> GlobalAveragePool -> Flatten -> Gemm."""
    w = _weights(rng, conv_w=(5, 2, 3, 3), fc_w=(4, 5))
    w["conv.b"], w["fc.b"] = np.zeros(5), np.zeros(4)
    nodes = [helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c"], ["s"]),
             helper.make_node("Dropout", ["s"], ["d"]),
             helper.make_node("GlobalAveragePool", ["d"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["y"], transB=1)]
    return _model("conv2d_dropout", nodes, (2, 9, 9), (4,), w), (2, 9, 9), 4


def conv2d_avgpool(rng):
    """2-D: Conv -> Relu -> AveragePool -> Flatten -> Gemm."""
    w = _weights(rng, conv_w=(3, 1, 3, 3), fc_w=(4, 27))
    w["conv.b"], w["fc.b"] = np.zeros(3), np.zeros(4)
    nodes = [helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("AveragePool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["y"], transB=1)]
    return _model("conv2d_avgpool", nodes, (1, 6, 6), (4,), w), (1, 6, 6), 4


def conv3d(rng):
    """3-D: Conv -> Relu -> MaxPool -> Flatten -> Gemm."""
    w = _weights(rng, conv_w=(3, 1, 3, 3, 3), fc_w=(4, 24))
    w["conv.b"], w["fc.b"] = np.zeros(3), np.zeros(4)
    nodes = [helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], pads=[1, 1, 1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2, 2], strides=[2, 2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["y"], transB=1)]
    return _model("conv3d", nodes, (1, 4, 4, 4), (4,), w), (1, 4, 4, 4), 4


BUILDERS = {f.__name__: f for f in (conv1d_global_avg, conv1d_mean, conv2d_bn, conv2d_dropout, conv2d_avgpool,
                                    conv3d)}


def generate(builder_name, folder, loss, optimizer, seed=0):
    """Write the artifacts of BUILDERS[builder_name] with `loss` (an artifacts.LossType name)
    and `optimizer` ("AdamW" or "SGD") into
    `folder`; returns (input shape per sample, number of classes or outputs)."""
    from onnxruntime.training import artifacts
    model, x_shape, classes = BUILDERS[builder_name](np.random.default_rng(seed))
    frozen = [t.name for t in model.graph.initializer if t.name.endswith((".mean", ".var"))]
    trainable = [t.name for t in model.graph.initializer if t.name not in frozen]
    artifacts.generate_artifacts(model, requires_grad=trainable, frozen_params=frozen,
                                 loss=artifacts.LossType[loss],
                                 optimizer=artifacts.OptimType[optimizer], artifact_directory=str(folder))
    optimizer_path = str(folder / "optimizer_model.onnx")
    optimizer_model = onnx.load(optimizer_path)
    optimizer_model.ir_version = IR_VERSION
    onnx.save(optimizer_model, optimizer_path)
    return x_shape, classes


def batch(rng, n, x_shape, classes, loss):
    """(x, labels) for `loss`: class indices for CrossEntropy, targets of the output's
    shape for MSE, 0/1 targets for BCEWithLogits."""
    x = rng.standard_normal((n, *x_shape)).astype(np.float32)
    if loss == "CrossEntropyLoss":
        return x, rng.integers(0, classes, n).astype(np.int64)
    if loss == "BCEWithLogitsLoss":
        return x, rng.integers(0, 2, (n, classes)).astype(np.float32)
    return x, rng.standard_normal((n, classes)).astype(np.float32)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Artifacts per (model, loss, optimizer), generated once per test module that imports this
    fixture: folders(case) -> (folder, what generate() returned)."""
    made = {}

    def folder(case):
        if case not in made:
            path = tmp_path_factory.mktemp("_".join(case))
            made[case] = path, generate(case[0], path, case[1], case[2])
        return made[case]
    return folder
