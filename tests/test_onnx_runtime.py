"""The inference export run by ONNX Runtime: its outputs equal minitrain's to 1e-5 (float32).

Each example's model is trained a few steps (so that BatchNorm's running statistics and the
parameters are not the initial ones), exported with minitrain.onnx.save, and run by
onnxruntime.InferenceSession on the CPU next to the session's own eval_step.  Skips without
onnxruntime (the plain package, or onnxruntime-training, which holds it)."""
import numpy as np
import pytest

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import minitrain  # noqa: E402
import minitrain.onnx as mx  # noqa: E402
from minitrain import cli, nn, optim  # noqa: E402
from minitrain.training import TrainingSession  # noqa: E402

TOLERANCE = 1e-5
EXAMPLES = {"lenet_digits": 10, "cnn1d_mnist1d": 10, "conv3d_volumes": 4, "convtranspose_autoencoder": None}


def trained_session(name, rng):
    """The example's model after three AdamW steps on random data."""
    example = cli.load_example(name)
    minitrain.random.seed(0)
    classes = EXAMPLES[name]
    loss = nn.MSELoss() if classes is None else nn.CrossEntropyLoss()
    session = TrainingSession(example.build_model(), loss, optim.AdamW(1e-2), input_shape=example.INPUT_SHAPE)
    for _ in range(3):
        x = rng.standard_normal((8,) + example.INPUT_SHAPE).astype(np.float32)
        session.train_step(x, x if classes is None else rng.integers(0, classes, 8))
    return session, example.INPUT_SHAPE


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_onnx_runtime_computes_what_minitrain_computes(name, tmp_path):
    rng = np.random.default_rng(0)
    session, input_shape = trained_session(name, rng)
    path = tmp_path / f"{name}.onnx"
    mx.save(session, path)
    runtime = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in runtime.get_inputs()] == ["input"]
    for batch in (1, 5):
        x = rng.standard_normal((batch,) + input_shape).astype(np.float32)
        expected = session.eval_step(x)
        (got,) = runtime.run(None, {"input": x})
        assert got.shape == expected.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, expected, rtol=TOLERANCE, atol=TOLERANCE * np.abs(expected).max())


def test_onnx_runtime_runs_an_imported_and_retrained_model(tmp_path):
    """import -> train -> export: the round trip ends in a file ONNX Runtime runs the same way."""
    from test_onnx_interop import cnn_model
    from minitrain.data import load_digits
    session = TrainingSession.from_onnx(cnn_model(), nn.CrossEntropyLoss(), optim.SGD(0.1, momentum=0.9))
    data = load_digits()
    for i in range(0, 256, 32):
        session.train_step(data.x_train[i:i + 32], data.y_train[i:i + 32])
    mx.save(session, tmp_path / "retrained.onnx")
    runtime = ort.InferenceSession(str(tmp_path / "retrained.onnx"), providers=["CPUExecutionProvider"])
    expected = session.eval_step(data.x_test[:64])
    (got,) = runtime.run(None, {"input": data.x_test[:64]})
    np.testing.assert_allclose(got, expected, rtol=TOLERANCE, atol=TOLERANCE * np.abs(expected).max())
