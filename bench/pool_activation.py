"""Pooling and activation kernels: minitrain vs PyTorch vs onnxruntime-training, side by side.

Runs the pooling cases below (bench/cases.py's POOL_CASES, whose gradients were the first
targets, plus the forward and backward pooling layers of the LeNet-5 and 1D CNN training
steps) and ACT_CASES in one process, interleaved round by round (bench/harness.py), and reports
effective GB/s: bytes of the tensors read and written once (X, Y and int64 Indices forward;
dY, Indices and dX backward).  minitrain is timed through nodes bound once, as the Executor runs
them (the kernel's Python side and output allocation included, run_node's per-call schema
binding not); PyTorch through the aten kernels (MaxPool forward: max_pool1d/2d with
return_indices=True); ONNX Runtime through single-node models bound once with IOBinding (its
gradient kernels are single-threaded).  Every peer's output is checked against minitrain's
before timing (MaxPool's indices too, after converting torch's per-plane indices).  The
activation rows also time STREAM's Add over arrays of their size (bench/roofline.py): the
ceiling of a kernel reading two arrays and writing a third on this machine.

    python bench/pool_activation.py [--threads 2] [--rounds 15] [--cases a,b]
                                    [--out bench/results/pool_activation.md]
    python bench/pool_activation.py --device cuda [--rounds 7]    (gpu_kernels.py's pool_act section)

Rounds are short (ROUND_TIME of calls per peer) and many, and the speed ratios are the median
of the per-round ratios: this guest's slow phases last seconds, and a peer timed in one while
the other was not skewed whole-run medians by 10-30%.

Targets (with 2 threads): >= 35 GB/s on the gradients and >= 20 GB/s on MaxPool forward, no
slower than PyTorch, and >= 3x faster than ORT's ReluGrad, LeakyReluGrad, LogSoftmaxGrad,
MaxPoolGrad and AveragePoolGrad.  A row slower than PyTorch says how much, and where it has
one, how close both peers came to STREAM Add's GB/s.
"""
import datetime
import os
import platform
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import (fmt, interleaved_rounds, markdown_table, medians, optional_onnxruntime,  # noqa: E402
                     optional_torch, paired_ratio, threads_from_argv)

THREADS = threads_from_argv(2) if __name__ == "__main__" else int(os.environ.get("OMP_NUM_THREADS", 2))

import numpy as np  # noqa: E402

import minitrain  # noqa: E402
from cases import ACT_CASES, POOL_CASES, PoolCase, make_inputs  # noqa: E402
from roofline import build_stream_add, stream_add_case  # noqa: E402
from minitrain.binding import bind_node  # noqa: E402
from minitrain.ops.schema import TensorType  # noqa: E402
from minitrain.providers import get_provider  # noqa: E402

MS = "com.microsoft"
ROUND_TIME = 0.1            # seconds of calls per peer and round (at least 5 calls)
TARGET_GBS = 35.0           # gradients and activations
TARGET_FWD_GBS = 20.0       # MaxPool forward with Indices
ORT_3X = {"relu_grad", "leakyrelu_grad", "logsoftmax_grad", "maxpool_2x2", "avgpool_3x3_s1_p1"}
# the rows the targets are set for; the others (forward passes, training-step shapes) are
# judged against the same figures but reported apart
TARGET_RUNS = {case.name for case in POOL_CASES} | {case.name for case in ACT_CASES}

# (case, pass): POOL_CASES' gradients first, then the pooling layers of the training steps
# (train.py): LeNet-5's two 2x2 max pools, the 1D CNN's two k2 max pools and its
# global-style average pool (kernel 256 over 256 steps)
LENET_POOL1 = PoolCase("lenet_pool1", "max", 64, 6, (28, 28), 2, 2)
LENET_POOL2 = PoolCase("lenet_pool2", "max", 64, 16, (10, 10), 2, 2)
CNN1D_POOL1 = PoolCase("cnn1d_pool1", "max", 64, 16, (1024,), 2, 2)
CNN1D_POOL2 = PoolCase("cnn1d_pool2", "max", 64, 32, (512,), 2, 2)
CNN1D_GAP = PoolCase("cnn1d_avgpool256", "avg", 64, 64, (256,), 256, 256)
POOL_RUNS = [(case, "bwd") for case in POOL_CASES] + [(case, "fwd") for case in POOL_CASES] + [
    (LENET_POOL1, "fwd"), (LENET_POOL1, "bwd"), (LENET_POOL2, "fwd"), (LENET_POOL2, "bwd"),
    (CNN1D_POOL1, "fwd"), (CNN1D_POOL1, "bwd"), (CNN1D_POOL2, "fwd"), (CNN1D_POOL2, "bwd"),
    (CNN1D_GAP, "fwd"), (CNN1D_GAP, "bwd"),
]

