"""Constant, Concat, Split, Gather, Tile, Pad and Resize inside graphs: the gradient graphs
that shapes unknown when they are built lead to (shapes gathered on the host, zeros made by
ConstantOfShape, PadGrad), constants feeding shape inference, and Pad and Resize beside
PyTorch's F.pad and F.interpolate, forward and backward."""
import numpy as np
import pytest

from minitrain import Executor, Graph, run_node
from minitrain.autodiff import build_gradient_graph
from minitrain.gradcheck import gradcheck_graph
from minitrain.inference import infer_types
from minitrain.scheduler import schedule


def _ops(graph):
    return [n.op_type for n in graph.nodes]


def test_concat_gradient_gathers_the_split_sizes_when_the_axis_dims_are_unknown(rng):
    g = Graph(opset_imports={"": 13})
    g.add_input("a", np.float64, (2, "n"))
    g.add_input("b", np.float64, (2, "m"))
    y = g.add_node("Concat", ["a", "b"], attrs={"axis": 1})
    g.outputs.append(g.add_node("Tanh", [y]))
    grad_graph, _ = build_gradient_graph(g, g.outputs[0], ["a", "b"],
                                         seeds={g.outputs[0]: g.add_input("seed", np.float64, (2, "k"))})
    assert {"Shape", "Gather", "Split"} <= set(_ops(grad_graph))
    gradcheck_graph(g, {"a": rng.standard_normal((2, 3)), "b": rng.standard_normal((2, 4))}, ["a", "b"])


def test_split_gradient_fills_an_unused_piece_with_zeros(rng):
    g = Graph(opset_imports={"": 18})
    g.add_input("x", np.float64, ("n", 6))
    first, _, third = g.add_node("Split", ["x"], outputs=["p0", "p1", "p2"], attrs={"axis": 1, "num_outputs": 3})
    g.outputs.append(g.add_node("Mul", [first, third]))
    grad_graph, _ = build_gradient_graph(g, g.outputs[0], ["x"],
                                         seeds={g.outputs[0]: g.add_input("seed", np.float64, ("n", 2))})
    assert "ConstantOfShape" in _ops(grad_graph)
    gradcheck_graph(g, {"x": rng.standard_normal((3, 6))}, ["x"])


def test_tile_gradient_interleaves_a_shape_it_does_not_know(rng):
    g = Graph(opset_imports={"": 13})
    g.add_input("x", np.float64, ("n", "c"))
    g.add_input("repeats", np.int64, (2,))
    g.outputs.append(g.add_node("Tile", ["x", "repeats"]))
    gradcheck_graph(g, {"x": rng.standard_normal((2, 3)), "repeats": np.array([3, 2])}, ["x"])


def test_pad_gradient_with_pads_known_only_at_run_time_is_a_pad_grad(rng):
    g = Graph(opset_imports={"": 13})
    g.add_input("x", np.float64, (2, 3))
    g.add_input("pads", np.int64, (4,))
    g.outputs.append(g.add_node("Pad", ["x", "pads"]))
    feeds = {"x": rng.standard_normal((2, 3)), "pads": np.array([1, -1, 0, 2])}
    grad_graph, _ = build_gradient_graph(g, g.outputs[0], ["x"],
                                         seeds={g.outputs[0]: g.add_input("seed", np.float64, None)})
    assert "PadGrad" in _ops(grad_graph)
    gradcheck_graph(g, feeds, ["x"])


def test_constant_node_values_reach_shape_inference():
    g = Graph(opset_imports={"": 13})
    g.add_input("x", np.float32, (2, 3, 4))
    shape = g.add_node("Constant", [], attrs={"value": np.array([6, -1], dtype=np.int64)})
    g.outputs.append(g.add_node("Reshape", ["x", shape]))
    assert infer_types(g)[g.outputs[0]].shape == (6, 4)
    got = Executor(schedule(g, g.outputs)).run({"x": np.ones((2, 3, 4), np.float32)})[g.outputs[0]]
    assert got.shape == (6, 4)


def test_resize_keeps_a_symbolic_batch_and_concat_gradient_splits_by_constants():
    """Resize by scales keeps a symbolic dim that a scale of 1 keeps, so the gradient of a
    Concat after it splits by constant sizes rather than gathering them on the host."""
    g = Graph(opset_imports={"": 13})
    g.add_input("x", np.float64, ("N", 2, 3, 4))
    g.add_input("skip", np.float64, ("N", 1, 6, 8))
    scales = g.add_node("Constant", [], attrs={"value": np.array([1.0, 1.0, 2.0, 2.0], np.float32)})
    up = g.add_node("Resize", ["x", "", scales], attrs={"mode": "nearest"})
    g.outputs.append(g.add_node("Concat", [up, "skip"], attrs={"axis": 1}))
    assert infer_types(g)[up].shape == ("N", 2, 6, 8)
    grad_graph, _ = build_gradient_graph(g, g.outputs[0], ["x", "skip"],
                                         seeds={g.outputs[0]: g.add_input("seed", np.float64, ("N", 3, 6, 8))})
    assert not {"Shape", "Gather"} & set(_ops(grad_graph))
    batch_scaled = g.add_node("Resize", ["x", "", g.add_initializer("s2", np.array([2.0, 1, 1, 1], np.float32))])
    assert infer_types(g)[batch_scaled].shape is None


def test_split_refuses_more_outputs_than_its_pieces():
    from minitrain.errors import ShapeError
    with pytest.raises(ShapeError, match="Split.*outputs_2"):
        run_node("Split", [np.zeros((2, 4)), np.array([1, 3])], attrs={"axis": 1}, opset=13,
                 outputs=["outputs_0", "outputs_2"])


