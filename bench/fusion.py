"""What fusion (minitrain/fusion/) does to a training step, fused against unfused in one process:
the nodes of the training plan, on CUDA the nodes of the captured step's CUDA Graph (its kernel
launches and copies), and the step time, interleaved round by round.

Models: LeNet-5 and the 1D CNN of cases.MODEL_CASES (batch 64, and 1024 on CUDA), mean softmax
cross-entropy, SGD.  CPU: wall time of a step; CUDA: device-resident batches, `STEPS` steps
queued back to back (captured and replayed), then one wait, per step.

    python bench/fusion.py [--device cpu|cuda] [--threads 2] [--rounds 3] [--out FILE]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import interleaved, markdown_table, ratio, threads_from_argv  # noqa: E402

THREADS = threads_from_argv()

import datetime  # noqa: E402
import platform  # noqa: E402

import minitrain  # noqa: E402
from minitrain import nn, optim  # noqa: E402
from minitrain.training import TrainingSession  # noqa: E402

from train import arg, minitrain_model  # noqa: E402
from cases import MODEL_CASES, make_inputs, with_batch  # noqa: E402

STEPS = 20


def session_step(case, device, fuse):
    """A session on `device` and a function running one step (STEPS queued steps on CUDA)."""
    minitrain.random.seed(0)
    session = TrainingSession(minitrain_model(case), nn.CrossEntropyLoss(), optim.SGD(case.lr),
                              input_shape=case.input_shape[1:], device=device, fuse=fuse)
    data = make_inputs(case)
    if device == "cpu":
        return session, lambda: session.train_step(data["x"], data["labels"])
    provider = session._provider
    x, y = provider.from_numpy(data["x"]), provider.from_numpy(data["labels"])

    def steps():
        for _ in range(STEPS):
            session.train_step(x, y, wait=False)
        provider.synchronize()
    return session, steps


def graph_nodes(session):
    """Nodes of the captured CUDA Graph of the training step (None when not captured)."""
    graphs = session._train.graphs
    captured = [sig.graph for sig in graphs.signatures.values() if sig.graph is not None] if graphs else []
    return captured[0].node_count if captured else None


def device_name():
    from pycuda import driver
    return driver.Context.get_device().name()


def isa():
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return "unknown ISA"
    return "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"


def main():
    device, rounds = arg("--device", "cpu"), arg("--rounds", 3)
    cases = MODEL_CASES if device == "cpu" else [with_batch(c, b) for c in MODEL_CASES for b in (64, 1024)]
    rows = []
    for case in cases:
        plain, plain_step = session_step(case, device, False)
        fused, fused_step = session_step(case, device, True)
        times = interleaved({"unfused": plain_step, "fused": fused_step}, rounds=rounds, min_time=0.5)
        per = 1 if device == "cpu" else STEPS
        row = [case.name, len(plain.train_plan.steps), len(fused.train_plan.steps)]
        if device != "cpu":
            row += [graph_nodes(plain), graph_nodes(fused)]
        rows.append(row + [f"{times['unfused'] / per:.3f}", f"{times['fused'] / per:.3f}",
                           ratio(times["unfused"], times["fused"])])
    header = ["model", "plan nodes unfused", "plan nodes fused"]
    if device != "cpu":
        header += ["graph nodes unfused", "graph nodes fused"]
    header += ["ms/step unfused", "ms/step fused", "unfused/fused"]
    where = (f"{platform.processor() or platform.machine()}, {isa()}, {THREADS} threads" if device == "cpu"
             else f"{device_name()}, whole step captured")
    text = "\n".join([f"# Fusion on a training step ({datetime.date.today()}, {device}: {where}, {rounds} rounds)",
                      "", markdown_table(header, rows), ""])
    print(text)
    out = arg("--out", "")
    if out:
        with open(out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
