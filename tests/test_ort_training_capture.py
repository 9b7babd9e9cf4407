"""minitrain.onnx.training's compiled steps: the training, eval and optimizer steps of a Module
run captured (a CUDA Graph replayed after warm-up on CUDA, the step arena on the CPU) with the
state kept on the device, and give what the uncaptured steps give.

The loop exercises what a captured step must follow from run to run: lazy_reset_grad (some
steps accumulate a second micro-batch into the gradients before the update), a learning rate
that LinearLRScheduler changes at every step, BatchNorm's running statistics, and parameters
written from the host (copy_buffer_to_parameters) between steps.

Skips without onnxruntime-training (it generates the artifacts: pip install minitrain[ort])."""
import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime.training.artifacts", reason="needs onnxruntime-training")

import ort_models  # noqa: E402
folders = ort_models.folders     # the artifacts fixture, shared with the other ORT tests
from minitrain.onnx import training  # noqa: E402

STEPS = 10
DOUBLE_BATCH_STEPS = (1, 4, 7)      # steps that accumulate a second micro-batch before the update
TRAIN_RUNS = STEPS + len(DOUBLE_BATCH_STEPS)
EVAL_RUNS = 4
CASES = [("conv2d_bn", "MSELoss", "AdamW"), ("conv3d", "CrossEntropyLoss", "SGD"),
         ("conv1d_global_avg", "CrossEntropyLoss", "AdamW")]


def run(folder, shape, case, device, capture=True):
    """Ten updates (three of them over two micro-batches), then eval steps; returns the
    (state, module, optimizer, every loss in order)."""
    rng = np.random.default_rng(3)
    data = [ort_models.batch(rng, 4, shape[0], shape[1], case[1]) for _ in range(STEPS)]
    state = training.CheckpointState.load_checkpoint(folder / "checkpoint")
    module = training.Module(folder / "training_model.onnx", state, folder / "eval_model.onnx", device=device,
                             capture=capture)
    optimizer = training.Optimizer(folder / "optimizer_model.onnx", module)
    scheduler = training.LinearLRScheduler(optimizer, 2, STEPS, 0.01)
    losses = []
    for step, (x, y) in enumerate(data):
        if step == STEPS // 2:      # a host write between captured steps
            module.copy_buffer_to_parameters(module.get_contiguous_parameters(trainable_only=True) * 0.5)
        losses.append(float(module(x, y)))
        if step in DOUBLE_BATCH_STEPS:
            losses.append(float(module(x[::-1].copy(), y[::-1].copy())))
        optimizer.step()
        scheduler.step()
        module.lazy_reset_grad()
    module.eval()
    losses += [float(module(x, y)) for x, y in data[:EVAL_RUNS]]
    return state, module, optimizer, np.array(losses)


def state_arrays(state):
    """Every value of the state on the host: parameters, gradients and moments."""
    values = {name: p.data.copy() for name, p in state.parameters}
    values.update((f"{name}.grad", state.host(g).copy()) for name, g in state.grads.items())
    for param, moments in state.optimizer_groups["group0"].states.items():
        values.update((f"{param}.{key}", state.host(m).copy()) for key, m in moments.items())
    return values


@pytest.mark.parametrize("case", CASES, ids="-".join)
def test_cpu_steps_run_in_the_step_arena_with_unchanged_results(case, folders):
    folder, shape = folders(case)
    plain_state, plain_module, plain_optimizer, plain_losses = run(folder, shape, case, "cpu", capture=False)
    state, module, optimizer, losses = run(folder, shape, case, "cpu")
    assert plain_module._train_step.replay_stats == plain_optimizer._update.replay_stats == {}
    assert module._train_step.replay_stats == {"warmups": 1, "traces": 1, "replays": TRAIN_RUNS - 2}
    assert optimizer._update.replay_stats == {"warmups": 1, "traces": 1, "replays": STEPS - 2}
    assert module._eval_step.replay_stats == {"warmups": 1, "traces": 1, "replays": EVAL_RUNS - 2}
    np.testing.assert_array_equal(losses, plain_losses)
    plain = state_arrays(plain_state)
    for name, value in state_arrays(state).items():
        np.testing.assert_array_equal(value, plain[name], err_msg=name)
    assert state.optimizer_groups["group0"].step == plain_state.optimizer_groups["group0"].step == STEPS


@pytest.mark.cuda
@pytest.mark.parametrize("case", CASES, ids="-".join)
def test_cuda_steps_are_captured_and_equal_the_cpu(case, folders):
    folder, shape = folders(case)
    cpu_state, _, _, cpu_losses = run(folder, shape, case, "cpu")
    state, module, optimizer, losses = run(folder, shape, case, "cuda")
    # warm-up, recording and capture runs, then one replay per run: one capture for all the
    # learning rates and lazy_reset_grad flags
    assert module._train_step.replay_stats == {"warmups": 1, "records": 1, "captures": 1,
                                               "replays": TRAIN_RUNS - 3}
    assert optimizer._update.replay_stats == {"warmups": 1, "records": 1, "captures": 1, "replays": STEPS - 3}
    assert module._eval_step.replay_stats == {"warmups": 1, "records": 1, "captures": 1, "replays": EVAL_RUNS - 3}
    np.testing.assert_allclose(losses, cpu_losses, rtol=1e-5, atol=1e-6)
    expected = state_arrays(cpu_state)
    for name, value in state_arrays(state).items():
        scale = max(float(np.abs(expected[name]).max()), 1e-3)
        np.testing.assert_allclose(value, expected[name], rtol=1e-5, atol=1e-5 * scale, err_msg=name)
    assert state.optimizer_groups["group0"].step == STEPS


@pytest.mark.cuda
def test_cuda_state_stays_on_the_device(folders):
    """The state's tensors are device tensors, the very ones the compiled steps read."""
    case = CASES[0]
    folder, shape = folders(case)
    state, module, optimizer, _ = run(folder, shape, case, "cuda")
    assert state.provider.name == "cuda"
    for name, _ in state.parameters:
        assert not isinstance(state.values[name], np.ndarray)
        for executor in module._train_step.executors.values():
            assert executor.constants[name] is state.values[name]


def test_a_state_bound_to_one_device_is_refused_on_another(folders):
    """A second Module on another device would move the tensors that the first one's steps read."""
    folder, _ = folders(CASES[1])
    state = training.CheckpointState.load_checkpoint(folder / "checkpoint")
    training.Module(folder / "training_model.onnx", state)
    training.Module(folder / "training_model.onnx", state)      # the same device shares the tensors
    with pytest.raises(ValueError, match="a Module on cpu trains this CheckpointState; load the checkpoint again "
                                         "for a Module on cuda"):
        training.Module(folder / "training_model.onnx", state, device="cuda")
