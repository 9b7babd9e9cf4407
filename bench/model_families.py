"""Training step of each model family exported from PyTorch: minitrain (the ONNX file through
TrainingSession.from_onnx) beside the PyTorch model itself, in one process.

The families are those of tests/model_families.py, exported in training mode at opset 17; one
step = forward, mean cross-entropy, backward and a plain SGD update, on the same batch.  The
first losses are checked to agree (1e-4 relative) before anything is timed; steps are then
timed in interleaved rounds (harness.py), time per step being wall time with a synchronisation
at the end of each call.  On CUDA both sides are fed device-resident batches and replay their
whole step from a CUDA Graph: minitrain its captured step, PyTorch a torch.cuda.graph of its
step, captured after warm-up steps on a side stream (as bench/amp.py does); PyTorch's eager
step is timed too, as an extra column, on its own copy of the model.  A last column says how
minitrain's steps ran on CUDA: how many of them replayed the captured graph, or why capture was
off (the graphs' `disabled` reason, or steps run plainly after a signature was turned off).
Both sides run float32 in the same math: strict FP32 by default (PyTorch's allow_tf32 flags off,
minitrain's use_tf32 off), TF32 allowed in GEMMs and convolutions on both with --tf32.

--profile prints, per family, the shares of minitrain's step by op type (node times summed by
op type over profiled steps, TrainingSession.profile_step: host wall time on the CPU, CUDA
events on the GPU).  --out writes the table (and the profiles) to that file, its folder made
if missing; on a remote machine, name a path inside the folder that comes back from it.

    python bench/model_families.py [--threads 2] [--rounds 3] [--min-time 0.5] [--batch 16]
                                   [--size 32] [--device cpu|cuda] [--families resnet,unet]
                                   [--profile] [--tf32] [--out bench/results/model_families.md]
"""
import copy
import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from harness import (fmt, interleaved, markdown_table, optional_torch, ratio, report, threads_from_argv,  # noqa: E402
                     torch_cuda_graph)

THREADS = threads_from_argv()

import numpy as np  # noqa: E402

from minitrain import nn, optim  # noqa: E402
from minitrain.training import TrainingSession  # noqa: E402

LR = 0.01
WARMUP_STEPS = 5        # PyTorch's steps on a side stream before its CUDA Graph is captured
PROFILED_STEPS = 4      # minitrain steps profiled per family (--profile)
TOP_OP_TYPES = 6        # op types listed per family in the profile
TF32 = "--tf32" in sys.argv


def arg(name, default):
    return type(default)(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def export(torch, model, batch, size):
    """The ONNX model (training-mode export, opset 17) of a PyTorch model."""
    import onnx
    f = io.BytesIO()
    torch.onnx.export(model, (torch.zeros(batch, 3, size, size),), f, training=torch.onnx.TrainingMode.TRAINING,
                      opset_version=17, dynamo=False, do_constant_folding=False)
    return onnx.load_from_string(f.getvalue())


def torch_step(torch, model, x, y):
    """PyTorch's training step of `model` on (x, y): zeroes the gradients in place (a captured
    step must keep their memory), returns the loss tensor."""
    sgd = torch.optim.SGD(model.parameters(), lr=LR)

    def step():
        sgd.zero_grad(set_to_none=False)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        sgd.step()
        return loss.detach()
    return step


def graphed(torch, step):
    """(replay, first loss): `step` run WARMUP_STEPS times on a side stream, then captured in a
    CUDA Graph; replay() runs the captured step and waits for it."""
    graph, first = torch_cuda_graph(torch, step, WARMUP_STEPS)

    def replay():
        graph.replay()
        torch.cuda.synchronize()
    return replay, first


def steps(torch, family, batch, size, device):
    """The session and its feed, and the timed steps (name -> fn) after checking that the first
    losses agree: minitrain, PyTorch eager and, on CUDA, PyTorch's CUDA Graph."""
    from model_families import CLASSES, build
    model = build(family)
    per_pixel = {"target_shape": (size, size)} if family == "unet" else {}
    session = TrainingSession.from_onnx(export(torch, model, batch, size), nn.CrossEntropyLoss(), optim.SGD(LR),
                                        device=device, use_tf32=TF32 and device == "cuda", **per_pixel)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 3, size, size)).astype(np.float32)
    y = rng.integers(0, CLASSES, (batch, size, size) if family == "unet" else (batch,))
    tx, ty = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
    feed = (session._provider.from_numpy(x), session._provider.from_numpy(y)) if device == "cuda" else (x, y)
    twin = copy.deepcopy(model) if device == "cuda" else None
    eager = torch_step(torch, model.to(device).train(), tx, ty)

    def minitrain_step():
        return session.train_step(*feed)

    def eager_step():
        return eager().item()

    timed = {"minitrain": minitrain_step}
    first = {"minitrain": minitrain_step(), "torch eager": eager_step()}
    if twin is not None:
        timed["torch graph"], first["torch graph"] = graphed(torch, torch_step(torch, twin.to(device).train(), tx, ty))
    timed["torch eager"] = eager_step
    reference, tolerance = first["torch eager"], 1e-2 if TF32 else 1e-4
    for name, loss in first.items():
        if abs(loss - reference) > tolerance * abs(reference):
            raise AssertionError(f"{family}: first losses differ: {name} {loss}, torch eager {reference}")
    return session, feed, timed


