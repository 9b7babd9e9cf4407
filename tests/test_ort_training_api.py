"""minitrain.onnx.training against onnxruntime.training.api on the four artifacts that
generate_artifacts writes for small CNNs of our own (tests/ort_models.py): 1-D, 2-D and 3-D
convolutions, max, average and global pooling, BatchNormalization, ReduceMean, Gemm; AdamW and
SGD; CrossEntropy, MSE and BCEWithLogits losses.

- Ten steps from the same checkpoint: losses equal to 1e-5 relative, parameters and the
  optimizer's moments and step after them to 1e-5 (the moments read from the checkpoint ORT
  saves); also with the AdamWOptimizer settings generate_artifacts does not write (adam_mode 0,
  no bias correction, weight decay).
- A checkpoint minitrain writes resumes in ORT with the losses of ORT's uninterrupted run, and
  the other way.
- The exported inference model runs in onnxruntime with minitrain's outputs.
- The Module and Optimizer API: learning rates and LinearLRScheduler, gradient accumulation
  (lazy_reset_grad), parameters, properties and buffers, batch sizes that change.
- The AveragePool model's training step dies of SIGFPE inside ONNX Runtime 1.19.2's Module
  (checked in a subprocess), so minitrain's ten steps on it are compared with PyTorch's.
- The Dropout model draws its masks from each runtime's own generator: its training losses
  cannot agree, so only its eval steps and its export are compared.

Skips without onnxruntime-training (pip install minitrain[ort]).  The CUDA variants (marked
`cuda`) run minitrain's Module on the GPU, its steps captured into CUDA Graphs, against ORT on
the CPU, at the CPU's tolerances: minitrain's float32 on CUDA is strict FP32 (cuBLAS without
TF32, cuDNN's FMA math), so it differs from ORT's CPU kernels by summation order only, as
minitrain's own CPU kernels do."""
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime.training.api", reason="needs onnxruntime-training")
import onnxruntime  # noqa: E402
from onnxruntime.training import api as ort_api  # noqa: E402

import ort_models  # noqa: E402
folders = ort_models.folders     # the artifacts fixture, shared with the other ORT tests
from minitrain.executor import Executor  # noqa: E402
from minitrain.onnx import load, training  # noqa: E402
from minitrain.onnx.ort_checkpoint_format import read_checkpoint  # noqa: E402
from minitrain.scheduler import schedule  # noqa: E402

RTOL = 1e-5
STEPS = 10
LEARNING_RATE = 0.01
# (model, loss, optimizer): the ones both runtimes train
CASES = [("conv1d_global_avg", "CrossEntropyLoss", "AdamW"), ("conv1d_mean", "MSELoss", "SGD"),
         ("conv2d_bn", "MSELoss", "AdamW"), ("conv2d_bn", "BCEWithLogitsLoss", "SGD"),
         ("conv3d", "CrossEntropyLoss", "SGD"), ("conv3d", "MSELoss", "AdamW")]
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def batches(case, shape, count=STEPS, seed=1):
    x_shape, classes = shape
    rng = np.random.default_rng(seed)
    return [ort_models.batch(rng, 4, x_shape, classes, case[1]) for _ in range(count)]


def start(api, folder, checkpoint=None, device="cpu"):
    """(state, module, optimizer) of `api` on the artifacts in `folder`."""
    state = api.CheckpointState.load_checkpoint(str(checkpoint or folder / "checkpoint"))
    options = {"device": device} if api is training else {}
    module = api.Module(str(folder / "training_model.onnx"), state, str(folder / "eval_model.onnx"), **options)
    optimizer = api.Optimizer(str(folder / "optimizer_model.onnx"), module)
    optimizer.set_learning_rate(LEARNING_RATE)
    return state, module, optimizer


def train(module, optimizer, data):
    losses = []
    for x, y in data:
        module.train()
        losses.append(float(module(x, y)))
        optimizer.step()
        module.lazy_reset_grad()
    return np.array(losses)


def assert_close(ours, theirs, what):
    theirs = np.asarray(theirs)
    scale = float(np.abs(theirs).max()) if theirs.size else 1.0
    np.testing.assert_allclose(ours, theirs, rtol=RTOL, atol=RTOL * max(scale, 1e-3), err_msg=what)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids="-".join)
