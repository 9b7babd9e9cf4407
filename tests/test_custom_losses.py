"""Losses written in user code with Tensor and functional, and the ops they lower to.

Each new op: its forward against NumPy (float32 and float64) and its gradient against central
finite differences in float64.  Then label smoothing cross-entropy, focal loss, distillation
(KL between softened softmaxes) and BCE-with-logits, written as a user would, checked against
PyTorch's values and gradients and trained in a TrainingSession."""
import numpy as np
import pytest

from minitrain import Executor, nn, optim, run_node
from minitrain.autodiff import build_gradient_graph
from minitrain.errors import GraphError, OpAttributeError, ShapeError
from minitrain.gradcheck import gradcheck, gradcheck_graph
from minitrain.nn import functional as F
from minitrain.ops import get_schema
from minitrain.scheduler import schedule
from minitrain.training.session import TrainingSession

MS = "com.microsoft"
DTYPES = [np.float32, np.float64]


def _tol(dtype):
    return {"rtol": 1e-5, "atol": 1e-6} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-13}


# --------------------------------------------------------------------------- forward against NumPy
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op,reference,positive", [
    ("Log", np.log, True), ("Exp", np.exp, False), ("Sqrt", np.sqrt, True), ("Abs", np.abs, False),
    ("Sign", np.sign, False)])
def test_unary_forward(op, reference, positive, dtype, rng):
    x = rng.standard_normal((3, 4)).astype(dtype)
    x = np.abs(x) + 0.1 if positive else x
    (y,) = run_node(op, [x])
    assert y.dtype == dtype and y.shape == x.shape
    np.testing.assert_allclose(y, reference(x), **_tol(dtype))
    (scalar,) = run_node(op, [x[0, 0].reshape(())])
    assert isinstance(scalar, np.ndarray) and scalar.shape == ()


@pytest.mark.parametrize("dtype", DTYPES)
def test_pow_forward_broadcasts(dtype, rng):
    a, b = (np.abs(rng.standard_normal((2, 3, 4))) + 0.1).astype(dtype), rng.standard_normal((4,)).astype(dtype)
    (z,) = run_node("Pow", [a, b])
    assert z.dtype == dtype
    np.testing.assert_allclose(z, a ** b, **_tol(dtype))


REDUCTIONS = {"ReduceSum": np.sum, "ReduceMean": np.mean, "ReduceMax": np.max}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", sorted(REDUCTIONS))
@pytest.mark.parametrize("axes", [None, [1], [0, -1], []])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_forward_both_axes_forms(op, axes, keepdims, dtype, rng):
    x = rng.standard_normal((2, 3, 4)).astype(dtype)
    expected = REDUCTIONS[op](x, axis=None if not axes else tuple(axes), keepdims=bool(keepdims))
    inputs = [x] if axes is None else [x, np.array(axes, dtype=np.int64)]
    (y,) = run_node(op, inputs, attrs={"keepdims": keepdims})
    assert y.dtype == dtype and y.shape == expected.shape
    np.testing.assert_allclose(y, expected, **_tol(dtype))
    (old,) = run_node(op, [x], attrs={"keepdims": keepdims, **({"axes": axes} if axes else {})}, opset=11)
    np.testing.assert_allclose(old, expected, **_tol(dtype))


def test_reduce_noop_with_empty_axes_and_empty_max(rng):
    x = rng.standard_normal((2, 3))
    (same,) = run_node("ReduceMean", [x, np.zeros(0, np.int64)], attrs={"noop_with_empty_axes": 1})
    np.testing.assert_array_equal(same, x)
    (empty,) = run_node("ReduceMax", [np.zeros((2, 0)), np.array([1])], attrs={"keepdims": 0})
    np.testing.assert_array_equal(empty, [-np.inf, -np.inf])


