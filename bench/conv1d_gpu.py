"""The 1D CNN's convolutions on CUDA, algorithm by algorithm: the implicit-GEMM 1-D kernels
(providers/cuda/conv/gemm1d.py) against every other algorithm of the conv search.

For each convolution of bench/cases.py's CNN1D at batch 1024 (conv 1->16 k7 p3 on 1024
positions, 16->32 k5 p2 on 512, 32->64 k3 p1 on 256) and each primitive (forward; forward with
bias and ReLU, FusedConv's key; data gradient, except for the first layer, whose input needs
none; weight gradient), every algorithm that supports the key is run on the same device buffers
and timed with CUDA events, as the search times them: after a warm-up, a spin kernel holds the stream while the host queues
CALLS runs, so only GPU time counts; the median over ROUNDS rounds.  Float32, strict FP32
(no TF32; with --tf32, TF32 on both sides and the TF32 implicit GEMM among mine).  With PyTorch
on CUDA the same primitive of cuDNN (benchmark mode, TF32 as minitrain's) is timed the same way.
The table gives each algorithm's time and TFLOP/s, the fastest of the others and the ratio
other / implicit GEMM (above 1: the implicit GEMM is faster).  Before the table, every
algorithm's time is printed, and the implicit GEMM's at other settings than its instances
(SWEEP: forward / data warps and chunk budgets, the pipelined TF32 kernel's warps, shared bytes
and tiles a block, weight-gradient slice counts).

    python bench/conv1d_gpu.py [--batch 1024] [--rounds 7] [--no-sweep] [--tf32]
"""
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402
import pycuda.driver as driver  # noqa: E402

from minitrain.ops.conv_geometry import geometry_for  # noqa: E402
from minitrain.providers import get_provider  # noqa: E402
from minitrain.providers.cuda.conv import kernels as conv  # noqa: E402
from minitrain.providers.cuda.conv import search  # noqa: E402
from minitrain.providers.cuda.conv.gemm1d import Gemm1d  # noqa: E402
from minitrain.providers.cuda.conv.gemm1d_tf32 import Gemm1dTf32  # noqa: E402

LAYERS = (("conv1 1->16 k7", 1, 16, 1024, 7, 3), ("conv2 16->32 k5", 16, 32, 512, 5, 2),
          ("conv3 32->64 k3", 32, 64, 256, 3, 1))
CALLS = 20
HOLD = 5e-3          # seconds the spin kernel holds the stream while the runs are queued
MINE = "implicit_gemm_1d"
RELU = (0, 0.0, 0.0)      # FusedConv's activation code, alpha and beta for Relu
SWEEP = [family(f"sweep {family.family} warps {warps} budget {budget >> 10}K slices {slices}", warps, budget, slices)
         for family in (Gemm1d, Gemm1dTf32)
         for warps, budget, slices in ((2, 6 << 10, 128), (4, 24 << 10, 512), (8, 16 << 10, 2048),
                                       (8, 48 << 10, 64))]
SWEEP += [Gemm1dTf32(f"sweep {Gemm1dTf32.family} pipelined warps {warps} budget {budget >> 10}K tiles {tiles} "
                     f"slices {slices}", warps, budget, slices, pipeline_tiles=tiles)
          for warps, budget, tiles, slices in ((2, 48 << 10, 8, 132), (4, 32 << 10, 16, 264), (8, 48 << 10, 2, 792),
                                               (8, 48 << 10, 32, 1584))]
PRIMITIVES = (("forward", None), ("forward+relu", RELU), ("data", None), ("weight", None))


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def median_ms(provider, run, rounds):
    """GPU milliseconds per call of `run`, queued behind a spin kernel."""
    for _ in range(3):
        run()
    provider.synchronize()
    means = []
    for _ in range(rounds):
        start, end = driver.Event(), driver.Event()
        provider.hold(HOLD)
        start.record(provider.stream)
        for _ in range(CALLS):
            run()
        end.record(provider.stream)
        end.synchronize()
        means.append(end.time_since(start) / CALLS)
    return statistics.median(means)


def primitive_buffers(provider, direction, activation, n, cin, cout, length, k, rng):
    """The device buffers of one primitive (search.execute's order: inputs, then the output)."""
    def device(*shape):
        return provider.from_numpy(rng.standard_normal(shape).astype(np.float32))
    x, w, y = device(n, cin, length), device(cout, cin, k), device(n, cout, length)
    if direction == "forward":
        return x, w, None if activation is None else device(cout), y
    if direction == "data":
        return y, w, None, x
    return y, x, device(cout, cin, k)


