"""Where a convolution's time goes: minitrain's forward, data gradient, weight gradient and bias
gradient timed apart, beside PyTorch's forward and its convolution_backward asked for dX, dW and
dB one at a time, interleaved in one process.

With --threads 1 every call runs on the calling thread (minitrain's OpenMP and torch both), so
the timings are that thread's CPU time: a co-tenant process that takes the core away for a while
does not count, which keeps the splits comparable on a shared machine.  With more threads they
are wall times.  Each row is the best of --rounds rounds of the median of >= --calls calls.
(torch 2.13's CPU convolution_backward asked for one output took about its whole backward's time
in most cases here, so its dX / dW / dB rows bound the part from above.)

    python bench/conv_split.py [--threads 1] [--rounds 5] [--calls 20] [--cases a,b]
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import optional_torch, threads_from_argv  # noqa: E402

THREADS = threads_from_argv(default=1)

import numpy as np  # noqa: E402

from cases import CONV_CASES, make_inputs  # noqa: E402
from minitrain.ops.conv_geometry import geometry_for  # noqa: E402
from minitrain.providers.cpu import conv as cpu_conv  # noqa: E402


def arg(name, default):
    return type(default)(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


CLOCK = time.thread_time if THREADS == 1 else time.perf_counter


def median_ms(fn, calls):
    for _ in range(2):
        fn()
    times = []
    for _ in range(calls):
        t0 = CLOCK()
        fn()
        times.append(CLOCK() - t0)
    return 1e3 * statistics.median(times)


def minitrain_parts(case, inp):
    """name -> callable: the three primitives and the bias sum, as ConvGrad calls them."""
    attrs = case.onnx_attrs()
    kind = "transpose" if case.transposed else "conv"
    x, w, b, dy = inp["x"], inp["w"], inp["b"], inp["dy"]
    geom = geometry_for(kind, "bench", x.shape, w.shape, attrs)
    if case.transposed:
        return {"fwd": lambda: cpu_conv.conv_data_grad(x, w, b, geom, "bench"),
                "dX": lambda: cpu_conv.conv_forward(dy, w, None, geom, "bench"),
                "dW": lambda: cpu_conv.conv_weight_grad(x, dy, w.shape, geom, "bench"),
                "dB": lambda: cpu_conv.bias_grad(dy)}
    return {"fwd": lambda: cpu_conv.conv_forward(x, w, b, geom, "bench"),
            "dX": lambda: cpu_conv.conv_data_grad(dy, w, None, geom, "bench"),
            "dW": lambda: cpu_conv.conv_weight_grad(dy, x, w.shape, geom, "bench"),
            "dB": lambda: cpu_conv.bias_grad(dy)}


def torch_parts(torch, case, inp):
    t = {k: torch.from_numpy(v) for k, v in inp.items()}
    args = (list(case.stride), list(case.pad), list(case.dilation), case.transposed,
            list(case.output_padding), case.groups)

    def fwd():
        with torch.no_grad():
            return torch.ops.aten.convolution(t["x"], t["w"], t["b"], *args)

    def back(mask):
        def run():
            with torch.no_grad():
                return torch.ops.aten.convolution_backward(t["dy"], t["x"], t["w"], [case.C_out], *args, mask)
        return run
    return {"fwd": fwd, "dX": back([True, False, False]), "dW": back([False, True, False]),
            "dB": back([False, False, True])}


def main():
    torch = optional_torch(THREADS)
    rounds, calls = arg("--rounds", 5), arg("--calls", 20)
    wanted = [c for c in arg("--cases", "").split(",") if c]
    print(f"{THREADS} thread(s), {'thread CPU' if THREADS == 1 else 'wall'} time, best of {rounds} rounds, ms")
    print("| case | part | GFLOP | minitrain | GF/s | torch | GF/s | mt/torch |")
    print("|---|---|---|---|---|---|---|---|")
    for case in CONV_CASES:
        if wanted and case.name not in wanted:
            continue
        inp = make_inputs(case)
        mt = minitrain_parts(case, inp)
        th = torch_parts(torch, case, inp) if torch else {}
        best = {}
        for _ in range(rounds):
            for side, parts in (("mt", mt), ("torch", th)):
                for part, fn in parts.items():
                    ms = median_ms(fn, calls)
                    best[side, part] = min(best.get((side, part), ms), ms)
        flops = {"fwd": case.fwd_flops, "dX": case.fwd_flops, "dW": case.fwd_flops, "dB": np.prod(case.y_shape)}
        for part in mt:
            a, b = best["mt", part], best.get(("torch", part))
            gf = flops[part] / 1e9
            tb = f"{b:.3g} | {gf / b * 1e3:.0f}" if b else "n/a | n/a"
            r = f"{a / b:.2f}" if b else "n/a"
            print(f"| {case.name} | {part} | {gf:.3f} | {a:.3g} | {gf / a * 1e3:.0f} | {tb} | {r} |", flush=True)


if __name__ == "__main__":
    main()
