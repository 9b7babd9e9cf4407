"""The GPU kernels against PyTorch on the same device, in one process.

Runs bench/cases.py's pooling and activation gradients (POOL_CASES, ACT_CASES), GEMM_CASES and
CONV_CASES (_gpu_conv.py: strict FP32 and TF32, with cuDNN and without) on the CUDA provider
and with PyTorch's CUDA kernels on the same float32 inputs, checks that both agree, and times
each with CUDA events after a warm-up (the median over rounds of the mean time per call over a
batch of calls).  Memory-bound rows report effective GB/s (tensors
read and written once, cases.py's convention) and their fraction of the device's copy
bandwidth, measured in the same run as a device-to-device copy of 256 MiB (bytes read plus
written).  GEMM rows report GFLOP/s in strict FP32 (TF32 off on both sides).  The host cost of
one run_node call on CUDA (a ReluGrad on a 1024-element tensor, device tensors in and out) is
timed against torch's eager op overhead on the same tensor.

minitrain is timed through nodes bound once, as the Executor runs them (the kernel's Python
side and output allocation from the session's pool included).

    python bench/gpu_kernels.py [--rounds 7] [--sections pool_act,gemm,host,conv] [--cases a,b]
                                [--out bench/results/gpu_kernels.md]

(`python bench/conv.py --device cuda` and `python bench/pool_activation.py --device cuda` run
its conv and pool_act sections alone.)

Targets: each elementwise gradient at >= 90% of PyTorch's GB/s, SoftmaxGrad/LogSoftmaxGrad and
both pool gradients at >= 100%, Gemm at >= 95% of torch.matmul.
"""
import datetime
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import minitrain  # noqa: E402
from pool_activation import ACT_GRAD_OPS, torch_act_grad  # noqa: E402
from cases import ACT_CASES, GEMM_CASES, POOL_CASES, make_inputs  # noqa: E402
from _gpu_conv import CONV_CALLS, conv_section  # noqa: E402
from harness import markdown_table  # noqa: E402
from minitrain.binding import bind_node  # noqa: E402
from minitrain.ops.schema import TensorType  # noqa: E402
from minitrain.providers import get_provider  # noqa: E402

MS = "com.microsoft"
CALLS = 50                  # calls per timed batch
ELEMENTWISE = {"relu_grad", "sigmoid_grad", "tanh_grad", "quickgelu_grad", "leakyrelu_grad"}


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


class Timer:
    """GPU time per call of a peer's kernels, from CUDA events on the stream the peer queues on.

    Before each batch of calls a spin kernel holds that stream for SPIN_CYCLES, long enough
    for the host to queue the whole batch behind it, so the events bracket the kernels' own
    time, not the host's cost of launching them (reported apart, in the host-cost table)."""
    SPIN_CYCLES = 40_000_000

    def __init__(self, torch, provider, rounds):
        from pycuda.compiler import SourceModule
        self.torch, self.provider, self.rounds = torch, provider, rounds
        source = ('extern "C" __global__ void spin(long long cycles) '
                  '{ long long start = clock64(); while (clock64() - start < cycles) {} }')
        self._spin = SourceModule(source, no_extern_c=True).get_function("spin")

    def minitrain_ms(self, fn, calls=CALLS):
        import pycuda.driver as driver
        stream = self.provider.stream
        return self._median(fn, calls, lambda: self._spin(np.int64(self.SPIN_CYCLES), block=(1, 1, 1), grid=(1, 1),
                                                   stream=stream),
                            lambda: driver.Event(), lambda e: e.record(stream),
                            lambda a, b: (b.synchronize(), a.time_till(b))[1])

    def torch_ms(self, fn, calls=CALLS):
        torch = self.torch
        return self._median(fn, calls, lambda: torch.cuda._sleep(self.SPIN_CYCLES),
                            lambda: torch.cuda.Event(enable_timing=True), lambda e: e.record(),
                            lambda a, b: (b.synchronize(), a.elapsed_time(b))[1])

    def _median(self, fn, calls, spin, event, record, elapsed):
        for _ in range(5):
            fn()
        self.provider.synchronize()
        self.torch.cuda.synchronize()
        means = []
        for _ in range(self.rounds):
            start, end = event(), event()
            spin()
            record(start)
            for _ in range(calls):
                fn()
            record(end)
            means.append(elapsed(start, end) / calls)
        return statistics.median(means)