@pytest.mark.parametrize("dtype", DTYPES)
def test_clip_forward(dtype, rng):
    x = rng.standard_normal((4, 5)).astype(dtype)
    (both,) = run_node("Clip", [x, np.array(-0.5, dtype), np.array(0.3, dtype)])
    np.testing.assert_array_equal(both, np.clip(x, -0.5, 0.3))
    (upper,) = run_node("Clip", [x, None, np.array(0.3, dtype)])
    np.testing.assert_array_equal(upper, np.minimum(x, 0.3))
    (old,) = run_node("Clip", [x], attrs={"min": -0.5}, opset=6)
    assert old.dtype == dtype
    np.testing.assert_array_equal(old, np.maximum(x, dtype(-0.5)))
    (crossed,) = run_node("Clip", [x, np.array(1.0, dtype), np.array(0.0, dtype)])
    np.testing.assert_array_equal(crossed, np.zeros_like(x))      # min > max: every element is max


@pytest.mark.parametrize("dtype", DTYPES)
def test_where_forward(dtype, rng):
    cond = rng.random((3, 1)) > 0.5
    x, y = rng.standard_normal((3, 4)).astype(dtype), rng.standard_normal((4,)).astype(dtype)
    (z,) = run_node("Where", [cond, x, y])
    assert z.dtype == dtype
    np.testing.assert_array_equal(z, np.where(cond, x, y))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1], [3], None, None), ([1, -1], [3, 0], [0, 2], [1, -2]), ([-100], [100], [1], [2]),
    ([5], [-7], [2], [-1]), ([2], [2], [0], None)])
def test_slice_forward(starts, ends, axes, steps, dtype, rng):
    x = rng.standard_normal((4, 5, 6)).astype(dtype)
    index = [slice(None)] * 3
    for i, (s, e) in enumerate(zip(starts, ends)):
        index[axes[i] if axes else i] = slice(s, e, steps[i] if steps else 1)
    inputs = [x, np.array(starts), np.array(ends)] + [None if v is None else np.array(v) for v in (axes, steps)]
    (y,) = run_node("Slice", inputs)
    np.testing.assert_array_equal(y, x[tuple(index)])
    if steps is None:
        attrs = {"starts": starts, "ends": ends, **({"axes": axes} if axes else {})}
        (old,) = run_node("Slice", [x], attrs=attrs, opset=1)
        np.testing.assert_array_equal(old, x[tuple(index)])


@pytest.mark.parametrize("dtype", DTYPES)
def test_one_hot_forward(dtype):
    labels = np.array([[0, 2], [-1, 7]])
    (y,) = run_node("OneHot", [labels, np.array([4]), np.array([0.5, 2.0], dtype)])
    expected = np.full((2, 2, 4), 0.5, dtype)
    expected[0, 0, 0] = expected[0, 1, 2] = expected[1, 0, 3] = 2.0       # -1 counts from the end; 7 is off
    np.testing.assert_array_equal(y, expected)
    (first_axis,) = run_node("OneHot", [labels, np.array([4]), np.array([0.5, 2.0], dtype)], attrs={"axis": 0})
    np.testing.assert_array_equal(first_axis, np.moveaxis(expected, -1, 0))
    (old,) = run_node("OneHot", [labels, np.array([4]), np.array([0.5, 2.0], dtype)], opset=9)
    assert old[1, 0].tolist() == [0.5] * 4       # opset 9: a negative index is out of range


def _nll_reference(log_prob, target, weight, reduction, ignore):
    n, c = log_prob.shape[:2]
    x, t = log_prob.reshape(n, c, -1), target.reshape(n, -1)
    active = t != ignore
    safe = np.where(active, t, 0)
    w = (weight[safe] if weight is not None else np.ones(t.shape)) * active
    losses = -np.take_along_axis(x, safe[:, None, :], 1)[:, 0, :] * w
    return {"none": losses.reshape(target.shape), "sum": losses.sum(), "mean": losses.sum() / w.sum()}[reduction]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_forward(reduction, weighted, dtype, rng):
    log_prob = rng.standard_normal((5, 3, 2)).astype(dtype)
    target = rng.integers(0, 3, (5, 2))
    target[1, 1] = -100
    weight = rng.random(3).astype(dtype) if weighted else None
    (loss,) = run_node("NegativeLogLikelihoodLoss", [log_prob, target, weight],
                       attrs={"reduction": reduction, "ignore_index": -100})
    assert loss.dtype == dtype
    np.testing.assert_allclose(loss, _nll_reference(log_prob, target, weight, reduction, -100), **_tol(dtype))


