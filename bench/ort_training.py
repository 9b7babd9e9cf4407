"""onnxruntime-training's Module and Optimizer against minitrain.onnx.training's on the same
four artifacts: one training step (forward, loss, backward into the gradient buffers, optimizer
update, lazy_reset_grad) of the models of tests/ort_models.py at a larger batch, interleaved
round by round after checking that both give the same first loss.

The AveragePool models are left out: ONNX Runtime 1.19.2's Module dies of SIGFPE on their
training graphs.  minitrain runs on the CPU, and with `--device cuda` on CUDA too, in the same table: its steps
are captured (the CPU's step arena, CUDA Graphs on the GPU), and on CUDA each timed step waits
for the device.  ONNX
Runtime always runs on the CPU of the same machine, with `--threads` intra-op threads: its
CUDA training build (onnxruntime-training with the CUDA execution provider) needs the CUDA 12
libraries and is far larger than what the GPU machine can be given, so only the CPU-only
wheel (onnxruntime-training-cpu) is installed there.

    python bench/ort_training.py [--device cpu|cuda] [--threads 2] [--rounds 3] [--batch 64] [--out FILE]
"""
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
from harness import fmt, interleaved, markdown_table, ratio, report, threads_from_argv  # noqa: E402

THREADS = threads_from_argv()

import datetime  # noqa: E402
import pathlib  # noqa: E402
import platform  # noqa: E402

import numpy as np  # noqa: E402
import onnxruntime  # noqa: E402
from onnxruntime.training import api as ort_api  # noqa: E402

import ort_models  # noqa: E402
from minitrain.onnx import training  # noqa: E402
from train import arg  # noqa: E402

CASES = [("conv1d_global_avg", "CrossEntropyLoss", "AdamW"), ("conv1d_mean", "MSELoss", "SGD"),
         ("conv2d_bn", "MSELoss", "AdamW"), ("conv3d", "CrossEntropyLoss", "SGD")]


def step_function(api, folder, data, device):
    """A function running one training step of `api` on `data` (waiting for the device), and
    the first step's loss."""
    state = api.CheckpointState.load_checkpoint(str(folder / "checkpoint"))
    if api is training:
        options = {"device": device}
    else:
        session_options = onnxruntime.SessionOptions()
        session_options.intra_op_num_threads = THREADS
        options = {"session_options": session_options}
    module = api.Module(str(folder / "training_model.onnx"), state, str(folder / "eval_model.onnx"), **options)
    optimizer = api.Optimizer(str(folder / "optimizer_model.onnx"), module)
    wait = state.provider.synchronize if api is training else (lambda: None)

    def step():
        loss = module(*data)
        optimizer.step()
        module.lazy_reset_grad()
        wait()
        return loss
    return step, float(step())


def main():
    device, rounds, batch = arg("--device", "cpu"), int(arg("--rounds", 3)), int(arg("--batch", 64))
    devices = ["cpu"] if device == "cpu" else ["cpu", device]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            folder = pathlib.Path(tmp) / "_".join(case)
            folder.mkdir()
            x_shape, classes = ort_models.generate(case[0], folder, case[1], case[2])
            data = ort_models.batch(np.random.default_rng(0), batch, x_shape, classes, case[1])
            theirs, theirs_loss = step_function(ort_api, folder, data, "cpu")
            candidates = {}
            for name in devices:
                candidates[name], loss = step_function(training, folder, data, name)
                if not np.isclose(loss, theirs_loss, rtol=1e-5):
                    raise SystemExit(f"{case}: first losses differ: minitrain on {name} {loss}, ORT {theirs_loss}")
            candidates["ort"] = theirs
            times = interleaved(candidates, rounds=rounds)
            rows.append(["/".join(case), batch, *(fmt(times[name]) for name in devices), fmt(times["ort"]),
                         *(ratio(times[name], times["ort"]) for name in devices)])
    header = ["model/loss/optimizer", "batch", *(f"minitrain {name} ms" for name in devices), "ORT cpu ms",
              *(f"mt {name}/ORT" for name in devices)]
    text = (f"# onnxruntime-training artifacts: one training step\n\n{datetime.date.today()}, {platform.machine()}, "
            f"{os.cpu_count()} cores, minitrain on {' and '.join(describe(name) for name in devices)}, "
            f"ORT {onnxruntime.__version__} on the CPU with {THREADS} intra-op threads, median of {rounds} "
            f"interleaved rounds\n\n" + markdown_table(header, rows) + "\n")
    if device != "cpu":
        text += ("\nONNX Runtime runs on the CPU: its CUDA training build cannot be installed on the GPU machine (it "
                 "needs the CUDA 12 libraries and is far over the size that can be carried there), so only "
                 "onnxruntime-training-cpu is.\n")
    report(text, arg("--out", ""))


def describe(device):
    """The device minitrain runs on, in words (the GPU's name on CUDA, once its context exists)."""
    if device == "cpu":
        return "the CPU"
    from pycuda import driver
    return f"{device} ({driver.Context.get_device().name()})"


if __name__ == "__main__":
    main()
