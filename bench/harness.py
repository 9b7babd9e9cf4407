"""Shared timing harness of minitrain's benchmarks.

Peers run in the same process on the same inputs, interleaved round by round (minitrain, then
each peer): 3 warm-up calls, then enough calls to fill `min_time` (at least `min_calls`, by
default 20, at most 400), the median taken per round and the median of the round medians
reported; ratios between peers may be taken per round (`paired_ratio`).  Thread counts are set
before numpy or torch is imported.
"""
import os
import statistics
import sys
import time


def set_threads(n):
    """Pin every runtime (OpenMP, OpenBLAS, MKL, torch) to n threads; call before importing numpy."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)


def threads_from_argv(default=2):
    """Read --threads N from the command line (default 2) and pin every runtime to it."""
    n = default
    if "--threads" in sys.argv:
        n = int(sys.argv[sys.argv.index("--threads") + 1])
    set_threads(n)
    return n


def median_ms(fn, min_time=0.5, warmup=3, min_calls=20, max_calls=400):
    """Median wall time of fn() in milliseconds."""
    for _ in range(warmup):
        fn()
    times = []
    start = time.perf_counter()
    while len(times) < max_calls and (len(times) < min_calls or time.perf_counter() - start < min_time):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def interleaved_rounds(candidates, rounds=3, **timing):
    """Time each candidate (name -> fn, or None when a peer lacks the case) once per round, in
    turn; return name -> the per-round median ms (an empty list for None)."""
    per_round = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, fn in candidates.items():
            if fn is not None:
                per_round[name].append(median_ms(fn, **timing))
    return per_round


def medians(per_round):
    """name -> the median over rounds of interleaved_rounds' result (None where it is empty)."""
    return {name: (statistics.median(v) if v else None) for name, v in per_round.items()}


def interleaved(candidates, rounds=3, **timing):
    """interleaved_rounds' median over rounds per candidate (None where a peer lacks the case)."""
    return medians(interleaved_rounds(candidates, rounds, **timing))


def paired_ratio(slow, fast):
    """Median over rounds of slow[i] / fast[i] (None when either is missing): a round's peers
    run seconds apart at most, so a slow phase of the machine mostly cancels in the ratio."""
    if not slow or not fast:
        return None
    return statistics.median(a / b for a, b in zip(slow, fast))


def optional_torch(threads):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    return torch


def torch_cuda_graph(torch, step, warmup):
    """(graph, first loss): PyTorch's `step` run `warmup` times on a side stream (the first
    one's loss kept), then captured whole in a torch.cuda.CUDAGraph, as PyTorch's CUDA Graphs
    notes describe it; waits for the device before returning."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        first = float(step())
        for _ in range(warmup - 1):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    torch.cuda.synchronize()
    return graph, first


def optional_onnxruntime():
    try:
        import onnx  # noqa: F401
        import onnxruntime
    except ImportError:
        return None
    return onnxruntime


def fmt(v, digits=3):
    return "n/a" if v is None else f"{v:.{digits}g}" if v < 1000 else f"{v:.0f}"


def ratio(a, b):
    return "n/a" if a is None or b is None else f"{a / b:.2f}"


def markdown_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def report(text, out):
    """Print a benchmark's markdown and write it to `out` (a path, its folder made if missing;
    "" writes nothing), saying where."""
    print(text)
    if out:
        path = os.path.abspath(out)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        print(f"wrote {path}", flush=True)