def test_shape_helpers_forward(rng):
    x = rng.standard_normal((3, 1, 4))
    assert run_node("Unsqueeze", [x, np.array([0, -1])])[0].shape == (1, 3, 1, 4, 1)
    assert run_node("Unsqueeze", [x], attrs={"axes": [1]}, opset=11)[0].shape == (3, 1, 1, 4)
    assert run_node("Squeeze", [x, np.array([1])])[0].shape == (3, 4)
    assert run_node("Squeeze", [x])[0].shape == (3, 4)
    np.testing.assert_array_equal(run_node("Expand", [x, np.array([2, 1, 1, 1])])[0], np.broadcast_to(x, (2, 3, 1, 4)))
    size = run_node("Size", [x])[0]
    assert size.dtype == np.int64 and int(size) == 12
    np.testing.assert_allclose(run_node("Scale", [x, np.array(4, np.int64)], attrs={"scale_down": 1}, domain=MS)[0],
                               x / 4)
    mask = run_node("Equal", [x, x[:1]])[0]
    assert mask.dtype == np.bool_ and mask[0].all()
    assert run_node("Cast", [mask], attrs={"to": 11})[0].dtype == np.float64
    np.testing.assert_array_equal(run_node("And", [np.array([True, False]), np.array([True, True])])[0], [True, False])


# --------------------------------------------------------------------------- gradients (float64 finite differences)
@pytest.mark.parametrize("op", ["Log", "Exp", "Sqrt", "Abs"])
def test_unary_gradcheck(op, rng):
    x = rng.standard_normal((3, 4))
    gradcheck(op, [np.abs(x) + 0.2 if op in ("Log", "Sqrt") else x])


def test_pow_gradcheck_both_inputs_with_broadcast(rng):
    gradcheck("Pow", [np.abs(rng.standard_normal((2, 3))) + 0.3, rng.standard_normal((3,))])


@pytest.mark.parametrize("op", sorted(REDUCTIONS))
@pytest.mark.parametrize("axes", [None, [1], [0, -1]])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("opset", [11, 13, 19])
def test_reduce_gradcheck(op, axes, keepdims, opset, rng):
    x = rng.standard_normal((3, 4, 2))
    attrs = {"keepdims": keepdims}
    if "axes" in get_schema(op, "", opset).attrs:
        inputs, attrs = [x], {**attrs, **({"axes": axes} if axes else {})}
    else:
        inputs = [x] if axes is None else [x, np.array(axes)]
    gradcheck(op, inputs, attrs, opset=opset)


def test_reduce_max_ties_share_the_gradient():
    x = np.array([[1.0, 3.0, 3.0], [2.0, 0.0, -1.0]])
    g, grads = _graph_gradient(lambda t: t.max(1).sum(), {"x": x})
    np.testing.assert_array_equal(grads["x"], [[0, 0.5, 0.5], [1, 0, 0]])


def test_reduce_noop_gradient_is_the_identity(rng):
    gradcheck("ReduceSum", [rng.standard_normal((2, 3)), np.zeros(0, np.int64)], {"noop_with_empty_axes": 1})


@pytest.mark.parametrize("bounds", [(-0.5, 0.4), (None, 0.4), (-0.5, None)])
def test_clip_gradcheck(bounds, rng):
    x = rng.standard_normal((4, 5))
    gradcheck("Clip", [x] + [None if b is None else np.array(b) for b in bounds])
    gradcheck("Clip", [x], {k: b for k, b in zip(("min", "max"), bounds) if b is not None}, opset=9)


