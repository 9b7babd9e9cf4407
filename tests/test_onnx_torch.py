"""A LeNet built with PyTorch, exported with torch.onnx.export, imported and trained by minitrain.

The model is PyTorch's own (its layers, its initialisation); minitrain sees only the .onnx
file.  The import must compute what PyTorch computes, and training it with
TrainingSession.from_onnx must reach the accuracy bar of examples/lenet_digits.py (97% on the
digits test split).  Skips without torch or onnx."""
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

import minitrain.onnx  # noqa: E402
from minitrain import nn, optim  # noqa: E402
from minitrain.data import ArrayDataset, DataLoader, load_digits  # noqa: E402
from minitrain.training import TrainingSession  # noqa: E402
from minitrain.training.loop import evaluate, fit  # noqa: E402

ACCURACY_BAR = 0.97     # examples/lenet_digits.py's


def torch_lenet():
    torch.manual_seed(0)
    tn = torch.nn
    return tn.Sequential(
        tn.Conv2d(1, 16, 3, padding=1), tn.ReLU(), tn.MaxPool2d(2),
        tn.Conv2d(16, 32, 3, padding=1), tn.ReLU(), tn.MaxPool2d(2),
        tn.Flatten(), tn.Linear(32 * 2 * 2, 64), tn.ReLU(), tn.Linear(64, 10))


def export(model, path):
    """torch.onnx.export with a symbolic batch dim.  The TorchScript exporter (dynamo=False)
    needs nothing beyond torch and onnx; the dynamo one needs onnxscript."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), (torch.zeros(2, 1, 8, 8),), str(path), dynamo=False, opset_version=17,
                          input_names=["image"], output_names=["logits"],
                          dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}})


@pytest.fixture(scope="module")
def lenet_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("torch") / "lenet.onnx"
    model = torch_lenet()
    export(model, path)
    return model, path


def test_exported_lenet_imports_and_computes_what_torch_computes(lenet_file):
    model, path = lenet_file
    graph = minitrain.onnx.load(path)
    assert [(v.name, v.shape) for v in graph.inputs] == [("image", ("batch", 1, 8, 8))]
    assert {n.op_type for n in graph.nodes} == {"Conv", "Relu", "MaxPool", "Flatten", "Gemm"}
    x = load_digits().x_test[:16]
    session = TrainingSession.from_graph(graph, nn.CrossEntropyLoss(), optim.SGD(0.1))
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(session.eval_step(x), expected, rtol=1e-5, atol=1e-5)


def test_exported_lenet_trains_to_the_lenet_digits_bar(lenet_file):
    _, path = lenet_file
    data = load_digits()
    epochs, batch_size = 20, 32
    loader = DataLoader(ArrayDataset(data.x_train, data.y_train), batch_size, shuffle=True, seed=0)
    total = epochs * len(loader)
    schedule = optim.LinearWarmup(total // 20, optim.CosineLR(total - total // 20))
    session = TrainingSession.from_onnx(path, nn.CrossEntropyLoss(),
                                        optim.AdamW(3e-3, weight_decay=1e-4, schedule=schedule))
    assert sorted(session.params) == ["0.bias", "0.weight", "3.bias", "3.weight",
                                      "7.bias", "7.weight", "9.bias", "9.weight"]
    before = evaluate(session, data.x_test, data.y_test)["test_accuracy"]
    fit(session, loader, epochs=epochs, progress=False, log=lambda line: None)
    after = evaluate(session, data.x_test, data.y_test)["test_accuracy"]
    assert before < 0.5 and after >= ACCURACY_BAR, (before, after)
