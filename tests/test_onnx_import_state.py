"""Which initializers of an imported ONNX model are trained, and what happens to the rest.

A model PyTorch exports in training mode carries BatchNormalization in its training form
(training_mode=1 from opset 14, the running-statistics outputs at opsets 9-13): minitrain trains
it with batch statistics, updates the running statistics as PyTorch does (the mean exactly, the
variance biased, as ONNX defines it), and never trains them.  An eval-mode export runs on the
running statistics and leaves them alone.  Skips without torch or onnx."""
import io
import logging

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

from minitrain import nn, optim  # noqa: E402
from minitrain.errors import OnnxImportError  # noqa: E402
from minitrain.nn.graph_module import trainable_initializers  # noqa: E402
from minitrain.onnx import load  # noqa: E402
from minitrain.training import TrainingSession  # noqa: E402

MODES = {"training": torch.onnx.TrainingMode.TRAINING, "eval": torch.onnx.TrainingMode.EVAL}


class TinyResNet(torch.nn.Module):
    """A stem and one residual block with BatchNorm, a global pool and a linear head."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1, bias=False), torch.nn.BatchNorm2d(4),
                                        torch.nn.ReLU())
        self.block = torch.nn.Sequential(torch.nn.Conv2d(4, 4, 3, padding=1, bias=False), torch.nn.BatchNorm2d(4),
                                         torch.nn.ReLU(), torch.nn.Conv2d(4, 4, 3, padding=1, bias=False),
                                         torch.nn.BatchNorm2d(4))
        self.head = torch.nn.Linear(4, 5)

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(x + self.block(x))
        return self.head(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


def export(model, x, mode, opset):
    f = io.BytesIO()
    torch.onnx.export(model, (x,), f, training=MODES[mode], opset_version=opset, dynamo=False,
                      do_constant_folding=False, input_names=["x"])
    return onnx.load_from_string(f.getvalue())


def batches(steps, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((4, 3, 6, 6)).astype(np.float32), rng.integers(0, 5, 4)) for _ in range(steps)]


@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.parametrize("mode", ["training", "eval"])
def test_batchnorm_statistics_are_state_not_parameters(mode, opset, caplog):
    torch.manual_seed(0)
    model = TinyResNet()
    with torch.no_grad():     # away from their defaults, so that using them shows (and the eval export
        for m in model.modules():  # does not merge equal initializers)
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    data = batches(3)
    proto = export(model, torch.from_numpy(data[0][0]), mode, opset)
    with caplog.at_level(logging.WARNING):
        session = TrainingSession.from_onnx(proto, nn.CrossEntropyLoss(), optim.SGD(0.1))
    assert "does not depend" not in caplog.text
    assert not any("running" in name for name in session.trained)
    assert sorted(session.trained) == sorted(n for n, p in model.named_parameters())

    model.train(mode == "training")
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    statistics = {n: b.clone() for n, b in model.named_buffers() if "running" in n}
    expected_var = {}
    seen = {}      # BatchNorm name -> its input in the last forward, for the biased variance
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.register_forward_pre_hook(lambda m, a, name=name: seen.__setitem__(name, a[0].detach()))
    for x, y in data:
        sgd.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        sgd.step()
        assert session.train_step(x, y) == pytest.approx(loss.item(), rel=1e-5)
        for name, value in seen.items() if mode == "training" else ():
            var = expected_var.get(name, statistics[f"{name}.running_var"])
            expected_var[name] = 0.9 * var + 0.1 * value.var(dim=(0, 2, 3), unbiased=False)
    session.pull()
    state = {n: b.data for n, b in session.model.named_buffers()}
    for name, before in statistics.items():
        if mode == "eval":
            np.testing.assert_array_equal(state[name], before.numpy())
        elif name.endswith("running_mean"):
            np.testing.assert_allclose(state[name], dict(model.named_buffers())[name].numpy(), rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_allclose(state[name], expected_var[name[:-len(".running_var")]].numpy(), rtol=1e-5)
    buffers = dict(model.named_buffers())
    for name, var in expected_var.items():
        buffers[f"{name}.running_var"].copy_(var)
    model.eval()
    x = data[0][0]
    np.testing.assert_allclose(session.eval_step(x), model(torch.from_numpy(x)).detach().numpy(),
                               rtol=1e-4, atol=1e-5)


def hand_made_model(nodes, initializers):
    """An opset-17 model of `nodes` from input x (2, 3, 5, 5) float32 to output y."""
    from onnx import TensorProto, helper, numpy_helper
    graph = helper.make_graph(nodes, "hand_made", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.asarray(a), name) for name, a in initializers.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_integer_and_non_differentiable_initializers_are_not_parameters():
    from onnx import helper
    f = np.ones(4, np.float32)
    initializers = {"w": np.ones((4, 3, 3, 3), np.float32), "gamma": f, "beta": f, "mean": f, "var": f,
                    "low": np.float32(0), "high": np.float32(6), "shape": np.array([2, -1])}
    model = hand_made_model([
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["b", "rm", "rv"],
                         training_mode=1),
        helper.make_node("Clip", ["b", "low", "high"], ["r"]),
        helper.make_node("Reshape", ["r", "shape"], ["y"])], initializers)
    assert trainable_initializers(load(model)) == ["w", "gamma", "beta"]


def test_unsupported_ops_are_all_named():
    from onnx import helper
    model = hand_made_model([helper.make_node("CumSum", ["x", "axis"], ["s"]),
                             helper.make_node("Relu", ["s"], ["r"]),
                             helper.make_node("Hardmax", ["r"], ["y"], axis=1)], {"axis": np.array(1)})
    with pytest.raises(OnnxImportError, match=r"2 node\(s\) are not supported:\n .*CumSum.*\n .*Hardmax"):
        load(model)