def test_clip_gradient_passes_at_the_bounds():
    x = np.array([-1.0, -0.5, 0.0, 0.5, 1.0])
    _, grads = _graph_gradient(lambda t: t.clamp(-0.5, 0.5).sum(), {"x": x})
    np.testing.assert_array_equal(grads["x"], [0, 1, 1, 1, 0])


def test_where_gradcheck_with_broadcast(rng):
    gradcheck("Where", [rng.random((3, 1)) > 0.5, rng.standard_normal((3, 4)), rng.standard_normal((4,))])


@pytest.mark.parametrize("starts,ends,axes,steps", [([1, -1], [3, 0], [0, 2], [1, -2]), ([0], [100], [1], [3])])
def test_slice_gradcheck(starts, ends, axes, steps, rng):
    gradcheck("Slice", [rng.standard_normal((4, 5, 3)), np.array(starts), np.array(ends), np.array(axes),
                        np.array(steps)])


def test_slice_gradcheck_attribute_form(rng):
    gradcheck("Slice", [rng.standard_normal((4, 5))], {"starts": [1, 0], "ends": [3, -1]}, opset=1)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_gradcheck(reduction, weighted, rng):
    target = rng.integers(0, 4, (3, 2))
    target[2, 0] = -1                   # ignored
    inputs = [rng.standard_normal((3, 4, 2)), target] + ([rng.random(4)] if weighted else [])
    gradcheck("NegativeLogLikelihoodLoss", inputs, {"reduction": reduction, "ignore_index": -1}, wrt=[0])


@pytest.mark.parametrize("op,inputs", [
    ("Expand", lambda r: [r.standard_normal((3, 1)), np.array([2, 3, 4])]),
    ("Unsqueeze", lambda r: [r.standard_normal((3, 4)), np.array([0, -1])]),
    ("Squeeze", lambda r: [r.standard_normal((3, 1, 4)), np.array([1])])])
def test_shape_helpers_gradcheck(op, inputs, rng):
    gradcheck(op, inputs(rng))


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("op,inputs,attrs,error,message", [
    ("Slice", [np.ones((2, 3)), np.array([0]), np.array([1]), np.array([0]), np.array([0])], {}, ShapeError,
     r"Slice: steps \(0,\) hold 0"),
    ("Slice", [np.ones((2, 3)), np.array([0]), np.array([1]), np.array([2])], {}, ShapeError,
     r"Slice: axes \(2,\) hold 2, out of range"),
    ("Slice", [np.ones((2, 3)), np.array([0, 1]), np.array([1])], {}, ShapeError, "must have the same length"),
    ("OneHot", [np.array([1]), np.array([0]), np.array([0.0, 1.0])], {}, ShapeError, "OneHot: input 'depth' is 0"),
    ("OneHot", [np.array([1]), np.array([3]), np.array([0.0, 1.0, 2.0])], {}, ShapeError,
     r"OneHot: input 'values' has shape \(3,\)"),
    ("NegativeLogLikelihoodLoss", [np.zeros((2, 3)), np.array([0, 3])], {}, ShapeError,
     r"input 'target' holds 3, outside \[0, 3\)"),
    ("NegativeLogLikelihoodLoss", [np.zeros((2, 3)), np.array([0, 1, 2])], {}, ShapeError, "input 'target'"),
    ("ReduceMean", [np.ones((2, 3)), np.array([2])], {}, ShapeError, r"ReduceMean: axes \(2,\) hold 2"),
    ("Squeeze", [np.ones((2, 3)), np.array([1])], {}, ShapeError, "Squeeze: axes .* not 1"),
    ("Expand", [np.ones((2, 3)), np.array([4, 3])], {}, ShapeError, "Expand"),
    ("Cast", [np.ones(2)], {"to": 8}, OpAttributeError, "Cast: attribute 'to'=8"),
    ("Clip", [np.ones(2), np.ones(2)], {}, ShapeError, "Clip: input 'min' has shape"),
    ("Scale", [np.ones(2), np.ones(2)], {"scale_down": 1}, ShapeError, "Scale: input 'scale'"),
])
def test_bad_input_names_the_op(op, inputs, attrs, error, message):
    with pytest.raises(error, match=message):
        run_node(op, inputs, attrs=attrs, domain=MS if op == "Scale" else "")


