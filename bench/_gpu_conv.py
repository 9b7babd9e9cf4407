"""gpu_kernels.py's convolution section: minitrain's CUDA convolutions against PyTorch's.

For every case of cases.CONV_CASES, forward (Conv / ConvTranspose) and backward (dX + dW + dB
in one call: ConvGrad / ConvTransposeGrad against aten's convolution_backward with an all-true
output mask), float32, in four settings: strict FP32 and TF32 (torch.backends.cudnn.allow_tf32
and the provider's use_tf32 set alike), each with cuDNN available and hidden (minitrain's own
algorithms only).  PyTorch runs with torch.backends.cudnn.benchmark = True, so both sides
search once per shape before timing.  The table names the algorithm the search ranked first for
each primitive and its workspace.

Ratios are PyTorch's time / minitrain's (above 1: minitrain faster).  Targets: with
cuDNN, every case forward and backward >= 0.95 and the geometric mean >= 1.1; hidden, the
geometric mean >= 0.6 and the depthwise case >= 1.0.
"""
import math

import numpy as np

from cases import CONV_CASES, make_inputs
from harness import markdown_table
from minitrain.providers.cuda.conv import search as conv_search
from minitrain.providers.cuda.libs import cudnn

MS = "com.microsoft"
CONV_CALLS = 20            # calls per timed batch (a backward call queues three primitives)
SETTINGS = (("strict FP32, cuDNN", False, False), ("TF32, cuDNN", True, False),
            ("strict FP32, own only", False, True), ("TF32, own only", True, True))


def _torch_fns(torch, case, t):
    stride, pad, dil = list(case.stride), list(case.pad), list(case.dilation)
    opad = list(case.output_padding)
    conv, back = torch.ops.aten.convolution, torch.ops.aten.convolution_backward

    def fwd():
        return conv(t["x"], t["w"], t["b"], stride, pad, dil, case.transposed, opad, case.groups)

    def bwd():
        return back(t["dy"], t["x"], t["w"], [case.C_out], stride, pad, dil, case.transposed, opad, case.groups,
                    [True, True, True])
    return fwd, bwd


def _minitrain_fns(bound, provider, case, dev):
    op = "ConvTranspose" if case.transposed else "Conv"
    attrs = case.onnx_attrs()
    fwd = bound(provider, op, [dev["x"], dev["w"], dev["b"]], attrs)
    bwd = bound(provider, op + "Grad", [dev["dy"], dev["x"], dev["w"]], attrs, domain=MS)
    return fwd, bwd


def _winners(before):
    """'primitive: algorithm (workspace)' for each key the search ranked since `before`."""
    found = []
    for key, ranked in conv_search.rankings().items():
        if key not in before and ranked:
            best = ranked[0]
            found.append(f"{key.direction}: {best.name} ({best.workspace_bytes(key) / 2**20:.1f} MiB)")
    return "; ".join(found)


def _check(mine, theirs, tolerance, what):
    for a, b in zip(mine, theirs):
        a, b = np.asarray(a, np.float64), b.double().cpu().numpy()
        err = np.abs(a - b).max() / max(1e-30, np.abs(b).max())
        if err > tolerance:
            raise AssertionError(f"{what}: minitrain differs from torch by {err:.2e} (relative to the max)")


def _geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


def conv_section(torch, provider_for, timer_for, bound, cases=None):
    """Markdown lines: one table per setting, then the geometric means against the targets."""
    cases = [c for c in CONV_CASES if cases is None or c.name in cases]
    torch.backends.cudnn.benchmark = True
    lines, summary = [], []
    torch_ms = {}
    for label, tf32, hidden in SETTINGS:
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        provider = provider_for(tf32)
        timer = timer_for(provider)
        conv_search.clear_cache()
        if hidden:
            cudnn.hide("hidden by gpu_kernels.py")
        rows, fwd_x, bwd_x = [], {}, {}
        try:
            for case in cases:
                data = make_inputs(case)
                dev = {k: provider.from_numpy(v) for k, v in data.items()}
                t = {k: torch.from_numpy(v).cuda() for k, v in data.items()}
                mt_fwd, mt_bwd = _minitrain_fns(bound, provider, case, dev)
                th_fwd, th_bwd = _torch_fns(torch, case, t)
                tolerance = 1e-2 if tf32 else 1e-4
                before = set(conv_search.rankings())
                _check([provider.to_numpy(mt_fwd())], [th_fwd()], tolerance, f"{case.name} forward ({label})")
                fwd_algo = _winners(before)
                before = set(conv_search.rankings())
                _check([provider.to_numpy(v) for v in mt_bwd()], th_bwd(), tolerance, f"{case.name} backward ({label})")
                bwd_algo = _winners(before)
                if (case.name, tf32) not in torch_ms:
                    torch_ms[case.name, tf32] = (timer.torch_ms(th_fwd, CONV_CALLS), timer.torch_ms(th_bwd, CONV_CALLS))
                t_fwd, t_bwd = torch_ms[case.name, tf32]
                m_fwd, m_bwd = timer.minitrain_ms(mt_fwd, CONV_CALLS), timer.minitrain_ms(mt_bwd, CONV_CALLS)
                fwd_x[case.name], bwd_x[case.name] = t_fwd / m_fwd, t_bwd / m_bwd
                rows.append([case.name, f"{t_fwd:.4f}", f"{m_fwd:.4f}", f"{fwd_x[case.name]:.2f}", fwd_algo,
                             f"{t_bwd:.4f}", f"{m_bwd:.4f}", f"{bwd_x[case.name]:.2f}", bwd_algo])
                print(" | ".join(rows[-1]), flush=True)
        finally:
            if hidden:
                cudnn.unhide()
            conv_search.clear_cache()
        lines += [f"### {label}", "",
                  markdown_table(["case", "torch fwd ms", "mt fwd ms", "fwd x", "forward algorithm (workspace)",
                                  "torch bwd ms", "mt bwd ms", "bwd x", "backward algorithms (workspace)"], rows), ""]
        summary.append(_summary(label, hidden, fwd_x, bwd_x))
    lines += ["### Against the targets (x = torch time / minitrain time)", "",
              markdown_table(["setting", "fwd geomean", "bwd geomean", "worst case", "depthwise fwd / bwd",
                              "targets", ""], summary), ""]
    return lines


def _summary(label, hidden, fwd_x, bwd_x):
    every = list(fwd_x.values()) + list(bwd_x.values())
    geo = _geomean(every)
    worst = min(((v, f"{n} fwd") for n, v in fwd_x.items()), default=(1.0, "-"))
    worst = min(worst, min(((v, f"{n} bwd") for n, v in bwd_x.items()), default=(1.0, "-")))
    dw = (fwd_x.get("depthwise_3x3"), bwd_x.get("depthwise_3x3"))
    if hidden:
        target = "geomean >= 0.6, depthwise >= 1.0"
        met = geo >= 0.6 and all(v is None or v >= 1.0 for v in dw)
    else:
        target = "every case >= 0.95, geomean >= 1.1"
        met = geo >= 1.1 and worst[0] >= 0.95
    return [label, f"{_geomean(list(fwd_x.values())):.2f}", f"{_geomean(list(bwd_x.values())):.2f}",
            f"{worst[0]:.2f} ({worst[1]})", " / ".join("-" if v is None else f"{v:.2f}" for v in dw),
            target, "met" if met else "missed"]
