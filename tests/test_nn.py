"""The layer API: shapes, parameter counts and names, PyTorch's default init, functional
composition (a residual block), build-time errors, and forward/backward parity with torch."""
import math

import numpy as np
import pytest

import minitrain
from minitrain import Executor, nn
from minitrain.errors import GraphError, ShapeError
from minitrain.gradcheck import gradcheck_graph
from minitrain.optim import SGD
from minitrain.scheduler import schedule
from minitrain.training import TrainingSession


def run(model, x, training=False):
    builder, out = nn.trace(model, {"x": (x.dtype, ("N",) + x.shape[1:])}, training=training)
    return Executor(schedule(builder.graph, [out.name])).run({"x": x})[out.name]


def lenet():
    return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.Relu(), nn.MaxPool2d(2),
                         nn.Conv2d(6, 16, 5), nn.Relu(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(400, 120), nn.Relu(), nn.Linear(120, 84), nn.Relu(), nn.Linear(84, 10))


LAYERS = [
    (lambda: nn.Linear(7, 5), (3, 7), (3, 5), 7 * 5 + 5),
    (lambda: nn.Linear(7, 5, bias=False), (3, 7), (3, 5), 35),
    (lambda: nn.Conv1d(2, 4, 3, stride=2, padding=1), (2, 2, 9), (2, 4, 5), 4 * 2 * 3 + 4),
    (lambda: nn.Conv2d(4, 6, 3, padding="same", groups=2), (2, 4, 5, 5), (2, 6, 5, 5), 6 * 2 * 9 + 6),
    (lambda: nn.Conv3d(1, 2, (1, 2, 3)), (1, 1, 3, 4, 5), (1, 2, 3, 3, 3), 2 * 6 + 2),
    (lambda: nn.ConvTranspose1d(3, 2, 4, stride=2, padding=1), (2, 3, 5), (2, 2, 10), 3 * 2 * 4 + 2),
    (lambda: nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1, output_padding=1), (1, 2, 4, 4), (1, 3, 8, 8), 57),
    (lambda: nn.ConvTranspose3d(2, 1, 2, stride=2), (1, 2, 2, 3, 2), (1, 1, 4, 6, 4), 2 * 8 + 1),
    (lambda: nn.MaxPool1d(2), (2, 3, 9), (2, 3, 4), 0),
    (lambda: nn.MaxPool2d(3, stride=2, padding=1), (1, 2, 7, 7), (1, 2, 4, 4), 0),
    (lambda: nn.MaxPool3d(2), (1, 1, 4, 4, 6), (1, 1, 2, 2, 3), 0),
    (lambda: nn.AvgPool1d(3, stride=1, padding=1), (2, 2, 5), (2, 2, 5), 0),
    (lambda: nn.AvgPool2d(2), (1, 3, 6, 4), (1, 3, 3, 2), 0),
    (lambda: nn.AvgPool3d(2, ceil_mode=True), (1, 1, 3, 4, 5), (1, 1, 2, 2, 3), 0),
    (lambda: nn.GlobalAvgPool(), (2, 3, 4, 5), (2, 3, 1, 1), 0),
    (lambda: nn.GlobalAvgPool(flatten=True), (2, 3, 4), (2, 3), 0),
    (lambda: nn.Flatten(), (2, 3, 4, 5), (2, 60), 0),
    (lambda: nn.BatchNorm1d(3), (4, 3), (4, 3), 6),
    (lambda: nn.BatchNorm2d(3), (2, 3, 4, 4), (2, 3, 4, 4), 6),
    (lambda: nn.BatchNorm3d(2), (2, 2, 2, 3, 2), (2, 2, 2, 3, 2), 4),
    (lambda: nn.Dropout(0.3), (4, 5), (4, 5), 0),
] + [(cls, (2, 3, 4), (2, 3, 4), 0) for cls in (nn.Relu, nn.LeakyRelu, nn.Sigmoid, nn.Tanh, nn.QuickGelu,
                                                nn.Softmax, nn.LogSoftmax, nn.Identity)]