def test_ten_steps_equal_onnx_runtime(case, device, folders, tmp_path):
    folder, shape = folders(case)
    assert_ten_steps_equal(folder, batches(case, shape), device, tmp_path, case)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("attrs", [{"adam_mode": 0, "weight_decay": 0.05}, {"adam_mode": 1, "weight_decay": 0.05},
                                   {"adam_mode": 1, "correct_bias": 0, "weight_decay": 0.01}],
                         ids=lambda attrs: "-".join(f"{k}={v}" for k, v in attrs.items()))
def test_adamw_settings_equal_onnx_runtime(attrs, device, folders, tmp_path):
    """generate_artifacts writes AdamW with adam_mode 1, bias correction and no weight decay;
    the optimizer model with the other settings of AdamWOptimizer trains as in ORT too."""
    import onnx
    case = CASES[0]
    folder, shape = folders(case)
    variant = tmp_path / "artifacts"
    variant.mkdir()
    for name in ("checkpoint", "training_model.onnx", "eval_model.onnx"):
        shutil.copy(folder / name, variant / name)
    model = onnx.load(str(folder / "optimizer_model.onnx"))
    node = model.graph.node[0]
    kept = [a for a in node.attribute if a.name not in attrs]
    del node.attribute[:]
    node.attribute.extend(kept + [onnx.helper.make_attribute(k, v) for k, v in attrs.items()])
    onnx.save(model, str(variant / "optimizer_model.onnx"))
    assert_ten_steps_equal(variant, batches(case, shape), device, tmp_path, (*case, str(attrs)))


def assert_ten_steps_equal(folder, data, device, tmp_path, case):
    """Ten steps of ORT (on the CPU) and minitrain (on `device`) on the artifacts in `folder`:
    the same losses, parameters, optimizer state (step, moments) and frozen values."""
    theirs_state, theirs_module, theirs_opt = start(ort_api, folder)
    ours_state, ours_module, ours_opt = start(training, folder, device=device)
    assert_close(train(ours_module, ours_opt, data), train(theirs_module, theirs_opt, data), f"{case}: losses")
    if device == "cuda":        # the losses above came from replays of the captured steps
        assert ours_module._train_step.replay_stats["replays"] == STEPS - 3
        assert ours_opt._update.replay_stats["replays"] == STEPS - 3
    for name, parameter in theirs_state.parameters:
        assert_close(ours_state.parameters[name].data, parameter.data, f"{case}: parameter {name}")
    ort_api.CheckpointState.save_checkpoint(theirs_state, str(tmp_path / "theirs"), include_optimizer_state=True)
    training.CheckpointState.save_checkpoint(ours_state, tmp_path / "ours", include_optimizer_state=True)
    theirs_saved, ours_saved = read_checkpoint(tmp_path / "theirs"), read_checkpoint(tmp_path / "ours")
    theirs_group, ours_group = theirs_saved.optimizer_groups["group0"], ours_saved.optimizer_groups["group0"]
    assert ours_group.step == theirs_group.step == STEPS
    assert ours_group.initial_learning_rate == theirs_group.initial_learning_rate
    assert sorted(ours_group.states) == sorted(theirs_group.states)
    for param, moments in theirs_group.states.items():
        assert sorted(ours_group.states[param]) == sorted(moments)
        for key, value in moments.items():
            assert_close(ours_group.states[param][key], value, f"{case}: {key} of {param}")
    assert sorted(ours_saved.frozen) == sorted(theirs_saved.frozen)
    for name, value in theirs_saved.frozen.items():    # BatchNorm's running statistics
        assert_close(ours_saved.frozen[name], value, f"{case}: frozen {name}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", [CASES[0], CASES[2]], ids="-".join)
