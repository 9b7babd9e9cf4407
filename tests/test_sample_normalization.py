"""LayerNormalization, InstanceNormalization and GroupNormalization beyond their op-table rows
(NumPy references, finite differences): forward and gradients against PyTorch autograd, the
statistics' shapes and types, bad input named, and on CUDA the shapes beyond the op table's
(rows longer than a block, more rows than blocks, data far from zero)."""
import numpy as np
import pytest

from cuda_parity import DTYPES, HALF_TYPES, check_parity
from minitrain import run_node
from minitrain.errors import OpAttributeError, ShapeError
from minitrain.ops import get_schema, infer_node
from minitrain.ops.schema import TensorType

MS = "com.microsoft"


def _forward_and_grad(op, x, scale, bias, dy, attrs, opset=None, domain=""):
    y, mean, inv_std = run_node(op, [x, scale, bias], attrs=attrs, opset=opset, domain=domain)
    grads = run_node(f"{op}Grad", [dy, x, scale, mean, inv_std], attrs=attrs, domain=MS)
    return y, grads


CASES = [  # (op, x shape, scale shape, attrs, opset, torch function of (x, weight, bias))
    ("LayerNormalization", (3, 4, 5), (5,), {"axis": -1}, 17,
     lambda t, x, w, b: t.nn.functional.layer_norm(x, (5,), w, b)),
    # channel-last over a few channels: rows taken in blocks, with a partial block
    ("LayerNormalization", (5, 9, 8), (8,), {"axis": -1}, 17,
     lambda t, x, w, b: t.nn.functional.layer_norm(x, (8,), w, b)),
    ("LayerNormalization", (2, 3, 4), (3, 4), {"axis": 1, "epsilon": 1e-3}, 17,
     lambda t, x, w, b: t.nn.functional.layer_norm(x, (3, 4), w, b, eps=1e-3)),
    ("InstanceNormalization", (2, 3, 4, 5), (3,), {}, 6,
     lambda t, x, w, b: t.nn.functional.instance_norm(x, weight=w, bias=b)),
    ("GroupNormalization", (2, 6, 3, 2), (6,), {"num_groups": 3}, 21,
     lambda t, x, w, b: t.nn.functional.group_norm(x, 3, w, b)),
    ("GroupNormalization", (2, 6, 5), (3,), {"num_groups": 3}, 18,
     lambda t, x, w, b: t.nn.functional.group_norm(x, 3, w.repeat_interleave(2), b.repeat_interleave(2))),
]


@pytest.mark.parametrize("op,x_shape,scale_shape,attrs,opset,reference", CASES,
                         ids=[f"{c[0]}-{c[4]}-{len(c[1])}d" for c in CASES])
def test_against_torch_autograd(op, x_shape, scale_shape, attrs, opset, reference, rng):
    torch = pytest.importorskip("torch")
    x = rng.standard_normal(x_shape) * 2 + 0.5
    scale, bias, dy = rng.standard_normal(scale_shape), rng.standard_normal(scale_shape), rng.standard_normal(x_shape)
    y, (dx, dscale, dbias) = _forward_and_grad(op, x, scale, bias, dy, attrs, opset)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, scale, bias))
    ty = reference(torch, tx, tw, tb)
    ty.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-10, atol=1e-10)
    for ours, theirs in ((dx, tx), (dscale, tw), (dbias, tb)):
        np.testing.assert_allclose(ours, theirs.grad.numpy(), rtol=1e-9, atol=1e-10)


def test_statistics_shapes_and_dtypes():
    """LayerNormalization's as ONNX defines them; the data's type, as ONNX's reference has them."""
    sch = get_schema("LayerNormalization", "", 17)
    types = [TensorType(np.dtype(np.float16), (4, 3, 8)), TensorType(np.dtype(np.float16), (8,)), None]
    _, out = infer_node(sch, types, {"axis": -1, "epsilon": 1e-5, "stash_type": 1})
    assert [(t.dtype, t.shape) for t in out] == [(np.float16, (4, 3, 8)), (np.float16, (4, 3, 1)),
                                                 (np.float16, (4, 3, 1))]


