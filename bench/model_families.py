"""Training step of each model family exported from PyTorch: minitrain (the ONNX file through
TrainingSession.from_onnx) beside the PyTorch model itself, in one process.

The families are those of tests/model_families.py, exported in training mode at opset 17; one
step = forward, mean cross-entropy, backward and a plain SGD update, on the same batch.  The
first losses are checked to agree (1e-4 relative) before anything is timed; steps are then
timed in interleaved rounds (harness.py).  On CUDA minitrain replays its captured step (CUDA
Graph) and PyTorch runs eager, both fed device-resident batches; time per step is wall time
with a synchronisation at the end of each call.

    python bench/model_families.py [--threads 2] [--rounds 3] [--min-time 0.5] [--batch 16]
                                   [--size 32] [--device cpu|cuda] [--families resnet,unet]
                                   [--out bench/results/model_families.md]
"""
import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from harness import fmt, interleaved, markdown_table, optional_torch, ratio, report, threads_from_argv  # noqa: E402

THREADS = threads_from_argv()

import numpy as np  # noqa: E402

from minitrain import nn, optim  # noqa: E402
from minitrain.training import TrainingSession  # noqa: E402

LR = 0.01


def arg(name, default):
    return type(default)(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def steps(torch, family, batch, size, device):
    """(minitrain step, PyTorch step) on one batch, after checking their first losses agree."""
    import onnx
    from model_families import CLASSES, build
    model = build(family)
    f = io.BytesIO()
    torch.onnx.export(model, (torch.zeros(batch, 3, size, size),), f, training=torch.onnx.TrainingMode.TRAINING,
                      opset_version=17, dynamo=False, do_constant_folding=False)
    per_pixel = {"target_shape": (size, size)} if family == "unet" else {}
    session = TrainingSession.from_onnx(onnx.load_from_string(f.getvalue()), nn.CrossEntropyLoss(), optim.SGD(LR),
                                        device=device, **per_pixel)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 3, size, size)).astype(np.float32)
    y = rng.integers(0, CLASSES, (batch, size, size) if family == "unet" else (batch,))
    model = model.to(device).train()
    sgd = torch.optim.SGD(model.parameters(), lr=LR)
    tx, ty = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
    feed = (session._provider.from_numpy(x), session._provider.from_numpy(y)) if device == "cuda" else (x, y)

    def torch_step():
        sgd.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(tx), ty)
        loss.backward()
        sgd.step()
        return loss.item()

    def minitrain_step():
        return session.train_step(*feed)

    first = (minitrain_step(), torch_step())
    if abs(first[0] - first[1]) > 1e-4 * abs(first[1]):
        raise AssertionError(f"{family}: first losses differ: minitrain {first[0]}, torch {first[1]}")
    return minitrain_step, torch_step


def main():
    torch = optional_torch(THREADS)
    if torch is None:
        sys.exit("bench/model_families.py needs torch (and onnx) for the models")
    from model_families import FAMILIES
    device = arg("--device", "cpu")
    batch, size = arg("--batch", 16), arg("--size", 32)
    names = arg("--families", ",".join(FAMILIES)).split(",")
    rows = []
    for family in names:
        mine, theirs = steps(torch, family, batch, size, device)
        times = interleaved({"minitrain": mine, "torch": theirs}, rounds=arg("--rounds", 3),
                            min_time=arg("--min-time", 0.5))
        rows.append([family, fmt(times["minitrain"]), fmt(times["torch"]), ratio(times["minitrain"], times["torch"])])
        print(" | ".join(rows[-1]), flush=True)
    header = ["family", "minitrain ms", "PyTorch ms", "minitrain / PyTorch"]
    text = (f"# Model families: training step, {device}, batch {batch} of 3x{size}x{size}, {THREADS} threads\n\n"
            + markdown_table(header, rows) + "\n")
    report(text, arg("--out", ""))


if __name__ == "__main__":
    main()
