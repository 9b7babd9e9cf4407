"""The autocast pass and fp16 loss scaling on the CPU: op placement, Cast placement, master
weights, the scaler's nodes, and training in "float32 emulation": the low-precision type
replaced by float64, which the CPU kernels serve, so every Cast and its gradient run for real."""
import json

import numpy as np
import pytest

import minitrain
from minitrain import cli, nn, run_node
from minitrain.autocast import FLOAT32_OP, LOW, PRECISIONS, PROMOTE, Precision, autocast, policy
from minitrain.autocast import precision as autocast_precision
from minitrain.data import ArrayDataset, DataLoader
from minitrain.errors import PrecisionError
from minitrain.autodiff import build_gradient_graph
from minitrain.graph import Graph
from minitrain.inference import infer_types
from minitrain.optim import SGD
from minitrain.training import TrainingSession
from minitrain.training.loop import fit
from minitrain.training.loss_scale import DynamicLossScale

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
MS = "com.microsoft"
EMULATED = Precision("emulated", F64)
EMULATED_FP16 = Precision("emulated-fp16", F64, loss_scaling=True)

# op -> (inputs as (shape, "low" | "f32"), attrs, the type autocast runs it in, or the type of
# each input where they differ)
X4, W4, M, C = (1, 3, 4, 4), (3, 3, 2, 2), (3, 3), (3,)
BN_TRAINING = {"training_mode": 1}
PLACEMENT = {
    "Conv": ([(X4, "f32"), (W4, "f32")], {}, F16),
    "ConvTranspose": ([(X4, "low"), (W4, "f32")], {}, F16),
    "Gemm": ([(M, "f32"), (M, "f32")], {"transB": 1}, F16),
    "MatMul": ([(M, "f32"), (M, "low")], {}, F16),
    "Softmax": ([(M, "low")], {}, F32),
    "LogSoftmax": ([(M, "low")], {}, F32),
    "Exp": ([(M, "low")], {}, F32),
    "Log": ([(M, "low")], {}, F32),
    "Pow": ([(M, "low"), (M, "low")], {}, F32),
    "ReduceSum": ([(M, "low")], {}, F32),
    "ReduceMean": ([(M, "low")], {}, F32),
    "Relu": ([(M, "low")], {}, F16),
    "Sigmoid": ([(M, "low")], {}, F16),
    "Tanh": ([(M, "f32")], {}, F32),
    "ReduceMax": ([(M, "low")], {}, F16),
    "Flatten": ([(X4, "low")], {}, F16),
    "Add": ([(M, "low"), (M, "f32")], {}, F32),
    "Mul": ([(M, "low"), (M, "low")], {}, F16),
    "Sub": ([(M, "low"), ((), "f32")], {}, F16),        # a float32 scalar follows the tensor
    "Div": ([(M, "f32"), ((), "low")], {}, F32),
    # BatchNorm: the data in the type that reaches it, scale, B and the statistics float32
    "BatchNormalization": ([(X4, "low")] + [(C, "f32")] * 4, BN_TRAINING, (F16,) + (F32,) * 4),
    "BatchNormalization/f32-data": ([(X4, "f32")] + [(C, "f32")] * 4, BN_TRAINING, F32),
    "BatchNormalization/low-parameters": ([(X4, "low")] + [(C, "low")] * 4, BN_TRAINING, (F16,) + (F32,) * 4),
}


def _placement_graph(op, inputs, attrs):
    """x_i of the given shape and type, fed to one `op` node whose output y is the graph's."""
    op = op.split("/")[0]
    g = Graph(name=op)
    for i, (shape, kind) in enumerate(inputs):
        g.add_input(f"x{i}", F16 if kind == "low" else F32, shape)
    g.outputs = [g.add_node(op, [f"x{i}" for i in range(len(inputs))], ["y"], attrs, name="op")]
    return g


@pytest.mark.parametrize("op", PLACEMENT)
def test_each_op_runs_where_the_policy_puts_it(op):
    """Its float inputs reach it in the policy's type, through one Cast per input that crosses;
    its output, a graph output, keeps its name and leaves in float32."""
    inputs, attrs, expected = PLACEMENT[op]
    expected = list(expected) if isinstance(expected, tuple) else [expected] * len(inputs)
    g = autocast(_placement_graph(op, inputs, attrs), F16)
    types = infer_types(g)
    node = next(n for n in g.nodes if n.name == "op")
    assert [types[x].dtype for x in node.inputs] == expected, op
    crossing = [f"x{i}" for i, (_, kind) in enumerate(inputs) if (F16 if kind == "low" else F32) != expected[i]]
    casts = [n for n in g.nodes if n.op_type == "Cast"]
    assert sorted(n.inputs[0] for n in casts if n.inputs[0] != node.outputs[0]) == crossing
    assert all(types[n.inputs[0]].dtype != types[n.outputs[0]].dtype for n in casts)
    assert types["y"].dtype == F32