def test_the_ms_layer_normalization_is_the_onnx_one(rng):
    x, scale, bias = rng.standard_normal((3, 6)), rng.standard_normal(6), rng.standard_normal(6)
    for a, b in zip(run_node("LayerNormalization", [x, scale, bias], domain=MS),
                    run_node("LayerNormalization", [x, scale, bias], opset=17)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("op,inputs,attrs,opset,error,match", [
    ("GroupNormalization", [(2, 6, 3), (6,), (6,)], {"num_groups": 4}, 21, OpAttributeError,
     r"'num_groups'=4 must divide the 6 channels"),
    ("GroupNormalization", [(2, 6, 3), (6,), (6,)], {"num_groups": 3}, 18, ShapeError,
     r"input 'scale' has shape \(6,\); expected \(3,\) \(one entry per group"),
    ("GroupNormalization", [(2, 6, 3), (3,), (3,)], {"num_groups": 0}, 18, OpAttributeError, r"must be >= 1"),
    ("LayerNormalization", [(2, 3, 4), (3,), (3,)], {"axis": -1}, 17, ShapeError,
     r"input 'Scale' has shape \(3,\); expected one entry per element of the normalised shape"),
    ("LayerNormalization", [(2, 3, 4), (4,), (4,)], {"axis": 3}, 17, OpAttributeError, r"'axis'=3 is out of range"),
    ("LayerNormalization", [(2, 3, 4), (4,), (4,)], {"stash_type": 0}, 17, OpAttributeError, r"stash_type"),
    ("InstanceNormalization", [(2, 3), (3,), (3,)], {}, 6, ShapeError, r"rank 2"),
    ("InstanceNormalization", [(2, 3, 4), (3,), (3,)], {"epsilon": 0.0}, 6, OpAttributeError, r"'epsilon'=0.0"),
])
def test_bad_input_is_named(op, inputs, attrs, opset, error, match):
    arrays = [np.ones(shape) for shape in inputs]
    with pytest.raises(error, match=match):
        run_node(op, arrays, attrs=attrs, opset=opset)


CUDA_CASES = [("LayerNormalization", (300, 1000), (1000,), {"axis": -1}, 17),
              ("LayerNormalization", (5000, 7), (7,), {"axis": 1}, 17),
              ("LayerNormalization", (70, 30, 32), (32,), {"axis": -1}, 17),        # the longest narrow rows
              ("LayerNormalization", (9, 33), (33,), {"axis": -1}, 17),             # the shortest block rows
              ("InstanceNormalization", (4, 16, 5, 5), (16,), {}, 6),              # narrow, an entry per row
              ("InstanceNormalization", (4, 16, 65, 33), (16,), {}, 6),
              ("GroupNormalization", (8, 32, 17, 9), (32,), {"num_groups": 8}, 21),
              ("GroupNormalization", (8, 32, 17, 9), (8,), {"num_groups": 8}, 18)]


@pytest.mark.cuda
@pytest.mark.parametrize("op,x_shape,scale_shape,attrs,opset", CUDA_CASES, ids=[f"{c[0]}-{c[1]}" for c in CUDA_CASES])
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_against_cpu(op, x_shape, scale_shape, attrs, opset, dtype, rng):
    x = rng.standard_normal(x_shape) * 3 + 20
    scale, bias = rng.standard_normal(scale_shape), rng.standard_normal(scale_shape)
    check_parity(op, [x, scale, bias], attrs, opset=opset, dtypes=[dtype])
    dy = rng.standard_normal(x_shape)
    cpu_stats = run_node(op, [a.astype(np.float32 if dtype in HALF_TYPES else dtype) for a in (x, scale, bias)],
                         attrs=attrs, opset=opset)[1:]
    check_parity(f"{op}Grad", [dy, x, scale, *cpu_stats], attrs, domain=MS, dtypes=[dtype])
    for outputs in (["dX"], ["dscale"], ["dbias", "dscale"]):
        check_parity(f"{op}Grad", [dy, x, scale, *cpu_stats], attrs, domain=MS, dtypes=[dtype], outputs=outputs)


def normalised_model(torch):
    """A PyTorch model of GroupNorm (exported as InstanceNormalization between Reshapes),
    InstanceNorm and LayerNorm over the channels, its norms' ones and zeros drawn at random."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3, padding=1), torch.nn.GroupNorm(3, 6), torch.nn.ReLU(),
                                torch.nn.InstanceNorm2d(6, affine=True), torch.nn.Flatten(2), torch.nn.AvgPool1d(25),
                                torch.nn.Flatten(), torch.nn.LayerNorm(6), torch.nn.Linear(6, 4))
    with torch.no_grad():
        for p in model.parameters():
            if p.numel() > 1 and bool(torch.all(p == p.reshape(-1)[0])):
                p.uniform_(0.5, 1.5)
    return model


@pytest.mark.parametrize("opset", [13, 17, 18])
def test_exported_norms_train_beside_torch(opset):
    torch = pytest.importorskip("torch")
    onnx = pytest.importorskip("onnx")
    import io

    from minitrain import nn, optim
    from minitrain.training import TrainingSession
    model = normalised_model(torch)
    f = io.BytesIO()
    torch.onnx.export(model, (torch.zeros(2, 3, 5, 5),), f, opset_version=opset, dynamo=False,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    proto = onnx.load_from_string(f.getvalue())
    ops = {n.op_type for n in proto.graph.node}
    assert "InstanceNormalization" in ops and ("LayerNormalization" in ops) == (opset >= 17)
    session = TrainingSession.from_onnx(proto, nn.CrossEntropyLoss(), optim.SGD(0.1))
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    rng = np.random.default_rng(0)
    for _ in range(3):
        x, y = rng.standard_normal((2, 3, 5, 5)).astype(np.float32), rng.integers(0, 4, 2)
        sgd.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        sgd.step()
        assert session.train_step(x, y) == pytest.approx(loss.item(), rel=1e-5)