def test_tensor_indexing_errors():
    b = nn.GraphBuilder()
    x = b.input("x", np.float32, ("N", 3))
    with pytest.raises(IndexError, match="index 3 is out of range for dim 1"):
        x[:, 3]
    with pytest.raises(IndexError, match="too many indices"):
        x[0, 0, 0]
    with pytest.raises(TypeError, match="only ints, slices, None and ..."):
        x[[0, 1]]
    with pytest.raises(ValueError, match="slice step cannot be zero"):
        x[::0]
    with pytest.raises(TypeError, match="only ints"):
        x[True]
    with pytest.raises(TypeError, match="cannot be iterated"):
        a, b = x


# --------------------------------------------------------------------------- Tensor and functional
def _graph_gradient(expression, feeds, wrt=("x",)):
    """Build `expression` of Tensors named after `feeds`; return (value, {name: gradient})."""
    b = nn.GraphBuilder()
    tensors = {k: b.input(k, v.dtype, v.shape) for k, v in feeds.items()}
    out = expression(*tensors.values())
    graph, grads = build_gradient_graph(b.graph, out.name, list(wrt))
    results = Executor(schedule(graph, [out.name] + [grads[w] for w in wrt])).run(feeds)
    return results[out.name], {w: results[grads[w]] for w in wrt}


def _evaluate(expression, feeds):
    b = nn.GraphBuilder()
    tensors = [b.input(k, v.dtype, v.shape) for k, v in feeds.items()]
    out = expression(*tensors)
    return Executor(schedule(b.graph, [out.name])).run(feeds)[out.name], out


@pytest.mark.parametrize("index", [
    (slice(None), 1), (0,), (-1,), (Ellipsis, None, -1), (slice(1, None, 2), slice(None, None, -1)),
    (None, slice(-3, None), Ellipsis), (1, slice(None), None, 0), (slice(None, None, -2), 0, slice(1, 3))])
def test_tensor_indexing_matches_numpy(index, rng):
    x = rng.standard_normal((4, 3, 5))
    value, out = _evaluate(lambda t: t[index], {"x": x})
    np.testing.assert_array_equal(value, x[index])
    assert out.shape == x[index].shape


def test_tensor_methods_match_numpy(rng):
    x, y = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    checks = [
        (lambda a, b: a.sum(), x.sum()), (lambda a, b: a.sum(1, keepdim=True), x.sum(1, keepdims=True)),
        (lambda a, b: a.mean((0, 1)), x.mean()), (lambda a, b: F.max(a, 0), x.max(0)),
        (lambda a, b: a / b, x / y), (lambda a, b: 2.0 / a, 2.0 / x), (lambda a, b: a.abs() ** 1.5, np.abs(x) ** 1.5),
        (lambda a, b: 2.0 ** a, 2.0 ** x), (lambda a, b: F.pow(a.abs(), b), np.abs(x) ** y),
        (lambda a, b: F.sqrt(a.abs()), np.sqrt(np.abs(x))), (lambda a, b: F.exp(a).log(), x),
        (lambda a, b: a.clamp(min=-0.2), np.maximum(x, -0.2)), (lambda a, b: F.clamp(a, max=0.1), np.minimum(x, 0.1)),
        (lambda a, b: a.reshape(2, -1), x.reshape(2, -1)), (lambda a, b: F.reshape(a, (0, 3, 1)), x[:, :, None]),
        (lambda a, b: F.where(x > 0, a, 0.0), np.where(x > 0, x, 0.0)), (lambda a, b: -F.sum(a, 0), -x.sum(0)),
        (lambda a, b: F.mean(F.softmax(a, 1) * b, 1), (np.exp(x) / np.exp(x).sum(1, keepdims=True) * y).mean(1)),
    ]
    for expression, expected in checks:
        value, _ = _evaluate(expression, {"x": x, "y": y})
        np.testing.assert_allclose(value, expected, rtol=1e-12, atol=1e-14)