# activation case op -> (minitrain gradient op, forward tensor it reads, attrs)
ACT_GRAD_OPS = {
    "relu": ("ReluGrad", "x", {}),
    "sigmoid": ("SigmoidGrad", "y", {}),
    "tanh": ("TanhGrad", "y", {}),
    "quickgelu": ("QuickGeluGrad", "x", {"alpha": 1.702}),
    "leakyrelu": ("LeakyReluGrad", "y", {"alpha": 0.01}),
    "softmax": ("SoftmaxGrad_13", "y", {"axis": -1}),
    "logsoftmax": ("LogSoftmaxGrad_13", "y", {"axis": -1}),
}


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


# --------------------------------------------------------------------------- minitrain
def bound(op, arrays, attrs, domain="", output_shapes=None):
    """A node bound once (schema, attributes, kernel), called as the Executor calls it."""
    cpu = get_provider("cpu")
    node, _ = bind_node(op, [TensorType(a.dtype, a.shape) for a in arrays], attrs, domain=domain,
                        opset=17 if not domain else 1, provider=cpu)
    return lambda: node.run(cpu, arrays, output_shapes)


def run_name(case, direction):
    """Gradient runs of POOL_CASES and ACT_CASES keep their case names; the others name the pass."""
    return case.name if direction == "bwd" and (case.kind != "pool" or case in POOL_CASES) else f"{case.name}_{direction}"


def pool_bytes(case, direction):
    """Forward: read X, write Y (and int64 Indices for max); backward: cases.py's bwd_bytes."""
    if direction == "bwd":
        return case.bwd_bytes
    ny, nx = int(np.prod(case.y_shape)), int(np.prod(case.x_shape))
    return 4 * nx + 4 * ny + (8 * ny if case.op == "max" else 0)


def minitrain_case(case, direction, data):
    """(callable, outputs) for minitrain on this case; MaxPool's Indices land in data."""
    if case.kind == "pool":
        attrs = case.onnx_attrs()
        op = "MaxPool" if case.op == "max" else "AveragePool"
        if case.op == "max":
            data["y"], data["indices"] = minitrain.run_node(op, [data["x"]], attrs=attrs)
        if direction == "fwd":
            fn = bound(op, [data["x"]], attrs)
        elif case.op == "max":
            fn = bound("MaxPoolGrad", [data["dy"], data["indices"]], attrs, output_shapes={"dX": case.x_shape})
        else:
            fn = bound("AveragePoolGrad", [data["dy"]], attrs, output_shapes={"dX": case.x_shape})
        return fn, fn()
    op, reads, attrs = ACT_GRAD_OPS[case.op]
    fn = bound(op, [data["dy"], data[reads]], attrs, domain=MS)
    return fn, fn()


