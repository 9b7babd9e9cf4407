"""Gelu written out in elementwise nodes -> one com.microsoft Gelu or FastGelu (fusion/gelu.py),
and a bias Add before a Gelu -> BiasGelu (fusion/bias_gelu.py), applied to the forward graph
before the gradient graph is built: hand-built graphs of every ordering fuse and give the nodes'
values, a wrong constant or bias, a second reader or a kept intermediate leaves them apart, and
exported PyTorch models (F.gelu, nn.GELU, opsets 13 and 17, ConvNeXt) train with one gradient
node per Gelu to the losses of the unfused graph."""
import dataclasses
import io
import math

import numpy as np
import pytest
from test_fusion import op_counts

import minitrain
from minitrain import nn, optim, run_node
from minitrain.executor import Executor
from minitrain.fusion import bias_gelu, fuse, fuse_forward, gelu
from minitrain.fusion.rewrite import Rewrite
from minitrain.graph import Graph
from minitrain.scheduler import schedule
from minitrain.training import TrainingSession

MS = "com.microsoft"
SHAPE = ("N", 3, 5)
ERF_NODES = ("Div", "Erf", "Add", "Mul")
TANH_NODES = ("Mul", "Pow", "Add", "Tanh")
GROUPINGS = ("(half*x)*a", "(x*a)*half", "x*(a*half)")


def pair(a, b, swap):
    return [b, a] if swap else [a, b]


class Pattern:
    """A graph X -> Y of one Gelu written out, with its constants as initializers (or Constant
    nodes) and every operand order chosen by the flags."""

    def __init__(self, dtype=np.float32, constant_nodes=False, opset=17):
        self.graph = Graph(opset_imports={"": opset}, name="gelu_pattern")
        self.graph.add_input("X", dtype, SHAPE)
        self.dtype, self.constant_nodes = dtype, constant_nodes

    def constant(self, name, value, shape=()):
        array = np.full(shape, value, self.dtype)
        if self.constant_nodes:
            self.graph.add_node("Constant", [], [name], {"value": array})
        else:
            self.graph.add_initializer(name, array)
        return name

    def node(self, op_type, inputs, output):
        return self.graph.add_node(op_type, inputs, [output])

    def half_x_times(self, one_plus, grouping, swap, half=0.5, half_shape=()):
        """Y = 0.5 * X * one_plus, grouped as `grouping`."""
        h = self.constant("half", half, half_shape)
        if grouping == "(half*x)*a":
            self.node("Mul", pair("X", h, swap), "half_x")
            self.node("Mul", pair("half_x", one_plus, swap), "Y")
        elif grouping == "(x*a)*half":
            self.node("Mul", pair("X", one_plus, swap), "x_a")
            self.node("Mul", pair("x_a", h, swap), "Y")
        else:
            self.node("Mul", pair(one_plus, h, swap), "a_half")
            self.node("Mul", pair("X", "a_half", swap), "Y")
        self.graph.outputs = ["Y"]
        return self.graph


def erf_pattern(scale="Div", erf_first=True, grouping="(x*a)*half", swap=False, sqrt2=math.sqrt(2), one=1.0,
                half=0.5, half_shape=(), **kwargs):
    """0.5 * X * (1 + Erf(X / sqrt2)); scale "Mul" multiplies by 1 / sqrt2 instead."""
    p = Pattern(**kwargs)
    if scale == "Div":
        p.node("Div", ["X", p.constant("sqrt2", sqrt2)], "scaled")
    else:
        p.node("Mul", pair("X", p.constant("inv_sqrt2", 1 / sqrt2), swap), "scaled")
    p.node("Erf", ["scaled"], "erf")
    p.node("Add", pair("erf", p.constant("one", one), not erf_first), "one_plus")
    return p.half_x_times("one_plus", grouping, swap, half, half_shape)


def tanh_pattern(cube="x*(x*x)", grouping="(half*x)*a", swap=False, cubic=0.044715, **kwargs):
    """0.5 * X * (1 + Tanh(sqrt(2/pi) * (X + cubic X^3))), X^3 as `cube`."""
    p = Pattern(**kwargs)
    if cube == "pow":
        p.node("Pow", ["X", p.constant("three", 3.0)], "cube")
    else:
        p.node("Mul", ["X", "X"], "square")
        p.node("Mul", pair("X", "square", cube == "(x*x)*x"), "cube")
    p.node("Mul", pair(p.constant("cubic", cubic), "cube", swap), "weighted")
    p.node("Add", pair("X", "weighted", swap), "inner")
    p.node("Mul", pair(p.constant("scale", math.sqrt(2 / math.pi)), "inner", swap), "scaled")
    p.node("Tanh", ["scaled"], "tanh")
    p.node("Add", pair(p.constant("one", 1.0), "tanh", swap), "one_plus")
    return p.half_x_times("one_plus", grouping, swap)


