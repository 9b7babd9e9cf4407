"""Training-step benchmark: minitrain's TrainingSession against PyTorch eager, side by side.

For every model of cases.MODEL_CASES (LeNet-5 on 1x28x28 and the 1D CNN on 1x1024, batch 64):
one step = forward, mean softmax cross-entropy, backward and a plain SGD update (lr from the
case).  Both start from the same weights and see the same batch; their first losses and
updated weights are checked to agree before anything is timed.  Steps are timed in one
process, interleaved round by round (harness.py).  Peak memory of a step is measured in a
fresh subprocess per framework: the peak RSS of the first 8 steps over the RSS before them
(Linux VmHWM, reset through /proc/self/clear_refs: the same yardstick for both), and for
minitrain also tracemalloc's peak during one step and the plan's own estimate.

    python bench/train.py [--threads 2] [--blas-threads 2] [--rounds 3] [--min-time 1.0]
                          [--fuse | --no-fuse] [--no-arena] [--cases lenet5_b64,cnn1d_b64]
                          [--out bench/results/train.md]

--fuse / --no-fuse run minitrain's plans fused or not (minitrain/fusion/; default: the session's
default); --no-arena runs the CPU step without its planned arena (capture=False).
    python bench/train.py --device cuda [--steps 200] [--rounds 5] [--out FILE]    (_train_cuda.py)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import fmt, interleaved, markdown_table, optional_torch, ratio, report, threads_from_argv  # noqa: E402

THREADS = threads_from_argv()
# --blas-threads K: OpenBLAS threads of NumPy/SciPy (minitrain's Gemm), default THREADS; the
# OpenMP kernels keep THREADS.  Set before NumPy loads, like the harness's thread counts.
BLAS_THREADS = int(sys.argv[sys.argv.index("--blas-threads") + 1]) if "--blas-threads" in sys.argv else THREADS
os.environ["OPENBLAS_NUM_THREADS"] = str(BLAS_THREADS)

import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import tracemalloc  # noqa: E402

import numpy as np  # noqa: E402

import minitrain  # noqa: E402
from minitrain import nn, optim  # noqa: E402
from minitrain.training import TrainingSession  # noqa: E402

from cases import MODEL_CASES, make_inputs, model_summary  # noqa: E402

CASES = {c.name: c for c in MODEL_CASES}


def arg(name, default):
    return type(default)(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


# --------------------------------------------------------------------------- models
def minitrain_model(case):
    """The case's layer list as an nn.Sequential (spatial rank from the input shape)."""
    n = len(case.input_shape) - 2
    conv, maxpool, avgpool = ((nn.Conv1d, nn.MaxPool1d, nn.AvgPool1d), (nn.Conv2d, nn.MaxPool2d, nn.AvgPool2d),
                              (nn.Conv3d, nn.MaxPool3d, nn.AvgPool3d))[n - 1]
    layers, channels, features = [], case.input_shape[1], None
    shapes = [row[2] for row in model_summary(case)[0]]
    for (op, p), shape in zip(case.layers, shapes):
        if op == "conv":
            layers.append(conv(channels, p["out"], p["k"], stride=p.get("stride", 1), padding=p.get("pad", 0)))
            channels = p["out"]
        elif op == "relu":
            layers.append(nn.Relu())
        elif op == "maxpool":
            layers.append(maxpool(p["k"], p.get("stride")))
        elif op == "avgpool":
            layers.append(avgpool(p["k"], p.get("stride")))
        elif op == "flatten":
            layers.append(nn.Flatten())
            features = shape[1]
        elif op == "linear":
            layers.append(nn.Linear(features, p["out"]))
            features = p["out"]
    return nn.Sequential(*layers)


def torch_model(torch, case, model):
    """The same network in torch, with the minitrain model's initial weights copied in."""
    n = len(case.input_shape) - 2
    tnn = torch.nn
    conv, maxpool, avgpool = ((tnn.Conv1d, tnn.MaxPool1d, tnn.AvgPool1d), (tnn.Conv2d, tnn.MaxPool2d, tnn.AvgPool2d),
                              (tnn.Conv3d, tnn.MaxPool3d, tnn.AvgPool3d))[n - 1]
    layers = []
    for layer in model:
        kind = type(layer).__name__
        if kind.startswith("Conv"):
            layers.append(conv(layer.in_channels, layer.out_channels, layer.kernel_size, layer.stride, layer.padding))
        elif kind == "Relu":
            layers.append(tnn.ReLU())
        elif kind.startswith("MaxPool"):
            layers.append(maxpool(layer.kernel_size, layer.stride))
        elif kind.startswith("AvgPool"):
            layers.append(avgpool(layer.kernel_size, layer.stride))
        elif kind == "Flatten":
            layers.append(tnn.Flatten())
        elif kind == "Linear":
            layers.append(tnn.Linear(layer.in_features, layer.out_features))
        if hasattr(layer, "weight"):
            with torch.no_grad():
                layers[-1].weight.copy_(torch.from_numpy(layer.weight.data))
                layers[-1].bias.copy_(torch.from_numpy(layer.bias.data))
    return tnn.Sequential(*layers)


