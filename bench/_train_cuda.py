"""train.py --device cuda: minitrain's training step (whole step captured in a CUDA Graph)
against PyTorch eager and PyTorch with the same step captured in one CUDA Graph, in one process,
strict FP32 and TF32.  PyTorch's capture: five warm-up steps on a side stream, then
`torch.cuda.graph(g)` around forward, loss, backward and the SGD update; a step is `g.replay()`.

Device time per step: CUDA events around `steps` steps queued back to back (no host wait
inside), median of `rounds` rounds.  minitrain is fed device-resident batches like PyTorch
(its host-batch time, through the pinned staging, is a column too).  Peak device memory:
torch.cuda.max_memory_allocated for PyTorch; for minitrain the session's device state
(parameters, momentum), the captured step's arena and its input tensors.  Also one epoch of
examples/cnn1d_mnist1d.py on the GPU and on the CPU.

    python bench/train.py --device cuda [--steps 200] [--rounds 5] [--out bench/results/train_cuda.md]
"""
import datetime
import statistics
import time

import minitrain
from minitrain import nn, optim
from minitrain.training import TrainingSession

from cases import MODEL_CASES, make_inputs, with_batch


HOLD_SECONDS = 0.01
SPIN_CYCLES = 20_000_000    # torch.cuda._sleep's hold: about HOLD_SECONDS at the H100's clocks
HOST_STEPS = 2      # steps queued behind a held GPU: minitrain's double-buffered inputs let the host run 2 ahead


def _device_ms(stream_events, step, steps, rounds):
    """Median over rounds of the device milliseconds per step between two events."""
    start_event, end_event, record, sync = stream_events
    times = []
    for _ in range(rounds):
        start = start_event()
        record(start)
        for _ in range(steps):
            step()
        end = end_event()
        record(end)
        times.append(sync(start, end) / steps)
    return statistics.median(times)


def _host_ms(hold, synchronize, step, rounds):
    """Median over rounds (5 per round asked) of the host milliseconds per step (Python and
    launches): HOST_STEPS steps queued while a spin kernel holds the GPU, so that the host never
    waits for it."""
    times = []
    for _ in range(5 * rounds):
        synchronize()
        hold()
        begin = time.perf_counter()
        for _ in range(HOST_STEPS):
            step()
        times.append((time.perf_counter() - begin) * 1e3 / HOST_STEPS)
        synchronize()
    return statistics.median(times)


def minitrain_session(case, tf32, minitrain_model):
    minitrain.random.seed(0)
    model = minitrain_model(case)
    return model, TrainingSession(model, nn.CrossEntropyLoss(), optim.SGD(case.lr), input_shape=case.input_shape[1:],
                                  device="cuda", use_tf32=tf32)


def minitrain_times(case, tf32, minitrain_model, steps, rounds):
    import pycuda.driver as driver
    model, session = minitrain_session(case, tf32, minitrain_model)
    provider = session._provider
    data = make_inputs(case)
    x, y = provider.from_numpy(data["x"]), provider.from_numpy(data["labels"])
    events = (driver.Event, driver.Event, lambda e: e.record(provider.stream),
              lambda a, b: (b.synchronize(), b.time_since(a))[1])
    for _ in range(5):
        session.train_step(x, y)
    device_ms = _device_ms(events, lambda: session.train_step(x, y, wait=False), steps, rounds)
    host_ms = _host_ms(lambda: provider.hold(HOLD_SECONDS), provider.synchronize,
                       lambda: session.train_step(x, y, wait=False), rounds)
    host_batch_ms = _device_ms(events, lambda: session.train_step(data["x"], data["labels"], wait=False), steps, rounds)
    graphs = session._train.graphs
    arena = sum(a for a, _ in graphs.memory().values()) if graphs else 0
    state = sum(v.nbytes for v in session.state._native.values())
    inputs = sum(t.nbytes for sig in graphs.signatures.values() for t in (sig.inputs or {}).values()) if graphs else 0
    captured = bool(graphs and graphs.stats["captures"])
    nodes = sum(sig.graph.node_count for sig in graphs.signatures.values() if sig.graph is not None) if graphs else 0
    return model, {"device_ms": device_ms, "host_ms": host_ms, "host_batch_ms": host_batch_ms,
                   "memory": state + arena + inputs,
                   "captured": captured, "arena": arena, "nodes": nodes,
                   "allocations": sum(t for _, t in graphs.memory().values()) if graphs else 0}


