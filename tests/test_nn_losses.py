"""Losses: MSELoss op (forward, gradcheck, torch), and the loss modules' reductions and
ignore_index through a graph."""
import re

import numpy as np
import pytest

from minitrain import Executor, nn, run_node
from minitrain.errors import OpAttributeError, ShapeError
from minitrain.gradcheck import gradcheck
from minitrain.scheduler import schedule

MS = "com.microsoft"


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mse_forward(reduction, dtype, rng):
    a, b = rng.standard_normal((3, 4, 2)).astype(dtype), rng.standard_normal((3, 4, 2)).astype(dtype)
    (loss,) = run_node("MSELoss", [a, b], attrs={"reduction": reduction}, domain=MS)
    sq = (a.astype(np.float64) - b) ** 2
    expected = {"mean": sq.mean(), "sum": sq.sum(), "none": sq}[reduction]
    assert loss.dtype == dtype and loss.shape == np.shape(expected)
    np.testing.assert_allclose(loss, expected, rtol=1e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_gradcheck(reduction, rng):
    gradcheck("MSELoss", [rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 4))],
              {"reduction": reduction}, domain=MS, wrt=[0])


def test_mse_against_torch(rng):
    torch = pytest.importorskip("torch")
    a, b = rng.standard_normal((5, 3)), rng.standard_normal((5, 3))
    (loss,) = run_node("MSELoss", [a, b], domain=MS)
    (grad,) = run_node("MSELossGrad", [np.array(1.0), a, b], domain=MS)
    ta = torch.tensor(a, requires_grad=True)
    tl = torch.nn.functional.mse_loss(ta, torch.tensor(b))
    tl.backward()
    assert float(loss) == pytest.approx(tl.item(), rel=1e-12)
    np.testing.assert_allclose(grad, ta.grad.numpy(), rtol=1e-12)


def test_mse_bad_input(rng):
    with pytest.raises(ShapeError, match="same shape"):
        run_node("MSELoss", [np.ones((2, 3)), np.ones((3, 2))], domain=MS)
    with pytest.raises(OpAttributeError, match="reduction"):
        run_node("MSELoss", [np.ones(2), np.ones(2)], attrs={"reduction": "max"}, domain=MS)
    with pytest.raises(ValueError, match="reduction"):
        nn.MSELoss("max")


@pytest.mark.parametrize("reduction,dy_shape", [("none", (1,)), ("none", (3, 1)), ("none", ()),
                                                 ("mean", (3, 2)), ("mean", (1, 1)), ("sum", (2,))])
def test_mse_grad_checks_dy(reduction, dy_shape):
    """dY has the loss's shape: the prediction's for 'none', a scalar (() or (1,)) otherwise."""
    with pytest.raises(ShapeError, match=re.escape(f"MSELossGrad: input 'dY' has shape {dy_shape}")):
        run_node("MSELossGrad", [np.ones(dy_shape), np.ones((3, 2)), np.zeros((3, 2))],
                 attrs={"reduction": reduction}, domain=MS)


@pytest.mark.parametrize("reduction,dy_shape,weight_shape,bad", [
    ("mean", (5,), None, "dY"), ("sum", (1, 1), None, "dY"), ("none", (), None, "dY"), ("none", (4,), None, "dY"),
    ("mean", (), (3,), "weight"), ("none", (5,), (4, 1), "weight")])
def test_sce_grad_checks_dy_and_weight(reduction, dy_shape, weight_shape, bad):
    """dY has the loss's shape (labels' for 'none', a scalar (() or (1,)) otherwise); weight is (C,)."""
    log_prob = np.log(np.full((5, 4), 0.25))
    inputs = [np.ones(dy_shape), log_prob, np.array([0, 1, 2, 3, 0])]
    if weight_shape is not None:
        inputs.append(np.ones(weight_shape))
    shape = dy_shape if bad == "dY" else weight_shape
    with pytest.raises(ShapeError, match=re.escape(f"SoftmaxCrossEntropyLossGrad: input '{bad}' has shape {shape}")):
        run_node("SoftmaxCrossEntropyLossGrad", inputs, attrs={"reduction": reduction}, domain=MS)


def _loss_value(loss_module, scores, target):
    builder = nn.GraphBuilder()
    s = builder.input("s", scores.dtype, scores.shape)
    t = builder.input("t", target.dtype, target.shape)
    out = loss_module(s, t)
    return Executor(schedule(builder.graph, [out.name])).run({"s": scores, "t": target})[out.name]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_module_against_torch(reduction, rng):
    torch = pytest.importorskip("torch")
    scores = rng.standard_normal((6, 4, 3))
    labels = rng.integers(0, 4, (6, 3))
    labels[0, 1] = labels[2, 2] = -1
    ours = _loss_value(nn.CrossEntropyLoss(reduction, ignore_index=-1), scores, labels)
    theirs = torch.nn.functional.cross_entropy(torch.tensor(scores), torch.tensor(labels), reduction=reduction,
                                               ignore_index=-1)
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-12)


def test_mse_module(rng):
    a, b = rng.standard_normal((4, 2)), rng.standard_normal((4, 2))
    assert float(_loss_value(nn.MSELoss("sum"), a, b)) == pytest.approx(((a - b) ** 2).sum())


@pytest.mark.parametrize("attrs", [{}, {"ignore_index": 1}, {"reduction": "sum"}])
@pytest.mark.parametrize("op", ["SoftmaxCrossEntropyLoss", "SoftmaxCrossEntropyLossGrad"])
def test_sce_names_the_first_label_out_of_range(attrs, op):
    """With and without weights or ignore_index (the unweighted path checks by min and max)."""
    scores = np.zeros((4, 3), np.float32)
    for labels, bad in ((np.array([0, 1, 5, -1]), 5), (np.array([0, -2, 1, 1]), -2)):
        inputs = [scores, labels] if op == "SoftmaxCrossEntropyLoss" else [np.array(1.0, np.float32), scores, labels]
        with pytest.raises(ValueError, match=rf"{op}: input 'labels' holds {bad}, outside \[0, 3\)"):
            run_node(op, inputs, attrs=attrs, domain="" if op == "SoftmaxCrossEntropyLoss" else "com.microsoft")