def fuse_flag():
    """--fuse: True, --no-fuse: False, neither: None (the session's default)."""
    return True if "--fuse" in sys.argv else False if "--no-fuse" in sys.argv else None


def minitrain_step(case):
    minitrain.random.seed(0)
    model = minitrain_model(case)
    session = TrainingSession(model, nn.CrossEntropyLoss(), optim.SGD(case.lr), input_shape=case.input_shape[1:],
                              fuse=fuse_flag(), capture="--no-arena" not in sys.argv)
    data = make_inputs(case)
    return model, session, (lambda: session.train_step(data["x"], data["labels"]))


def torch_step(torch, case, model):
    tmodel = torch_model(torch, case, model)
    opt = torch.optim.SGD(tmodel.parameters(), lr=case.lr)
    data = make_inputs(case)
    x, y = torch.from_numpy(data["x"]), torch.from_numpy(data["labels"])

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(tmodel(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    return tmodel, step


def check_agreement(torch, case):
    """Same first loss and same weights after two steps (float32 tolerances)."""
    model, session, step = minitrain_step(case)
    tmodel, tstep = torch_step(torch, case, model)
    losses = [(step(), tstep()) for _ in range(2)]
    for ours, theirs in losses:
        assert abs(ours - theirs) <= 1e-4 * max(1.0, abs(theirs)), (case.name, losses)
    tparams = [p.detach().numpy() for p in tmodel.parameters()]
    for (name, ours), theirs in zip(model.named_parameters(), tparams):
        err = float(np.max(np.abs(ours.data - theirs)))
        assert err <= 1e-4, f"{case.name}: {name} differs from torch by {err}"
    return losses[0]


# --------------------------------------------------------------------------- memory
def current_rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss():
    """VmHWM: the peak resident set size since the last reset_peak_rss()."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak_rss():
    """Linux: writing 5 to clear_refs resets VmHWM to the current RSS."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def memory_child(case_name, framework):
    """Runs in a fresh process: the peak RSS of the first 8 steps over the RSS before them
    (model, optimizer and batch already built).  It counts what the steps allocate, whether a
    framework returns it to the OS after each step (minitrain: NumPy buffers) or keeps it in
    its heap (torch), plus one-time allocations of the first step."""
    case = CASES[case_name]
    torch = optional_torch(THREADS) if framework == "torch" else None
    model, session, step = minitrain_step(case)
    if framework == "torch":
        _, step = torch_step(torch, case, model)
    base = current_rss()
    reset_peak_rss()
    for _ in range(8):
        step()
    growth = peak_rss() - base
    traced = None
    if framework == "minitrain":
        tracemalloc.start()
        step()
        traced = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    print(json.dumps({"rss_growth": growth, "tracemalloc_peak": traced,
                      "planned_peak": session.train_plan.peak_bytes({"N": case.batch})
                      if framework == "minitrain" else None}))


def measure_memory(case_name, framework):
    env = dict(os.environ)
    result = subprocess.run([sys.executable, os.path.abspath(__file__), "--memory-child", case_name, framework,
                             "--threads", str(THREADS), "--blas-threads", str(BLAS_THREADS)],
                            capture_output=True, text=True, env=env, timeout=600)
    if result.returncode:
        raise RuntimeError(result.stderr)
    return json.loads(result.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- main
def profile(case, steps=20):
    """Per-op share of minitrain's step (kernel time summed by op type)."""
    _, session, step = minitrain_step(case)
    data = make_inputs(case)
    for _ in range(3):
        step()
        session.profile_step(data["x"], data["labels"])
    session._profiled.profiler.totals.clear()
    import time
    start = time.perf_counter()
    for _ in range(steps):
        float(session.profile_step(data["x"], data["labels"]))
    wall = (time.perf_counter() - start) / steps
    by_op = {}
    for step_ in session.train_plan.steps:
        node = step_.node
        by_op[node.op_type] = by_op.get(node.op_type, 0.0) + session._profiled.profile.get(node.name, 0.0) / steps
    kernels = sum(by_op.values())
    top = sorted(by_op.items(), key=lambda kv: -kv[1])[:6]
    arenas = session._train.graphs.memory() if session._train.graphs is not None else {}
    return wall, kernels, top, next(iter(arenas.values()), None)


def main():
    if "--memory-child" in sys.argv:
        i = sys.argv.index("--memory-child")
        memory_child(sys.argv[i + 1], sys.argv[i + 2])
        return
    if arg("--device", "cpu") == "cuda":
        from _train_cuda import main_gpu
        import torch as cuda_torch
        main_gpu(cuda_torch, minitrain_model, torch_model, arg, arg("--out", ""))
        return
    rounds, min_time = arg("--rounds", 3), arg("--min-time", 1.0)
    out = arg("--out", os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "train.md"))
    torch = optional_torch(THREADS)
    rows, mem_rows, notes = [], [], []
    chosen = arg("--cases", ",".join(CASES)).split(",")
    for case in [c for c in MODEL_CASES if c.name in chosen]:
        _, _, step = minitrain_step(case)
        candidates = {"minitrain": step, "torch": None}
        if torch is not None:
            first = check_agreement(torch, case)
            notes.append(f"{case.name}: first-step loss minitrain {first[0]:.6f}, torch {first[1]:.6f}")
            model, session, step = minitrain_step(case)
            _, tstep = torch_step(torch, case, model)
            candidates = {"minitrain": step, "torch": tstep}
        times = interleaved(candidates, rounds=rounds, min_time=min_time)
        ours, theirs = times["minitrain"], times["torch"]
        rows.append([case.name, case.batch, fmt(ours), fmt(theirs), ratio(ours, theirs),
                     f"{case.batch / ours * 1e3:.0f}", "n/a" if theirs is None else f"{case.batch / theirs * 1e3:.0f}"])
        mem = {fw: measure_memory(case.name, fw) for fw in (["minitrain", "torch"] if torch else ["minitrain"])}
        mt, tt = mem["minitrain"], mem.get("torch")
        mem_rows.append([case.name, f"{mt['rss_growth'] / 2**20:.1f}",
                         "n/a" if tt is None else f"{tt['rss_growth'] / 2**20:.1f}",
                         "n/a" if tt is None else ratio(mt["rss_growth"], tt["rss_growth"]),
                         f"{mt['tracemalloc_peak'] / 2**20:.1f}", f"{mt['planned_peak'] / 2**20:.1f}"])
        wall, kernels, top, arena = profile(case)
        notes.append(f"{case.name}: minitrain step {wall * 1e3:.2f} ms, kernels {kernels * 1e3:.2f} ms "
                     f"(executor overhead {(wall - kernels) * 1e3:.2f} ms); by op: " +
                     ", ".join(f"{op} {t * 1e3:.2f}" for op, t in top) +
                     ("" if arena is None else f"; step arena {arena[0] / 2**20:.1f} MiB for "
                      f"{arena[1] / 2**20:.1f} MiB of allocations"))
    header = ["model", "batch", "minitrain ms/step", "torch ms/step", "minitrain/torch", "minitrain samples/s",
              "torch samples/s"]
    mem_header = ["model", "minitrain peak RSS growth MiB", "torch peak RSS growth MiB", "minitrain/torch",
                  "minitrain tracemalloc peak MiB", "minitrain planned peak MiB"]
    text = "\n".join([
        f"# Training step: minitrain vs PyTorch ({datetime.date.today()}, {THREADS} threads, "
        f"OpenBLAS {BLAS_THREADS} thread(s), {rounds} rounds)",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, minitrain kernels "
        f"{minitrain._ext.LEVEL}; numpy {np.__version__}" + (f", torch {torch.__version__}" if torch else "") + ".",
        f"minitrain sessions: fuse={'default' if fuse_flag() is None else fuse_flag()}, "
        f"step arena {'off' if '--no-arena' in sys.argv else 'on'}.",
        "One step: forward, mean softmax cross-entropy, backward, SGD update (bench/train.py).",
        "Times are the median over rounds of per-round medians, interleaved in one process.",
        "", markdown_table(header, rows), "",
        "Peak memory of the steps (fresh process per framework: peak RSS of the first 8 steps over the RSS "
        "before them, model and batch already built):",
        "", markdown_table(mem_header, mem_rows), "", "Notes:", ""] + [f"- {n}" for n in notes]) + "\n"
    report(text, out)


if __name__ == "__main__":
    main()