def bound(provider, op, arrays, attrs, domain="", output_shapes=None):
    """A node bound once, called as the Executor calls it, on device tensors: its first output
    (all of them when it has several)."""
    node, _ = bind_node(op, [TensorType(np.dtype(a.dtype), tuple(a.shape)) for a in arrays], attrs,
                        domain=domain, opset=17 if not domain else 1, provider=provider)
    if len(node.wanted) > 1:
        return lambda: node.run(provider, arrays, output_shapes)
    return lambda: node.run(provider, arrays, output_shapes)[0]


def copy_bandwidth(torch, timer):
    """GB/s of a device-to-device copy of 256 MiB, counting bytes read and written."""
    src = torch.empty(64 << 20, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    ms = timer.torch_ms(lambda: dst.copy_(src))
    return 2 * src.numel() * 4 / ms / 1e6


def pool_act_rows(torch, provider, timer, copy_gbs):
    F, aten = torch.nn.functional, torch.ops.aten
    rows = []
    for case in POOL_CASES + ACT_CASES:
        data = make_inputs(case)
        dev = {k: provider.from_numpy(v) for k, v in data.items()}
        t = {k: torch.from_numpy(v).cuda() for k, v in data.items()}
        if case.kind == "pool":
            attrs = case.onnx_attrs()
            k, s, p = list(case.kernel), list(case.stride), list(case.pad)
            if case.op == "max":
                _, indices = minitrain.run_node("MaxPool", [dev["x"]], attrs=attrs, provider=provider)
                mine = bound(provider, "MaxPoolGrad", [dev["dy"], indices], attrs, output_shapes={"dX": case.x_shape})
                _, tind = F.max_pool2d(t["x"], k, s, p, return_indices=True)
                theirs = lambda: aten.max_pool2d_with_indices_backward(t["dy"], t["x"], k, s, p, [1, 1], False, tind)  # noqa: E731,E501
            else:
                mine = bound(provider, "AveragePoolGrad", [dev["dy"]], attrs, output_shapes={"dX": case.x_shape})
                theirs = lambda: aten.avg_pool2d_backward(t["dy"], t["x"], k, s, p, False,  # noqa: E731
                                                          case.count_include_pad, None)
            nbytes = case.bwd_bytes
        else:
            op, reads, attrs = ACT_GRAD_OPS[case.op]
            mine = bound(provider, op, [dev["dy"], dev[reads]], attrs, domain=MS)
            theirs = torch_act_grad(torch, case, t)
            nbytes = case.bwd_bytes
        np.testing.assert_allclose(provider.to_numpy(mine()), theirs().cpu().numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=case.name)
        ms_mine, ms_torch = timer.minitrain_ms(mine), timer.torch_ms(theirs)
        gbs_mine, gbs_torch = nbytes / ms_mine / 1e6, nbytes / ms_torch / 1e6
        target = 0.9 if case.name in ELEMENTWISE else 1.0
        ratio = gbs_mine / gbs_torch
        rows.append([case.name, f"{ms_mine:.4f}", f"{gbs_mine:.0f}", f"{gbs_mine / copy_gbs:.0%}", f"{ms_torch:.4f}",
                     f"{gbs_torch:.0f}", f"{ratio:.2f}", f">= {target:.2f}", "met" if ratio >= target else "missed"])
    return rows


def gemm_rows(torch, provider, timer):
    rows = []
    for case in GEMM_CASES:
        data = make_inputs(case)
        a, b = provider.from_numpy(data["a"]), provider.from_numpy(data["b"])
        ta, tb = torch.from_numpy(data["a"]).cuda(), torch.from_numpy(data["b"]).cuda()
        mine = bound(provider, "MatMul", [a, b], {})
        theirs = lambda: torch.matmul(ta, tb)  # noqa: E731
        np.testing.assert_allclose(provider.to_numpy(mine()), theirs().cpu().numpy(), rtol=1e-3, atol=1e-3)
        ms_mine, ms_torch = timer.minitrain_ms(mine), timer.torch_ms(theirs)
        ratio = ms_torch / ms_mine
        rows.append([case.name, f"{case.M}x{case.N}x{case.K}", f"{ms_mine:.4f}", f"{case.flops / ms_mine / 1e6:.0f}",
                     f"{ms_torch:.4f}", f"{case.flops / ms_torch / 1e6:.0f}", f"{ratio:.2f}", ">= 0.95",
                     "met" if ratio >= 0.95 else "missed"])
    return rows


def host_cost_rows(torch, provider):
    """Microseconds of host time per call, the device kept busy-free (tiny tensors)."""
    x = np.random.default_rng(0).standard_normal(1024).astype(np.float32)
    dev_dy, dev_x = provider.from_numpy(x), provider.from_numpy(x)
    t_dy, t_x = torch.from_numpy(x).cuda(), torch.from_numpy(x).cuda()
    calls = {
        "run_node (ReluGrad, device tensors)": lambda: minitrain.run_node("ReluGrad", [dev_dy, dev_x], domain=MS,
                                                                         provider=provider),
        "bound node (as the Executor runs it)": bound(provider, "ReluGrad", [dev_dy, dev_x], {}, domain=MS),
        "torch eager threshold_backward": lambda: torch.ops.aten.threshold_backward(t_dy, t_x, 0),
    }
    rows = []
    for name, fn in calls.items():
        for _ in range(100):
            fn()
        times = []
        for _ in range(7):
            start = time.perf_counter()
            for _ in range(1000):
                fn()
            times.append((time.perf_counter() - start) / 1000 * 1e6)
            provider.synchronize()
            torch.cuda.synchronize()
        rows.append([name, f"{statistics.median(times):.1f}"])
    return rows


def main(sections=None):
    """Run the named sections (default: --sections, else all) and print the report."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    sections = sections or arg("--sections", "pool_act,gemm,host,conv").split(",")
    rounds = int(arg("--rounds", 7))
    provider = get_provider("cuda").for_session()
    timer = Timer(torch, provider, rounds)
    device = torch.cuda.get_device_name()
    copy_gbs = copy_bandwidth(torch, timer)
    started = time.time()
    lines = [
        f"# GPU benchmark: minitrain's CUDA provider against PyTorch on {device}", "",
        f"{datetime.date.today()}, `python bench/gpu_kernels.py --sections {','.join(sections)}`, "
        f"PyTorch {torch.__version__}, GPU time from CUDA events (each batch of calls queued behind a spin kernel, "
        f"so host launch cost is excluded; it is the host-cost table), median of {timer.rounds} rounds of {CALLS} "
        f"calls ({CONV_CALLS} for convolutions) after warm-up, float32, TF32 off unless a table says otherwise; "
        f"the device-to-device copy moved {copy_gbs:.0f} GB/s (read + written) in the same run.", "",
    ]
    if "pool_act" in sections:
        lines += ["## Pooling and activation gradients (GB/s = tensors read and written once / time)", "",
                  markdown_table(["case", "minitrain ms", "GB/s", "of copy", "torch ms", "torch GB/s",
                                  "minitrain/torch GB/s", "target", ""],
                                 pool_act_rows(torch, provider, timer, copy_gbs)), ""]
    if "gemm" in sections:
        lines += ["## GEMM (cuBLAS both; strict FP32)", "",
                  markdown_table(["case", "shape", "minitrain ms", "GF/s", "torch ms", "torch GF/s",
                                  "torch/minitrain time", "target", ""], gemm_rows(torch, provider, timer)), ""]
    if "host" in sections:
        lines += ["## Host cost of one call (microseconds; 1024 float32 elements, nothing waits for the device)", "",
                  markdown_table(["call", "us"], host_cost_rows(torch, provider)), ""]
    if "conv" in sections:
        cases = arg("--cases", None)
        lines += ["## Convolutions (x = torch time / minitrain time; cudnn.benchmark on for torch)", ""]
        lines += conv_section(torch, lambda tf32: get_provider("cuda").for_session(use_tf32=tf32),
                              lambda p: Timer(torch, p, rounds), bound, cases.split(",") if cases else None)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    lines.append(f"({time.time() - started:.0f} s)")
    text = "\n".join(lines)
    print(text)
    out = arg("--out", None)
    if out:
        with open(out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