def test_policy_table():
    """The lists as PyTorch's autocast keeps them, for the ops minitrain has."""
    low = ["Conv", "ConvTranspose", "Gemm", "MatMul"]
    float32 = ["Softmax", "LogSoftmax", "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss", "ReduceSum",
               "ReduceMean", "Exp", "Log", "Pow", "LayerNormalization"]
    promote = ["Relu", "Add", "Mul", "MaxPool", "AveragePool", "Reshape", "Flatten", "Dropout", "Clip", "ReduceMax",
               "BatchNormalization"]
    node = lambda op, domain="": type("N", (), {"op_type": op, "domain": domain})()
    assert [policy(node(op)) for op in low] == [LOW] * len(low)
    assert [policy(node(op)) for op in float32] == [FLOAT32_OP] * len(float32)
    assert [policy(node(op)) for op in promote] == [PROMOTE] * len(promote)
    assert policy(node("FusedConv", MS)) == policy(node("FusedGemm", MS)) == LOW
    assert policy(node("MSELoss", MS)) == FLOAT32_OP


def lenet(dropout=False, seed=0):
    minitrain.random.seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.Relu(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.Relu(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 2 * 2, 32), nn.Relu(), *([nn.Dropout(0.25)] if dropout else []),
        nn.Linear(32, 10))


def digits(n=64, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 1, 8, 8)).astype(np.float32)
    return x, (x[:, 0, :4].sum(axis=(1, 2)) > 0).astype(np.int64) + 2 * (x[:, 0, 4:].sum(axis=(1, 2)) > 0)


def session(precision=None, model=None, optimizer=None, **kw):
    return TrainingSession(model or lenet(), nn.CrossEntropyLoss(), optimizer or SGD(0.05, momentum=0.9),
                           input_shape=(1, 8, 8), precision=precision, **kw)


def test_casts_only_where_values_cross_and_each_once():
    forward = session(EMULATED)._build(training=True)[0]
    forward_nodes = forward.nodes
    types = infer_types(forward)
    casts = [n for n in forward.nodes if n.op_type == "Cast"]
    for cast in casts:
        assert types[cast.inputs[0]].dtype != types[cast.outputs[0]].dtype, cast.name
    pairs = [(c.inputs[0], types[c.outputs[0]].dtype) for c in casts]
    assert len(pairs) == len(set(pairs))
    # into low: the input, 2 convs' and 2 linears' weight and bias; into float32: the logits
    # (the loss, and the fetched output).  BatchNorm takes the low activations as they are.
    assert len(casts) == 1 + 8 + 1, [c.name for c in casts]
    low = {n.name for n in forward_nodes if n.op_type in ("Conv", "Gemm")}
    assert all(types[x].dtype == F64 for n in forward_nodes if n.name in low for x in n.inputs)
    bn = [n for n in forward_nodes if n.op_type == "BatchNormalization"]
    assert bn and all([types[x].dtype for x in n.inputs] == [F64] + [F32] * 4 for n in bn)
    assert all(types[y].dtype == (F64 if k == 0 else F32) for n in bn for k, y in enumerate(n.outputs) if y)


def test_master_weights_and_gradients_stay_float32():
    s = session(EMULATED)
    types = infer_types(s.grad_graph)
    readers = s.grad_graph.consumers()
    for name, array in s.params.items():
        assert array.dtype == F32 and s.grad_graph.initializers[name].dtype == F32
        assert types[s.grad_names[name]].dtype == F32, name
        kinds = {n.op_type for n in readers[name]}
        assert kinds in ({"Cast"}, {"BatchNormalization"}, {"BatchNormalization", "BatchNormalizationGrad"}), \
            (name, kinds)
    update = next(step.node for step in s.train_plan.steps if step.node.name == "optimizer_update")
    plan_types = infer_types(s.train_plan.graph)
    count = len(s.trained)
    assert [plan_types[x].dtype for x in update.inputs[1:]] == [F32] * 3 * count   # params, grads, momenta


