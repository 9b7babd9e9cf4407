"""onnxruntime-training's own training graph, run by minitrain.

generate_artifacts turns a small CNN (Conv, Relu, MaxPool, Flatten, Gemm, cross-entropy) into
training_model.onnx: ONNX Runtime's gradient graph, with its com.microsoft ops
(SoftmaxCrossEntropyLossGrad, ReluGrad, ConvGrad, InPlaceAccumulatorV2) and ReduceSum.
minitrain.onnx.training.Module runs that file and must give the loss and gradients that ONNX
Runtime's own training Module gives on the same batch, after a reset and when accumulating.

Skips without onnxruntime-training (pip install minitrain[ort])."""
import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime.training.api", reason="needs onnxruntime-training")
from onnxruntime.training import api as ort_api  # noqa: E402
from onnxruntime.training import artifacts  # noqa: E402

from minitrain.onnx import training  # noqa: E402
from ort_models import IR_VERSION  # noqa: E402
from test_onnx_interop import cnn_model  # noqa: E402

RTOL = 1e-5


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """The artifacts of cnn_model(opset 17) with a cross-entropy loss, in a fresh folder."""
    folder = tmp_path_factory.mktemp("artifacts")
    model = cnn_model(opset=17)
    model.ir_version = IR_VERSION
    params = [t.name for t in model.graph.initializer]
    artifacts.generate_artifacts(model, requires_grad=params, loss=artifacts.LossType.CrossEntropyLoss,
                                 artifact_directory=str(folder))
    return folder


def batch(seed, n):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, n).astype(np.int64)


def module(api, folder):
    state = api.CheckpointState.load_checkpoint(str(folder / "checkpoint"))
    return state, api.Module(str(folder / "training_model.onnx"), state, str(folder / "eval_model.onnx"))


def assert_close(ours, theirs, what):
    scale = np.abs(theirs).max()
    np.testing.assert_allclose(ours, theirs, rtol=RTOL, atol=RTOL * scale, err_msg=what)


def test_the_training_graph_holds_the_ops_minitrain_runs(generated):
    import onnx
    ops = {(n.domain or "ai.onnx", n.op_type) for n in onnx.load(str(generated / "training_model.onnx")).graph.node}
    assert {("com.microsoft", "InPlaceAccumulatorV2"), ("ai.onnx", "ReduceSum"),
            ("com.microsoft", "ConvGrad"), ("com.microsoft", "SoftmaxCrossEntropyLossGrad")} <= ops


def test_gradients_equal_onnx_runtime_training(generated):
    theirs_state, theirs = module(ort_api, generated)
    ours_state, ours = module(training, generated)
    assert ours.input_names() == theirs.input_names() == ["x", "labels"]
    assert ours.output_names() == theirs.output_names()
    for step, (x, y) in enumerate([batch(0, 16), batch(1, 16), batch(2, 7)]):
        if step != 1:                    # step 1 adds to step 0's gradients
            theirs.lazy_reset_grad()
            ours.lazy_reset_grad()
        assert_close(ours(x, y), theirs(x, y), f"loss at step {step}")
        for name, parameter in theirs_state.parameters:
            assert_close(ours_state.parameters[name].grad, parameter.grad, f"gradient of {name} at step {step}")


def test_parameters_must_all_be_in_the_state(generated, tmp_path):
    from minitrain.onnx.ort_checkpoint_format import read_checkpoint, write_checkpoint
    contents = read_checkpoint(generated / "checkpoint")
    del contents.trainable["fc.b"]
    write_checkpoint(contents, tmp_path / "checkpoint")
    state = training.CheckpointState.load_checkpoint(tmp_path / "checkpoint")
    with pytest.raises(ValueError, match=r"has no parameter\(s\) \['fc.b'\]"):
        training.Module(generated / "training_model.onnx", state)


def test_a_plain_model_is_not_a_training_graph(generated):
    state = training.CheckpointState.load_checkpoint(generated / "checkpoint")
    with pytest.raises(ValueError, match="not an onnxruntime-training training model"):
        training.Module(generated / "eval_model.onnx", state)