def test_one_hot_and_nll_functional(rng):
    labels = np.array([2, 0, 1])
    value, out = _evaluate(lambda t: F.one_hot(t, 4), {"t": labels})
    assert out.shape == (3, 4) and value.dtype == np.float32
    np.testing.assert_array_equal(value, np.eye(4, dtype=np.float32)[labels])
    log_prob = rng.standard_normal((3, 4))
    value, _ = _evaluate(lambda lp, t: F.nll_loss(lp, t, reduction="sum"), {"lp": log_prob, "t": labels})
    assert float(value) == pytest.approx(-log_prob[np.arange(3), labels].sum(), rel=1e-12)


def test_handwritten_logsumexp_gradcheck(rng):
    """max, exp, sum, log, slicing and division composed, checked by finite differences."""
    b = nn.GraphBuilder()
    x = b.input("x", np.float64, (3, 5))

    def logsumexp(t):
        m = t.max(1, keepdim=True)
        return m + (t - m).exp().sum(1, keepdim=True).log()
    loss = (logsumexp(x) - x[:, 1:2] / 2.0).sum()
    b.graph.outputs = [loss.name]
    gradcheck_graph(b.graph, {"x": rng.standard_normal((3, 5))}, ["x"])


# --------------------------------------------------------------------------- losses in user code
def label_smoothing_cross_entropy(logits, target, smoothing=0.1):
    log_probs = F.log_softmax(logits, dim=1)
    nll = F.nll_loss(log_probs, target)
    uniform = -log_probs.mean(dim=1).mean()
    return (1 - smoothing) * nll + smoothing * uniform


class FocalLoss(nn.Module):
    """-alpha (1 - p_t)^gamma log p_t, averaged over the batch (Lin et al.)."""
    target_dtype = "int64"

    def __init__(self, gamma=2.0, alpha=0.25):
        super().__init__()
        self.gamma, self.alpha = gamma, alpha

    def forward(self, logits, target):
        log_pt = (F.log_softmax(logits, dim=1) * F.one_hot(target, logits.shape[1], logits.dtype)).sum(dim=1)
        return (-self.alpha * (1 - log_pt.exp()) ** self.gamma * log_pt).mean()


def distillation_loss(student_logits, teacher_logits, temperature=2.0):
    """KL(softmax(teacher / T) || softmax(student / T)) * T^2, summed over classes, batch-mean."""
    teacher_log_probs = F.log_softmax(teacher_logits / temperature, dim=1)
    student_log_probs = F.log_softmax(student_logits / temperature, dim=1)
    kl = (teacher_log_probs.exp() * (teacher_log_probs - student_log_probs)).sum(dim=1).mean()
    return kl * temperature ** 2


def bce_with_logits(logits, target):
    """max(x, 0) - x y + log(1 + exp(-|x|)): stable for any logit."""
    return (logits.clamp(min=0) - logits * target + (1 + (-logits.abs()).exp()).log()).mean()


def _torch_losses(torch):
    tf = torch.nn.functional

    def focal(logits, target):
        log_pt = tf.log_softmax(logits, 1).gather(1, target[:, None])[:, 0]
        return (-0.25 * (1 - log_pt.exp()) ** 2 * log_pt).mean()
    return {
        "label_smoothing": lambda x, t: tf.cross_entropy(x, t, label_smoothing=0.1),
        "focal": focal,
        "distillation": lambda x, t: tf.kl_div(tf.log_softmax(x / 2, 1), tf.softmax(t / 2, 1),
                                               reduction="batchmean") * 4,
        "bce": tf.binary_cross_entropy_with_logits,
    }


LOSSES = {"label_smoothing": (label_smoothing_cross_entropy, "labels"), "focal": (FocalLoss(), "labels"),
          "distillation": (distillation_loss, "logits"), "bce": (bce_with_logits, "probabilities")}


