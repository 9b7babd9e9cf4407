"""What a CPU training step spends on memory: the step with its allocations served from the
planned arena (providers/cpu/step_arena.py, TrainingSession(capture=True), the default) against
plain NumPy allocations (capture=False), each unfused and fused (minitrain/fusion/), with
PyTorch's step as the yardstick.

Each variant runs in a fresh process (glibc's allocator adapts its thresholds to what a process
has freed before, so variants sharing a process would change each other's page faults), the
variants one after the other, round after round; figures are medians over rounds.  A child
reports the median time of BLOCKS blocks of steps, then its page faults and CPU time per step
(getrusage over STEPS steps): fresh pages that glibc hands out for large buffers are mapped and
zeroed by the kernel on first touch, in whichever thread touches them first.

    python bench/step_memory.py [--threads 2] [--rounds 5] [--cases lenet5_b64,cnn1d_b64]
                                [--out bench/results/step_memory.md]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import markdown_table, optional_torch, report, threads_from_argv  # noqa: E402

THREADS = threads_from_argv()
os.environ["OPENBLAS_NUM_THREADS"] = str(THREADS)

import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

import minitrain  # noqa: E402
from minitrain import nn, optim  # noqa: E402
from minitrain._ext import LEVEL  # noqa: E402
from minitrain.training import TrainingSession  # noqa: E402

from train import arg, minitrain_model, torch_step  # noqa: E402
from cases import MODEL_CASES, make_inputs  # noqa: E402

STEPS = 50
BLOCKS = 5
VARIANTS = {"plain": (False, False), "arena": (False, True), "fused": (True, False), "fused + arena": (True, True)}
CASES = {c.name: c for c in MODEL_CASES}


def variant_step(case, variant):
    """(step function, session or None) of one variant (or "torch")."""
    minitrain.random.seed(0)
    model = minitrain_model(case)
    if variant == "torch":
        return torch_step(optional_torch(THREADS), case, model)[1], None
    fuse, arena = VARIANTS[variant]
    session = TrainingSession(model, nn.CrossEntropyLoss(), optim.SGD(case.lr), input_shape=case.input_shape[1:],
                              fuse=fuse, capture=arena)
    data = make_inputs(case)
    return (lambda: session.train_step(data["x"], data["labels"])), session


def child(case_name, variant):
    """Runs in a fresh process: prints one JSON line of this variant's figures."""
    step, session = variant_step(CASES[case_name], variant)
    for _ in range(10):
        step()
    blocks = []
    for _ in range(BLOCKS):
        start, count = time.perf_counter(), 0
        while count < 5 or time.perf_counter() - start < 0.3:
            step()
            count += 1
        blocks.append((time.perf_counter() - start) / count * 1e3)
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(STEPS):
        step()
    after = resource.getrusage(resource.RUSAGE_SELF)
    arenas = session._train.graphs.memory() if session is not None and session._train.graphs else {}
    print(json.dumps({"ms": statistics.median(blocks), "faults": (after.ru_minflt - before.ru_minflt) / STEPS,
                      "system": (after.ru_stime - before.ru_stime) / STEPS * 1e3,
                      "user": (after.ru_utime - before.ru_utime) / STEPS * 1e3,
                      "arena": next(iter(arenas.values()), None)}))


def run_child(case_name, variant):
    result = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", case_name, variant,
                             "--threads", str(THREADS)], capture_output=True, text=True, timeout=600)
    if result.returncode:
        raise RuntimeError(result.stderr)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main():
    if "--child" in sys.argv:
        i = sys.argv.index("--child")
        child(sys.argv[i + 1], sys.argv[i + 2])
        return
    rounds = arg("--rounds", 5)
    out = arg("--out", os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "step_memory.md"))
    variants = list(VARIANTS) + (["torch"] if optional_torch(THREADS) is not None else [])
    chosen = arg("--cases", ",".join(c.name for c in MODEL_CASES)).split(",")
    rows = []
    for case in [c for c in MODEL_CASES if c.name in chosen]:
        runs = {v: [] for v in variants}
        for _ in range(rounds):
            for variant in variants:
                runs[variant].append(run_child(case.name, variant))
        med = {v: {k: statistics.median(r[k] for r in rs) for k in ("ms", "faults", "system", "user")}
               for v, rs in runs.items()}
        torch_ms = med.get("torch", {}).get("ms")
        for variant in variants:
            m, arena = med[variant], runs[variant][-1]["arena"]
            rows.append([case.name, variant, f"{m['ms']:.2f}", "n/a" if torch_ms is None else f"{m['ms'] / torch_ms:.2f}",
                         f"{m['faults']:.0f}", f"{m['system']:.2f}", f"{m['user']:.2f}",
                         "" if arena is None else f"{arena[0] / 2**20:.1f} / {arena[1] / 2**20:.1f}"])
    header = ["model", "variant", "ms/step", "/torch", "minor faults/step", "system ms/step", "user ms/step",
              "arena MiB / allocations MiB"]
    text = "\n".join([
        f"# CPU step memory: arena against plain allocations ({datetime.date.today()}, {THREADS} threads, "
        f"{rounds} rounds)", "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, minitrain kernels {LEVEL}.",
        "Each variant in a fresh process, variants in turn, round after round; medians over rounds of each "
        f"process's median over {BLOCKS} blocks of steps; faults and CPU time (user and system, summed over "
        f"threads): getrusage over {STEPS} steps.", "",
        markdown_table(header, rows)]) + "\n"
    report(text, out)


if __name__ == "__main__":
    main()