@pytest.mark.parametrize("make,in_shape,out_shape,count", LAYERS, ids=lambda v: getattr(v, "__name__", None))
def test_layer_shapes_and_parameter_counts(make, in_shape, out_shape, count, rng):
    layer = make()
    assert layer.num_parameters() == count
    for training in (False, True):
        builder, out = nn.trace(layer, {"x": (np.float32, ("N",) + in_shape[1:])}, training=training)
        assert out.shape == ("N",) + out_shape[1:], "inferred at build time, batch dim symbolic"
        y = run(layer, rng.standard_normal(in_shape).astype(np.float32), training)
        assert y.shape == out_shape and y.dtype == np.float32


def test_lenet5_matches_torch_parameter_count_and_names():
    model = lenet()
    assert model.num_parameters() == 61706
    names = [n for n, _ in model.named_parameters()]
    assert names[:4] == ["0.weight", "0.bias", "3.weight", "3.bias"] and names[-1] == "11.bias"
    builder, out = nn.trace(model, {"x": (np.float32, ("N", 1, 28, 28))})
    assert set(builder.graph.initializers) == set(names)
    assert out.shape == ("N", 10)


def test_default_init_follows_pytorch():
    minitrain.random.seed(0)
    conv = nn.Conv2d(4, 8, 3)
    bound = 1 / math.sqrt(4 * 9)
    assert conv.weight.dtype == np.float32
    assert np.abs(conv.weight.data).max() <= bound and np.abs(conv.weight.data).max() > 0.9 * bound
    assert np.abs(conv.bias.data).max() <= bound
    assert abs(np.std(conv.weight.data) - bound / math.sqrt(3)) < 0.15 * bound
    convt = nn.ConvTranspose2d(4, 6, 2, groups=2)
    assert convt.weight.shape == (4, 3, 2, 2)
    assert np.abs(convt.weight.data).max() <= 1 / math.sqrt(3 * 4)
    bn = nn.BatchNorm2d(5)
    assert np.all(bn.weight.data == 1) and np.all(bn.bias.data == 0) and np.all(bn.running_var.data == 1)
    minitrain.random.seed(0)
    again = nn.Conv2d(4, 8, 3)
    assert np.array_equal(again.weight.data, conv.weight.data), "seeded init is reproducible"


class ResidualBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        h = nn.functional.relu(self.bn1(self.conv1(x)))
        return nn.functional.relu(x + self.bn2(self.conv2(h)))


class SmallResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 4, 3, padding=1)
        self.block = ResidualBlock(4)
        self.head = nn.Sequential(nn.GlobalAvgPool(flatten=True), nn.Linear(4, 3))

    def forward(self, x):
        return self.head(self.block(self.stem(x)))


def test_residual_block_composes_functionally(rng):
    model = SmallResNet()
    names = [n for n, _ in model.named_parameters()]
    assert "block.conv1.weight" in names and "head.1.bias" in names
    assert [n for n, _ in model.named_buffers()][:2] == ["block.bn1.running_mean", "block.bn1.running_var"]
    builder, out = nn.trace(model, {"x": (np.float32, ("N", 1, 6, 6))}, training=True)
    ops = [n.op_type for n in builder.graph.nodes]
    assert ops.count("Add") == 1 and ops.count("BatchNormalization") == 2
    assert any(n.name.startswith("block.bn2") for n in builder.graph.nodes)
    assert len(builder.state_updates) == 4
    y = run(model, rng.standard_normal((2, 1, 6, 6)).astype(np.float32))
    assert y.shape == (2, 3)


def test_whole_model_gradients_by_finite_differences(rng):
    minitrain.random.seed(1)
    model = nn.Sequential(nn.Conv1d(2, 3, 3, padding=1), nn.BatchNorm1d(3), nn.Tanh(), nn.MaxPool1d(2),
                          nn.Flatten(), nn.Linear(6, 4), nn.QuickGelu(), nn.Linear(4, 2))
    model.to_dtype(np.float64)
    builder, out = nn.trace(model, {"x": (np.float64, (3, 2, 4))}, training=True)
    feeds = {"x": rng.standard_normal((3, 2, 4))}
    gradcheck_graph(builder.graph, feeds, ["x"] + [n for n, _ in model.named_parameters()], loss=out.name, rtol=1e-4, atol=1e-7)


