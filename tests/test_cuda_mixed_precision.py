"""Mixed precision on the GPU: 300 steps of the LeNet and 1D CNN examples in bf16 and fp16 track
the float32 run (loss curve within 2%, test accuracy within 1.5 points) with each step one
captured CUDA Graph; no node of an autocast plan falls back to the CPU; bf16's update reads the
bfloat16 weight gradients with no Cast between; fp16's loss scale skips
an overflowing update inside a captured step and recovers; a checkpoint resumes bitwise."""
import numpy as np
import pytest

import minitrain
from minitrain import nn
from minitrain.autocast import PRECISIONS
from minitrain.cli import load_example
from minitrain.data import load_digits, load_mnist1d
from minitrain.inference import infer_types
from minitrain.optim import SGD, AdamW, CosineLR, LinearWarmup
from minitrain.training import TrainingSession
from minitrain.training.loss_scale import DynamicLossScale

pytestmark = pytest.mark.cuda

STEPS, BATCH, WINDOW = 300, 64, 50
EXAMPLES = {"lenet_digits": (load_digits, (1, 8, 8)), "cnn1d_mnist1d": (load_mnist1d, (1, 40))}


def train(example, precision, steps=STEPS):
    """(per-step losses, test accuracy, the session) of `steps` AdamW steps on fixed batches,
    warm-up and cosine decay as the examples' recipe (the decay settles the final weights)."""
    load, shape = EXAMPLES[example]
    data = load()
    minitrain.random.seed(0)
    schedule = LinearWarmup(steps // 20, CosineLR(steps - steps // 20))
    s = TrainingSession(load_example(example).build_model(), nn.CrossEntropyLoss(),
                        AdamW(3e-3, weight_decay=1e-4, schedule=schedule), input_shape=shape, device="cuda",
                        precision=precision)
    order = np.random.default_rng(0).permutation(len(data.x_train))
    per_epoch = len(order) // BATCH
    losses = []
    for step in range(steps):
        batch = order[(step % per_epoch) * BATCH:(step % per_epoch + 1) * BATCH]
        losses.append(s.train_step(data.x_train[batch], data.y_train[batch], wait=False))
    losses = np.array([float(loss) for loss in losses])
    outputs = s.eval_step(data.x_test)
    accuracy = float(np.mean(np.asarray(outputs).argmax(axis=1) == data.y_test))
    return losses, accuracy, s


@pytest.fixture(scope="module")
def float32_runs():
    return {example: train(example, "fp32")[:2] for example in EXAMPLES}


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize("example", list(EXAMPLES))
def test_300_steps_track_float32(example, precision, float32_runs):
    ref_losses, ref_accuracy = float32_runs[example]
    losses, accuracy, s = train(example, precision)
    assert np.isfinite(losses).all()
    ref_curve = ref_losses.reshape(-1, WINDOW).mean(axis=1)
    curve = losses.reshape(-1, WINDOW).mean(axis=1)
    # within 2% of float32's, or 0.01 (1% of the first window's loss) where the loss nears 0 and
    # two runs' noise outweighs 2% of it
    np.testing.assert_allclose(curve, ref_curve, rtol=0.02, atol=0.01,
                               err_msg=f"{example} {precision}: mean loss per {WINDOW} steps")
    # the accuracy of one run on 1000 test samples near 0.97 has a standard error of 0.5 points,
    # and the convolution search may pick other algorithms from run to run: the float32 run alone
    # gave 0.973 and 0.980, so two runs' accuracies are held to three of those errors
    assert abs(accuracy - ref_accuracy) <= 0.015, f"{example} {precision}: {accuracy} vs float32 {ref_accuracy}"
    stats = s._train.graphs.stats
    assert stats["captures"] == 1 and stats["replays"] == STEPS - 3, stats
    assert s.skipped_steps <= 5


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_no_node_of_an_autocast_plan_falls_back_to_the_cpu(precision):
    for example, (_, shape) in EXAMPLES.items():
        s = TrainingSession(load_example(example).build_model(), nn.CrossEntropyLoss(), AdamW(1e-3),
                            input_shape=shape, device="cuda", precision=precision)
        on_cpu = [step.node.name for step in s.train_plan.steps if step.provider != "cuda"]
        assert not on_cpu, f"{example} {precision}: on the CPU: {on_cpu}"
        casts = [step for step in s.train_plan.steps if step.node.op_type == "Cast"]
        assert casts, f"{example} {precision}: no Cast in the plan"
        # BatchNorm and its gradient run on the low-precision data, no Cast on either side
        types = infer_types(s.train_plan.graph)
        bn = [step.node for step in s.train_plan.steps
              if step.node.op_type in ("BatchNormalization", "BatchNormalizationGrad")]
        assert bn and {types[n.inputs[0]].dtype for n in bn} == {PRECISIONS[precision].low}, example
        data = {n.inputs[0] for n in bn} | {n.outputs[0] for n in bn}
        assert not [c.node.name for c in casts if {*c.node.inputs, *c.node.outputs} & data], example


def test_bf16_update_reads_the_low_gradients_with_no_cast_between():
    """The update of a bf16 plan, and the accumulation of micro-batch gradients, read the
    bfloat16 gradients of the LOW ops' weights as the backward pass makes them: no Cast between
    a gradient and the optimizer or its accumulator."""
    for example, (_, shape) in EXAMPLES.items():
        s = TrainingSession(load_example(example).build_model(), nn.CrossEntropyLoss(), AdamW(1e-3),
                            input_shape=shape, device="cuda", precision="bf16")
        steps = [step.node for step in s.train_plan.steps]
        producers = {out: node for node in steps for out in node.outputs if out}
        update = next(node for node in steps if node.name == "optimizer_update")
        count = len(s.trained)
        grads = update.inputs[2 + count:2 + 2 * count]        # learning rate, step, params, grads, m, v
        assert not [x for x in grads if producers[x].op_type == "Cast"], example
        types = infer_types(s.train_plan.graph)
        assert PRECISIONS["bf16"].low in {types[x].dtype for x in grads}, example
        # the same for the gradient accumulation plan: InPlaceAccumulator reads them as they are
        rng = np.random.default_rng(0)
        s.accumulate(rng.standard_normal((4, *shape)).astype(np.float32), rng.integers(0, 10, 4))
        steps = [step.node for step in s._grad.plan.steps]
        producers = {out: node for node in steps for out in node.outputs if out}
        accumulated = [node.inputs[1] for node in steps if node.op_type == "InPlaceAccumulator"]
        assert len(accumulated) == count and not [x for x in accumulated if producers[x].op_type == "Cast"], example


def overflow_session(scale, capture=True):
    minitrain.random.seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.Relu(), nn.Linear(16, 1))
    return TrainingSession(model, nn.MSELoss(reduction="sum"), SGD(1e-3, momentum=0.9), input_shape=(4,),
                           device="cuda", precision="fp16", capture=capture,
                           loss_scale=DynamicLossScale(scale, growth_interval=1000))