def test_checkpoints_resume_in_the_other_runtime(case, device, folders, tmp_path):
    """Five steps in one runtime, its checkpoint (optimizer state included) resumed for five
    more in the other: the losses of ONNX Runtime's uninterrupted run."""
    folder, shape = folders(case)
    data = batches(case, shape)
    _, module, optimizer = start(ort_api, folder)
    straight = train(module, optimizer, data)
    for first, second in ((training, ort_api), (ort_api, training)):
        state, module, optimizer = start(first, folder, device=device)
        head = train(module, optimizer, data[:5])
        first.CheckpointState.save_checkpoint(state, str(tmp_path / "resume"), include_optimizer_state=True)
        _, module, optimizer = start(second, folder, checkpoint=tmp_path / "resume", device=device)
        tail = train(module, optimizer, data[5:])
        assert_close(np.concatenate([head, tail]), straight, f"{case}: {first.__name__} then {second.__name__}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES[:3] + [("conv2d_dropout", "BCEWithLogitsLoss", "AdamW")], ids="-".join)
def test_eval_and_exported_inference_model(case, device, folders, tmp_path):
    """After three training steps in minitrain, ORT's Module on minitrain's checkpoint: the
    same eval losses, and inference models that give minitrain's outputs in onnxruntime."""
    folder, shape = folders(case)
    data = batches(case, shape, count=3)
    ours_state, ours_module, ours_opt = start(training, folder, device=device)
    train(ours_module, ours_opt, data)
    training.CheckpointState.save_checkpoint(ours_state, tmp_path / "trained")
    _, theirs_module, _ = start(ort_api, folder, checkpoint=tmp_path / "trained")
    for module in (theirs_module, ours_module):
        module.eval()
    assert ours_module.input_names() == theirs_module.input_names()
    assert ours_module.output_names() == theirs_module.output_names()
    for x, y in data:
        assert_close(ours_module(x, y), theirs_module(x, y), f"{case}: eval loss")
    ours_module.export_model_for_inferencing(tmp_path / "ours.onnx", ["y"])
    theirs_module.export_model_for_inferencing(str(tmp_path / "theirs.onnx"), ["y"])
    x = data[0][0]
    graph = load(tmp_path / "ours.onnx")
    ours = Executor(schedule(graph, ["y"], device)).run({"x": x})["y"]
    for which in ("ours", "theirs"):
        session = onnxruntime.InferenceSession(str(tmp_path / f"{which}.onnx"), providers=["CPUExecutionProvider"])
        assert_close(ours, session.run(["y"], {"x": x})[0], f"{case}: {which} exported model in onnxruntime")


def test_the_average_pool_model_crashes_onnx_runtime(folders):
    """ONNX Runtime 1.19.2's Module dies of SIGFPE on the AveragePool training graph; when a
    later release fixes it, test_average_pool_trains_like_pytorch should compare with it."""
    folder, _ = folders(("conv2d_avgpool", "CrossEntropyLoss", "SGD"))
    script = ("import numpy as np\nfrom onnxruntime.training import api\n"
              f"s = api.CheckpointState.load_checkpoint({str(folder / 'checkpoint')!r})\n"
              f"m = api.Module({str(folder / 'training_model.onnx')!r}, s)\n"
              "m(np.ones((2, 1, 6, 6), np.float32), np.zeros(2, np.int64))\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert run.returncode == -8, f"ONNX Runtime's Module ran the AveragePool graph (exit {run.returncode})"


@pytest.mark.parametrize("device", DEVICES)
def test_average_pool_trains_like_pytorch(device, folders):
    torch = pytest.importorskip("torch")
    case = ("conv2d_avgpool", "CrossEntropyLoss", "SGD")
    folder, shape = folders(case)
    data = batches(case, shape)
    state, module, optimizer = start(training, folder, device=device)
    initial = {name: p.data.copy() for name, p in state.parameters}
    ours = train(module, optimizer, data)
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 3, 3, padding=1), torch.nn.ReLU(), torch.nn.AvgPool2d(2),
                              torch.nn.Flatten(), torch.nn.Linear(27, 4))
    with torch.no_grad():
        for layer, prefix in ((net[0], "conv"), (net[4], "fc")):
            layer.weight.copy_(torch.from_numpy(initial[f"{prefix}.w"]))
            layer.bias.copy_(torch.from_numpy(initial[f"{prefix}.b"]))
    sgd = torch.optim.SGD(net.parameters(), lr=LEARNING_RATE)
    theirs = []
    for x, y in data:
        sgd.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        sgd.step()
        theirs.append(loss.item())
    assert_close(ours, theirs, "AveragePool model: losses")
    for layer, prefix in ((net[0], "conv"), (net[4], "fc")):
        assert_close(state.parameters[f"{prefix}.w"].data, layer.weight.detach().numpy(), f"{prefix}.w")
        assert_close(state.parameters[f"{prefix}.b"].data, layer.bias.detach().numpy(), f"{prefix}.b")


