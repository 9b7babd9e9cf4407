"""Pooling and activation gradients: minitrain vs PyTorch vs onnxruntime-training, side by side.

Runs POOL_CASES and ACT_CASES of bench/cases.py in one process, interleaved round by round
(bench/harness.py), and reports effective GB/s (bytes of the tensors read and written once,
the cases' bwd_bytes).  minitrain is timed through `minitrain.run_node`, its public entry (Python
dispatch and output allocation included); PyTorch through the aten backward kernels; ONNX
Runtime through single-node models bound once with IOBinding (its gradient kernels are
single-threaded).  Every peer's dX is checked against minitrain's before timing.

    python bench/bench_pool_act.py [--threads 2] [--rounds 3] [--out bench/results/pool_act.md]

Targets (with 2 threads): >= 35 GB/s, no slower than PyTorch, and >= 3x faster than ORT's
ReluGrad, LeakyReluGrad, LogSoftmaxGrad, MaxPoolGrad and AveragePoolGrad.
"""
import datetime
import os
import platform
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import fmt, interleaved, markdown_table, optional_onnxruntime, optional_torch, threads_from_argv  # noqa: E402

THREADS = threads_from_argv(2) if __name__ == "__main__" else int(os.environ.get("OMP_NUM_THREADS", 2))

import numpy as np  # noqa: E402

import minitrain  # noqa: E402
from cases import ACT_CASES, POOL_CASES, make_inputs  # noqa: E402

MS = "com.microsoft"
TARGET_GBS = 35.0
ORT_3X = {"relu_grad", "leakyrelu_grad", "logsoftmax_grad", "maxpool_2x2", "avgpool_3x3_s1_p1"}
NOTES_MARK = "<!-- notes: kept when the benchmark rewrites this file -->"

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
def minitrain_case(case, data):
    """(callable, dX) for minitrain on this case."""
    if case.kind == "pool":
        attrs = case.onnx_attrs()
        if case.op == "max":
            _, indices = minitrain.run_node("MaxPool", [data["x"]], attrs=attrs)
            data["indices"] = indices
            inputs, op = [data["dy"], indices], "MaxPoolGrad"
        else:
            inputs, op = [data["dy"]], "AveragePoolGrad"
        shapes = {"dX": case.x_shape}

        def fn():
            return minitrain.run_node(op, inputs, attrs=attrs, output_shapes=shapes)[0]
        return fn, fn()
    op, reads, attrs = ACT_GRAD_OPS[case.op]
    inputs = [data["dy"], data[reads]]

    def fn():
        return minitrain.run_node(op, inputs, attrs=attrs, domain=MS)[0]
    return fn, fn()


# --------------------------------------------------------------------------- PyTorch
def torch_case(torch, case, data):
    aten = torch.ops.aten
    t = {k: torch.from_numpy(v) for k, v in data.items()}
    if case.kind == "pool":
        k, s, p = list(case.kernel), list(case.stride), list(case.pad)
        if case.op == "max":
            _, tind = torch.nn.functional.max_pool2d(t["x"], k, s, p, return_indices=True)
            return lambda: aten.max_pool2d_with_indices_backward(t["dy"], t["x"], k, s, p, [1, 1], False, tind)
        return lambda: aten.avg_pool2d_backward(t["dy"], t["x"], k, s, p, False, case.count_include_pad, None)
    dy = t["dy"]
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
def ort_case(ort, case, data):
    """A single-node model bound once through IOBinding; None when ORT lacks the kernel."""
    import onnx
    from onnx import TensorProto, helper
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    if case.kind == "pool":
        attrs = case.onnx_attrs()
        if case.op == "max":
            op, names, types = "MaxPoolGrad", ["dY", "Indices"], [f32, i64]
            arrays = [data["dy"], data["indices"]]
            attrs = {k: v for k, v in attrs.items() if k != "count_include_pad"}
        else:
            op, names, types, arrays = "AveragePoolGrad", ["dY"], [f32], [data["dy"]]
        domain, out_shape = "", case.x_shape      # MaxPoolGrad/AveragePoolGrad: default domain
    else:
        op, reads, attrs = ACT_GRAD_OPS[case.op]
        reads_name = "X" if reads == "x" else "Y"
        names, types, arrays = ["dY", reads_name], [f32, f32], [data["dy"], data[reads]]
        domain, out_shape = MS, case.shape
    inputs = [helper.make_tensor_value_info(n, t, a.shape) for n, t, a in zip(names, types, arrays)]
    # dX's shape is declared as a graph output: the pool gradient kernels read it from there
    output = helper.make_tensor_value_info("dX", f32, list(out_shape))
    node = helper.make_node(op, names, ["dX"], domain=domain, **attrs)
    graph = helper.make_graph([node], f"bench_{case.name}", inputs, [output])
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
    binding.bind_output("dX")

    def run():
        sess.run_with_iobinding(binding)
    run()
    del onnx
    return run, binding.copy_outputs_to_cpu()[0]


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