def test_fp16_overflow_skips_in_a_captured_step_and_recovers():
    """2**24 makes the float16 gradients overflow: the captured step skips the update (weights
    untouched), halves the scale, and training goes on once it fits."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 4)).astype(np.float32)
    t = 10 + x[:, :1]
    s = overflow_session(2.0 ** 24)
    before = {n: p.copy() for n, p in s.params.items()}
    losses = [s.train_step(x, t) for _ in range(40)]
    s.pull()
    skipped = s.skipped_steps
    assert 1 <= skipped <= 30 and s.loss_scale.scale == 2.0 ** 24 * 0.5 ** skipped
    assert s._train.graphs.stats["replays"] == 37
    assert np.isfinite(losses).all() and losses[-1] < losses[0]
    assert not all(np.array_equal(before[n], p) for n, p in s.params.items())
    # the same run uncaptured skips the same steps and ends with the same weights
    plain = overflow_session(2.0 ** 24, capture=False)
    plain_losses = [plain.train_step(x, t) for _ in range(40)]
    plain.pull()
    assert plain.skipped_steps == skipped and plain_losses == losses
    for name, p in s.params.items():
        assert np.array_equal(plain.params[name], p), name


def test_fp16_checkpoint_resumes_bitwise(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((32, 4)).astype(np.float32)
    t = 10 + x[:, :1]
    a = overflow_session(2.0 ** 24)
    for _ in range(10):
        a.train_step(x, t)
    a.save(tmp_path / "ckpt")
    expected = [a.train_step(x, t) for _ in range(10)]
    b = overflow_session(1.0)
    b.load(tmp_path / "ckpt")
    assert [b.train_step(x, t) for _ in range(10)] == expected
    a.pull(), b.pull()
    assert a.skipped_steps == b.skipped_steps and a.loss_scale.scale == b.loss_scale.scale
    for name, p in a.params.items():
        assert np.array_equal(p, b.params[name]), name