# --------------------------------------------------------------------------- PyTorch
def torch_case(torch, case, direction, data):
    aten = torch.ops.aten
    t = {k: torch.from_numpy(v) for k, v in data.items() if k != "indices"}
    if case.kind == "pool":
        k, s, p = list(case.kernel), list(case.stride), list(case.pad)
        F = torch.nn.functional
        if direction == "fwd":
            if case.op == "max":
                fn = F.max_pool1d if case.ndim == 1 else F.max_pool2d
                return lambda: fn(t["x"], k, s, p, return_indices=True)
            fn = F.avg_pool1d if case.ndim == 1 else F.avg_pool2d
            return lambda: fn(t["x"], k, s, p, count_include_pad=case.count_include_pad)
        x, dy = t["x"], t["dy"]
        if case.ndim == 1:      # torch's 1D pooling gradients are its 2D kernels over a unit H axis
            x, dy, k, s, p = x.unsqueeze(2), dy.unsqueeze(2), [1] + k, [1] + s, [0] + p
        if case.op == "max":
            _, tind = F.max_pool2d(x, k, s, p, return_indices=True)
            return lambda: aten.max_pool2d_with_indices_backward(dy, x, k, s, p, [1, 1], False, tind).view(case.x_shape)
        return lambda: aten.avg_pool2d_backward(dy, x, k, s, p, False, case.count_include_pad, None).view(case.x_shape)
    return torch_act_grad(torch, case, t)


def torch_act_grad(torch, case, t):
    """PyTorch's gradient kernel of an activation case, on the tensors `t` (dy, x, y)."""
    aten, dy = torch.ops.aten, t["dy"]
    if case.op == "relu":
        return lambda: aten.threshold_backward(dy, t["x"], 0)
    if case.op == "sigmoid":
        return lambda: aten.sigmoid_backward(dy, t["y"])
    if case.op == "tanh":
        return lambda: aten.tanh_backward(dy, t["y"])
    if case.op == "leakyrelu":
        return lambda: aten.leaky_relu_backward(dy, t["y"], case.alpha, True)
    if case.op == "quickgelu":       # no torch kernel: the eager composite
        def quickgelu():
            s = torch.sigmoid(case.alpha * t["x"])
            return dy * s * (1 + case.alpha * t["x"] * (1 - s))
        return quickgelu
    if case.op == "softmax":
        return lambda: aten._softmax_backward_data(dy, t["y"], case.axis, torch.float32)
    if case.op == "logsoftmax":
        return lambda: aten._log_softmax_backward_data(dy, t["y"], case.axis, torch.float32)
    return None


