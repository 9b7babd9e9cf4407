"""The CNN families people export from PyTorch, trained by minitrain from their ONNX files.

Each family is a small PyTorch model of its own (model_families.py: a few layers of the
family's characteristic blocks).

Each is exported with torch.onnx.export in training and in eval mode at opsets 13 and 17,
imported with TrainingSession.from_onnx, and trained 3 SGD steps beside the PyTorch model in
the same mode: the losses agree to 1e-5 relative (float32).  The trained model exported back
runs in onnxruntime with minitrain's outputs.  The CUDA variants carry the `cuda` marker.
Inputs are tiny so that the suite stays fast.  Skips without torch or onnx."""
import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

from minitrain import nn, optim  # noqa: E402
from minitrain.training import TrainingSession  # noqa: E402
from model_families import CLASSES, FAMILIES, build  # noqa: E402

F = torch.nn.functional
MODES = {"training": torch.onnx.TrainingMode.TRAINING, "eval": torch.onnx.TrainingMode.EVAL}
LR = 0.05
INPUT = (4, 3, 8, 8)
STEPS = 3


def export(model, mode, opset):
    f = io.BytesIO()
    model.train(mode == "training")
    torch.onnx.export(model, (torch.zeros(INPUT),), f, training=MODES[mode], opset_version=opset, dynamo=False,
                      do_constant_folding=False, input_names=["x"], output_names=["scores"])
    return onnx.load_from_string(f.getvalue())


def batches(family, seed=0):
    rng = np.random.default_rng(seed)
    label_shape = (INPUT[0],) + (INPUT[2:] if family == "unet" else ())
    return [(rng.standard_normal(INPUT).astype(np.float32), rng.integers(0, CLASSES, label_shape))
            for _ in range(STEPS)]


def train_beside_torch(family, mode, opset, device):
    """(session, PyTorch model) after STEPS SGD steps on both, losses compared at each."""
    model = build(family)
    proto = export(model, mode, opset)
    per_pixel = {"target_shape": INPUT[2:]} if family == "unet" else {}
    session = TrainingSession.from_onnx(proto, nn.CrossEntropyLoss(), optim.SGD(LR), device=device, **per_pixel)
    assert sorted(session.trained) == sorted(n for n, _ in model.named_parameters())
    model.train(mode == "training")
    sgd = torch.optim.SGD(model.parameters(), lr=LR)
    for step, (x, y) in enumerate(batches(family)):
        sgd.zero_grad()
        loss = F.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        sgd.step()
        ours = session.train_step(x, y)
        assert ours == pytest.approx(loss.item(), rel=1e-5), f"{family} {mode} opset {opset}: step {step}"
    return session, model


def check_family(family, mode, opset, device, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    session, _ = train_beside_torch(family, mode, opset, device)
    path = tmp_path / f"{family}.onnx"
    session.export(str(path))
    x = batches(family, seed=1)[0][0]
    ours = session.eval_step(x)
    inference = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    theirs = inference.run(None, {inference.get_inputs()[0].name: x})[0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.parametrize("mode", ["training", "eval"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_trains_beside_torch(family, mode, opset, tmp_path):
    check_family(family, mode, opset, "cpu", tmp_path)


@pytest.mark.cuda
@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.parametrize("mode", ["training", "eval"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_trains_beside_torch_on_cuda(family, mode, opset, tmp_path):
    check_family(family, mode, opset, "cuda", tmp_path)