def test_split_into_equal_pieces_unless_num_outputs_counts_them():
    from minitrain.errors import ShapeError
    pieces = ["outputs_0", "outputs_1", "outputs_2"]
    with pytest.raises(ShapeError, match="Split.*dim of 7 into 3 equal pieces"):
        run_node("Split", [np.zeros((2, 7))], attrs={"axis": 1}, opset=13, outputs=pieces)
    got = run_node("Split", [np.zeros((2, 7))], attrs={"axis": 1, "num_outputs": 3}, opset=18, outputs=pieces)
    assert [p.shape[1] for p in got] == [3, 3, 1]
    assert [p.shape[1] for p in run_node("Split", [np.zeros((2, 6))], attrs={"axis": 1}, opset=13,
                                         outputs=pieces)] == [2, 2, 2]


# --------------------------------------------------------------------------- beside PyTorch
torch = pytest.importorskip("torch")
F = torch.nn.functional


def _torch_forward_backward(fn, x, seed):
    t = torch.tensor(x, requires_grad=True)
    y = fn(t)
    y.backward(torch.tensor(seed))
    return y.detach().numpy(), t.grad.numpy()


def _ours_forward_backward(op, inputs, attrs, opset, seed):
    g = Graph(opset_imports={"": opset})
    names = ["" if x is None else g.add_input(f"x{i}", x.dtype, x.shape) for i, x in enumerate(inputs)]
    g.outputs.append(g.add_node(op, names, attrs=attrs))
    grad_graph, grads = build_gradient_graph(g, g.outputs[0], ["x0"],
                                             seeds={g.outputs[0]: g.add_input("seed", np.float64, seed.shape)})
    feeds = {f"x{i}": x for i, x in enumerate(inputs) if x is not None}
    got = Executor(schedule(grad_graph, [g.outputs[0], grads["x0"]])).run({**feeds, "seed": seed})
    return got[g.outputs[0]], got[grads["x0"]]


RESIZES = [  # (F.interpolate keywords, Resize attributes, input shape, scales)
    ({"mode": "nearest"}, {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
     (2, 3, 5, 4), (2.0, 3.0)),
    ({"mode": "nearest"}, {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
     (2, 3, 6, 7), (0.5, 1.5)),
    ({"mode": "bilinear", "align_corners": False}, {"mode": "linear",
                                                    "coordinate_transformation_mode": "pytorch_half_pixel"},
     (2, 3, 5, 4), (2.0, 1.5)),
    ({"mode": "bilinear", "align_corners": False}, {"mode": "linear",
                                                    "coordinate_transformation_mode": "pytorch_half_pixel"},
     (1, 2, 7, 6), (0.5, 0.75)),
    ({"mode": "bilinear", "align_corners": True}, {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
     (2, 3, 5, 4), (2.0, 2.5)),
    ({"mode": "linear", "align_corners": False}, {"mode": "linear", "coordinate_transformation_mode": "half_pixel"},
     (2, 3, 9), (1.5,)),
    ({"mode": "trilinear", "align_corners": False}, {"mode": "linear",
                                                     "coordinate_transformation_mode": "pytorch_half_pixel"},
     (1, 2, 3, 4, 5), (2.0, 1.5, 0.5)),
]


@pytest.mark.parametrize("torch_kwargs,attrs,shape,scales", RESIZES, ids=lambda v: str(v))
def test_resize_matches_f_interpolate(rng, torch_kwargs, attrs, shape, scales):
    x = rng.standard_normal(shape)
    expected_y = F.interpolate(torch.tensor(x), scale_factor=scales, **torch_kwargs)
    seed = rng.standard_normal(tuple(expected_y.shape))
    y_torch, dx_torch = _torch_forward_backward(lambda t: F.interpolate(t, scale_factor=scales, **torch_kwargs),
                                                x, seed)
    full_scales = np.array((1.0, 1.0) + scales, dtype=np.float32)
    y, dx = _ours_forward_backward("Resize", [x, np.zeros(0, np.float32), full_scales], attrs, 13, seed)
    np.testing.assert_allclose(y, y_torch, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dx, dx_torch, rtol=1e-10, atol=1e-12)


PADS = [("constant", "constant", (1, 2, 0, 3)), ("reflect", "reflect", (2, 1, 3, 0)),
        ("replicate", "edge", (3, 1, 1, 2)), ("circular", "wrap", (2, 1, 1, 3))]


@pytest.mark.parametrize("torch_mode,mode,pads", PADS, ids=[p[0] for p in PADS])
def test_pad_matches_f_pad(rng, torch_mode, mode, pads):
    x = rng.standard_normal((2, 3, 4, 5))
    # F.pad lists (begin, end) pairs from the last axis back; ONNX lists begins, then ends
    onnx_pads = np.array([0, 0, pads[2], pads[0], 0, 0, pads[3], pads[1]], dtype=np.int64)
    y_shape = F.pad(torch.tensor(x), pads, mode=torch_mode).shape
    seed = rng.standard_normal(tuple(y_shape))
    y_torch, dx_torch = _torch_forward_backward(lambda t: F.pad(t, pads, mode=torch_mode), x, seed)
    y, dx = _ours_forward_backward("Pad", [x, onnx_pads], {"mode": mode}, 19, seed)
    np.testing.assert_allclose(y, y_torch, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dx, dx_torch, rtol=1e-12, atol=1e-12)