def torch_times(torch, case, model, tf32, torch_model, steps, rounds, graph):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    tmodel = torch_model(torch, case, model).cuda()
    opt = torch.optim.SGD(tmodel.parameters(), lr=case.lr)
    data = make_inputs(case)
    x, y = torch.from_numpy(data["x"]).cuda(), torch.from_numpy(data["labels"]).cuda()

    def eager():
        opt.zero_grad(set_to_none=False)
        loss = torch.nn.functional.cross_entropy(tmodel(x), y)
        loss.backward()
        opt.step()
        return loss
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(5):
            eager()
    torch.cuda.current_stream().wait_stream(side)
    step = eager
    if graph:
        g = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=False)
        with torch.cuda.graph(g):
            eager()
        step = g.replay
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    stream = torch.cuda.current_stream()
    events = (lambda: torch.cuda.Event(enable_timing=True), lambda: torch.cuda.Event(enable_timing=True),
              lambda e: e.record(stream), lambda a, b: (b.synchronize(), a.elapsed_time(b))[1])
    ms = _device_ms(events, step, steps, rounds)
    host_ms = _host_ms(lambda: torch.cuda._sleep(SPIN_CYCLES), torch.cuda.synchronize, step, rounds)
    return {"ms": ms, "host_ms": host_ms, "memory": torch.cuda.max_memory_allocated()}


def epoch_seconds(device):
    """Seconds of the training part of one epoch of examples/cnn1d_mnist1d (its model, data and
    batch size; the second of two epochs, so compilation and capture are behind)."""
    from minitrain.data import ArrayDataset, DataLoader, load_mnist1d
    from minitrain.training import fit
    from minitrain.cli import load_example
    example = load_example("cnn1d_mnist1d")
    data = load_mnist1d()
    minitrain.random.seed(0)
    session = TrainingSession(example.build_model(), nn.CrossEntropyLoss(), optim.AdamW(1e-3),
                              input_shape=(1, 40), device=device)
    loader = DataLoader(ArrayDataset(data.x_train, data.y_train), example.DEFAULTS["batch_size"], shuffle=True)
    history = fit(session, loader, epochs=2, progress=False, log=lambda *_: None)
    return len(loader) / history[-1]["steps_per_s"]


def main_gpu(torch, minitrain_model, torch_model, argv_value, out):
    steps, rounds = argv_value("--steps", 200), argv_value("--rounds", 5)
    rows = []
    for mode in ("fp32", "tf32"):
        for base in MODEL_CASES:
            for batch in (64, 1024):
                case = with_batch(base, batch)
                model, ours = minitrain_times(case, mode == "tf32", minitrain_model, steps, rounds)
                eager = torch_times(torch, case, model, mode == "tf32", torch_model, steps, rounds, graph=False)
                graph = torch_times(torch, case, model, mode == "tf32", torch_model, steps, rounds, graph=True)
                rows.append([mode, case.name, f"{ours['device_ms']:.3f}", f"{ours['host_ms']:.3f}",
                             f"{ours['host_batch_ms']:.3f}", f"{eager['ms']:.3f}", f"{graph['ms']:.3f}",
                             f"{graph['host_ms']:.3f}", f"{ours['device_ms'] / graph['ms']:.2f}",
                             f"{ours['device_ms'] / eager['ms']:.2f}", f"{ours['memory'] / 2**20:.2f}",
                             f"{graph['memory'] / 2**20:.2f}", f"{eager['memory'] / 2**20:.2f}",
                             f"{ours['arena'] / 2**20:.2f} / {ours['allocations'] / 2**20:.2f}",
                             str(ours["nodes"]) if ours["captured"] else "not captured"])
                print(" | ".join(rows[-1]), flush=True)
    header = ["mode", "model", "minitrain ms", "minitrain host ms", "minitrain host-batch ms", "torch eager ms",
              "torch graph ms", "torch graph host ms",
              "mt/graph", "mt/eager", "mt MiB", "torch graph MiB", "torch eager MiB", "arena/alloc sum MiB", "graph nodes"]
    start = time.perf_counter()
    gpu, cpu = epoch_seconds("cuda"), epoch_seconds("cpu")
    lines = [f"# Training step on CUDA ({datetime.date.today()}, {torch.cuda.get_device_name()}, torch {torch.__version__})",
             "", f"Device ms per step: CUDA events around {steps} queued steps, median of {rounds} rounds; "
             f"host ms: the host's time per step (Python and launches), {HOST_STEPS} steps queued behind a "
             "held GPU; where it reaches the device time, the host bounds the step.", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]
    lines += ["", f"cnn1d_mnist1d epoch (training part): GPU {gpu:.3f} s, CPU {cpu:.3f} s, CPU/GPU {cpu / gpu:.1f}x "
              f"({time.perf_counter() - start:.0f} s to measure)"]
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text)
