"""Convolution benchmark: minitrain against PyTorch (aten kernels) and onnxruntime-training's
ConvGrad, side by side in one process, interleaved round by round (harness.py's median_ms).

For every case of cases.CONV_CASES: forward (Conv / ConvTranspose) and backward (dX + dW + dB
in one call: ConvGrad / ConvTransposeGrad, torch's convolution_backward with an all-true
output_mask, ORT's ConvGrad single-node model).  numpy's float32 GEMM (cases.GEMM_CASES) is
timed first as the machine's practical peak, and gemm_1024 again within the rounds of the dense
3x3 cases, against which their GFLOP/s are reported.

Each round times every candidate in turn (median of its calls, harness.median_ms); a row reports
the best round (--stat min, the default: on a machine shared with other work the slow rounds are
the ones other processes disturbed) or the median round (--stat median).

    python bench/conv.py [--threads 2] [--rounds 5] [--cases a,b] [--min-time 0.5]
                         [--stat min|median] [--out FILE]
    python bench/conv.py --device cuda [--rounds 7] [--cases a,b]    (gpu_kernels.py's conv section)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (fmt, markdown_table, median_ms, optional_onnxruntime, optional_torch,  # noqa: E402
                     ratio, threads_from_argv)

THREADS = threads_from_argv()

import datetime  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402

import numpy as np  # noqa: E402

import minitrain  # noqa: E402
from minitrain.binding import bind_node  # noqa: E402
from minitrain.ops.schema import MS_DOMAIN, TensorType  # noqa: E402
from minitrain.providers import get_provider  # noqa: E402

from cases import CONV_CASES, GEMM_CASES, make_inputs  # noqa: E402


DENSE_3X3 = ("resnet_3x3", "strided_3x3_s2", "dilated_3x3_d2")


def arg(name, default):
    return type(default)(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def interleaved(candidates, rounds, stat, **timing):
    """name -> best (stat "min") or median round of each candidate's per-round median ms;
    candidates take turns within every round.  None (a peer without the case) stays None."""
    per_round = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, fn in candidates.items():
            if fn is not None:
                per_round[name].append(median_ms(fn, **timing))
    pick = min if stat == "min" else statistics.median
    return {name: (pick(v) if v else None) for name, v in per_round.items()}


# --------------------------------------------------------------------------- minitrain
def minitrain_fns(case, inp):
    """Forward and backward callables through pre-bound nodes (as the executor runs them)."""
    cpu = get_provider("cpu")
    attrs = case.onnx_attrs()
    op = "ConvTranspose" if case.transposed else "Conv"
    x, w, b, dy = inp["x"], inp["w"], inp["b"], inp["dy"]

    def bound(op_type, arrays, domain="", wanted=None):
        types = [TensorType(a.dtype, a.shape) for a in arrays]
        node, _ = bind_node(op_type, types, attrs, domain=domain, opset=11 if not domain else 1,
                            provider=cpu, wanted=wanted)
        return lambda: node.run(cpu, arrays)
    fwd = bound(op, [x, w, b])
    bwd = bound(op + "Grad", [dy, x, w], MS_DOMAIN, ["dX", "dW", "dB"])
    return fwd, bwd


# --------------------------------------------------------------------------- torch
def torch_fns(torch, case, inp):
    t = {k: torch.from_numpy(v) for k, v in inp.items()}
    stride, pad, dil = list(case.stride), list(case.pad), list(case.dilation)
    opad = list(case.output_padding)
    conv = torch.ops.aten.convolution
    back = torch.ops.aten.convolution_backward

    def fwd():
        with torch.no_grad():
            return conv(t["x"], t["w"], t["b"], stride, pad, dil, case.transposed, opad, case.groups)

    def bwd():
        with torch.no_grad():
            return back(t["dy"], t["x"], t["w"], [case.C_out], stride, pad, dil, case.transposed, opad,
                        case.groups, [True, True, True])
    return fwd, bwd


# --------------------------------------------------------------------------- onnxruntime
def ort_fns(ort, case, inp):
    """ORT forward (Conv/ConvTranspose) and ConvGrad (none for ConvTranspose: CUDA-only)."""
    import onnx
    from onnx import TensorProto, helper

    def session(op, domain, names_in, names_out, shapes_out):
        node = helper.make_node(op, names_in, names_out, domain=domain, **case.onnx_attrs())
        ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, inp[k].shape)
               for n, k in zip(names_in, ("dy", "x", "w") if domain else ("x", "w", "b"))]
        outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in zip(names_out, shapes_out)]
        graph = helper.make_graph([node], op, ins, outs)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                        helper.make_opsetid(MS_DOMAIN, 1)])
        model.ir_version = 10  # onnx writes a newer IR than ORT 1.19 loads
        so = ort.SessionOptions()
        so.intra_op_num_threads = THREADS
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        binding = sess.io_binding()
        for n, k in zip(names_in, ("dy", "x", "w") if domain else ("x", "w", "b")):
            binding.bind_cpu_input(n, inp[k])
        for n in names_out:
            binding.bind_output(n)

        def run():
            sess.run_with_iobinding(binding)
        return run, binding
    op = "ConvTranspose" if case.transposed else "Conv"
    fwd, _ = session(op, "", ["X", "W", "B"], ["Y"], [case.y_shape])
    bwd = None
    if not case.transposed:
        bwd, binding = session("ConvGrad", MS_DOMAIN, ["dY", "X", "W"], ["dX", "dW", "dB"],
                               [case.x_shape, case.w_shape, (case.C_out,)])
        bwd.binding = binding
    return fwd, bwd


# --------------------------------------------------------------------------- checks
def rel_err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(1e-30, np.abs(b).max()))


def check(case, mt, th):
    """minitrain's forward and gradients against torch's on the case's inputs."""
    errs = [rel_err(mt[0]()[0], th[0]().numpy())]
    errs += [rel_err(a, b.numpy()) for a, b in zip(mt[1](), th[1]())]
    worst = max(errs)
    if worst > 1e-4:
        raise AssertionError(f"{case.name}: minitrain differs from torch, rel errors {errs}")
    return worst