def main():
    rounds = int(arg("--rounds", 3))
    out_path = arg("--out", os.path.join(HERE, "results", "pool_act.md"))
    minitrain.set_num_threads(THREADS)
    torch = optional_torch(THREADS)
    ort = optional_onnxruntime()
    rows, verdicts = [], []
    for case in POOL_CASES + ACT_CASES:
        data = make_inputs(case)
        mt, dx = minitrain_case(case, data)
        candidates = {"minitrain": mt, "torch": None, "ort": None}
        if torch is not None:
            candidates["torch"] = torch_case(torch, case, data)
            ref = candidates["torch"]()
            ref = (ref[0] if isinstance(ref, tuple) else ref).numpy()
            err = float(np.max(np.abs(ref - dx)) / max(1e-30, float(np.max(np.abs(ref)))))
            assert err < 1e-4, f"{case.name}: minitrain and torch differ (rel err {err:.2g})"
        if ort is not None:
            fn, ort_dx = ort_case(ort, case, data)
            if fn is not None:
                err = float(np.max(np.abs(ort_dx - dx)) / max(1e-30, float(np.max(np.abs(ort_dx)))))
                if err > 1e-4:
                    print(f"  ORT: {case.name}: result differs from minitrain (rel err {err:.2g})")
                candidates["ort"] = fn
        ms = interleaved(candidates, rounds=rounds)
        gbs = {k: (case.bwd_bytes / 1e6 / v if v else None) for k, v in ms.items()}
        speed_torch = ms["torch"] / ms["minitrain"] if ms["torch"] else None
        speed_ort = ms["ort"] / ms["minitrain"] if ms["ort"] else None
        rows.append([case.name, case.describe(), f"{case.bwd_bytes / 1e6:.1f}", fmt(ms["minitrain"]),
                     fmt(gbs["minitrain"]), fmt(ms["torch"]), fmt(gbs["torch"]), fmt(ms["ort"]),
                     fmt(gbs["ort"]), fmt(speed_torch, 2), fmt(speed_ort, 2)])
        missed = []
        if gbs["minitrain"] < TARGET_GBS:
            missed.append(f"{gbs['minitrain']:.1f} GB/s is {100 * (1 - gbs['minitrain'] / TARGET_GBS):.0f}% "
                          f"short of {TARGET_GBS:.0f} GB/s")
        if speed_torch is not None and speed_torch < 1:
            missed.append(f"{1 / speed_torch:.2f}x slower than PyTorch")
        if case.name in ORT_3X and speed_ort is not None and speed_ort < 3:
            missed.append(f"only {speed_ort:.2f}x faster than ORT (target 3x)")
        verdicts.append(f"- {case.name}: " + ("all targets met" if not missed else "; ".join(missed)))
        print(" | ".join(rows[-1]), flush=True)

    header = ["case", "what", "MB moved", "minitrain ms", "minitrain GB/s", "torch ms", "torch GB/s",
              "ORT ms", "ORT GB/s", "torch/minitrain", "ORT/minitrain"]
    versions = [f"numpy {np.__version__}"]
    if torch is not None:
        versions.append(f"torch {torch.__version__}")
    if ort is not None:
        versions.append(f"onnxruntime-training {ort.__version__}")
    notes = ""
    if os.path.exists(out_path):
        with open(out_path) as f:
            old = f.read()
        if NOTES_MARK in old:
            notes = old[old.index(NOTES_MARK) + len(NOTES_MARK):]
    text = "\n".join([
        "# Pooling and activation gradients: minitrain vs PyTorch vs onnxruntime-training",
        "",
        f"- date: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}",
        f"- machine: {machine()}",
        f"- command: `python bench/{os.path.basename(__file__)} --threads {THREADS} --rounds {rounds}`",
        f"- threads: {THREADS} (minitrain, torch and ORT intra-op); versions: {', '.join(versions)}",
        "- method: one process, peers interleaved per round (bench/harness.py); median of the round medians."
        " minitrain through run_node (dispatch + output allocation included), torch through aten backward"
        " kernels, ORT through single-node models with IOBinding. GB/s = bytes read + written once / time.",
        "",
        markdown_table(header, rows),
        "",
        f"Targets: >= {TARGET_GBS:.0f} GB/s, no slower than PyTorch, >= 3x faster than ORT on "
        f"{', '.join(sorted(ORT_3X))}.",
        "",
        *verdicts,
        "",
        NOTES_MARK + notes if notes else NOTES_MARK + "\n",
    ])
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w") as f:
        f.write(text)
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
