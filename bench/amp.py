"""Mixed-precision training step on CUDA: minitrain's TrainingSession(precision=...) against
PyTorch autocast, the whole step in one CUDA Graph on both sides, in one process.

Models: the case table's LeNet-5 and 1D CNN at batch 64 and 1024 (the cases of train.py's CUDA
table) and amp_models.py's VGG-style CNN with BatchNorm and small ResNet at batch 512.  One step:
forward, mean softmax cross-entropy, backward, plain SGD (the case's lr), both sides from the same
initial weights on the same batch.  Precisions:

* fp32: strict float32 on both sides (TF32 off: PyTorch's allow_tf32 flags and minitrain's
  use_tf32 both False, in every precision, so whatever runs in float32 runs in strict FP32);
* bf16: minitrain's precision="bf16"; PyTorch's forward and loss under
  torch.autocast("cuda", torch.bfloat16);
* fp16: minitrain's precision="fp16" with its dynamic loss scale (GradScaler's defaults);
  PyTorch's autocast to float16 with torch.amp.GradScaler.

PyTorch's optimizer is SGD(fused=True) in every precision: its step takes GradScaler's scale and
found_inf as device tensors, so the fp16 step (unscale, skip decision, scale update) captures with
no host sync.  autocast runs with cache_enabled=False, as a captured region needs.  Capture:
five warm-up steps (on a side stream for PyTorch), then `torch.cuda.graph` around the whole step;
minitrain captures its step itself (train_step on device-resident batches).

Timing: for each model and precision both steps are built, warmed up and captured, then
`rounds` rounds each time minitrain, then PyTorch: CUDA events around `steps` steps queued back
to back; the median over rounds.  Peak device memory: for PyTorch torch.cuda.max_memory_allocated
over the step's life (model, optimizer, warm-up, capture, timing) less what was allocated before;
for minitrain the session's device state (parameters, optimizer and loss-scale state), the
captured step's arena and its input tensors (as train.py --device cuda counts them).  The first
step's loss of each side is reported beside; a disagreement beyond the precision's tolerance is
flagged in the notes, and a case that raises is listed there (the run goes on; the exit status
says so at the end).

    python bench/amp.py [--steps 50] [--rounds 3] [--cases lenet5_b64,vgg_bn_b512]
                        [--precisions fp32,bf16,fp16] [--out FILE]
    python bench/amp.py --device cpu [--batch 8] [--cases ...]

--device cpu checks what needs no GPU: every model built in both frameworks, the weights copied,
minitrain's float32 CPU step against PyTorch's (first losses and the weights after two steps
agree), and one bf16 and fp16 step of each side: minitrain's autocast pass (and loss scaling)
with float64 standing in for the 16-bit type, PyTorch's autocast (and GradScaler) on the CPU.
Nothing is timed; --batch (default 8) shrinks the batches.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import dataclasses  # noqa: E402
import datetime  # noqa: E402
import gc  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402

import numpy as np  # noqa: E402

import minitrain  # noqa: E402
from minitrain import nn, optim  # noqa: E402
from minitrain.autocast import Precision  # noqa: E402
from minitrain.training import TrainingSession  # noqa: E402

from amp_models import NETWORKS, Network, minitrain_network, torch_network  # noqa: E402
from cases import CNN1D, LENET5, make_inputs, with_batch  # noqa: E402
from harness import markdown_table, report, torch_cuda_graph  # noqa: E402
from train import minitrain_model, torch_model  # noqa: E402

CASES = {c.name: c for c in (with_batch(LENET5, 64), with_batch(LENET5, 1024), with_batch(CNN1D, 64),
                             with_batch(CNN1D, 1024), *NETWORKS)}
PRECISIONS = ("fp32", "bf16", "fp16")
WARMUP_STEPS = 5
# Relative first-loss agreement expected between the two sides: float32 differs in summation
# order only; a low-precision forward rounds every convolution and GEMM input to 8 (bfloat16) or
# 11 (float16) mantissa bits.
LOSS_TOLERANCE = {"fp32": 1e-4, "bf16": 3e-2, "fp16": 5e-3}
# The CPU's stand-ins for bf16 and fp16: the autocast pass and loss scaling with float64 as the
# "low" type (the CPU kernels have no 16-bit floats), so --device cpu builds the graphs the GPU runs.
EMULATED = {"bf16": Precision("bf16-emulated", np.dtype(np.float64)),
            "fp16": Precision("fp16-emulated", np.dtype(np.float64), loss_scaling=True)}


def arg(name, default):
    return type(default)(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


# --------------------------------------------------------------------------- models
def build_minitrain(case):
    minitrain.random.seed(0)
    return minitrain_network(case) if isinstance(case, Network) else minitrain_model(case)


def build_torch(torch, case, model):
    return torch_network(torch, case, model) if isinstance(case, Network) else torch_model(torch, case, model)


def minitrain_session(case, precision, device):
    """A session at `precision` (a name, or an autocast.Precision for the CPU's emulation)."""
    model = build_minitrain(case)
    session = TrainingSession(model, nn.CrossEntropyLoss(), optim.SGD(case.lr), input_shape=case.input_shape[1:],
                              device=device, use_tf32=False, precision=precision)
    return model, session


def torch_step(torch, case, model, precision, device):
    """PyTorch's model (the minitrain model's weights), fused SGD and a step function under
    autocast at `precision`, with a GradScaler for fp16 (a pass-through otherwise)."""
    tmodel = build_torch(torch, case, model).to(device)
    opt = torch.optim.SGD(tmodel.parameters(), lr=case.lr, fused=True)
    scaler = torch.amp.GradScaler(device, enabled=precision == "fp16")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    data = make_inputs(case)
    x, y = torch.from_numpy(data["x"]).to(device), torch.from_numpy(data["labels"]).to(device)

    def step():
        opt.zero_grad(set_to_none=False)
        with torch.autocast(device, dtype=dtype, enabled=dtype is not None, cache_enabled=False):
            loss = torch.nn.functional.cross_entropy(tmodel(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss.detach()
    return tmodel, step


# --------------------------------------------------------------------------- CPU checks
def check_on_cpu(torch, case):
    """minitrain's float32 CPU step against PyTorch's: first losses and weights after two
    steps; then one bf16 and one fp16 step of each side (minitrain's emulated in float64), whose
    losses must be finite.  Returns a line of findings."""
    model, session = minitrain_session(case, "fp32", "cpu")
    tmodel, tstep = torch_step(torch, case, model, "fp32", "cpu")
    data = make_inputs(case)
    losses = [(session.train_step(data["x"], data["labels"]), float(tstep())) for _ in range(2)]
    for ours, theirs in losses:
        if abs(ours - theirs) > LOSS_TOLERANCE["fp32"] * max(1.0, abs(theirs)):
            raise AssertionError(f"{case.name}: losses differ, minitrain/torch {losses}")
    theirs = tmodel.state_dict()
    worst = max(float(np.max(np.abs(p.data - theirs[name].numpy()))) for name, p in model.named_parameters())
    if worst > 1e-4:
        raise AssertionError(f"{case.name}: weights after two steps differ from torch's by up to {worst}")
    low = {}
    for precision in PRECISIONS[1:]:
        _, emulated = minitrain_session(case, EMULATED[precision], "cpu")
        _, step = torch_step(torch, case, build_minitrain(case), precision, "cpu")
        low[precision] = (emulated.train_step(data["x"], data["labels"]), float(step()))
        if not all(math.isfinite(v) for v in low[precision]):
            raise AssertionError(f"{case.name}: {precision} CPU steps gave losses minitrain/torch {low[precision]}")
    return (f"{case.name}: fp32 first loss minitrain {losses[0][0]:.6f}, torch {losses[0][1]:.6f}; weights after "
            f"two steps within {worst:.1e}; first loss, minitrain's autocast pass in float64 / torch CPU autocast: " +
            ", ".join(f"{p} {ours:.4f} / {theirs:.4f}" for p, (ours, theirs) in low.items()))


def main_cpu(torch, cases):
    batch = arg("--batch", 8)
    for case in cases:
        print(check_on_cpu(torch, dataclasses.replace(case, input_shape=(batch, *case.input_shape[1:]))), flush=True)


# --------------------------------------------------------------------------- GPU
def minitrain_device_bytes(session):
    """The session's device state, the captured step's arena and its input tensors."""
    graphs = session._train.graphs
    state = sum(v.nbytes for v in session.state._native.values())
    if graphs is None:
        return state
    arena = sum(a for a, _ in graphs.memory().values())
    inputs = sum(t.nbytes for sig in graphs.signatures.values() for t in (sig.inputs or {}).values())
    return state + arena + inputs


def minitrain_side(case, precision):
    """(model, timed step, event functions, first loss, device bytes, captured?) of minitrain."""
    import pycuda.driver as driver
    model, session = minitrain_session(case, precision, "cuda")
    provider = session._provider
    data = make_inputs(case)
    x, y = provider.from_numpy(data["x"]), provider.from_numpy(data["labels"])
    first = session.train_step(x, y)
    for _ in range(WARMUP_STEPS - 1):
        session.train_step(x, y)
    graphs = session._train.graphs
    events = (driver.Event, lambda e: e.record(provider.stream), lambda a, b: (b.synchronize(), b.time_since(a))[1])
    return {"model": model, "session": session, "step": lambda: session.train_step(x, y, wait=False),
            "events": events, "first_loss": first, "bytes": minitrain_device_bytes(session),
            "captured": bool(graphs and graphs.stats["captures"])}


def torch_side(torch, case, model, precision):
    """PyTorch's step at `precision`, warmed up on a side stream and captured in one CUDA Graph."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    _, step = torch_step(torch, case, model, precision, "cuda")
    graph, first = torch_cuda_graph(torch, step, WARMUP_STEPS)
    stream = torch.cuda.current_stream()
    events = (lambda: torch.cuda.Event(enable_timing=True), lambda e: e.record(stream),
              lambda a, b: (b.synchronize(), a.elapsed_time(b))[1])
    return {"graph": graph, "step": graph.replay, "events": events, "first_loss": first,
            "peak": lambda: torch.cuda.max_memory_allocated() - before}


def round_ms(side, steps):
    """Device milliseconds per step of one round: events around `steps` queued steps."""
    new_event, record, elapsed = side["events"]
    start, end = new_event(), new_event()
    record(start)
    for _ in range(steps):
        side["step"]()
    record(end)
    return elapsed(start, end) / steps


def measure(torch, case, precision, steps, rounds):
    ours = minitrain_side(case, precision)
    theirs = torch_side(torch, case, ours["model"], precision)
    times = {"minitrain": [], "torch": []}
    for _ in range(rounds):
        times["minitrain"].append(round_ms(ours, steps))
        times["torch"].append(round_ms(theirs, steps))
    result = {"minitrain_ms": statistics.median(times["minitrain"]), "torch_ms": statistics.median(times["torch"]),
              "minitrain_bytes": ours["bytes"], "torch_bytes": theirs["peak"](), "captured": ours["captured"],
              "first_loss": (ours["first_loss"], theirs["first_loss"])}
    del ours, theirs
    gc.collect()
    torch.cuda.empty_cache()
    return result


def speed_up(fp32, result, key):
    """fp32's time over this result's ("n/a" without an fp32 result of the case)."""
    return "n/a" if fp32 is None else f"{fp32[key] / result[key]:.2f}"


def notes_section(notes):
    return ["Notes:", ""] + [f"- {n}" for n in notes] if notes else []


def main_gpu(torch, cases, precisions, out):
    steps, rounds = arg("--steps", 50), arg("--rounds", 3)
    results, notes, failed = {}, [], []
    for case in cases:
        for precision in precisions:
            try:
                r = results[case.name, precision] = measure(torch, case, precision, steps, rounds)
            except Exception as error:    # one broken case must not cost the other rows of the run
                failed.append(f"{case.name} {precision}: {type(error).__name__}: {error}")
                print(f"FAILED {failed[-1]}", flush=True)
                continue
            ours, theirs = r["first_loss"]
            print(f"{case.name} {precision}: minitrain {r['minitrain_ms']:.3f} ms, torch {r['torch_ms']:.3f} ms, "
                  f"first loss {ours:.5f} / {theirs:.5f}", flush=True)
            if abs(ours - theirs) > LOSS_TOLERANCE[precision] * max(1.0, abs(theirs)):
                notes.append(f"{case.name} {precision}: FIRST LOSSES DISAGREE: minitrain {ours:.6f}, "
                             f"torch {theirs:.6f} (tolerance {LOSS_TOLERANCE[precision]} relative)")
            if not r["captured"]:
                notes.append(f"{case.name} {precision}: minitrain's step was not captured in a CUDA Graph")
    rows = []
    for (name, precision), r in results.items():
        base = results.get((name, "fp32"))
        rows.append([name, CASES[name].batch, precision, f"{r['minitrain_ms']:.3f}", f"{r['torch_ms']:.3f}",
                     f"{r['minitrain_ms'] / r['torch_ms']:.2f}", speed_up(base, r, "minitrain_ms"),
                     speed_up(base, r, "torch_ms"),
                     f"{r['minitrain_bytes'] / 2**20:.1f}", f"{r['torch_bytes'] / 2**20:.1f}",
                     f"{r['first_loss'][0]:.4f} / {r['first_loss'][1]:.4f}"])
    header = ["model", "batch", "precision", "minitrain ms", "torch ms", "mt/torch", "mt speed-up over own fp32",
              "torch speed-up over own fp32", "mt MiB", "torch peak MiB", "first loss mt / torch"]
    text = "\n".join([
        f"# Mixed-precision training step on CUDA ({datetime.date.today()}, {torch.cuda.get_device_name()}, "
        f"torch {torch.__version__}, numpy {np.__version__})",
        "",
        f"Device ms per step: CUDA events around {steps} queued steps of the captured step, median of {rounds} "
        f"interleaved rounds (minitrain, then PyTorch), after {WARMUP_STEPS} warm-up steps.  TF32 off on both sides; "
        "PyTorch: autocast (cache off), GradScaler for fp16, fused SGD, whole step in one CUDA Graph.  "
        "Speed-up over own fp32: that side's fp32 ms / this row's ms.  Memory: PyTorch's peak allocated over "
        "the step's life; minitrain's device state, captured arena and inputs (bench/amp.py).",
        "", markdown_table(header, rows), ""] + notes_section([f"FAILED {f}" for f in failed] + notes)) + "\n"
    report(text, out)
    if failed:
        raise SystemExit(f"{len(failed)} case(s) failed: see the notes")


def main():
    import torch
    chosen = arg("--cases", ",".join(CASES)).split(",")
    unknown = [name for name in chosen if name not in CASES]
    if unknown:
        raise ValueError(f"--cases: unknown {unknown}; known: {list(CASES)}")
    precisions = arg("--precisions", ",".join(PRECISIONS)).split(",")
    if any(p not in PRECISIONS for p in precisions):
        raise ValueError(f"--precisions: each of {list(PRECISIONS)}, got {precisions}")
    cases = [CASES[name] for name in chosen]
    if arg("--device", "cuda") == "cpu":
        main_cpu(torch, cases)
    else:
        main_gpu(torch, cases, precisions, arg("--out", ""))


if __name__ == "__main__":
    main()