def torch_runner(torch, direction, n, cin, cout, length, k, pad):
    """cuDNN's primitive through aten (None without PyTorch on CUDA)."""
    x = torch.randn(n, cin, length, device="cuda")
    w = torch.randn(cout, cin, k, device="cuda")
    dy = torch.randn(n, cout, length, device="cuda")
    b = torch.randn(cout, device="cuda")
    mask = {"forward": None, "forward+relu": None, "data": [True, False, False],
            "weight": [False, True, False]}[direction]
    if direction == "forward+relu":
        return lambda: torch.relu_(torch.ops.aten.convolution(x, w, b, [1], [pad], [1], False, [0], 1))
    if mask is None:
        return lambda: torch.ops.aten.convolution(x, w, None, [1], [pad], [1], False, [0], 1)
    return lambda: torch.ops.aten.convolution_backward(dy, x, w, None, [1], [pad], [1], False, [0], 1, mask)


def torch_ms(torch, run, rounds):
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    means = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(50_000_000)
        start.record()
        for _ in range(CALLS):
            run()
        end.record()
        end.synchronize()
        means.append(start.elapsed_time(end) / CALLS)
    return statistics.median(means)


def optional_torch(tf32):
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    return torch


def main():
    n, rounds, sweep = int(arg("--batch", 1024)), int(arg("--rounds", 7)), "--no-sweep" not in sys.argv
    tf32 = "--tf32" in sys.argv
    provider = get_provider("cuda")
    provider.use_tf32 = tf32
    torch = optional_torch(tf32)
    rng = np.random.default_rng(0)
    math = "TF32" if tf32 else "strict FP32"
    print(f"device: {provider.device.name()}, batch {n}, float32 {math}, {CALLS} calls x {rounds} rounds")
    header = ["layer", "primitive", "GFLOP", "implicit GEMM ms", "TFLOP/s", "best other", "other ms", "other / mine"]
    if torch is not None:
        header += ["cuDNN (torch) ms", "torch / mine"]
    rows, mine_total, other_total = [], 0.0, 0.0
    for label, cin, cout, length, k, pad in LAYERS:
        geom = geometry_for("conv", "Conv", (n, cin, length), (cout, cin, k), {"pads": [pad, pad]})
        for label_direction, activation in PRIMITIVES:
            direction = label_direction.split("+")[0]
            if direction == "data" and cin == 1:
                continue
            key = search.ConvKey("Conv", direction, n, geom, "float32", tf32, ("Y",), activation)
            buffers = primitive_buffers(provider, direction, activation, n, cin, cout, length, k, rng)
            listed = conv.ALGORITHMS + conv.FAMILIES if activation is None else conv.WITH_ACTIVATION
            found = search.candidates(provider, key, search.expand(provider, key, listed))
            if sweep:
                found += [a for a in SWEEP if a.supports(key)]
            times = {}
            for algorithm in found:
                try:
                    times[algorithm.name] = median_ms(provider, lambda: algorithm.run(provider, key, buffers), rounds)
                except search.RECOVERABLE as e:
                    print(f"  {label} {label_direction}: {algorithm.name} failed: {e}")
            gflop = 2.0 * n * cout * length * cin * k / 1e9
            mine = {name: ms for name, ms in times.items() if name.startswith(MINE)}
            others = {name: ms for name, ms in times.items() if not name.startswith((MINE, "sweep"))}
            for name, ms in sorted(times.items(), key=lambda item: item[1]):
                print(f"  {label} {label_direction}: {name} {ms:.4f} ms ({gflop / ms:.1f} TFLOP/s)")
            best_mine = min(mine.items(), key=lambda item: item[1], default=(None, float("nan")))
            best_other = min(others.items(), key=lambda item: item[1], default=("-", float("nan")))
            if direction != "forward" or activation is not None:   # the step runs FusedConv's forward
                mine_total += best_mine[1]
                other_total += best_other[1]
            row = [label, label_direction, f"{gflop:.2f}", f"{best_mine[1]:.4f} ({best_mine[0]})",
                   f"{gflop / best_mine[1]:.1f}", best_other[0], f"{best_other[1]:.4f}",
                   f"{best_other[1] / best_mine[1]:.2f}"]
            if torch is not None:
                t = torch_ms(torch, torch_runner(torch, label_direction, n, cin, cout, length, k, pad), rounds)
                row += [f"{t:.4f}", f"{t / best_mine[1]:.2f}"]
            rows.append(row)
            print(" | ".join(row), flush=True)
    print()
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(f"\nsum of a training step's primitives (forward+relu, data, weight): implicit GEMM {mine_total:.4f} ms, "
          f"best others {other_total:.4f} ms")


if __name__ == "__main__":
    main()