def test_float32_graph_is_unchanged():
    """fp32 and tf32 sessions build the very graph of a session without precision, and the
    pass leaves a graph with no LOW op untouched whatever the low type."""
    base = session().grad_graph
    for precision in ("fp32", "tf32"):
        g = session(precision).grad_graph
        assert [(n.op_type, n.inputs, n.outputs, n.attrs) for n in g.nodes] == \
               [(n.op_type, n.inputs, n.outputs, n.attrs) for n in base.nodes]
    g = Graph(name="no-low")
    g.add_input("x", F32, (2, 5))
    y = g.add_node("Relu", ["x"])
    g.outputs = [g.add_node("Softmax", [y], attrs={"axis": 1})]
    for low in (F16, F64):
        out = autocast(g, low)
        assert [(n.op_type, n.inputs, n.outputs, n.name) for n in out.nodes] == \
               [(n.op_type, n.inputs, n.outputs, n.name) for n in g.nodes]


def test_fetched_values_keep_their_names_and_types():
    s = session(EMULATED)
    types = infer_types(s.grad_graph)
    assert types[s.output_name].dtype == F32 and types[s.loss_name].dtype == F32
    for out in s.state_updates:
        assert types[out].dtype == F32


def test_low_precision_needs_cuda():
    for precision in ("fp16", "bf16"):
        with pytest.raises(PrecisionError, match=f"precision '{precision}' needs a CUDA device; device 'cpu'"):
            session(precision)
    with pytest.raises(PrecisionError, match="must be one of"):
        session("fp8")


def test_emulated_autocast_trains_like_float32():
    """The rewritten graph with float64 as the low type: Casts and their gradients wired right
    give float32's losses to float32's precision (float64 is exact where float32 rounds)."""
    x, y = digits()
    losses = {}
    for precision in ("fp32", EMULATED, EMULATED_FP16):
        s = session(precision)
        losses[precision] = [s.train_step(x, y) for _ in range(25)]
    ref = np.array(losses["fp32"])
    assert ref[-1] < 0.5 * ref[0]
    for precision in (EMULATED, EMULATED_FP16):
        np.testing.assert_allclose(losses[precision], ref, rtol=2e-4)


def test_loss_scaling_nodes():
    s = session(EMULATED_FP16)
    nodes = {step.node.name: step.node for step in s.train_plan.steps}
    order = [step.node.name for step in s.train_plan.steps]
    # the seed of the gradient graph is the scale: the loss's gradient node multiplies by it
    assert any(n.op_type == "Mul" and "loss_scale.scale" in n.inputs for n in nodes.values())
    unscale = [n for n in nodes.values() if n.op_type == "MixedPrecisionScale"]
    assert len(unscale) == len(s.trained)
    assert all(n.attrs["to"] == 1 for n in unscale)
    # the gradients of cast master weights are unscaled straight from the low type: no Cast back
    types = infer_types(s.grad_graph)
    low_read = [n for n in unscale if types[n.inputs[1]].dtype == F64]
    assert len(low_read) == 8, [n.name for n in unscale]
    update = nodes["optimizer_update"]
    assert update.attrs["skip_non_finite"] == 1
    assert order.index("loss_scale.update") > order.index("optimizer_update") > max(order.index(n.name)
                                                                                     for n in unscale)
    assert "skip_non_finite" not in next(st.node for st in session().train_plan.steps
                                         if st.node.name == "optimizer_update").attrs


def regression_session(scale, growth_interval=2000, precision=EMULATED_FP16):
    minitrain.random.seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Relu(), nn.Linear(8, 1))
    return TrainingSession(model, nn.MSELoss(reduction="sum"), SGD(1e-3, momentum=0.9), input_shape=(4,),
                           precision=precision, loss_scale=DynamicLossScale(scale, growth_interval=growth_interval))