@pytest.mark.parametrize("device", DEVICES)
def test_learning_rate_scheduler_and_gradient_accumulation(device, folders):
    """set/get_learning_rate as ONNX Runtime's; LinearLRScheduler's documented schedule, which
    ONNX Runtime 1.19.2's Python binding reaches with its two counts swapped; steps without
    lazy_reset_grad add a second micro-batch's gradients to the first.  The learning rates,
    losses and accumulated gradients equal ONNX Runtime's."""
    folder, shape = folders(CASES[0])
    data = batches(CASES[0], shape)
    rates, losses, grads = {}, {}, {}
    for api, counts in ((training, (2, 6)), (ort_api, (6, 2))):
        state, module, optimizer = start(api, folder, device=device)
        scheduler = api.LinearLRScheduler(optimizer, *counts, 0.05)
        rates[api], losses[api], grads[api] = [optimizer.get_learning_rate()], [], []
        for step, (x, y) in enumerate(data[:8]):
            losses[api].append(float(module(x, y)))
            if step % 3 == 1:
                losses[api].append(float(module(x[::-1].copy(), y[::-1].copy())))
            grads[api].append({name: p.grad.copy() for name, p in state.parameters if p.requires_grad})
            optimizer.step()
            scheduler.step()
            module.lazy_reset_grad()
            rates[api].append(optimizer.get_learning_rate())
    np.testing.assert_allclose(rates[training], rates[ort_api], rtol=1e-7)
    np.testing.assert_allclose(rates[training], [0, 0.025, 0.05, 0.0375, 0.025, 0.0125, 0, 0, 0], rtol=1e-6)
    assert_close(losses[training], losses[ort_api], "losses")
    for step, (ours, theirs) in enumerate(zip(grads[training], grads[ort_api])):
        for name, grad in theirs.items():
            assert_close(ours[name], grad, f"step {step}: gradient of {name}")


@pytest.mark.parametrize("device", DEVICES)
def test_state_parameters_properties_and_buffers(device, folders, tmp_path):
    folder, shape = folders(CASES[2])
    state, module, _ = start(training, folder, device=device)
    theirs_state, theirs_module, _ = start(ort_api, folder)
    assert module.input_names() == theirs_module.input_names()      # training mode
    assert module.output_names() == theirs_module.output_names()
    assert [n for n, _ in state.parameters] == [n for n, _ in theirs_state.parameters]
    assert [p.requires_grad for _, p in state.parameters] == [p.requires_grad for _, p in theirs_state.parameters]
    assert state.parameters["fc.w"].grad is None or not state.parameters["fc.w"].grad.any()
    for trainable_only in (True, False):
        assert module.get_parameters_size(trainable_only) == theirs_module.get_parameters_size(trainable_only)
    flat = module.get_contiguous_parameters()
    np.testing.assert_array_equal(flat, theirs_module.get_contiguous_parameters().numpy())
    module.copy_buffer_to_parameters(np.zeros(module.get_parameters_size()))
    assert not state.parameters["conv.w"].data.any() and state.parameters["bn.var"].data.any()
    with pytest.raises(ValueError, match="holds 3 values"):
        module.copy_buffer_to_parameters(np.zeros(3))
    state.properties["epoch"] = 3
    state.properties["best"] = 0.25
    state.properties["note"] = "ok"
    with pytest.raises(TypeError, match="int, a float or a str"):
        state.properties["bad"] = [1]
    training.CheckpointState.save_checkpoint(state, tmp_path / "ours")
    theirs = ort_api.CheckpointState.load_checkpoint(str(tmp_path / "ours"))
    assert dict(theirs.properties) == {"best": 0.25, "epoch": 3, "note": "ok"}
    np.testing.assert_array_equal(theirs.parameters["conv.w"].data, state.parameters["conv.w"].data)