# --------------------------------------------------------------------------- main
def machine():
    """CPU model, family/model, vector extensions, caches and core count, from lscpu."""
    try:
        info = dict(line.split(":", 1) for line in subprocess.run(
            ["lscpu"], capture_output=True, text=True).stdout.splitlines() if ":" in line)
        info = {k.strip(): v.strip() for k, v in info.items()}
        flags = info.get("Flags", "").split()
        simd = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
        cpu = (f"{info.get('Model name', '?')} (family {info.get('CPU family', '?')}, model {info.get('Model', '?')}), "
               f"{simd}, L2 {info.get('L2 cache', '?')}, L3 {info.get('L3 cache', '?')}")
    except OSError:
        cpu = platform.processor() or "unknown CPU"
    return f"{cpu}; {os.cpu_count()} CPUs; {platform.system()} {platform.release()}"


def main():
    if arg("--device", "cpu") == "cuda":
        import gpu_kernels
        gpu_kernels.main(sections=["conv"])
        return
    rounds = arg("--rounds", 5)
    min_time = arg("--min-time", 0.5)
    stat = arg("--stat", "min")
    wanted = arg("--cases", "")
    out_path = arg("--out", "")
    torch = optional_torch(THREADS)
    ort = optional_onnxruntime()
    minitrain.set_num_threads(THREADS)
    cases = [c for c in CONV_CASES if not wanted or c.name in wanted.split(",")]

    rows, bwd_ratios, ort_ratios, dense_gfs = [], [], [], {}
    gemm_gfs = {}
    for g in GEMM_CASES:
        inp = make_inputs(g)
        a, b = inp["a"], inp["b"]
        ms = interleaved({"numpy": lambda: a @ b}, rounds, stat, min_time=min_time)["numpy"]
        gemm_gfs[g.name] = g.flops / ms / 1e6
        print(f"{g.name}: numpy {ms:.2f} ms, {gemm_gfs[g.name]:.0f} GFLOP/s", flush=True)
    gemm = GEMM_CASES[0]
    gemm_inp = make_inputs(gemm)

    def gemm_fn():
        return gemm_inp["a"] @ gemm_inp["b"]

    for case in cases:
        inp = make_inputs(case)
        mt = minitrain_fns(case, inp)
        th = torch_fns(torch, case, inp) if torch is not None else (None, None)
        ox = ort_fns(ort, case, inp) if ort is not None else (None, None)
        err = check(case, mt, th) if torch is not None else float("nan")
        for p, (m_fn, t_fn, o_fn, flops) in enumerate(((mt[0], th[0], ox[0], case.fwd_flops),
                                                       (mt[1], th[1], ox[1], case.bwd_flops))):
            pass_name = ("fwd", "bwd")[p]
            dense = case.name in DENSE_3X3
            res = interleaved({"minitrain": m_fn, "torch": t_fn, "ort": o_fn, "gemm": gemm_fn if dense else None},
                              rounds, stat, min_time=min_time)
            m, t, o = res["minitrain"], res["torch"], res["ort"]
            gf = flops / m / 1e6
            if pass_name == "bwd" and t is not None:
                bwd_ratios.append(m / t)
            if pass_name == "bwd" and o is not None:
                ort_ratios.append((case.name, m / o))
            if dense:
                dense_gfs[(case.name, pass_name)] = (gf, gemm.flops / res["gemm"] / 1e6)
            rows.append([case.name, pass_name, f"{flops / 1e9:.3f}", fmt(m), f"{gf:.0f}", fmt(t),
                         "n/a" if t is None else f"{flops / t / 1e6:.0f}", fmt(o),
                         "n/a" if o is None else f"{flops / o / 1e6:.0f}", ratio(m, t), ratio(m, o)])
            print(" | ".join(rows[-1]) + f"   (max rel err vs torch {err:.1e})", flush=True)

    header = ["case", "pass", "GFLOP", "minitrain ms", "GF/s", "torch ms", "GF/s", "ORT ms", "GF/s",
              "mt/torch", "mt/ORT"]
    table = markdown_table(header, rows)
    geo = math.exp(sum(math.log(r) for r in bwd_ratios) / len(bwd_ratios)) if bwd_ratios else float("nan")
    summary = [f"numpy float32 GEMM: " + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in gemm_gfs.items()),
               f"backward mt/torch: geometric mean {geo:.2f}, worst {max(bwd_ratios, default=float('nan')):.2f}"]
    if ort_ratios:
        slower = [f"{name} ({r:.2f})" for name, r in ort_ratios if r >= 1]
        summary.append(f"backward mt/ORT ConvGrad: faster on {len(ort_ratios) - len(slower)} of {len(ort_ratios)} "
                       f"cases" + (f"; slower on {', '.join(slower)}" if slower else ""))
    summary += [f"{name} {p}: {gf:.0f} GFLOP/s = {100 * gf / peak:.0f}% of numpy's {gemm.name} "
                f"({peak:.0f} GFLOP/s in the same rounds)" for (name, p), (gf, peak) in dense_gfs.items()]
    print(table)
    print("\n".join(summary))
    if out_path:
        versions = (f"Python {platform.python_version()}, numpy {np.__version__}, "
                    f"torch {torch.__version__ if torch else 'absent'}, "
                    f"onnxruntime {ort.__version__ if ort else 'absent'}")
        with open(out_path, "w") as f:
            f.write(f"# Convolution benchmark\n\n- date: {datetime.date.today().isoformat()}\n"
                    f"- machine: {machine()}\n- versions: {versions}\n"
                    f"- command: `python {' '.join(sys.argv)}` ({THREADS} threads, {rounds} rounds, "
                    f"{'best' if stat == 'min' else 'median'} round reported)\n\n")
            f.write(table + "\n\n" + "\n".join(f"- {s}" for s in summary) + "\n")


if __name__ == "__main__":
    main()