@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_overflow_skips_the_update_and_the_scale_recovers():
    """A scale so large that the float32 loss gradient overflows: the update is skipped (the
    parameters and the momentum stay as they were), the scale halves until the gradients fit,
    then training goes on and the scale grows back every growth_interval clean steps."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 4)).astype(np.float32)
    t = 10 + x[:, :1]                       # |prediction - target| ~ 10: 2 * 10 * 2**127 overflows
    s = regression_session(2.0 ** 127)
    before = {n: p.copy() for n, p in s.params.items()}
    skipped = 0
    while True:
        s.train_step(x, t)
        s.pull()
        if s.skipped_steps == skipped:
            break
        skipped = s.skipped_steps
        assert all(np.array_equal(before[n], p) for n, p in s.params.items()), "a skipped step changed a weight"
        assert all(not m.any() for m in s.optimizer.state["momentum"].values())
        assert s.loss_scale.scale == 2.0 ** 127 * 0.5 ** skipped
    assert 1 <= skipped <= 8
    assert not all(np.array_equal(before[n], p) for n, p in s.params.items())
    scale = s.loss_scale.scale
    losses = [s.train_step(x, t) for _ in range(6)]
    s.pull()
    assert s.skipped_steps == skipped and s.loss_scale.scale == scale
    assert np.isfinite(losses).all() and losses[-1] < losses[0] < 1e5    # the fetched loss is unscaled


def test_scale_grows_after_growth_interval_clean_steps():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 4)).astype(np.float32)
    s = regression_session(8.0, growth_interval=3)
    for step in range(1, 8):
        s.train_step(x, x[:, :1])
        s.pull()
        assert s.loss_scale.scale == 8.0 * 2 ** (step // 3), step
        assert int(s.loss_scale.arrays["loss_scale.growth_tracker"]) == step % 3


def test_nan_batch_is_skipped_then_training_resumes():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((16, 4)).astype(np.float32)
    t = x[:, :1] * 2
    s = regression_session(2.0 ** 16)
    s.train_step(x, t)
    s.pull()
    weights = {n: p.copy() for n, p in s.params.items()}
    poisoned = x.copy()
    poisoned[3, 1] = np.nan
    s.train_step(poisoned, t)
    s.pull()
    assert s.skipped_steps == 1 and s.loss_scale.scale == 2.0 ** 15
    assert all(np.array_equal(weights[n], p) for n, p in s.params.items())
    s.train_step(x, t)
    assert s.skipped_steps == 1


def test_optimizer_skip_non_finite_leaves_everything():
    rng = np.random.default_rng(0)
    w, m = rng.standard_normal(5).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    g = rng.standard_normal(5).astype(np.float32)
    g[2] = np.inf
    w0, m0 = w.copy(), m.copy()
    (norm,) = run_node("SGDOptimizer", [np.array(0.1, np.float32), w, g, m], domain=MS,
                       attrs={"momentum": 0.9, "weight_decay": 0.01, "skip_non_finite": 1})
    assert not np.isfinite(norm) and np.array_equal(w, w0) and np.array_equal(m, m0)
    run_node("SGDOptimizer", [np.array(0.1, np.float32), w, g, m], domain=MS, attrs={"momentum": 0.9})
    assert not np.isfinite(w).all()      # without skip_non_finite the inf goes through


@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_scaler_state_round_trips_through_a_checkpoint(tmp_path):
    """Resuming an fp16-emulated run repeats the uninterrupted one bitwise, scaler included."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((16, 4)).astype(np.float32)
    t = 10 + x[:, :1]
    a = regression_session(2.0 ** 127, growth_interval=2)
    for _ in range(8):
        a.train_step(x, t)
    a.save(tmp_path / "ckpt")
    assert a.skipped_steps >= 1
    expected = [a.train_step(x, t) for _ in range(5)]
    b = regression_session(1.0, growth_interval=2)
    b.load(tmp_path / "ckpt")
    got = [b.train_step(x, t) for _ in range(5)]
    assert got == expected
    a.pull(), b.pull()
    assert a.loss_scale.state_dict().keys() == b.loss_scale.state_dict().keys()
    for name, value in a.loss_scale.state_dict().items():
        assert np.array_equal(value, b.loss_scale.state_dict()[name]), name
    for name, p in a.params.items():
        assert np.array_equal(p, b.params[name])


def test_accumulate_and_step_unscale_and_skip():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((16, 4)).astype(np.float32)
    t = x[:, :1] * 2
    a, b = regression_session(2.0 ** 10), regression_session(2.0 ** 10)
    for _ in range(3):
        a.train_step(x, t)
        b.train_step(x, t, micro_batches=2)
    a.pull(), b.pull()
    for name, p in a.params.items():
        np.testing.assert_allclose(b.params[name], p, rtol=1e-5, atol=1e-6)
    poisoned = x.copy()
    poisoned[0, 0] = np.inf
    weights = {n: p.copy() for n, p in b.params.items()}
    b.train_step(poisoned, t, micro_batches=2)
    b.pull()
    assert b.skipped_steps == 1 and all(np.array_equal(weights[n], p) for n, p in b.params.items())