@pytest.mark.parametrize("damage,message", [
    (lambda b: b[:3], "not an ONNX Runtime training checkpoint"),
    (lambda b: b[:4] + b"XXXX" + b[8:], "file identifier"),
    (lambda b: b[:len(b) // 2], "truncated or corrupt"),
    (lambda b: b"\xff\xff\xff\x7f" + b[4:], "truncated or corrupt"),
])
def test_a_corrupt_or_foreign_checkpoint_names_the_file(damage, message, folders, tmp_path):
    folder, _ = folders(CASES[0])
    bad = tmp_path / "bad_checkpoint"
    bad.write_bytes(damage((folder / "checkpoint").read_bytes()))
    from minitrain.errors import CheckpointError
    with pytest.raises(CheckpointError, match=message) as error:
        training.CheckpointState.load_checkpoint(bad)
    assert str(bad) in str(error.value)


def test_an_onnx_model_is_not_a_checkpoint(folders):
    folder, _ = folders(CASES[0])
    from minitrain.errors import CheckpointError
    with pytest.raises(CheckpointError, match="eval_model.onnx: not an ONNX Runtime training checkpoint"):
        training.CheckpointState.load_checkpoint(folder / "eval_model.onnx")


def test_an_optimizer_model_of_another_kind_is_refused(folders, tmp_path):
    import onnx
    folder, _ = folders(CASES[0])
    model = onnx.load(str(folder / "eval_model.onnx"))
    onnx.save(model, str(tmp_path / "not_an_optimizer.onnx"))
    _, module, _ = start(training, folder)
    from minitrain.errors import GraphError
    with pytest.raises(GraphError, match="must hold one AdamWOptimizer or SGDOptimizerV2 node"):
        training.Optimizer(tmp_path / "not_an_optimizer.onnx", module)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_device_and_mismatched_optimizer_state(device, folders, tmp_path):
    folder, shape = folders(CASES[1])          # SGD: one moment per parameter in its checkpoint
    state, module, optimizer = start(training, folder, device=device)
    with pytest.raises(ValueError, match="device must be one of"):
        training.Module(folder / "training_model.onnx", state, device="tpu")
    train(module, optimizer, batches(CASES[1], shape, count=1))
    training.CheckpointState.save_checkpoint(state, tmp_path / "sgd", include_optimizer_state=True)
    adamw_folder, _ = folders(("conv1d_mean", "MSELoss", "AdamW"))
    resumed = training.CheckpointState.load_checkpoint(tmp_path / "sgd")
    module = training.Module(adamw_folder / "training_model.onnx", resumed, device=device)
    with pytest.raises(ValueError, match=r"holds \['momentum0'\]; AdamWOptimizer needs"):
        training.Optimizer(adamw_folder / "optimizer_model.onnx", module)


@pytest.mark.parametrize("device", DEVICES)
def test_batch_sizes_change_between_steps(device, folders):
    """A step is planned per input signature with the values its shapes decide folded into
    constants (the Shape, Size and integer Div of ReduceMean's gradient): batches of several
    sizes, in training and eval, give ONNX Runtime's losses, and no plan runs those nodes."""
    case = CASES[1]         # conv1d_mean: ReduceMean over the length, MSE's mean over the batch
    folder, (x_shape, classes) = folders(case)
    rng = np.random.default_rng(4)
    data = [ort_models.batch(rng, n, x_shape, classes, case[1]) for n in (4, 3, 4, 5, 3)]
    losses, modules = {}, {}
    for api in (training, ort_api):
        _, modules[api], optimizer = start(api, folder, device=device)
        losses[api] = train(modules[api], optimizer, data)
        modules[api].eval()
        losses[api] = np.concatenate([losses[api], [float(modules[api](x, y)) for x, y in data[:2]]])
    assert_close(losses[training], losses[ort_api], "losses")
    module = modules[training]
    for step in (module._train_step, module._eval_step):
        for executor in step.executors.values():
            assert not {"Shape", "Size", "Div"} & {s.node.op_type for s in executor.plan.steps}
    batch_sizes = [shape[0] for signature in module._train_step.executors for name, shape, _ in signature if name == "x"]
    assert sorted(batch_sizes) == [3, 4, 5]


def test_inputs_of_the_wrong_shape_are_refused(folders):
    folder, (x_shape, classes) = folders(CASES[1])
    _, module, _ = start(training, folder)
    x, y = ort_models.batch(np.random.default_rng(0), 4, x_shape, classes, CASES[1][1])
    with pytest.raises(ValueError, match=r"input 'x' expects shape \('batch', 3, 20\), got \(4, 3, 21\)"):
        module(np.zeros((4, 3, 21), np.float32), y)
    with pytest.raises(ValueError, match="input 'target': dim 'batch' is 4 elsewhere, here 5"):
        module(x, np.zeros((5, 3), np.float32))
