"""onnxruntime-training's Module and Optimizer against minitrain.onnx.training's on the same
four artifacts: one training step (forward, loss, backward into the gradient buffers, optimizer
update, lazy_reset_grad) of the models of tests/ort_models.py at a larger batch, interleaved
round by round after checking that both give the same first loss.

The AveragePool models are left out: ONNX Runtime 1.19.2's Module dies of SIGFPE on their
training graphs.  minitrain runs on `--device` (cpu or cuda): its steps are captured (the CPU's
step arena, CUDA Graphs on the GPU), and on CUDA each timed step waits for the device.  ONNX
Runtime runs on the CPU beside a CPU run only: its CUDA training build is another package, so a
CUDA run times minitrain alone (onnxruntime-training still generates the artifacts).

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
    options = {"device": device} if api is training else {}
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
    with_ort = device == "cpu"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            folder = pathlib.Path(tmp) / "_".join(case)
            folder.mkdir()
            x_shape, classes = ort_models.generate(case[0], folder, case[1], case[2])
            data = ort_models.batch(np.random.default_rng(0), batch, x_shape, classes, case[1])
            ours, ours_loss = step_function(training, folder, data, device)
            candidates = {"minitrain": ours}
            if with_ort:
                theirs, theirs_loss = step_function(ort_api, folder, data, device)
                if not np.isclose(ours_loss, theirs_loss, rtol=1e-5):
                    raise SystemExit(f"{case}: first losses differ: minitrain {ours_loss}, ORT {theirs_loss}")
                candidates["ort"] = theirs
            times = interleaved(candidates, rounds=rounds)
            row = ["/".join(case), batch, fmt(times["minitrain"])]
            if with_ort:
                row += [fmt(times["ort"]), ratio(times["minitrain"], times["ort"])]
            rows.append(row)
    header = ["model/loss/optimizer", "batch", "minitrain ms"] + (["ORT ms", "mt/ORT"] if with_ort else [])
    peers = "ORT 1.19.2 on cpu" if with_ort else "ORT not timed (no CUDA training build)"
    text = (f"# onnxruntime-training artifacts: one training step\n\n{datetime.date.today()}, {platform.machine()}, "
            f"minitrain on {device}, {peers}, {THREADS} threads, median of {rounds} interleaved rounds\n\n"
            + markdown_table(header, rows) + "\n")
    report(text, arg("--out", ""))


if __name__ == "__main__":
    main()