def run(graph, x, fetch=("Y",)):
    return Executor(schedule(graph, list(fetch), ("cpu",))).run({"X": x})


def x_values(rng, dtype=np.float32):
    x = (rng.standard_normal((4,) + SHAPE[1:]) * 3).astype(dtype)
    x.flat[:4] = [0.0, -0.0, 8.0, -8.0]
    return x


def working_ops(graph):
    """op type -> count of the nodes that compute something (not Constant nodes)."""
    return {op: n for op, n in op_counts(graph).items() if op != "Constant"}


def assert_fuses_to(graph, op, rng, dtype=np.float32, rtol=1e-6):
    fused = fuse_forward(graph)
    assert working_ops(fused) == {op: 1}
    (node,) = [n for n in fused.nodes if n.op_type == op]
    assert (node.domain, node.inputs, node.outputs) == (MS, ["X"], ["Y"])
    x = x_values(rng, dtype)
    got, expected = run(fused, x)["Y"], run(graph, x)["Y"]
    # the nodes' 1 + f(x) rounds to eps * |x| where f(x) nears -1: the fused op keeps those digits
    bound = rtol * np.abs(expected) + 2 * np.finfo(dtype).eps * np.abs(x)
    assert got.dtype == dtype and np.all(np.abs(got - expected) <= bound)


# ------------------------------------------------------------------------------ hand-built graphs
@pytest.mark.parametrize("grouping", GROUPINGS)
@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("erf_first", [True, False])
@pytest.mark.parametrize("scale", ["Div", "Mul"])
def test_every_ordering_of_the_erf_form_becomes_one_gelu(scale, erf_first, grouping, swap, rng):
    assert_fuses_to(erf_pattern(scale, erf_first, grouping, swap), "Gelu", rng)