def test_forward_and_backward_match_torch(rng):
    torch = pytest.importorskip("torch")
    model = SmallResNet().to_dtype(np.float64)
    tstem = torch.nn.Conv2d(1, 4, 3, padding=1).double()
    tconv1, tconv2 = (torch.nn.Conv2d(4, 4, 3, padding=1).double() for _ in range(2))
    tbn1, tbn2 = torch.nn.BatchNorm2d(4).double(), torch.nn.BatchNorm2d(4).double()
    tlin = torch.nn.Linear(4, 3).double()
    pairs = {"stem": tstem, "block.conv1": tconv1, "block.conv2": tconv2, "block.bn1": tbn1, "block.bn2": tbn2,
             "head.1": tlin}
    with torch.no_grad():
        for prefix, tm in pairs.items():
            tm.weight.copy_(torch.tensor(dict(model.named_parameters())[f"{prefix}.weight"].data))
            tm.bias.copy_(torch.tensor(dict(model.named_parameters())[f"{prefix}.bias"].data))

    def tforward(x):
        x = tstem(x)
        h = torch.relu(tbn1(tconv1(x)))
        y = torch.relu(x + tbn2(tconv2(h)))
        return tlin(y.mean(dim=(2, 3)))
    x = rng.standard_normal((3, 1, 5, 5))
    labels = np.array([0, 2, 1])
    session = TrainingSession(model, nn.CrossEntropyLoss(), SGD(0.1), input_shape=(1, 5, 5))
    loss = session.accumulate(x, labels)
    tloss = torch.nn.functional.cross_entropy(tforward(torch.tensor(x)), torch.tensor(labels))
    tloss.backward()
    assert loss == pytest.approx(tloss.item(), rel=1e-12)
    for prefix, tm in pairs.items():
        np.testing.assert_allclose(session.grads[f"{prefix}.weight"], tm.weight.grad.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(dict(model.named_buffers())["block.bn1.running_mean"].data, tbn1.running_mean.numpy(), rtol=1e-12)
    with torch.no_grad():     # running_var: ONNX's biased batch variance, torch's unbiased one
        for prefix, bn in (("block.bn1", tbn1), ("block.bn2", tbn2)):
            bn.running_var.copy_(torch.tensor(dict(model.named_buffers())[f"{prefix}.running_var"].data))
    for m in pairs.values():
        m.eval()
    np.testing.assert_allclose(session.eval_step(x), tforward(torch.tensor(x)).detach().numpy(), rtol=1e-10)


def test_build_errors_name_the_layer():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Relu())
    with pytest.raises(ShapeError, match=r"0\.Conv"):
        nn.trace(model, {"x": (np.float32, ("N", 2, 8, 8))})
    with pytest.raises(ShapeError, match="rank 4"):
        nn.trace(nn.Conv2d(1, 1, 3), {"x": (np.float32, ("N", 1, 8))})
    with pytest.raises(ShapeError, match="Flatten"):
        nn.trace(nn.Linear(4, 2), {"x": (np.float32, ("N", 2, 2))})
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    for groups in (0, -2, 1.5):
        with pytest.raises(ValueError, match=f"Conv2d: groups must be an int >= 1, got {groups}"):
            nn.Conv2d(4, 4, 3, groups=groups)
    with pytest.raises(ValueError, match="rank"):
        nn.trace(nn.BatchNorm2d(3), {"x": (np.float32, ("N", 3))})

    class Unregistered(nn.Module):
        def forward(self, x):
            return nn.Linear(2, 2)(x)
    with pytest.raises(GraphError, match="not registered"):
        nn.trace(Unregistered(), {"x": (np.float32, ("N", 2))})
    with pytest.raises(TypeError, match="symbolic"):
        nn.Relu()(np.ones(3))


def test_state_dict_round_trip_keeps_array_identity():
    model = lenet()
    weights = dict(model.named_parameters())["0.weight"].data
    state = model.state_dict()
    dict(model.named_parameters())["0.weight"].data[...] = 0
    model.load_state_dict(state)
    assert dict(model.named_parameters())["0.weight"].data is weights and np.array_equal(weights, state["0.weight"])
    with pytest.raises(ValueError, match="missing"):
        model.load_state_dict({k: v for k, v in state.items() if k != "0.bias"})
    bad = dict(state, **{"0.bias": np.zeros(7, np.float32)})
    with pytest.raises(ValueError, match="0.bias"):
        model.load_state_dict(bad)
    assert np.array_equal(dict(model.named_parameters())["0.bias"].data, state["0.bias"]), "nothing changed on error"


