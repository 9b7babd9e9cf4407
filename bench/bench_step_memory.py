"""What a CPU training step spends on memory: the step with its allocations served from the
planned arena (providers/cpu/step_arena.py, TrainingSession(capture=True), the default) against
plain NumPy allocations (capture=False), each unfused and fused (minitrain/fusion/), with
PyTorch's step as the yardstick, interleaved round by round in one process.

Besides the time per step, each variant's page faults and system time per step (getrusage
over a separate run of STEPS steps): fresh pages that glibc hands out for large buffers are
mapped and zeroed by the kernel on first touch, in whichever thread touches them first.

    python bench/bench_step_memory.py [--threads 2] [--rounds 5] [--out bench/results/step_memory.md]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import interleaved, markdown_table, optional_torch, ratio, threads_from_argv  # noqa: E402

THREADS = threads_from_argv()
os.environ["OPENBLAS_NUM_THREADS"] = str(THREADS)

import datetime  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402

import minitrain  # noqa: E402
from minitrain import nn, optim  # noqa: E402
from minitrain._ext import LEVEL  # noqa: E402
from minitrain.training import TrainingSession  # noqa: E402

from bench_train import arg, minitrain_model, torch_step  # noqa: E402
from cases import MODEL_CASES, make_inputs  # noqa: E402

STEPS = 50
VARIANTS = {"plain": (False, False), "arena": (False, True), "fused": (True, False), "fused + arena": (True, True)}


def session_step(case, fuse, arena):
    minitrain.random.seed(0)
    model = minitrain_model(case)
    session = TrainingSession(model, nn.CrossEntropyLoss(), optim.SGD(case.lr), input_shape=case.input_shape[1:],
                              fuse=fuse, capture=arena)
    data = make_inputs(case)
    return model, session, (lambda: session.train_step(data["x"], data["labels"]))


def per_step_usage(step):
    """(minor page faults, system ms, user ms) per step over STEPS steps, after a warm-up."""
    for _ in range(5):
        step()
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(STEPS):
        step()
    after = resource.getrusage(resource.RUSAGE_SELF)
    return ((after.ru_minflt - before.ru_minflt) / STEPS, (after.ru_stime - before.ru_stime) / STEPS * 1e3,
            (after.ru_utime - before.ru_utime) / STEPS * 1e3)


def main():
    rounds = arg("--rounds", 5)
    out = arg("--out", os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "step_memory.md"))
    torch = optional_torch(THREADS)
    rows = []
    for case in MODEL_CASES:
        steps, sessions = {}, {}
        for name, (fuse, arena) in VARIANTS.items():
            model, sessions[name], steps[name] = session_step(case, fuse, arena)
        if torch is not None:
            steps["torch"] = torch_step(torch, case, model)[1]
        times = interleaved(steps, rounds=rounds, min_time=0.5)
        for name, step in steps.items():
            faults, system, user = per_step_usage(step)
            arena = sessions[name]._train.graphs.memory() if name in sessions and sessions[name]._train.graphs else {}
            planned = next(iter(arena.values()), None)
            rows.append([case.name, name, f"{times[name]:.2f}", ratio(times[name], times.get("torch")),
                         f"{faults:.0f}", f"{system:.2f}", f"{user:.2f}",
                         "" if planned is None else f"{planned[0] / 2**20:.1f} / {planned[1] / 2**20:.1f}"])
    header = ["model", "variant", "ms/step", "/torch", "minor faults/step", "system ms/step", "user ms/step",
              "arena MiB / allocations MiB"]
    text = "\n".join([
        f"# CPU step memory: arena against plain allocations ({datetime.date.today()}, {THREADS} threads, "
        f"{rounds} rounds)", "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, minitrain kernels {LEVEL}.",
        "Times: median of per-round medians, interleaved in one process; faults and CPU time: getrusage over "
        f"{STEPS} steps of each variant (user and system time summed over threads).", "",
        markdown_table(header, rows)]) + "\n"
    print(text)
    if out:
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