@pytest.mark.parametrize("grouping", GROUPINGS)
@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("cube", ["x*(x*x)", "(x*x)*x", "pow"])
def test_every_ordering_of_the_tanh_form_becomes_one_fast_gelu(cube, grouping, swap, rng):
    assert_fuses_to(tanh_pattern(cube, grouping, swap), "FastGelu", rng, rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_constant_nodes_and_float64_fuse(dtype, rng):
    assert_fuses_to(erf_pattern(dtype=dtype, constant_nodes=True), "Gelu", rng, dtype)
    assert_fuses_to(tanh_pattern(dtype=dtype, constant_nodes=True), "FastGelu", rng, dtype, rtol=1e-5)


def test_the_approximate_sqrt2_of_bert_exports_fuses_as_in_onnx_runtime(rng):
    assert_fuses_to(erf_pattern(sqrt2=1.4142099618911743), "Gelu", rng, rtol=1e-5)


@pytest.mark.parametrize("wrong", [{"sqrt2": 1.5}, {"sqrt2": 1.4143}, {"sqrt2": 1.4143, "scale": "Mul"}, {"one": 2.0},
                                   {"one": -1.0}, {"half": 0.4}, {"half": 1.0}, {"half_shape": (1, 1, 1, 1)}])
def test_a_wrong_constant_leaves_the_erf_form(wrong):
    graph = erf_pattern(**wrong)
    assert working_ops(fuse_forward(graph)) == working_ops(graph)


@pytest.mark.parametrize("wrong", [{"cubic": 0.05}, {"cube": "pow", "cubic": -0.044715}])
def test_a_wrong_constant_leaves_the_tanh_form(wrong):
    graph = tanh_pattern(**wrong)
    assert working_ops(fuse_forward(graph)) == working_ops(graph)


def test_a_cube_of_another_power_leaves_the_tanh_form():
    graph = tanh_pattern("pow")
    graph.initializers["three"] = np.array(2.0, np.float32)
    assert "FastGelu" not in op_counts(fuse_forward(graph))


ERF_INTERMEDIATES = {"(half*x)*a": ["scaled", "erf", "one_plus", "half_x"],
                     "(x*a)*half": ["scaled", "erf", "one_plus", "x_a"],
                     "x*(a*half)": ["scaled", "erf", "one_plus", "a_half"]}


@pytest.mark.parametrize("grouping,value", [(g, v) for g, values in ERF_INTERMEDIATES.items() for v in values])
def test_an_intermediate_with_a_second_reader_stays(grouping, value, rng):
    graph = erf_pattern(grouping=grouping)
    graph.add_node("Neg", [value], ["outside"])
    graph.outputs.append("outside")
    fused = fuse_forward(graph)
    assert "Gelu" not in op_counts(fused)
    x = x_values(rng)
    np.testing.assert_array_equal(run(fused, x, graph.outputs)["outside"], run(graph, x, graph.outputs)["outside"])


@pytest.mark.parametrize("value", ["square", "cube", "weighted", "inner", "scaled", "tanh", "one_plus", "half_x"])
def test_a_kept_intermediate_of_the_tanh_form_stays(value):
    assert "FastGelu" not in op_counts(fuse_forward(tanh_pattern(), ["Y", value]))
    assert "FastGelu" in op_counts(fuse_forward(tanh_pattern(), ["Y"]))


def test_the_whole_graph_pass_fuses_a_forward_graph_too(rng):
    """fuse (an inference plan) has the rule among its RULES."""
    graph = erf_pattern()
    assert working_ops(fuse(graph)) == {"Gelu": 1}


def place_elsewhere(monkeypatch, moved):
    """The fusion pass sees op type `moved` run on another provider ("cuda") than the rest."""
    real = Rewrite.kernel_for

    def elsewhere(self, op_type, domain, dtype):
        kdef = real(self, op_type, domain, dtype)
        return dataclasses.replace(kdef, provider="cuda") if op_type == moved else kdef
    monkeypatch.setattr(Rewrite, "kernel_for", elsewhere)


@pytest.mark.parametrize("moved", ["Gelu", "GeluGrad"])
def test_no_gelu_where_it_or_its_gradient_runs_elsewhere(moved, monkeypatch):
    place_elsewhere(monkeypatch, moved)
    assert "Gelu" not in op_counts(fuse_forward(erf_pattern()))


# ------------------------------------------------------------------------------ a bias Add before a Gelu
def bias_gelu_graph(bias_shape=(5,), x_shape=SHAPE, bias_first=False, gelu="ms", opset=20):
    """Y = Gelu(X + B) ("ms": com.microsoft Gelu, "onnx"/"tanh": ONNX Gelu of that approximation,
    "erf": written out)."""
    p = Pattern(opset=opset)
    p.graph.inputs[0].shape = x_shape
    p.graph.add_input("B", np.float32, bias_shape)
    p.node("Add", pair("X", "B", bias_first), "Z")
    if gelu == "erf":
        p.node("Div", ["Z", p.constant("sqrt2", math.sqrt(2))], "scaled")
        p.node("Erf", ["scaled"], "erf")
        p.node("Add", ["erf", p.constant("one", 1.0)], "one_plus")
        p.node("Mul", ["Z", "one_plus"], "z_a")
        p.node("Mul", ["z_a", p.constant("half", 0.5)], "Y")
    elif gelu == "ms":
        p.graph.add_node("Gelu", ["Z"], ["Y"], domain=MS)
    else:
        p.graph.add_node("Gelu", ["Z"], ["Y"], {"approximate": "none" if gelu == "onnx" else "tanh"})
    p.graph.outputs = ["Y"]
    return p.graph


def run_biased(graph, x, b):
    return Executor(schedule(graph, ["Y"], ("cpu",))).run({"X": x, "B": b})["Y"]


@pytest.mark.parametrize("gelu", ["ms", "onnx", "erf"])
@pytest.mark.parametrize("bias_first", [False, True])
def test_a_bias_add_before_a_gelu_becomes_bias_gelu(gelu, bias_first, rng):
    graph = bias_gelu_graph(bias_first=bias_first, gelu=gelu)
    fused = fuse_forward(graph)
    assert working_ops(fused) == {"BiasGelu": 1}
    (node,) = fused.nodes[-1:]
    assert (node.domain, node.inputs, node.outputs) == (MS, ["X", "B"], ["Y"])
    x, b = x_values(rng), rng.standard_normal(5).astype(np.float32)
    np.testing.assert_allclose(run_biased(fused, x, b), run_biased(graph, x, b), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("bias_shape,x_shape", [((1, 5), SHAPE), ((3, 5), SHAPE), ((1,), SHAPE), ((5,), ("N", 3, 1)),
                                                ((5,), None)])
def test_another_add_before_a_gelu_stays(bias_shape, x_shape):
    assert "BiasGelu" not in op_counts(fuse_forward(bias_gelu_graph(bias_shape, x_shape)))


def test_no_bias_gelu_for_the_tanh_form_a_kept_sum_or_a_second_reader():
    assert "BiasGelu" not in op_counts(fuse_forward(bias_gelu_graph(gelu="tanh")))
    assert "BiasGelu" not in op_counts(fuse_forward(bias_gelu_graph(), ["Y", "Z"]))
    graph = bias_gelu_graph()
    graph.add_node("Neg", ["Z"], ["outside"])
    graph.outputs.append("outside")
    assert "BiasGelu" not in op_counts(fuse_forward(graph))


@pytest.mark.parametrize("moved", ["BiasGelu", "BiasGeluGrad_dX"])
def test_no_bias_gelu_where_it_or_its_gradient_runs_elsewhere(moved, monkeypatch):
    place_elsewhere(monkeypatch, moved)
    assert working_ops(fuse_forward(bias_gelu_graph())) == {"Add": 1, "Gelu": 1}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(4096, 16), (3, 7, 8), (1, 5), (0, 4)])
