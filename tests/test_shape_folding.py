"""Shape subgraphs of exported models folded into constants (minitrain/shape_folding.py): with
a dynamic batch dim, view/flatten/chunk/channel shuffle train beside PyTorch at two batch sizes
and the traced graph holds no shape arithmetic; what cannot fold runs on the host at every step
(a view that moves the batch dim), and what cannot run there is refused by name."""
import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

from minitrain import nn, optim  # noqa: E402
from minitrain.errors import GraphError, OnnxImportError  # noqa: E402
from minitrain.graph import Node  # noqa: E402
from minitrain.onnx import load  # noqa: E402
from minitrain.shape_folding import ShapeFolder  # noqa: E402
from minitrain.training import TrainingSession  # noqa: E402

SHAPE_ARITHMETIC = {"Gather", "Unsqueeze", "Squeeze", "Div", "Mul", "Constant"}    # none of them in the model itself


class ShuffleViews(torch.nn.Module):
    """chunk, channel shuffle by view/transpose/reshape, and a flatten by x.view(x.size(0), -1)."""

    def __init__(self):
        super().__init__()
        self.conv, self.branch = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Conv2d(4, 4, 1)
        self.head = torch.nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        kept, changed = self.conv(x).chunk(2, dim=1)
        y = torch.cat([kept, torch.relu(self.branch(changed))], 1)
        n, c, h, w = y.shape
        y = y.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)
        return self.head(torch.nn.functional.max_pool2d(y, 2).view(y.size(0), -1))


def export(model, opset=17):
    f = io.BytesIO()
    torch.onnx.export(model, (torch.zeros(2, 3, 8, 8),), f, opset_version=opset, dynamo=False, input_names=["x"],
                      dynamic_axes={"x": {0: "batch"}}, do_constant_folding=False)
    return onnx.load_from_string(f.getvalue())


@pytest.mark.parametrize("opset", [13, 17])
def test_dynamic_batch_views_fold_and_train_beside_torch(opset):
    torch.manual_seed(0)
    model = ShuffleViews()
    proto = export(model, opset)
    assert {"Shape", "Gather", "Div"} <= {n.op_type for n in proto.graph.node}
    session = TrainingSession.from_onnx(proto, nn.CrossEntropyLoss(), optim.SGD(0.1))
    traced = [n.op_type for n in session.export_graph("inference").nodes]
    assert not set(traced) & SHAPE_ARITHMETIC
    assert traced.count("Concat") == 1 and traced.count("Shape") == 0      # the channel concat only
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    rng = np.random.default_rng(0)
    for batch in (4, 3, 4):
        x, y = rng.standard_normal((batch, 3, 8, 8)).astype(np.float32), rng.integers(0, 5, batch)
        sgd.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        sgd.step()
        assert session.train_step(x, y) == pytest.approx(loss.item(), rel=1e-5)