def test_cli_refuses_low_precision_on_the_cpu(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", "lenet_digits", "--epochs", "1", "--max-steps", "1", "--no-progress", "--precision", "fp16"])
    assert exit_info.value.code == 2
    assert "--precision fp16: precision 'fp16' needs a CUDA device; device 'cpu'" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_precision_context_sets_the_default_and_fit_reports_skipped_steps(tmp_path):
    """The context (the CLI's --precision) reaches a session built inside it; fit() writes the
    skipped updates to metrics.jsonl."""
    with autocast_precision(EMULATED_FP16):
        s = regression_session(2.0 ** 127, precision=None)
        assert s.precision is EMULATED_FP16
    assert session().precision.name == "fp32"
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 4)).astype(np.float32)
    loader = DataLoader(ArrayDataset(x, 10 + x[:, :1]), 16)
    history = fit(s, loader, epochs=2, task="regression", out_dir=tmp_path / "run", progress=False, log=lambda _: None)
    assert history[0]["skipped_steps"] >= 1 and history[1]["skipped_steps"] == s.skipped_steps
    with open(tmp_path / "run" / "metrics.jsonl") as f:
        assert [json.loads(line)["skipped_steps"] for line in f] == [h["skipped_steps"] for h in history]


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_low_precision_training_graph_type_checks(name):
    """The graph a CUDA session would run, built and type-checked here (the CPU cannot run it):
    LOW ops in the low type, every parameter's gradient float32."""
    low = PRECISIONS[name].low
    if low is None:
        pytest.skip("NumPy has no bfloat16 without ml_dtypes")
    s = session(model=lenet(dropout=True))
    forward, _, loss, updates = s._build(training=True)
    g = autocast(forward, low, keep=[*forward.outputs, *updates])
    dropout = next(n for n in g.nodes if n.op_type == "Dropout")
    assert infer_types(g)[dropout.inputs[0]].dtype == low       # follows the Gemm before it
    grad_graph, grads = build_gradient_graph(g, loss, list(s.params))
    types = infer_types(grad_graph)
    assert all(types[x].dtype == low for n in g.nodes if n.op_type in ("Conv", "Gemm") for x in n.inputs)
    assert {types[grads[p]].dtype for p in s.params} == {F32}
    conv_grads = [n for n in grad_graph.nodes if n.op_type == "ConvGrad"]
    assert conv_grads and {types[o].dtype for n in conv_grads for o in n.outputs if o} == {low}
    # BatchNorm and its gradient keep the data low, with float32 parameters and statistics
    bn = [n for n in grad_graph.nodes if n.op_type in ("BatchNormalization", "BatchNormalizationGrad")]
    assert len(bn) == 4
    for n in bn:
        data = (0,) if n.op_type == "BatchNormalization" else (0, 1)
        assert [types[x].dtype for x in n.inputs] == [low if i in data else F32 for i in range(5)], n.name
        assert [types[y].dtype for y in n.outputs if y] == [low] + [F32] * (len([y for y in n.outputs if y]) - 1)
    data = {n.inputs[0] for n in bn} | {n.outputs[0] for n in bn} | {n.inputs[1] for n in bn}
    assert not [n.name for n in grad_graph.nodes if n.op_type == "Cast" and {*n.inputs, *n.outputs} & data]


def test_bf16_update_reads_the_low_gradients_with_no_cast_between():
    """In the bf16 training graph a CUDA session builds (here through the session's own
    update-building step), the optimizer update reads each LOW op's weight and bias gradient as
    the bfloat16 value the backward pass makes, not its Cast to float32, and BatchNorm's float32
    gradients as they are; the master weights and state stay float32."""
    low = PRECISIONS["bf16"].low
    if low is None:
        pytest.skip("NumPy has no bfloat16 without ml_dtypes")
    s = session()
    forward, _, loss, updates = s._build(training=True)
    g = autocast(forward, low, keep=[*forward.outputs, *updates])
    train, grads = build_gradient_graph(g, loss, list(s.params))
    norm = s._add_update(train, grads)
    update = train.producers()[norm]
    count = len(s.trained)
    params, read = update.inputs[1:1 + count], update.inputs[1 + count:1 + 2 * count]
    producers, types = train.producers(), infer_types(train)
    assert not [x for x in read if producers[x].op_type == "Cast"]
    cast_weights = {p for p in params if {n.op_type for n in g.consumers()[p]} == {"Cast"}}
    assert len(cast_weights) == 8       # 2 convs' and 2 linears' weight and bias
    assert [types[x].dtype for x in read] == [low if p in cast_weights else F32 for p in params]
    assert {types[x].dtype for x in update.inputs if x not in read} == {F32}   # rate, params, momenta