def test_bias_gelu_kernels_are_gelu_of_the_sum(shape, dtype, rng):
    """BiasGelu and BiasGeluGrad_dX against Gelu and GeluGrad run on X + B, within a few
    roundings (the row loops vectorise apart from the flat ones)."""
    x, dy = (rng.standard_normal(shape) * 3).astype(dtype), rng.standard_normal(shape).astype(dtype)
    b = rng.standard_normal(shape[-1]).astype(dtype)
    tolerance = 4 * np.finfo(dtype).eps
    np.testing.assert_allclose(run_node("BiasGelu", [x, b], domain=MS)[0], run_node("Gelu", [x + b], domain=MS)[0],
                               rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(run_node("BiasGeluGrad_dX", [dy, x, b], domain=MS)[0],
                               run_node("GeluGrad", [dy, x + b], domain=MS)[0], rtol=tolerance, atol=tolerance)


def test_bias_gelu_against_torch(rng):
    torch = pytest.importorskip("torch")
    x, b, dy = rng.standard_normal((6, 4)) * 2, rng.standard_normal(4), rng.standard_normal((6, 4))
    tx, tb = torch.tensor(x, requires_grad=True), torch.tensor(b, requires_grad=True)
    y = torch.nn.functional.gelu(tx + tb)
    y.backward(torch.tensor(dy))
    np.testing.assert_allclose(run_node("BiasGelu", [x, b], domain=MS)[0], y.detach().numpy(), rtol=1e-12)
    dx = run_node("BiasGeluGrad_dX", [dy, x, b], domain=MS)[0]
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(dx.sum(0), tb.grad.numpy(), rtol=1e-12)


@pytest.mark.cuda
@pytest.mark.parametrize("shape", [(3, 1027), (64, 16), (5, 3, 8)])
def test_cuda_bias_gelu_kernels_against_the_cpu(shape, rng):
    from cuda_parity import DTYPES, check_parity
    x, dy, b = rng.standard_normal(shape) * 4, rng.standard_normal(shape), rng.standard_normal(shape[-1])
    check_parity("BiasGelu", [x, b], {}, domain=MS, dtypes=DTYPES)
    check_parity("BiasGeluGrad_dX", [dy, x, b], {}, domain=MS, dtypes=DTYPES)


# ------------------------------------------------------------------------------ exported models and training
def without_gelu_rules(monkeypatch):
    monkeypatch.setattr(minitrain.fusion, "FORWARD_RULES", ())
    monkeypatch.setattr(minitrain.fusion, "RULES",
                        tuple(r for r in minitrain.fusion.RULES if r not in (gelu, bias_gelu)))


def gelu_mlp(torch, module):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), module, torch.nn.Linear(8, 3))


def exported(torch, model, opset):
    f = io.BytesIO()
    torch.onnx.export(model, (torch.zeros(4, 6),), f, opset_version=opset, dynamo=False)
    return f.getvalue()


