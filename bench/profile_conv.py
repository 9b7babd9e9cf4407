"""A few convolutions of minitrain and PyTorch under PyTorch's profiler (CUPTI: every kernel,
memset, copy and driver call of the process, pycuda's and cuDNN's included).

For each named case: the forward and backward of both, searched (minitrain's conv search,
PyTorch's cudnn.benchmark) before the ranges open, then `--calls` calls of each in a range named
"<side>/<case>/<fwd|bwd>" (side: mt, torch, or own = minitrain with cuDNN hidden; an NVTX range
too, for ncu), the stream drained at both ends of a range.  Prints the algorithm minitrain's
search ranked first for each key, the host time of one minitrain call, and per range the GPU
activities that ran inside it (by time: each range starts and ends with the device idle) and the
synchronizing driver calls; the Chrome trace goes to --trace.

    python bench/profile_conv.py [--cases a,b] [--calls 5] [--tf32] [--trace FILE]
"""
import collections
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from bench_gpu import bound  # noqa: E402
from cases import CONV_CASES, make_inputs  # noqa: E402
from gpu_conv import _minitrain_fns, _torch_fns  # noqa: E402
from minitrain.providers import get_provider  # noqa: E402
from minitrain.providers.cuda.conv import search as conv_search
from minitrain.providers.cuda.libs import cudnn  # noqa: E402


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def in_range(name, fn, calls, sync):
    sync()
    torch.cuda.nvtx.range_push(name)
    with torch.profiler.record_function(name):
        for _ in range(calls):
            fn()
        sync()
    torch.cuda.nvtx.range_pop()


def summarize(trace_path, calls):
    """Per range: GPU activities inside it (count per call, mean us) and synchronizing calls."""
    with open(trace_path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    ranges = [e for e in events if e.get("cat") == "user_annotation" and "/" in e.get("name", "")]
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")]
    api = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    for r in sorted(ranges, key=lambda e: e["ts"]):
        lo, hi = r["ts"], r["ts"] + r["dur"]
        inside = collections.defaultdict(list)
        for e in gpu:
            if lo <= e["ts"] <= hi:
                inside[(e["cat"], e["name"])].append(e["dur"])
        total = sum(sum(v) for v in inside.values()) / calls
        print(f"\n== {r['name']}: GPU busy {total:.1f} us per call, wall {r['dur'] / calls:.1f} us per call")
        for (cat, name), durs in sorted(inside.items(), key=lambda kv: -sum(kv[1])):
            print(f"   {len(durs) / calls:4.1f}x {sum(durs) / len(durs):8.1f} us  {cat:10s} {name[:150]}")
        syncs = collections.Counter(e["name"] for e in api if lo <= e["ts"] <= hi and
                                    any(w in e["name"] for w in ("ynchronize", "Alloc", "Free", "GetInfo", "Memset")))
        if syncs:
            print("   host calls: " + ", ".join(f"{n} x{c}" for n, c in syncs.items()))


def main():
    names = arg("--cases", "resnet_3x3,lenet_conv1,depthwise_3x3").split(",")
    calls = int(arg("--calls", 5))
    tf32 = "--tf32" in sys.argv
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = tf32
    provider = get_provider("cuda").for_session(use_tf32=tf32)
    trace = arg("--trace", "/tmp/conv_trace.json")
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        run_sides(provider, names, calls)
    prof.export_chrome_trace(trace)
    summarize(trace, calls)


def run_sides(provider, names, calls):
    for side in ("mt", "torch", "own"):
        if side == "own":
            show_rankings("mt")
            cudnn.hide("profile of minitrain's own algorithms")
            conv_search.clear_cache()
        for case in [c for c in CONV_CASES if c.name in names]:
            data = make_inputs(case)
            if side == "torch":
                t = {k: torch.from_numpy(v).cuda() for k, v in data.items()}
                fns, sync = _torch_fns(torch, case, t), torch.cuda.synchronize
            else:
                dev = {k: provider.from_numpy(v) for k, v in data.items()}
                fns, sync = _minitrain_fns(bound, provider, case, dev), provider.synchronize
            for direction, fn in zip(("fwd", "bwd"), fns):
                fn()
                fn()
                sync()
                if side != "torch":
                    start = time.perf_counter()
                    for _ in range(20):
                        fn()
                    host = (time.perf_counter() - start) / 20 * 1e6
                    print(f"{side}/{case.name}/{direction}: host {host:.0f} us per call", flush=True)
                in_range(f"{side}/{case.name}/{direction}", fn, calls, sync)
    show_rankings("own")
    cudnn.unhide()


def show_rankings(side):
    for key, ranked in conv_search.rankings().items():
        print(f"{side} {key.op} {key.direction} n={key.n} img={key.geom.img_spatial}: " + ", ".join(
            f"{a.name} ({a.workspace_bytes(key)} B)" for a in ranked[:4]), flush=True)


if __name__ == "__main__":
    main()