def _targets(kind, rng, n=6, c=4):
    if kind == "labels":
        return rng.integers(0, c, n)
    if kind == "logits":
        return rng.standard_normal((n, c)) * 2
    return rng.random((n, c))


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("dtype", DTYPES)
def test_user_loss_matches_torch(name, dtype, rng):
    torch = pytest.importorskip("torch")
    loss_fn, kind = LOSSES[name]
    logits = (rng.standard_normal((6, 4)) * 3).astype(dtype)
    target = _targets(kind, rng)
    target = target if kind == "labels" else target.astype(dtype)
    value, grads = _graph_gradient(loss_fn, {"x": logits, "t": target})
    tx = torch.tensor(logits, requires_grad=True)
    expected = _torch_losses(torch)[name](tx, torch.tensor(target))
    expected.backward()
    tol = {"rtol": 2e-5, "atol": 1e-6} if dtype == np.float32 else {"rtol": 1e-11, "atol": 1e-13}
    assert np.asarray(value).dtype == dtype
    np.testing.assert_allclose(value, expected.item(), **tol)
    np.testing.assert_allclose(grads["x"], tx.grad.numpy(), **tol)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_user_loss_gradcheck(name, rng):
    loss_fn, kind = LOSSES[name]
    b = nn.GraphBuilder()
    target = _targets(kind, rng, 3, 4)
    x = b.input("x", np.float64, (3, 4))
    t = b.input("t", target.dtype, target.shape)
    b.graph.outputs = [loss_fn(x, t).name]
    gradcheck_graph(b.graph, {"x": rng.standard_normal((3, 4)), "t": target}, ["x"])


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_user_loss_trains_in_a_session_as_torch_does(name, rng):
    """Two SGD steps of a Linear model on a user-written loss: the losses and the weights after
    each step match PyTorch's (float64)."""
    torch = pytest.importorskip("torch")
    loss_fn, kind = LOSSES[name]
    model = nn.Linear(5, 4, dtype=np.float64)
    reference = torch.nn.Linear(5, 4).double()
    with torch.no_grad():
        reference.weight.copy_(torch.tensor(model.weight.data))
        reference.bias.copy_(torch.tensor(model.bias.data))
    target_spec = {"target_dtype": "int64", "target_shape": ()} if kind == "labels" else {}
    session = TrainingSession(model, loss_fn, optim.SGD(lr=0.5), input_shape=(5,), **target_spec)
    torch_sgd = torch.optim.SGD(reference.parameters(), lr=0.5)
    torch_loss = _torch_losses(torch)[name]
    for _ in range(2):
        x, target = rng.standard_normal((8, 5)), _targets(kind, rng, 8, 4)
        loss = session.train_step(x, target)
        torch_sgd.zero_grad()
        expected = torch_loss(reference(torch.tensor(x)), torch.tensor(target))
        expected.backward()
        torch_sgd.step()
        assert float(loss) == pytest.approx(expected.item(), rel=1e-10)
    session.pull()
    np.testing.assert_allclose(model.weight.data, reference.weight.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(model.bias.data, reference.bias.detach().numpy(), rtol=1e-10, atol=1e-12)


def test_user_loss_lowers_to_standard_onnx_ops():
    """The user's losses become ONNX-domain nodes only (no private op in the forward graph)."""
    b = nn.GraphBuilder()
    x = b.input("x", np.float32, ("N", 4))
    t = b.input("t", np.int64, ("N",))
    FocalLoss()(x, t)
    label_smoothing_cross_entropy(x, t)
    assert {n.domain for n in b.graph.nodes} == {""}


def test_reduce_with_non_constant_axes_and_noop_needs_a_known_length():
    b = nn.GraphBuilder()
    x = b.input("x", np.float64, (2, 3))
    axes = b.input("axes", np.int64, ("K",))
    y = b.op("ReduceSum", [x, axes], {"noop_with_empty_axes": 1, "keepdims": 1})
    loss = b.op("ReduceSum", [y], {"keepdims": 0})
    with pytest.raises(GraphError, match="noop_with_empty_axes=1 the length of input 'axes'"):
        build_gradient_graph(b.graph, loss.name, ["x"])