def mlp_session(model_bytes):
    import onnx
    minitrain.random.seed(0)
    return TrainingSession.from_onnx(onnx.load_from_string(model_bytes), nn.CrossEntropyLoss(), optim.SGD(0.1))


def assert_same_losses(fused, plain, x, y, steps=3):
    for _ in range(steps):
        assert fused.train_step(x, y) == pytest.approx(plain.train_step(x, y), rel=1e-5, abs=1e-6)
    for name, value in fused.params.items():
        np.testing.assert_allclose(value, plain.params[name], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.parametrize("form", ["F.gelu", "nn.GELU", "tanh"])
def test_an_exported_gelu_trains_as_one_gelu_and_one_gradient(form, opset, monkeypatch, rng):
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    import torch.nn.functional as F

    class FunctionalGelu(torch.nn.Module):
        def forward(self, x):
            return F.gelu(x)
    module = {"F.gelu": FunctionalGelu(), "nn.GELU": torch.nn.GELU(),
              "tanh": torch.nn.GELU(approximate="tanh")}[form]
    model = exported(torch, gelu_mlp(torch, module), opset)
    op, grad_op, function = ("FastGelu", "FastGeluGrad", "Tanh") if form == "tanh" else ("Gelu", "GeluGrad", "Erf")
    fused = mlp_session(model)
    train_ops = op_counts(fused.train_plan.graph)
    assert train_ops[op] == train_ops[grad_op] == 1 and function not in train_ops and "Exp" not in train_ops
    assert op_counts(fused._eval_executor(True)[0].plan.graph)[op] == 1
    without_gelu_rules(monkeypatch)
    plain = mlp_session(model)
    assert op not in op_counts(plain.train_plan.graph)
    x, y = rng.standard_normal((5, 6)).astype(np.float32) * 2, rng.integers(0, 3, 5)
    assert_same_losses(fused, plain, x, y)


def test_exported_convnext_trains_to_the_unfused_losses(monkeypatch, rng):
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from family_plans import INPUT, exported_session
    from model_families import CLASSES
    fused = exported_session("convnext", "training", "cpu")
    counts = op_counts(fused.train_plan.graph)
    assert counts["BiasGelu"] == counts["BiasGeluGrad_dX"] == 2 and not {"Erf", "Exp", "Div"} & set(counts)
    without_gelu_rules(monkeypatch)
    plain = exported_session("convnext", "training", "cpu")
    assert op_counts(plain.train_plan.graph)["Erf"] == 2
    x, y = rng.standard_normal(INPUT).astype(np.float32), rng.integers(0, CLASSES, INPUT[0])
    assert_same_losses(fused, plain, x, y)


def test_the_cuda_convnext_plans_hold_the_fused_gelu_on_the_device():
    """With pycuda stubbed: BiasGelu and its gradient land on CUDA, nothing leaves the device and the
    plans still capture (tests/test_family_capture.py runs them on a GPU)."""
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from stubbed_cuda import run_stubbed
    found = run_stubbed(
        "import json\nfrom family_plans import cuda_blockers, exported_session\n"
        "session = exported_session('convnext', 'training', 'cuda')\n"
        "steps = session.train_plan.steps\n"
        "placed = sorted({(s.node.op_type, s.provider) for s in steps if 'Gelu' in s.node.op_type})\n"
        "print(json.dumps([placed, cuda_blockers(['convnext'])]))")
    placed, blockers = found
    assert placed == [["BiasGelu", "cuda"], ["BiasGeluGrad_dX", "cuda"]]
    assert blockers == {f"convnext/{mode}/{plan}": [[], None] for mode in ("training", "eval")
                        for plan in ("train", "eval")}


@pytest.mark.cuda
def test_cuda_convnext_trains_to_the_unfused_losses(monkeypatch, rng):
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from family_plans import INPUT, exported_session
    from model_families import CLASSES
    fused = exported_session("convnext", "training", "cuda")
    assert op_counts(fused.train_plan.graph)["BiasGeluGrad_dX"] == 2
    without_gelu_rules(monkeypatch)
    plain = exported_session("convnext", "training", "cuda")
    x, y = rng.standard_normal(INPUT).astype(np.float32), rng.integers(0, CLASSES, INPUT[0])
    for _ in range(3):
        assert fused.train_step(x, y) == pytest.approx(plain.train_step(x, y), rel=1e-5, abs=1e-6)
    assert fused._train.graphs.disabled is None