def test_symbolic_dim_reaching_another_consumer_runs_at_run_time():
    """A shape value that cannot fold into a constant (ConstantOfShape here; Expand in
    onnxruntime-training's gradient graphs) imports, its Shape node left to run."""
    from onnx import TensorProto, helper
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("ConstantOfShape", ["s"], ["zeros"], value=helper.make_tensor("v", TensorProto.FLOAT,
                                                                                                [1], [0.0])),
             helper.make_node("Add", ["x", "zeros"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert [node.op_type for node in load(model).nodes] == ["Shape", "ConstantOfShape", "Add"]


def test_folder_evaluates_torch_chunk_arithmetic():
    folder = ShapeFolder()
    dims = {"x": ("N", 8, 4, 4)}
    folder.add_constant("one", np.array(1))
    folder.add_constant("two", np.array(2))
    folder.add_constant("zero_axes", np.array([0]))
    for node in (Node("Shape", ["x"], ["s"]), Node("Gather", ["s", "one"], ["c"]), Node("Add", ["c", "one"], ["c1"]),
                 Node("Div", ["c1", "two"], ["half"]), Node("Gather", ["s", "two"], ["h"]),
                 Node("Unsqueeze", ["half", "zero_axes"], ["half1"])):
        assert folder.try_fold(node, node.attrs, 17, dims.get)
    assert folder.constant_for("half", Node("Slice", ["x", "one", "half"], ["y"]), 2, None).tolist() == 4
    reshape = Node("Reshape", ["x", "target"], ["y"])
    folder.values["target"] = folder.values["s"]
    assert folder.constant_for("target", reshape, 1, ("N", 8, 4, 4)).tolist() == [0, 8, 4, 4]
    assert folder.constant_for("target", Node("Expand", ["x", "target"], ["y"]), 1, None) is None


def test_known_values_fold_by_the_shared_rule():
    """Values with no symbolic entry fold through constant_folding.fold_node: Size of known dims
    and a Reshape of known ints too, which the symbolic evaluation does not cover."""
    folder = ShapeFolder()
    folder.add_constant("flat", np.array([-1]))
    dims = {"x": (2, 8, 4, 4), "y": ("N", 8)}
    for node in (Node("Size", ["x"], ["n"]), Node("Shape", ["x"], ["s"], {"start": 1}),
                 Node("Reshape", ["s", "flat"], ["s1"])):
        assert folder.try_fold(node, node.attrs, 17, dims.get)
    assert folder.values["n"].array().tolist() == 256 and folder.values["s1"].array().tolist() == [8, 4, 4]
    assert not folder.try_fold(Node("Size", ["y"], ["m"]), {}, 17, dims.get)


def test_a_bad_constant_is_one_of_the_import_failures():
    from onnx import helper
    nodes = [helper.make_node("Constant", [], ["c"], value_string="two", name="text"),
             helper.make_node("Relu", ["x"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 3])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 3])])
    with pytest.raises(OnnxImportError, match=r"node 'text' \(Constant.*value_string"):
        load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_run_time_nodes_come_in_order_and_need_host_kernels():
    """The nodes of a value the run must compute, each after what it reads, known values left
    out (they become constants); a node without an int64 host kernel is refused by name."""
    folder = ShapeFolder()
    dims = {"x": ("N", 8, 4, 4)}
    folder.add_constant("zero", np.array(0))
    folder.add_constant("two", np.array(2))
    folder.add_constant("axes", np.array([0]))
    folder.add_constant("minus_one", np.array([-1]))
    nodes = [Node("Shape", ["x"], ["s"], name="shape"), Node("Gather", ["s", "zero"], ["n"], name="batch"),
             Node("Unsqueeze", ["n", "axes"], ["n1"], name="unsqueeze"),
             Node("Unsqueeze", ["two", "axes"], ["two1"], name="two"),
             Node("Concat", ["two1", "n1", "minus_one"], ["target"], {"axis": 0}, name="concat"),
             Node("Mul", ["n", "two"], ["doubled"], name="double")]
    for node in nodes:
        assert folder.try_fold(node, node.attrs, 17, dims.get)
    reshape = Node("Reshape", ["x", "target"], ["y"])
    assert folder.constant_for("target", reshape, 1, dims["x"]) is None          # N moved: [2, N, -1]
    assert [n.name for n in folder.run_time_nodes("target")] == ["shape", "batch", "unsqueeze", "concat"]
    with pytest.raises(GraphError, match=r"'double' \(Mul\) computes 'doubled' = \[\'\(N \* 2\)\'\]"):
        folder.run_time_nodes("doubled")


class BatchMoved(torch.nn.Module):
    """x.view(2, x.size(0), -1): the batch dim in another place, which no constant can say."""

    def __init__(self):
        super().__init__()
        self.conv, self.head = torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.Linear(128, 5)

    def forward(self, x):
        y = self.conv(x)
        return self.head(torch.relu(y.view(2, y.size(0), -1)).sum(0))


def batch_moved_session(opset=17, **kwargs):
    torch.manual_seed(0)
    model = BatchMoved()
    session = TrainingSession.from_onnx(export(model, opset), nn.CrossEntropyLoss(), optim.SGD(0.1), **kwargs)
    return model, session


def train_beside_torch(model, session, batches=(4, 3, 4, 4), rel=1e-5):
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    rng = np.random.default_rng(0)
    for batch in batches:
        x, y = rng.standard_normal((batch, 3, 8, 8)).astype(np.float32), rng.integers(0, 5, batch)
        sgd.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        sgd.step()
        assert session.train_step(x, y) == pytest.approx(loss.item(), rel=rel)


@pytest.mark.parametrize("opset", [13, 17])
def test_shape_only_the_run_knows_is_computed_on_the_host(opset):
    model, session = batch_moved_session(opset)
    traced = [n.op_type for n in session.export_graph("inference").nodes]
    assert {"Shape", "Gather", "Unsqueeze", "Concat"} <= set(traced)
    steps = {s.node.op_type: s for s in session.train_plan.steps}
    reshape = next(s for s in session.train_plan.steps if s.node.op_type == "Reshape")
    assert reshape.node.inputs[1] == steps["Concat"].node.outputs[0]        # read as computed, no copy
    train_beside_torch(model, session)


def test_reshape_infers_minus_one_beside_a_copied_symbolic_dim():
    from minitrain.ops import get_schema, infer_node
    from minitrain.ops.schema import TensorType
    sch = get_schema("Reshape", "", 14)
    target = TensorType(np.dtype(np.int64), (3,), (0, 3, -1))
    _, (out,) = infer_node(sch, [TensorType(np.dtype(np.float32), ("N", 6, 5, 5)), target], {"allowzero": 0})
    assert out.shape == ("N", 3, 50)
