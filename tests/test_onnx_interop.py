"""minitrain.onnx: importing ONNX models, exporting graphs and sessions, training an import.

The models are small CNNs on 8x8 digits, built with onnx.helper or with minitrain.nn; ONNX's
reference evaluator is the outside judge of the inference export."""
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import minitrain.onnx as mx  # noqa: E402
from minitrain import nn, optim  # noqa: E402
from minitrain.data.digits import load_digits  # noqa: E402
from minitrain.errors import OnnxImportError  # noqa: E402
from minitrain.executor import Executor  # noqa: E402
from minitrain.scheduler import schedule  # noqa: E402
from minitrain.training import TrainingSession  # noqa: E402


def cnn_model(opset=13):
    """Conv -> Relu -> MaxPool -> Flatten -> Gemm on (batch, 1, 8, 8), built with onnx.helper."""
    rng = np.random.default_rng(0)
    weights = {"conv.w": rng.normal(0, 0.3, (4, 1, 3, 3)), "conv.b": np.zeros(4),
               "fc.w": rng.normal(0, 0.1, (10, 64)), "fc.b": np.zeros(10)}
    nodes = [
        helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])],
        [numpy_helper.from_array(w.astype(np.float32), name) for name, w in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run_graph(graph, feeds, fetch=None):
    fetch = fetch or graph.outputs
    return Executor(schedule(graph, fetch)).run(feeds, fetch)


def digits_batch(n=32):
    d = load_digits()
    return d.x_train[:n], d.y_train[:n]


# --------------------------------------------------------------------------- import
def test_import_keeps_opsets_initializers_attributes_and_types():
    g = mx.load(cnn_model())
    assert g.opset_imports[""] == 13
    assert set(g.initializers) == {"conv.w", "conv.b", "fc.w", "fc.b"}
    assert all(a.flags.writeable for a in g.initializers.values())
    assert [(v.name, v.dtype, v.shape) for v in g.inputs] == [("x", np.float32, ("batch", 1, 8, 8))]
    assert g.outputs == ["y"]
    nodes = {n.name: n for n in g.nodes}
    assert nodes["conv"].attrs == {"pads": [1, 1, 1, 1]}
    assert nodes["fc"].attrs == {"transB": 1}
    assert g.value_info["p"].shape == ("batch", 4, 4, 4)      # filled in by shape inference


def test_imported_model_computes_what_onnx_reference_computes():
    model = cnn_model()
    x, _ = digits_batch(5)
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = run_graph(mx.load(model), {"x": x})["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_import_from_a_path_with_external_data(tmp_path):
    path = tmp_path / "cnn.onnx"
    onnx.save(cnn_model(), str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location="cnn.weights", size_threshold=0)
    assert (tmp_path / "cnn.weights").exists()
    g = mx.load(path)
    np.testing.assert_array_equal(g.initializers["fc.w"], mx.load(cnn_model()).initializers["fc.w"])


def test_unsupported_nodes_are_all_named_in_one_error():
    model = cnn_model(opset=5)      # Relu's first minitrain schema is opset 6
    g = model.graph
    g.node.append(helper.make_node("Frobnicate", ["y"], ["z1"], name="mystery"))
    g.node.append(helper.make_node("Thing", ["y"], ["z2"], name="foreign", domain="my.domain"))
    g.node.append(helper.make_node("Cast", ["y"], ["yi"], name="cast", to=TensorProto.INT32))
    g.node.append(helper.make_node("Reshape", ["int_input", "shape"], ["z3"], name="int_reshape"))
    g.input.append(helper.make_tensor_value_info("int_input", TensorProto.INT32, [3]))
    g.initializer.append(numpy_helper.from_array(np.array([3, 1]), "shape"))
    with pytest.raises(OnnxImportError) as info:
        mx.from_model(model)
    message = str(info.value)
    for name, op, domain in [("relu", "Relu", "'ai.onnx'"), ("mystery", "Frobnicate", "'ai.onnx'"),
                             ("foreign", "Thing", "'my.domain'"), ("cast", "Cast", "'ai.onnx'"),
                             ("int_reshape", "Reshape", "'ai.onnx'")]:
        assert f"node {name!r} ({op}, domain {domain}" in message, message
    assert "version 5" in message and "version None" in message and "int32" in message
    assert isinstance(info.value, ValueError)


# --------------------------------------------------------------------------- export
def small_session(opt=None):
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Relu(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(64, 10))
    return TrainingSession(model, nn.CrossEntropyLoss(), opt or optim.SGD(0.1), input_shape=(1, 8, 8))


def test_inference_export_is_valid_onnx_with_the_trained_parameters(tmp_path):
    session = small_session()
    x, y = digits_batch()
    session.train_step(x, y)
    model = mx.save(session, tmp_path / "model.onnx")       # runs onnx.checker with full_check
    onnx.checker.check_model(onnx.load(str(tmp_path / "model.onnx")), full_check=True)
    expected = session.eval_step(x)
    got = ReferenceEvaluator(model).run(None, {"input": x})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_training_export_reimports_with_identical_gradients(tmp_path):
    session = small_session()
    model = mx.save(session, tmp_path / "train.onnx", what="training")
    assert {(o.domain, o.version) for o in model.opset_import} == {("", 19), ("com.microsoft", 1)}
    assert {"ConvGrad", "ReluGrad", "SoftmaxCrossEntropyLossGrad"} <= {n.op_type for n in model.graph.node}
    x, y = digits_batch()
    feeds = {"input": x, "target": y}
    grads = [v for v in session.grad_names.values()]
    original = run_graph(session.grad_graph, feeds, grads)
    reloaded = run_graph(mx.load(tmp_path / "train.onnx"), feeds, grads)
    for name in grads:
        np.testing.assert_array_equal(reloaded[name], original[name])


def test_save_refuses_an_unknown_what(tmp_path):
    with pytest.raises(ValueError, match="what must be one of"):
        mx.save(small_session(), tmp_path / "m.onnx", what="deploy")


def test_session_export_writes_what_save_writes(tmp_path):
    session = small_session()
    for what in ("inference", "training"):
        exported = session.export(tmp_path / f"{what}.onnx", what=what)
        saved = mx.save(session, tmp_path / f"{what}-saved.onnx", what=what)
        assert exported.SerializeToString() == saved.SerializeToString()
        assert onnx.load(str(tmp_path / f"{what}.onnx")).SerializeToString() == saved.SerializeToString()


def test_save_refuses_what_it_cannot_export(tmp_path):
    with pytest.raises(TypeError, match="cannot export a dict"):
        mx.save({"w": np.ones(3)}, tmp_path / "m.onnx")


# --------------------------------------------------------------------------- training
def test_imported_model_trains_on_digits(tmp_path):
    path = tmp_path / "cnn.onnx"
    onnx.save(cnn_model(), str(path))
    session = TrainingSession.from_onnx(path, nn.CrossEntropyLoss(), optim.SGD(0.1, momentum=0.9))
    assert sorted(session.params) == ["conv.b", "conv.w", "fc.b", "fc.w"]
    d = load_digits()
    first = session.evaluate(d.x_train[:256], d.y_train[:256])[0]
    for epoch in range(3):
        for i in range(0, 512, 64):
            session.train_step(d.x_train[i:i + 64], d.y_train[i:i + 64])
    assert session.evaluate(d.x_train[:256], d.y_train[:256])[0] < 0.5 * first


def test_trainable_selects_the_parameters():
    session = TrainingSession.from_graph(mx.load(cnn_model()), nn.CrossEntropyLoss(), optim.SGD(0.1),
                                         trainable=["fc.w", "fc.b"])
    assert sorted(session.params) == ["fc.b", "fc.w"]
    assert sorted(n for n, _ in session.model.named_buffers()) == ["conv.b", "conv.w"]
    with pytest.raises(ValueError, match="not floating-point initializers"):
        nn.GraphModule(mx.load(cnn_model()), trainable=["nope"])


# --------------------------------------------------------------------------- without onnx
def test_missing_onnx_gives_a_clear_error():
    code = ("import sys; sys.modules['onnx'] = None\n"
            "import minitrain, minitrain.onnx\n"
            "try:\n    minitrain.onnx.load('model.onnx')\n"
            "except ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install minitrain[onnx]" in out