# --------------------------------------------------------------------------- onnxruntime
def ort_case(ort, case, direction, data):
    """A single-node model bound once through IOBinding; None when ORT lacks the kernel."""
    import onnx
    from onnx import TensorProto, helper
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    outputs = [("dX", f32, case.x_shape if case.kind == "pool" else case.shape)]
    if case.kind == "pool" and direction == "fwd":
        attrs = case.onnx_attrs()
        op, names, types, arrays, domain = ("MaxPool" if case.op == "max" else "AveragePool"), ["X"], [f32], \
            [data["x"]], ""
        if case.op == "max":
            attrs = {k: v for k, v in attrs.items() if k != "count_include_pad"}
        outputs = [("Y", f32, case.y_shape)] + ([("Indices", i64, case.y_shape)] if case.op == "max" else [])
    elif case.kind == "pool":
        attrs = case.onnx_attrs()
        if case.op == "max":
            op, names, types = "MaxPoolGrad", ["dY", "Indices"], [f32, i64]
            arrays = [data["dy"], data["indices"]]
            attrs = {k: v for k, v in attrs.items() if k != "count_include_pad"}
        else:
            op, names, types, arrays = "AveragePoolGrad", ["dY"], [f32], [data["dy"]]
        domain = ""      # MaxPoolGrad/AveragePoolGrad: default domain
    else:
        op, reads, attrs = ACT_GRAD_OPS[case.op]
        reads_name = "X" if reads == "x" else "Y"
        names, types, arrays = ["dY", reads_name], [f32, f32], [data["dy"], data[reads]]
        domain = MS
    inputs = [helper.make_tensor_value_info(n, t, a.shape) for n, t, a in zip(names, types, arrays)]
    # dX's shape is declared as a graph output: the pool gradient kernels read it from there
    graph_outputs = [helper.make_tensor_value_info(n, t, list(shape)) for n, t, shape in outputs]
    node = helper.make_node(op, names, [n for n, _, _ in outputs], domain=domain, **attrs)
    graph = helper.make_graph([node], f"bench_{case.name}_{direction}", inputs, graph_outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = THREADS
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    try:
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    except Exception as exc:   # noqa: BLE001 - a peer without the kernel is reported as n/a
        print(f"  ORT: {case.name}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
        return None, None
    binding = sess.io_binding()
    for n, a in zip(names, arrays):
        binding.bind_ortvalue_input(n, ort.OrtValue.ortvalue_from_numpy(a))
    for n, _, _ in outputs:
        binding.bind_output(n)

    def run():
        sess.run_with_iobinding(binding)
    run()
    del onnx
    return run, binding.copy_outputs_to_cpu()


# --------------------------------------------------------------------------- main
def machine():
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    model = fields.get("model name", "unknown CPU")
    if "cpu family" in fields:
        model += f" (family {fields['cpu family']} model {fields.get('model', '?')})"
    avx512 = " AVX-512," if "avx512f" in fields.get("flags", "") else ""
    return f"{model},{avx512} {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}"


def slower_than_torch(speed_torch, gbs):
    """The verdict on a row where torch/minitrain < 1, with both peers' share of STREAM Add's
    GB/s where the row has it: a ratio near 1 at the ceiling is a tie no kernel can break."""
    verdict = f"{1 / speed_torch:.3f}x slower than PyTorch"
    if gbs["stream_add"] is None:
        return verdict
    share = {peer: f"{100 * gbs[peer] / gbs['stream_add']:.0f}%" for peer in ("minitrain", "torch")}
    return f"{verdict} (minitrain at {share['minitrain']} and torch at {share['torch']} of STREAM Add's GB/s)"


def rel_err(ref, got):
    return float(np.max(np.abs(ref - got)) / max(1e-30, float(np.max(np.abs(ref)))))


def check_torch(case, direction, ref, outputs):
    """torch's outputs against minitrain's (MaxPool forward: indices converted to ONNX's)."""
    if isinstance(ref, tuple) and direction == "fwd":
        y, ind = ref[0].numpy(), ref[1].numpy()
        planes = np.arange(case.N * case.C, dtype=np.int64).reshape((case.N, case.C) + (1,) * case.ndim)
        assert np.array_equal(ind + planes * int(np.prod(case.in_spatial)), outputs[1]), \
            f"{case.name}: minitrain's and torch's MaxPool indices differ"
    else:
        y = (ref[0] if isinstance(ref, tuple) else ref).numpy()
    err = rel_err(y, outputs[0])
    assert err < 1e-4, f"{case.name} {direction}: minitrain and torch differ (rel err {err:.2g})"


def main():
    if arg("--device", "cpu") == "cuda":
        import gpu_kernels
        gpu_kernels.main(sections=["pool_act"])
        return
    rounds = int(arg("--rounds", 15))
    out_path = arg("--out", os.path.join(HERE, "results", "pool_activation.md"))
    only = arg("--cases", "")
    minitrain.set_num_threads(THREADS)
    torch = optional_torch(THREADS)
    ort = optional_onnxruntime()
    stream_add = build_stream_add()
    rows, verdicts = [], []
    for case, direction in POOL_RUNS + [(case, "bwd") for case in ACT_CASES]:
        name = run_name(case, direction)
        if only and not any(word in name for word in only.split(",")):
            continue
        data = make_inputs(case)
        mt, outputs = minitrain_case(case, direction, data)
        candidates = {"minitrain": mt, "torch": None, "ort": None, "stream_add": None}
        if torch is not None:
            candidates["torch"] = torch_case(torch, case, direction, data)
            check_torch(case, direction, candidates["torch"](), outputs)
        if ort is not None:
            fn, ort_out = ort_case(ort, case, direction, data)
            if fn is not None:
                same = [rel_err(o, m) <= 1e-4 for o, m in zip(ort_out, outputs)]
                if not all(same):
                    print(f"  ORT: {name}: result differs from minitrain")
                candidates["ort"] = fn
        if stream_add is not None and case.kind != "pool":
            candidates["stream_add"] = stream_add_case(stream_add, case.shape, THREADS)
        per_round = interleaved_rounds(candidates, rounds=rounds, min_time=ROUND_TIME, min_calls=5)
        ms = medians(per_round)
        moved = pool_bytes(case, direction) if case.kind == "pool" else case.bwd_bytes
        gbs = {k: (moved / 1e6 / v if v else None) for k, v in ms.items()}
        speed_torch = paired_ratio(per_round["torch"], per_round["minitrain"])
        speed_ort = paired_ratio(per_round["ort"], per_round["minitrain"])
        what = f"{case.describe()} {direction}" if case.kind == "pool" else case.describe()
        rows.append([name, what, f"{moved / 1e6:.1f}", fmt(ms["minitrain"]), fmt(gbs["minitrain"]),
                     fmt(ms["torch"]), fmt(gbs["torch"]), fmt(ms["ort"]), fmt(gbs["ort"]), fmt(speed_torch, 2),
                     fmt(speed_ort, 2), fmt(gbs["stream_add"])])
        missed = []
        target = TARGET_FWD_GBS if (case.kind == "pool" and direction == "fwd" and case.op == "max") else \
            TARGET_GBS if direction == "bwd" else None
        if target and gbs["minitrain"] < target:
            missed.append(f"{gbs['minitrain']:.1f} GB/s is {100 * (1 - gbs['minitrain'] / target):.0f}% "
                          f"short of {target:.0f} GB/s")
        if speed_torch is not None and speed_torch < 1:
            missed.append(slower_than_torch(speed_torch, gbs))
        if name in ORT_3X and speed_ort is not None and speed_ort < 3:
            missed.append(f"only {speed_ort:.2f}x faster than ORT (target 3x)")
        verdict = "all targets met" if not missed else "; ".join(missed)
        verdicts.append(f"- {name}: {verdict}" if name in TARGET_RUNS else f"- ({name}, not a target row: {verdict})")
        print(" | ".join(rows[-1]), flush=True)

    header = ["case", "what", "MB moved", "minitrain ms", "minitrain GB/s", "torch ms", "torch GB/s",
              "ORT ms", "ORT GB/s", "torch/minitrain", "ORT/minitrain", "STREAM Add GB/s"]
    versions = [f"numpy {np.__version__}"]
    if torch is not None:
        versions.append(f"torch {torch.__version__}")
    if ort is not None:
        versions.append(f"onnxruntime-training {ort.__version__}")
    text = "\n".join([
        "# Pooling and activation kernels: minitrain vs PyTorch vs onnxruntime-training",
        "",
        f"- date: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}",
        f"- machine: {machine()}",
        f"- command: `python bench/{os.path.basename(__file__)} --threads {THREADS} --rounds {rounds}"
        + (f" --cases {only}" if only else "") + "`",
        f"- threads: {THREADS} (minitrain, torch and ORT intra-op); versions: {', '.join(versions)}",
        f"- method: one process, peers interleaved per round of {ROUND_TIME:g} s each (bench/harness.py); times:"
        " median of the round medians; speed ratios (torch/minitrain, ORT/minitrain): median of the per-round ratios."
        " minitrain through nodes bound once, as the Executor runs them (the kernel's Python side and output"
        " allocation included), torch through aten kernels, ORT through single-node models with IOBinding."
        " GB/s = bytes read + written once / time (forward: X, Y, int64 Indices; backward: dY, Indices, dX)."
        " STREAM Add GB/s: c = a + b over float32 arrays of the case's size, plain C with OpenMP on the same"
        " threads (bench/stream_add.c), timed in the same rounds: the machine's ceiling for the activation rows."
        " One libgomp serves minitrain and torch (torch's wheel ships it under the same name; the first"
        f" loaded wins), spinning as minitrain sets it: GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT')},"
        f" OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}.",
        "",
        markdown_table(header, rows),
        "",
        f"Targets (for {', '.join(sorted(TARGET_RUNS))}): >= {TARGET_GBS:.0f} GB/s, no slower than "
        f"PyTorch, >= 3x faster than ORT on {', '.join(sorted(ORT_3X))}. The other rows are held to the same "
        f"figures (MaxPool forward: >= {TARGET_FWD_GBS:.0f} GB/s, our own) and reported in brackets.",
        "",
        *verdicts,
        "",
    ])
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w") as f:
        f.write(text)
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