def op_type_shares(session, feed):
    """(ms in nodes per step, [(op type, share)] largest first) of minitrain's step, over
    PROFILED_STEPS profiled steps after one unprofiled."""
    float(session.profile_step(*feed))
    session._profiled.profiler.totals.clear()
    for _ in range(PROFILED_STEPS):
        float(session.profile_step(*feed))
    by_op = {}
    for step in session.train_plan.steps:
        node = step.node
        by_op[node.op_type] = by_op.get(node.op_type, 0.0) + session._profiled.profile.get(node.name, 0.0)
    total = sum(by_op.values())
    shares = sorted(((op, t / total) for op, t in by_op.items()), key=lambda kv: -kv[1])
    return 1e3 * total / PROFILED_STEPS, shares


def capture_state(session):
    """How the training steps of `session` ran so far: the share replayed from the captured
    graph, or why the step was not captured."""
    graphs = session._train.graphs
    if graphs is None:
        return "capture off"
    if graphs.disabled:
        return f"not captured: {graphs.disabled}"
    stats = graphs.stats
    state = f"{stats['replays']}/{session._train.calls} replayed"
    if stats["plain"] or stats["diverged"]:
        state += f" ({stats['plain']} plain, {stats['diverged']} diverged: see the minitrain.capture log)"
    return state


def profile_row(family, session, feed):
    ms, shares = op_type_shares(session, feed)
    return [family, f"{ms:.3g}", ", ".join(f"{op} {share:.0%}" for op, share in shares[:TOP_OP_TYPES])]


def main():
    torch = optional_torch(THREADS)
    if torch is None:
        sys.exit("bench/model_families.py needs torch (and onnx) for the models")
    from model_families import FAMILIES
    device = arg("--device", "cpu")
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = TF32
        torch.backends.cudnn.benchmark = True
    batch, size = arg("--batch", 16), arg("--size", 32)
    names = arg("--families", ",".join(FAMILIES)).split(",")
    rows, profiles = [], []
    for family in names:
        session, feed, timed = steps(torch, family, batch, size, device)
        times = interleaved(timed, rounds=arg("--rounds", 3), min_time=arg("--min-time", 0.5))
        peer = "torch graph" if "torch graph" in times else "torch eager"
        rows.append([family, fmt(times["minitrain"])] + [fmt(times[name]) for name in timed if name != "minitrain"]
                    + [ratio(times["minitrain"], times[peer])] + ([capture_state(session)] if device == "cuda" else []))
        print(" | ".join(rows[-1]), flush=True)
        if "--profile" in sys.argv:
            profiles.append(profile_row(family, session, feed))
            print(" | ".join(profiles[-1]), flush=True)
        del session, feed, timed
    peers = ["PyTorch graph ms", "PyTorch eager ms"] if device == "cuda" else ["PyTorch ms"]
    header = ["family", "minitrain ms"] + peers + [f"minitrain / {peers[0][:-3]}"] + \
        (["minitrain steps"] if device == "cuda" else [])
    math = (", TF32 allowed on both sides" if TF32 else ", strict FP32 on both sides") if device == "cuda" else ""
    text = (f"# Model families: training step, {device}, batch {batch} of 3x{size}x{size}, {THREADS} threads{math}\n\n"
            + markdown_table(header, rows) + "\n")
    if profiles:
        text += (f"\n## minitrain's step by op type ({PROFILED_STEPS} profiled steps)\n\n"
                 + markdown_table(["family", "ms in nodes", "largest shares"], profiles) + "\n")
    report(text, arg("--out", ""))


if __name__ == "__main__":
    main()