class Block(nn.Module):
    """The ResNet idiom: attributes set to None first, then maybe to a layer or a Parameter."""

    def __init__(self, downsample, bias):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3, padding=1, bias=False)
        self.downsample = None
        self.bias = None
        if downsample:
            self.downsample = nn.Conv2d(2, 2, 1)
        if bias:
            self.bias = nn.Parameter(np.zeros((1, 2, 1, 1), np.float32))

    def forward(self, x):
        y = self.conv(x)
        y = y + (self.downsample(x) if self.downsample is not None else x)
        return y + self.bias if self.bias is not None else y


@pytest.mark.parametrize("downsample,bias", [(False, False), (True, False), (False, True), (True, True)])
def test_attribute_first_none_then_a_layer_or_parameter(downsample, bias, rng):
    block = Block(downsample, bias)
    assert (block.downsample is not None) == downsample and (block.bias is not None) == bias
    assert ("downsample" in vars(block)) != downsample and ("bias" in vars(block)) != bias, "one place only"
    names = [n for n, _ in block.named_parameters()]
    expected = ["conv.weight"] + ["downsample.weight", "downsample.bias"] * downsample + ["bias"] * bias
    assert sorted(names) == sorted(expected)
    builder, out = nn.trace(block, {"x": (np.float32, ("N", 2, 4, 4))})
    assert set(builder.graph.initializers) == set(expected)
    assert run(block, rng.standard_normal((1, 2, 4, 4)).astype(np.float32)).shape == (1, 2, 4, 4)


def test_registered_names_take_none_and_refuse_other_values():
    layer = nn.Linear(3, 2)
    layer.bias = None                   # as PyTorch: the name stays registered, holding None
    assert layer.bias is None and [n for n, _ in layer.named_parameters()] == ["weight"]
    assert "bias" in layer._parameters and "bias" not in vars(layer)
    layer.bias = nn.Parameter(np.zeros(2, np.float32))
    assert [n for n, _ in layer.named_parameters()] == ["weight", "bias"]
    with pytest.raises(TypeError, match="'weight'.*Parameter or None"):
        layer.weight = np.zeros((2, 3), np.float32)
    model = nn.Sequential(nn.Linear(3, 2), nn.Relu())
    model.head = nn.Linear(2, 2)
    model.head = None
    assert model.head is None and [n for n, _ in model.named_modules()] == ["", "0", "1"]
    with pytest.raises(TypeError, match="'head'.*Module or None"):
        model.head = "linear"
    model.head = nn.Parameter(np.ones(2, np.float32))      # another kind replaces the layer
    assert model.head.shape == (2,) and "head" not in model._modules
    del model.head
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "0.bias"]
    bn = nn.BatchNorm1d(2)
    with pytest.raises(TypeError, match="'running_mean'.*Buffer or None"):
        bn.running_mean = 0.0


def test_parameters_yield_parameters_as_pytorch():
    model = lenet()
    params = list(model.parameters())
    assert all(type(p) is nn.Parameter for p in params) and len(params) == 10
    assert [p for _, p in model.named_parameters()] == params
    assert all(type(b) is nn.Buffer for b in nn.BatchNorm2d(3).buffers())
    np.testing.assert_array_equal(np.asarray(params[0]), params[0].data)
    assert np.asarray(params[0]) is params[0].data and np.array(params[0]) is not params[0].data
    model[0].requires_grad_(False)
    assert [p.requires_grad for p in model.parameters()][:3] == [False, False, True]
    assert "requires_grad=False" in repr(model[0].weight)


def test_pytorch_spellings_and_printout():
    assert nn.ReLU is nn.Relu and nn.LeakyReLU is nn.LeakyRelu
    text = repr(nn.Sequential(nn.Conv2d(1, 4, 3, bias=False), nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.25),
                              nn.AvgPool2d(3, stride=1), nn.Linear(4, 2, bias=False), nn.LeakyReLU(0.2)))
    assert "Conv2d(1, 4, kernel_size=(3, 3), stride=1, bias=False)" in text
    assert "MaxPool2d(kernel_size=2, stride=2," in text and "stride=None" not in text
    assert "AvgPool2d(kernel_size=3, stride=1," in text
    assert "Dropout(p=0.25)" in text and "Linear(4, 2, bias=False)" in text and "negative_slope=0.2" in text
    assert "padding=1, groups=2)" in repr(nn.Conv2d(2, 2, 3, padding=1, groups=2))
