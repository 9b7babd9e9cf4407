"""onnxruntime-training's own training graph, run by minitrain.

generate_artifacts turns a small CNN (Conv, Relu, MaxPool, Flatten, Gemm, cross-entropy) into
training_model.onnx: ONNX Runtime's gradient graph, with its com.microsoft ops
(SoftmaxCrossEntropyLossGrad, ReluGrad, ConvGrad, InPlaceAccumulatorV2) and ReduceSum.
minitrain's ArtifactModule runs that file and must give the loss and gradients that ONNX
Runtime's own training Module gives on the same batch, after a reset and when accumulating.

Skips without onnxruntime-training (pip install onnxruntime-training==1.19.2: it needs torch,
and pins its own numpy and protobuf ranges, so it lives in a venv of its own; see README)."""
import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime.training.api", reason="needs onnxruntime-training")
from onnxruntime.training import artifacts  # noqa: E402
from onnxruntime.training.api import CheckpointState, Module  # noqa: E402

from minitrain.onnx.artifacts import ArtifactModule  # noqa: E402
from test_onnx_interop import cnn_model  # noqa: E402

RTOL = 1e-5


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """The artifacts of cnn_model(opset 17) with a cross-entropy loss, in a fresh folder."""
    folder = tmp_path_factory.mktemp("artifacts")
    model = cnn_model(opset=17)
    params = [t.name for t in model.graph.initializer]
    artifacts.generate_artifacts(model, requires_grad=params, loss=artifacts.LossType.CrossEntropyLoss,
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=str(folder))
    return model, folder


def batch(seed, n):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, n).astype(np.int64)


def ort_module(folder):
    state = CheckpointState.load_checkpoint(str(folder / "checkpoint"))
    module = Module(str(folder / "training_model.onnx"), state, str(folder / "eval_model.onnx"))
    module.train()
    return state, module


def assert_close(ours, theirs, what):
    scale = np.abs(theirs).max()
    np.testing.assert_allclose(ours, theirs, rtol=RTOL, atol=RTOL * scale, err_msg=what)


def test_the_training_graph_holds_the_ops_minitrain_runs(generated):
    import onnx
    _, folder = generated
    ops = {(n.domain or "ai.onnx", n.op_type) for n in onnx.load(str(folder / "training_model.onnx")).graph.node}
    assert {("com.microsoft", "InPlaceAccumulatorV2"), ("ai.onnx", "ReduceSum"),
            ("com.microsoft", "ConvGrad"), ("com.microsoft", "SoftmaxCrossEntropyLossGrad")} <= ops


def test_gradients_equal_onnx_runtime_training(generated):
    model, folder = generated
    state, theirs = ort_module(folder)
    ours = ArtifactModule(folder / "training_model.onnx", model)
    assert sorted(ours.param_names) == ["conv.b", "conv.w", "fc.b", "fc.w"]
    assert ours.input_names == ["x", "labels"]
    for step, (x, y) in enumerate([batch(0, 16), batch(1, 16), batch(2, 7)]):
        if step != 1:                    # step 1 adds to step 0's gradients
            theirs.lazy_reset_grad()
            ours.lazy_reset_grad()
        assert_close(ours(x, y), theirs(x, y), f"loss at step {step}")
        for name, parameter in state.parameters:
            assert_close(ours.grads[name], parameter.grad, f"gradient of {name} at step {step}")


def test_parameters_must_all_be_given(generated):
    model, folder = generated
    with pytest.raises(ValueError, match=r"no value for the trainable parameter\(s\) \['fc.b'\]"):
        ArtifactModule(folder / "training_model.onnx", {t.name: 0 for t in model.graph.initializer
                                                        if t.name != "fc.b"})


def test_a_plain_model_is_not_a_training_graph(generated):
    model, _ = generated
    with pytest.raises(ValueError, match="not an onnxruntime-training training model"):
        ArtifactModule(model, model)
