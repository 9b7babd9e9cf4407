"""The convolution family: Conv, ConvTranspose, ConvGrad, ConvTransposeGrad (1D, 2D, 3D).

A parametrized matrix over rank x group (1, 2, depthwise) x stride x dilation x padding mode
(symmetric, asymmetric, VALID, SAME_UPPER, SAME_LOWER; for ConvTranspose also output_padding and
output_shape) checks, for every geometry: the forward against an independent NumPy reference,
every gradient against float64 central differences (along random directions; at rank 1 also
element by element through the registered gradient builder), every subset of
requested gradient outputs (including no dX and no dW) against the full result while the
unrequested ones are not computed, and, where PyTorch is installed, float32 forward and
gradients against torch autograd.  Element-by-element gradchecks through the registered gradient
builder, a Conv -> Relu graph, and bad input complete it."""
import itertools
import zlib

import numpy as np
import pytest

from minitrain import Graph, run_node
from minitrain.autodiff import build_gradient_graph
from minitrain.errors import DTypeError, OpAttributeError, ShapeError
from minitrain.gradcheck import gradcheck, gradcheck_graph
from minitrain.providers.cpu import blas as cpu_blas
from minitrain.providers.cpu import conv as cpu_conv

MS = "com.microsoft"
SUBSETS = [list(s) for r in (1, 2, 3) for s in itertools.combinations(("dX", "dW", "dB"), r)]

SPATIAL = {1: (9,), 2: (6, 7), 3: (4, 5, 6)}
KERNEL = {1: (3,), 2: (3, 2), 3: (2, 3, 2)}
# group mode -> (C_in, C_out, group) of a Conv; ConvTranspose uses W (C_in, C_out // group, k).
GROUPS = {"g1": (4, 6, 1), "g2": (4, 6, 2), "depthwise": (4, 8, 4)}
T_GROUPS = {"g1": (4, 6, 1), "g2": (4, 6, 2), "depthwise": (4, 4, 4)}
CONV_PADS = ["p0", "p1", "asym", "VALID", "SAME_UPPER", "SAME_LOWER"]
T_PADS = ["p0", "p1", "asym", "out_pad", "out_shape", "VALID", "SAME_UPPER", "SAME_LOWER"]
# element-by-element gradchecks: central differences of a float64 loss carry roundoff up to
# about 1.2e-8 here (seen over 40 seeds), so 1e-8 failed now and then
FD_ATOL = 1e-7


# --------------------------------------------------------------------------- references
def case_seed(*key):
    """A seed fixed by the case's parameters (Python's hash of a str changes per process)."""
    return zlib.crc32(repr(key).encode())


def _dilated(k, d):
    return (k - 1) * d + 1


def expected_conv_pads(mode, spatial, kernel, strides, dilations):
    """(begin, end) pads as ONNX defines them for each padding mode of the matrix."""
    r = len(spatial)
    if mode == "p0" or mode == "VALID":
        return [0] * r, [0] * r
    if mode == "p1":
        return [1] * r, [1] * r
    if mode == "asym":
        return [1, 0, 2][:r], [0, 2, 1][:r]
    begin, end = [], []
    for i, s in enumerate(spatial):
        out = -(-s // strides[i])
        total = max(0, (out - 1) * strides[i] + _dilated(kernel[i], dilations[i]) - s)
        small, big = total // 2, total - total // 2
        begin.append(big if mode == "SAME_LOWER" else small)
        end.append(small if mode == "SAME_LOWER" else big)
    return begin, end


def conv_attrs(mode, rank, strides, dilations, group):
    attrs = dict(strides=list(strides), dilations=list(dilations), group=group)
    if mode in ("VALID", "SAME_UPPER", "SAME_LOWER"):
        attrs["auto_pad"] = mode
    else:
        b, e = expected_conv_pads(mode, SPATIAL[rank], KERNEL[rank], strides, dilations)
        attrs["pads"] = b + e
    return attrs


def conv_reference(x, w, b, strides, dilations, begin, end, group):
    """Conv by sliding windows and einsum, in float64."""
    r = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(begin, end)))
    k = w.shape[2:]
    extent = [_dilated(k[i], dilations[i]) for i in range(r)]
    v = np.lib.stride_tricks.sliding_window_view(xp, extent, axis=tuple(range(2, 2 + r)))
    v = v[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)
          + tuple(slice(None, None, d) for d in dilations)]
    n, c = x.shape[:2]
    m = w.shape[0]
    v = v.reshape((n, group, c // group) + v.shape[2:])
    wg = w.reshape((group, m // group) + w.shape[1:])
    o, kk = "xyz"[:r], "XYZ"[:r]
    y = np.einsum(f"ngc{o}{kk},gmc{kk}->ngm{o}", v, wg).reshape((n, m) + v.shape[3:3 + r])
    return y if b is None else y + b.reshape((1, -1) + (1,) * r)


def expected_transpose_geometry(mode, spatial, kernel, strides, dilations):
    """(begin pads, end pads, output spatial, output_padding, attrs) for a ConvTranspose mode."""
    r = len(spatial)
    full = [strides[i] * (spatial[i] - 1) + _dilated(kernel[i], dilations[i]) for i in range(r)]
    attrs, opad = {}, [0] * r
    if mode in ("p0", "p1", "asym", "out_pad", "VALID"):
        begin = {"p1": [1] * r, "asym": [1, 0, 2][:r]}.get(mode, [0] * r)
        end = {"p1": [1] * r, "asym": [0, 2, 1][:r]}.get(mode, [0] * r)
        if mode == "out_pad":
            opad = [s - 1 if s > 1 else 0 for s in strides]
            attrs["output_padding"] = opad
            begin, end = [1] * r, [0] * r
        if mode == "VALID":
            attrs["auto_pad"] = "VALID"
        else:
            attrs["pads"] = begin + end
        return begin, end, [f + p - b - e for f, p, b, e in zip(full, opad, begin, end)], attrs
    if mode == "out_shape":   # one more than natural on axis 0 (a negative pad), one less elsewhere
        out = [f + (1 if i == 0 else -1) for i, f in enumerate(full)]
        attrs["output_shape"] = out
        upper = False
    else:
        out = [s * st for s, st in zip(spatial, strides)]
        attrs["auto_pad"] = mode
        upper = mode == "SAME_UPPER"
    begin, end = [], []
    for f, o in zip(full, out):
        total = f - o
        small, big = total // 2, total - total // 2
        begin.append(small if upper else big)
        end.append(big if upper else small)
    return begin, end, out, attrs


def conv_transpose_reference(x, w, b, strides, dilations, begin, out, group):
    """ConvTranspose by scattering every kernel tap, in float64."""
    r = x.ndim - 2
    n, c = x.shape[:2]
    k = w.shape[2:]
    m = w.shape[1] * group
    shift = [max(0, -p) for p in begin]
    size = [max(strides[i] * (x.shape[2 + i] - 1) + _dilated(k[i], dilations[i]), out[i] + begin[i])
            + shift[i] for i in range(r)]
    full = np.zeros((n, m) + tuple(size))
    xg = x.reshape((n, group, c // group) + x.shape[2:])
    wg = w.reshape((group, c // group, m // group) + k)
    o = "xyz"[:r]
    for tap in itertools.product(*[range(kk) for kk in k]):
        contrib = np.einsum(f"ngc{o},gcm->ngm{o}", xg, wg[(slice(None),) * 3 + tap]).reshape((n, m) + x.shape[2:])
        idx = tuple(slice(shift[i] + tap[i] * dilations[i],
                          shift[i] + tap[i] * dilations[i] + strides[i] * (x.shape[2 + i] - 1) + 1, strides[i])
                    for i in range(r))
        full[(slice(None), slice(None)) + idx] += contrib
    y = full[(slice(None), slice(None)) + tuple(slice(shift[i] + begin[i], shift[i] + begin[i] + out[i])
                                                 for i in range(r))]
    return y if b is None else y + b.reshape((1, -1) + (1,) * r)


# --------------------------------------------------------------------------- checks
def directional_gradcheck(forward, arrays, grads, rng, eps=1e-6, directions=2):
    """For each input i with analytic gradient grads[i] of L = forward(arrays) (a scalar):
    <grads[i], V> against (L(a + eps V) - L(a - eps V)) / 2 eps along random directions V."""
    for i, g in grads.items():
        for _ in range(directions):
            v = rng.standard_normal(arrays[i].shape)
            plus = [a + eps * v if j == i else a for j, a in enumerate(arrays)]
            minus = [a - eps * v if j == i else a for j, a in enumerate(arrays)]
            numeric = (forward(plus) - forward(minus)) / (2 * eps)
            analytic = float(np.sum(g * v))
            assert abs(analytic - numeric) <= 1e-6 * max(1.0, abs(numeric)), (i, analytic, numeric)


class CallCounter:
    """Counts calls of the provider's conv primitives (monkeypatched)."""

    def __init__(self, monkeypatch):
        self.calls = {}
        for name in ("conv_forward", "conv_data_grad", "conv_weight_grad", "bias_grad"):
            original = getattr(cpu_conv, name)
            monkeypatch.setattr(cpu_conv, name, self._wrap(name, original))

    def _wrap(self, name, fn):
        def wrapped(*args, **kwargs):
            self.calls[name] = self.calls.get(name, 0) + 1
            return fn(*args, **kwargs)
        return wrapped


def check_subsets(op, dy, x, w, attrs, full, monkeypatch, data_grad_fn):
    """Every subset of (dX, dW, dB) returns what the full call returned, and skips the work of
    the outputs it does not name."""
    counter = CallCounter(monkeypatch)
    primitive = {"dX": data_grad_fn, "dW": "conv_weight_grad", "dB": "bias_grad"}
    for subset in SUBSETS:
        counter.calls.clear()
        got = run_node(op, [dy, x, w], attrs=attrs, domain=MS, outputs=subset)
        assert len(got) == len(subset)
        for name, value in zip(subset, got):
            np.testing.assert_allclose(value, full[name], rtol=1e-12, atol=1e-12)
        for name, fn in primitive.items():   # (conv_data_grad may run conv_forward inside)
            assert (fn in counter.calls) == (name in subset), (subset, counter.calls)


def torch_compare(torch, fn, x, w, b, dy, expected_y):
    """Float32 forward and gradients through torch autograd, rtol 1e-4 against ours in float32."""
    xt, wt, bt = (torch.tensor(a.astype(np.float32), requires_grad=True) for a in (x, w, b))
    yt = fn(xt, wt, bt)
    yt.backward(torch.tensor(dy.astype(np.float32)))
    return yt.detach().numpy(), xt.grad.numpy(), wt.grad.numpy(), bt.grad.numpy()


def assert_close32(got, want):
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale)


def check_against_torch_padded(x, w, b, dy, want, attrs, strides, dilations, pads, group):
    """Conv and ConvGrad in float32 against PyTorch autograd's conv{1,2,3}d on the input padded
    by F.pad (ONNX pads may differ at the two ends); skipped without torch."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    r = x.ndim - 2
    torch_pads = [p for i in reversed(range(r)) for p in (pads[i], pads[r + i])]

    def fn(xt, wt, bt):
        return (F.conv1d, F.conv2d, F.conv3d)[r - 1](F.pad(xt, torch_pads), wt, bt, stride=strides,
                                                      dilation=dilations, groups=group)
    ty, tdx, tdw, tdb = torch_compare(torch, fn, x, w, b, dy, want)
    f32 = [a.astype(np.float32) for a in (dy, x, w, b)]
    assert_close32(run_node("Conv", f32[1:], attrs=attrs)[0], ty)
    for got, ref in zip(run_node("ConvGrad", f32[:3], attrs=attrs, domain=MS), (tdx, tdw, tdb)):
        assert_close32(got, ref)


def check_on_one_and_three_threads(x, w, b, dy, want, attrs, rng):
    """Serially and on three threads: Conv against `want`, ConvGrad against central differences
    in float64, both in float32 against float64.  Returns ConvGrad's (dX, dW, dB) in float64."""
    from minitrain import get_num_threads, set_num_threads

    def loss(arrs):
        return float(np.sum(dy * run_node("Conv", arrs, attrs=attrs)[0]))
    old = get_num_threads()
    try:
        for threads in (1, 3):
            set_num_threads(threads)
            np.testing.assert_allclose(run_node("Conv", [x, w, b], attrs=attrs)[0], want, rtol=1e-10, atol=1e-10)
            dx, dw, db = run_node("ConvGrad", [dy, x, w], attrs=attrs, domain=MS)
            directional_gradcheck(loss, [x, w, b], {0: dx, 1: dw, 2: db}, rng)
            f32 = [a.astype(np.float32) for a in (dy, x, w, b)]
            assert_close32(run_node("Conv", f32[1:], attrs=attrs)[0], want)
            for got, ref in zip(run_node("ConvGrad", f32[:3], attrs=attrs, domain=MS), (dx, dw, db)):
                assert got.dtype == np.float32
                assert_close32(got, ref)
    finally:
        set_num_threads(old)
    return dx, dw, db


# --------------------------------------------------------------------------- the matrix
@pytest.mark.parametrize("pad_mode", CONV_PADS)
@pytest.mark.parametrize("dilation", [1, 2])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("group_mode", list(GROUPS))
@pytest.mark.parametrize("rank", [1, 2, 3])
def test_conv_matrix(rank, group_mode, stride, dilation, pad_mode, monkeypatch):
    rng = np.random.default_rng(case_seed(rank, group_mode, stride, dilation, pad_mode))
    c_in, c_out, group = GROUPS[group_mode]
    spatial, kernel = SPATIAL[rank], KERNEL[rank]
    strides, dilations = (stride,) * rank, (dilation,) * rank
    attrs = conv_attrs(pad_mode, rank, strides, dilations, group)
    begin, end = expected_conv_pads(pad_mode, spatial, kernel, strides, dilations)
    x = rng.standard_normal((2, c_in) + spatial)
    w = rng.standard_normal((c_out, c_in // group) + kernel)
    b = rng.standard_normal(c_out)

    y = run_node("Conv", [x, w, b], attrs=attrs)[0]
    want = conv_reference(x, w, b, strides, dilations, begin, end, group)
    np.testing.assert_allclose(y, want, rtol=1e-10, atol=1e-10)
    assert y.dtype == np.float64

    dy = rng.standard_normal(y.shape)
    dx, dw, db = run_node("ConvGrad", [dy, x, w], attrs=attrs, domain=MS)
    assert dx.shape == x.shape and dw.shape == w.shape and db.shape == b.shape

    def loss(arrs):
        return float(np.sum(dy * run_node("Conv", arrs, attrs=attrs)[0]))
    directional_gradcheck(loss, [x, w, b], {0: dx, 1: dw, 2: db}, rng)
    if rank == 1:   # element by element too, through the gradient builder (cheap at rank 1)
        gradcheck("Conv", [x, w, b], attrs, rtol=1e-6, atol=FD_ATOL)
    check_subsets("ConvGrad", dy, x, w, attrs, {"dX": dx, "dW": dw, "dB": db}, monkeypatch, "conv_data_grad")

    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    conv = (F.conv1d, F.conv2d, F.conv3d)[rank - 1]
    torch_pads = [p for i in reversed(range(rank)) for p in (begin[i], end[i])]

    def fn(xt, wt, bt):
        return conv(F.pad(xt, torch_pads), wt, bt, stride=strides, dilation=dilations, groups=group)
    ty, tdx, tdw, tdb = torch_compare(torch, fn, x, w, b, dy, want)
    f32 = [a.astype(np.float32) for a in (x, w, b, dy)]
    assert_close32(run_node("Conv", f32[:3], attrs=attrs)[0], ty)
    for got, ref in zip(run_node("ConvGrad", [f32[3], f32[0], f32[1]], attrs=attrs, domain=MS), (tdx, tdw, tdb)):
        assert got.dtype == np.float32
        assert_close32(got, ref)


@pytest.mark.parametrize("pad_mode", T_PADS)
@pytest.mark.parametrize("dilation", [1, 2])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("group_mode", list(T_GROUPS))
@pytest.mark.parametrize("rank", [1, 2, 3])
def test_conv_transpose_matrix(rank, group_mode, stride, dilation, pad_mode, monkeypatch):
    rng = np.random.default_rng(case_seed("T", rank, group_mode, stride, dilation, pad_mode))
    c_in, c_out, group = T_GROUPS[group_mode]
    spatial, kernel = tuple(s - 1 for s in SPATIAL[rank]), KERNEL[rank]
    strides, dilations = (stride,) * rank, (dilation,) * rank
    begin, end, out, attrs = expected_transpose_geometry(pad_mode, spatial, kernel, strides, dilations)
    attrs.update(strides=list(strides), dilations=list(dilations), group=group)
    x = rng.standard_normal((2, c_in) + spatial)
    w = rng.standard_normal((c_in, c_out // group) + kernel)
    b = rng.standard_normal(c_out)

    y = run_node("ConvTranspose", [x, w, b], attrs=attrs)[0]
    want = conv_transpose_reference(x, w, b, strides, dilations, begin, out, group)
    assert y.shape == (2, c_out) + tuple(out)
    np.testing.assert_allclose(y, want, rtol=1e-10, atol=1e-10)

    dy = rng.standard_normal(y.shape)
    dx, dw, db = run_node("ConvTransposeGrad", [dy, x, w], attrs=attrs, domain=MS)

    def loss(arrs):
        return float(np.sum(dy * run_node("ConvTranspose", arrs, attrs=attrs)[0]))
    directional_gradcheck(loss, [x, w, b], {0: dx, 1: dw, 2: db}, rng)
    if rank == 1:
        gradcheck("ConvTranspose", [x, w, b], attrs, rtol=1e-6, atol=FD_ATOL)
    check_subsets("ConvTransposeGrad", dy, x, w, attrs, {"dX": dx, "dW": dw, "dB": db}, monkeypatch,
                  "conv_forward")

    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    conv_t = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[rank - 1]
    natural = [strides[i] * (spatial[i] - 1) + _dilated(kernel[i], dilations[i]) for i in range(rank)]
    crop = [p for i in reversed(range(rank)) for p in (-begin[i], out[i] + begin[i] - natural[i])]

    def fn(xt, wt, bt):
        full = conv_t(xt, wt, None, stride=strides, dilation=dilations, groups=group)
        return F.pad(full, crop) + bt.reshape((1, -1) + (1,) * rank)
    ty, tdx, tdw, tdb = torch_compare(torch, fn, x, w, b, dy, want)
    f32 = [a.astype(np.float32) for a in (x, w, b, dy)]
    assert_close32(run_node("ConvTranspose", f32[:3], attrs=attrs)[0], ty)
    grads = run_node("ConvTransposeGrad", [f32[3], f32[0], f32[1]], attrs=attrs, domain=MS)
    for got, ref in zip(grads, (tdx, tdw, tdb)):
        assert_close32(got, ref)


# --------------------------------------------------------------------------- special paths
@pytest.mark.parametrize("shape,kernel,attrs", [
    ((2, 6, 8, 9), (5, 6, 1, 1), {}),                                    # pointwise: no im2col
    ((2, 6, 8, 9), (6, 3, 1, 1), {"group": 2}),
    ((2, 6, 8, 9), (5, 6, 1, 1), {"strides": [2, 2]}),                   # 1x1 strided: gathers
    ((1, 3, 40, 45), (8, 3, 3, 3), {"pads": [1, 1, 1, 1]}),              # N=1: one item, several tiles
    ((3, 16, 30, 31), (8, 16, 3, 3), {"pads": [2, 1, 0, 2], "strides": [2, 1]}),  # several tiles
    ((4, 5, 50), (7, 5, 9), {"pads": [4, 4], "dilations": [3]}),
    ((2, 6, 9, 9), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}),    # depthwise, multiplier 1
    ((2, 1, 12, 11), (5, 1, 5, 5), {"pads": [2, 2, 2, 2]}),              # single input channel
    ((2, 3, 5, 6, 7), (4, 3, 1, 1, 1), {}),
    ((2, 3, 9000), (5, 3, 3), {"pads": [1, 1]}),                          # long samples: kernel B in pieces
])
def test_special_paths_against_reference(shape, kernel, attrs, rng):
    x, w, b = rng.standard_normal(shape), rng.standard_normal(kernel), rng.standard_normal(kernel[0])
    r = len(shape) - 2
    strides, dilations = attrs.get("strides", [1] * r), attrs.get("dilations", [1] * r)
    pads = attrs.get("pads", [0] * 2 * r)
    group = attrs.get("group", 1)
    y = run_node("Conv", [x, w, b], attrs=attrs)[0]
    np.testing.assert_allclose(y, conv_reference(x, w, b, strides, dilations, pads[:r], pads[r:], group),
                               rtol=1e-10, atol=1e-10)
    dy = rng.standard_normal(y.shape)
    dx, dw, db = run_node("ConvGrad", [dy, x, w], attrs=attrs, domain=MS)

    def loss(arrs):
        return float(np.sum(dy * run_node("Conv", arrs, attrs=attrs)[0]))
    directional_gradcheck(loss, [x, w, b], {0: dx, 1: dw, 2: db}, rng)
    for threads in (1, 3):       # serial and uneven OpenMP splits give the same answer
        from minitrain import get_num_threads, set_num_threads
        old = get_num_threads()
        set_num_threads(threads)
        try:
            for got, ref in zip(run_node("ConvGrad", [dy, x, w], attrs=attrs, domain=MS), (dx, dw, db)):
                np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10)
        finally:
            set_num_threads(old)


@pytest.mark.parametrize("layout", ["shifted", "unrolled"])
@pytest.mark.parametrize("shape,kernel,attrs", [
    ((5, 3, 7, 9), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((5, 4, 9, 8), (6, 2, 3, 2), {"group": 2, "pads": [1, 0, 2, 1], "dilations": [2, 1]}),
    ((5, 3, 9, 11), (4, 3, 3, 3), {"strides": [2, 3], "pads": [1, 2, 0, 1], "dilations": [1, 2]}),
    ((3, 2, 4, 5, 6), (4, 2, 2, 3, 3), {"strides": [1, 2, 2], "pads": [1, 0, 1, 0, 1, 2]}),
    ((7, 3, 11), (5, 3, 4), {"pads": [2, 1], "dilations": [3]}),
    ((4, 6, 8, 9), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}),
])
def test_both_grid_layouts_agree_with_the_reference(layout, shape, kernel, attrs, rng, monkeypatch):
    """The direct kernels' shifted grid and width-unrolled grid (ext/conv_plan.h), forced for
    every primitive (depthwise ones too, which route to the depthwise kernels at stride 1):
    forward, data and weight gradient against the reference in float64 and float32, with batches
    that leave a short last item, serially and on three threads."""
    monkeypatch.setattr(cpu_conv, "unrolls", lambda geom, kernel="forward": layout == "unrolled")
    default_route = cpu_conv.route
    monkeypatch.setattr(cpu_conv, "route", lambda geom, n, nt: "direct" if default_route(geom, n, nt) == "depthwise"
                        else default_route(geom, n, nt))
    r = len(shape) - 2
    strides, dilations = attrs.get("strides", [1] * r), attrs.get("dilations", [1] * r)
    pads = attrs.get("pads", [0] * 2 * r)
    x, w, b = rng.standard_normal(shape), rng.standard_normal(kernel), rng.standard_normal(kernel[0])
    want = conv_reference(x, w, b, strides, dilations, pads[:r], pads[r:], attrs.get("group", 1))
    dy = rng.standard_normal(want.shape)
    check_on_one_and_three_threads(x, w, b, dy, want, attrs, rng)


# (x shape, w shape, attributes) of depthwise convolutions at stride 1: ranks 1-3, multipliers 1
# and 2, zero, symmetric, asymmetric and kernel-sized pads, dilations, widths that are no multiple
# of a vector (rows of one to five vectors), a kernel wider than the image, batch 1.
DEPTHWISE_CASES = [
    ((3, 4, 37), (4, 1, 5), {"group": 4, "pads": [2, 1], "dilations": [2]}),
    ((2, 3, 19), (6, 1, 3), {"group": 3}),
    ((2, 6, 9, 9), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}),
    ((3, 5, 11, 19), (5, 1, 3, 3), {"group": 5, "pads": [1, 0, 2, 1], "dilations": [2, 1]}),
    ((2, 4, 7, 21), (8, 1, 3, 5), {"group": 4, "pads": [1, 2, 1, 2]}),
    ((1, 3, 10, 33), (3, 1, 2, 3), {"group": 3}),
    ((2, 2, 5, 70), (2, 1, 3, 3), {"group": 2, "pads": [1, 1, 1, 1], "dilations": [1, 3]}),
    ((2, 3, 6, 13), (3, 1, 3, 3), {"group": 3, "pads": [3, 0, 3, 4]}),
    ((2, 2, 3, 4), (2, 1, 3, 7), {"group": 2, "pads": [1, 3, 1, 3]}),
    ((2, 4, 5, 6), (4, 1, 1, 1), {"group": 4}),
    ((2, 3, 4, 5, 6), (3, 1, 2, 3, 2), {"group": 3, "pads": [1, 0, 1, 0, 1, 1]}),
    ((1, 2, 5, 4, 9), (4, 1, 3, 2, 2), {"group": 2, "pads": [2, 1, 0, 1, 0, 2], "dilations": [2, 1, 3]}),
]


@pytest.mark.parametrize("shape,kernel,attrs", DEPTHWISE_CASES)
def test_depthwise_kernels_against_reference(shape, kernel, attrs, rng, monkeypatch):
    """The in-place depthwise kernels (ext/conv_depthwise.pyx), which these convolutions route
    to: forward against the reference, dX, dW and dB against central differences in float64 and
    against the GEMM route, float32 against float64, serially and on three threads, and against
    PyTorch autograd where it is installed."""
    r = len(shape) - 2
    dilations, pads, group = attrs.get("dilations", [1] * r), attrs.get("pads", [0] * 2 * r), attrs["group"]
    geom = cpu_conv.geometry_for("conv", "Conv", shape, kernel, attrs)
    assert all(cpu_conv.route(geom, shape[0], nt) == "depthwise" for nt in (1, 2, 3))
    x, w, b = rng.standard_normal(shape), rng.standard_normal(kernel), rng.standard_normal(kernel[0])
    want = conv_reference(x, w, b, [1] * r, dilations, pads[:r], pads[r:], group)
    dy = rng.standard_normal(want.shape)
    dx, dw, db = check_on_one_and_three_threads(x, w, b, dy, want, attrs, rng)
    monkeypatch.setattr(cpu_conv, "route", lambda geom, n, nt: "gemm")
    for got, ref in zip(run_node("ConvGrad", [dy, x, w], attrs=attrs, domain=MS), (dx, dw, db)):
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10)
    monkeypatch.undo()
    check_against_torch_padded(x, w, b, dy, want, attrs, [1] * r, dilations, pads, group)


@pytest.mark.parametrize("x_shape,w_shape,attrs,expected", [
    ((2, 4, 9, 9), (4, 1, 3, 3), {"group": 4}, "depthwise"),
    ((2, 4, 9, 9), (8, 1, 3, 3), {"group": 4}, "depthwise"),            # multiplier 2
    ((2, 4, 9, 9), (12, 1, 3, 3), {"group": 4}, "direct"),              # multiplier 3
    ((2, 4, 9, 9), (4, 1, 3, 3), {"group": 4, "strides": [2, 1]}, "depthwise_strided"),
    ((2, 4, 9, 9), (8, 1, 3, 3), {"group": 4, "strides": [2, 2]}, "depthwise_strided"),
    ((2, 4, 9, 9), (4, 1, 3, 3), {"group": 4, "strides": [3, 1]}, "direct"),          # stride 3
    ((2, 4, 9, 9), (4, 2, 3, 3), {"group": 2}, "direct"),               # two image channels per group
    ((2, 1, 9, 9), (6, 1, 5, 5), {}, "direct"),                         # LeNet's first layer
])
def test_depthwise_route_rule(x_shape, w_shape, attrs, expected):
    """One image channel and at most DEPTHWISE_MAX_MULTIPLIER column channels per group: stride 1,
    or strides up to DEPTHWISE_MAX_STRIDE on the stride-1 grid."""
    geom = cpu_conv.geometry_for("conv", "Conv", x_shape, w_shape, attrs)
    assert cpu_conv.route(geom, x_shape[0], 2) == expected


# (x shape, w shape, attributes) of strided depthwise convolutions (route "depthwise_strided"):
# ranks 1-3, multipliers 1 and 2, strides 2 on some axes, pads that leave the last image points
# unread, dilations, MobileNet's 3x3 stride-2 layer.
STRIDED_DEPTHWISE_CASES = [
    ((3, 4, 37), (4, 1, 5), {"group": 4, "strides": [2], "pads": [2, 1], "dilations": [2]}),
    ((2, 6, 9, 9), (6, 1, 3, 3), {"group": 6, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((2, 4, 10, 9), (8, 1, 3, 3), {"group": 4, "strides": [2, 1], "pads": [0, 1, 0, 0]}),
    ((3, 5, 11, 20), (5, 1, 3, 3), {"group": 5, "strides": [1, 2], "pads": [1, 0, 2, 1], "dilations": [2, 1]}),
    ((2, 3, 5, 6, 7), (3, 1, 3, 2, 3), {"group": 3, "strides": [2, 1, 2], "pads": [1, 0, 1, 1, 1, 0]}),
]


@pytest.mark.parametrize("shape,kernel,attrs", STRIDED_DEPTHWISE_CASES)
def test_strided_depthwise_against_reference(shape, kernel, attrs, rng, monkeypatch):
    """Strided depthwise convolutions, run on the stride-1 grid: forward against the reference,
    dX, dW and dB against central differences in float64 and against the direct route, float32
    against float64, serially and on three threads, and against PyTorch autograd."""
    r = len(shape) - 2
    strides, dilations, pads = attrs["strides"], attrs.get("dilations", [1] * r), attrs["pads"]
    geom = cpu_conv.geometry_for("conv", "Conv", shape, kernel, attrs)
    assert all(cpu_conv.route(geom, shape[0], nt) == "depthwise_strided" for nt in (1, 2, 3))
    x, w, b = rng.standard_normal(shape), rng.standard_normal(kernel), rng.standard_normal(kernel[0])
    want = conv_reference(x, w, b, strides, dilations, pads[:r], pads[r:], attrs["group"])
    dy = rng.standard_normal(want.shape)
    grads = check_on_one_and_three_threads(x, w, b, dy, want, attrs, rng)
    monkeypatch.setattr(cpu_conv, "route", lambda geom, n, nt: "direct")
    for got, ref in zip(run_node("ConvGrad", [dy, x, w], attrs=attrs, domain=MS), grads):
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10)
    monkeypatch.undo()
    check_against_torch_padded(x, w, b, dy, want, attrs, strides, dilations, pads, attrs["group"])


@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((2, 4, 5, 6), (4, 1, 3, 3), {"group": 4, "strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 0]}),
    ((3, 4, 9), (4, 1, 4), {"group": 2, "strides": [2], "pads": [1, 2]}),                  # multiplier 2
])
def test_strided_depthwise_conv_transpose_matches_the_direct_route(x_shape, w_shape, attrs, rng, monkeypatch):
    """A strided ConvTranspose with one output channel per group runs its primitives on the
    stride-1 grid (its forward is their data gradient on upsampled columns, its dX their
    subsampled forward): the values of the direct route, and dX, dW, dB against central
    differences, in float64."""
    geom = cpu_conv.geometry_for("transpose", "ConvTranspose", x_shape, w_shape, attrs)
    assert cpu_conv.route(geom, x_shape[0], 2) == "depthwise_strided"
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    b = rng.standard_normal(w_shape[1] * attrs["group"])
    y = run_node("ConvTranspose", [x, w, b], attrs=attrs)[0]
    dy = rng.standard_normal(y.shape)
    grads = run_node("ConvTransposeGrad", [dy, x, w], attrs=attrs, domain=MS)

    def loss(arrs):
        return float(np.sum(dy * run_node("ConvTranspose", arrs, attrs=attrs)[0]))
    directional_gradcheck(loss, [x, w, b], dict(enumerate(grads)), rng)
    monkeypatch.setattr(cpu_conv, "route", lambda geom, n, nt: "direct")
    np.testing.assert_allclose(run_node("ConvTranspose", [x, w, b], attrs=attrs)[0], y, rtol=1e-10, atol=1e-10)
    for got, want in zip(run_node("ConvTransposeGrad", [dy, x, w], attrs=attrs, domain=MS), grads):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((2, 4, 7, 8), (4, 1, 3, 3), {"group": 4, "pads": [1, 0, 2, 1]}),                  # multiplier 1
    ((2, 4, 6, 11), (4, 1, 2, 3), {"group": 2, "dilations": [2, 1]}),                  # multiplier 2
    ((3, 2, 17), (2, 1, 4), {"group": 2, "pads": [1, 2]}),
])
def test_depthwise_conv_transpose_matches_the_gemm_route(x_shape, w_shape, attrs, rng, monkeypatch):
    """ConvTranspose with one output channel per group runs its three primitives on the
    depthwise kernels (its forward is their data gradient, its dX their forward): the same
    values as the GEMM route, in float64."""
    geom = cpu_conv.geometry_for("transpose", "ConvTranspose", x_shape, w_shape, attrs)
    assert cpu_conv.route(geom, x_shape[0], 2) == "depthwise"
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    b = rng.standard_normal(w_shape[1] * attrs["group"])
    y = run_node("ConvTranspose", [x, w, b], attrs=attrs)[0]
    dy = rng.standard_normal(y.shape)
    grads = run_node("ConvTransposeGrad", [dy, x, w], attrs=attrs, domain=MS)
    monkeypatch.setattr(cpu_conv, "route", lambda geom, n, nt: "gemm")
    np.testing.assert_allclose(run_node("ConvTranspose", [x, w, b], attrs=attrs)[0], y, rtol=1e-10, atol=1e-10)
    for got, want in zip(run_node("ConvTransposeGrad", [dy, x, w], attrs=attrs, domain=MS), grads):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


# (x shape, w shape) of 1x1 convolutions on planes of one point (route "rows"): a
# squeeze-excitation's, 1D and 3D ones, and a product past blas.SMALL_GEMM_MACS (BLAS, not the loops).
ONE_POINT_CASES = [((16, 16, 1, 1), (8, 16, 1, 1)), ((5, 3, 1), (7, 3, 1)), ((2, 4, 1, 1, 1), (6, 4, 1, 1, 1)),
                   ((64, 32, 1, 1), (32, 32, 1, 1))]


@pytest.mark.parametrize("shape,kernel", ONE_POINT_CASES)
def test_one_point_planes_against_reference(shape, kernel, rng, monkeypatch):
    """1x1 convolutions of one group on one-point planes run as one product over the batch's
    rows: forward against the reference, dX, dW and dB against central differences in float64
    and against the GEMM route, float32 against float64, serially and on three threads, and
    against PyTorch autograd."""
    r = len(shape) - 2
    geom = cpu_conv.geometry_for("conv", "Conv", shape, kernel, {})
    assert all(cpu_conv.route(geom, shape[0], nt) == "rows" for nt in (1, 2, 3))
    assert (shape[0] * shape[1] * kernel[0] >= cpu_blas.SMALL_GEMM_MACS) == (shape[0] == 64)
    x, w, b = rng.standard_normal(shape), rng.standard_normal(kernel), rng.standard_normal(kernel[0])
    want = conv_reference(x, w, b, [1] * r, [1] * r, [0] * r, [0] * r, 1)
    dy = rng.standard_normal(want.shape)
    grads = check_on_one_and_three_threads(x, w, b, dy, want, {}, rng)
    monkeypatch.setattr(cpu_conv, "route", lambda geom, n, nt: "gemm")
    for got, ref in zip(run_node("ConvGrad", [dy, x, w], domain=MS), grads):
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10)
    monkeypatch.undo()
    check_against_torch_padded(x, w, b, dy, want, {}, [1] * r, [1] * r, [0] * (2 * r), 1)


@pytest.mark.parametrize("x_shape,w_shape", [((16, 8, 1, 1), (8, 16, 1, 1)), ((64, 32, 1), (32, 48, 1))])
def test_one_point_conv_transpose_matches_the_gemm_route(x_shape, w_shape, rng, monkeypatch):
    """ConvTranspose 1x1 on one-point planes runs its primitives as products over the batch's
    rows (its forward is their data gradient, with the bias): the GEMM route's values, and dX,
    dW, dB against central differences, in float64."""
    geom = cpu_conv.geometry_for("transpose", "ConvTranspose", x_shape, w_shape, {})
    assert cpu_conv.route(geom, x_shape[0], 2) == "rows"
    x, w, b = rng.standard_normal(x_shape), rng.standard_normal(w_shape), rng.standard_normal(w_shape[1])
    y = run_node("ConvTranspose", [x, w, b])[0]
    dy = rng.standard_normal(y.shape)
    grads = run_node("ConvTransposeGrad", [dy, x, w], domain=MS)

    def loss(arrs):
        return float(np.sum(dy * run_node("ConvTranspose", arrs)[0]))
    directional_gradcheck(loss, [x, w, b], dict(enumerate(grads)), rng)
    monkeypatch.setattr(cpu_conv, "route", lambda geom, n, nt: "gemm")
    np.testing.assert_allclose(run_node("ConvTranspose", [x, w, b])[0], y, rtol=1e-10, atol=1e-10)
    for got, want in zip(run_node("ConvTransposeGrad", [dy, x, w], domain=MS), grads):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("x_shape,w_shape,attrs,begin,out", [
    # output_shape one past the natural size with SAME_UPPER: a negative begin pad
    ((2, 2, 5), (2, 3, 3), {"strides": [2], "auto_pad": "SAME_UPPER", "output_shape": [12]}, [-1], [12]),
    ((1, 4, 3, 4), (4, 1, 3, 2), {"strides": [2, 3], "group": 4, "auto_pad": "SAME_UPPER",
                                  "output_shape": [9, 12]}, [-1, -1], [9, 12]),
    ((2, 3, 4), (3, 2, 2), {"strides": [3], "output_padding": [2]}, [0], [13]),   # points no tap reaches
])
def test_conv_transpose_edge_geometry(x_shape, w_shape, attrs, begin, out, rng):
    r = len(x_shape) - 2
    strides, dilations = attrs["strides"], attrs.get("dilations", [1] * r)
    group = attrs.get("group", 1)
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    b = rng.standard_normal(w_shape[1] * group)
    y = run_node("ConvTranspose", [x, w, b], attrs=attrs)[0]
    np.testing.assert_allclose(y, conv_transpose_reference(x, w, b, strides, dilations, begin, out, group),
                               rtol=1e-10, atol=1e-10)
    dy = rng.standard_normal(y.shape)
    dx, dw, db = run_node("ConvTransposeGrad", [dy, x, w], attrs=attrs, domain=MS)

    def loss(arrs):
        return float(np.sum(dy * run_node("ConvTranspose", arrs, attrs=attrs)[0]))
    directional_gradcheck(loss, [x, w, b], {0: dx, 1: dw, 2: db}, rng)


@pytest.mark.parametrize("op,x_shape,w_shape,attrs", [
    ("Conv", (2, 4, 9, 8), (6, 2, 3, 2), {"group": 2, "pads": [1, 0, 2, 1], "dilations": [2, 1]}),
    ("Conv", (2, 3, 9, 8), (4, 3, 3, 3), {"strides": [2, 3], "pads": [1, 1, 1, 1]}),
    ("Conv", (2, 3, 4, 5, 6), (4, 3, 2, 3, 2), {"strides": [1, 2, 1], "auto_pad": "SAME_LOWER"}),
    ("ConvTranspose", (2, 4, 5, 6), (4, 3, 3, 2), {"group": 2, "strides": [2, 1], "pads": [1, 0, 0, 1],
                                                   "output_padding": [1, 0]}),
    ("ConvTranspose", (2, 3, 7), (3, 2, 4), {"strides": [3], "dilations": [2]}),
    # stride-1 rows that share their pad columns (shared_pad_width): uneven, wide and end-only pads
    ("Conv", (2, 3, 6, 7), (4, 3, 3, 3), {"pads": [1, 3, 1, 0], "dilations": [1, 2]}),
    ("Conv", (2, 3, 6, 7), (4, 3, 2, 4), {"pads": [0, 0, 0, 3]}),
    ("Conv", (2, 2, 5, 4), (3, 2, 1, 2), {"pads": [0, 4, 0, 4]}),
])
def test_gemm_and_direct_kernels_agree(op, x_shape, w_shape, attrs, rng, monkeypatch):
    """im2col/col2im + BLAS (for 1x1 convolutions and batches too small for the threads) gives
    what the direct kernels give, for every primitive."""
    c_out = w_shape[0] if op == "Conv" else w_shape[1] * attrs.get("group", 1)
    x, w, b = rng.standard_normal(x_shape), rng.standard_normal(w_shape), rng.standard_normal(c_out)
    y = run_node(op, [x, w, b], attrs=attrs)[0]
    dy = rng.standard_normal(y.shape)
    grads = run_node(op + "Grad", [dy, x, w], attrs=attrs, domain=MS)
    assert cpu_conv.route(cpu_conv.geometry_for("conv" if op == "Conv" else "transpose", op, x_shape, w_shape,
                                                attrs), 2, 2) == "direct"
    monkeypatch.setattr(cpu_conv, "route", lambda geom, n, nt: "gemm")
    np.testing.assert_allclose(run_node(op, [x, w, b], attrs=attrs)[0], y, rtol=1e-10, atol=1e-10)
    for got, want in zip(run_node(op + "Grad", [dy, x, w], attrs=attrs, domain=MS), grads):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("op,inputs,attrs,size", [
    ("Conv", [(2, 3, 5, 5), (4, 3, 1, 1)], {}, 25),                                  # column plane
    ("Conv", [(1, 6, 4, 4), (2, 6, 2, 2)], {"strides": [2, 2]}, 24),                  # im2col depth
    ("ConvTranspose", [(1, 2, 4, 4), (2, 8, 3, 3)], {"strides": [2, 2]}, 72),         # im2col depth of Y
    ("ConvGrad", [(2, 4, 5, 5), (2, 3, 5, 5), (4, 3, 1, 1)], {}, 25),
    ("ConvTransposeGrad", [(2, 4, 5, 5), (2, 3, 5, 5), (3, 4, 1, 1)], {}, 25),
])
def test_gemm_route_refuses_dims_beyond_blas_ints(op, inputs, attrs, size, rng, monkeypatch):
    """BLAS takes 32-bit int dimensions: the GEMM route refuses larger ones, naming the op and
    the size, instead of handing BLAS a wrapped-around int (the limit is lowered here)."""
    arrays = [rng.standard_normal(shape) for shape in inputs]
    domain = MS if op.endswith("Grad") else ""
    monkeypatch.setattr(cpu_conv, "route", lambda geom, n, nt: "gemm")
    run_node(op, arrays, attrs=attrs, domain=domain)
    monkeypatch.setattr(cpu_conv, "BLAS_INT_MAX", 20)
    with pytest.raises(ShapeError, match=rf"^{op}: .* is {size}, beyond the 20 "):
        run_node(op, arrays, attrs=attrs, domain=domain)


def test_non_contiguous_inputs_are_not_written(rng):
    x = rng.standard_normal((2, 8, 7, 9))[:, ::2]
    w = rng.standard_normal((3, 4, 3, 3))
    x_before, w_before = x.copy(), w.copy()
    y = run_node("Conv", [x, w], attrs={"pads": [1, 1, 1, 1]})[0]
    np.testing.assert_allclose(y, conv_reference(np.ascontiguousarray(x), w, None, (1, 1), (1, 1), (1, 1), (1, 1), 1),
                               rtol=1e-10, atol=1e-10)
    run_node("ConvGrad", [np.ones_like(y), x, w], attrs={"pads": [1, 1, 1, 1]}, domain=MS)
    assert np.array_equal(x, x_before) and np.array_equal(w, w_before)


def test_kernel_shape_is_inferred_or_checked(rng):
    x, w = rng.standard_normal((1, 2, 6, 6)), rng.standard_normal((3, 2, 3, 2))
    y1 = run_node("Conv", [x, w])[0]
    y2 = run_node("Conv", [x, w], attrs={"kernel_shape": [3, 2]})[0]
    assert y1.shape == (1, 3, 4, 5)
    np.testing.assert_array_equal(y1, y2)


@pytest.mark.parametrize("opset", [1, 11])
def test_both_opset_versions_run(opset, rng):
    x, w = rng.standard_normal((1, 2, 5)), rng.standard_normal((3, 2, 3))
    y = run_node("Conv", [x, w], opset=opset, attrs={"auto_pad": "SAME_UPPER"})[0]
    assert y.shape == (1, 3, 5)
    yt = run_node("ConvTranspose", [x, w.transpose(1, 0, 2).copy()], opset=opset)[0]
    assert yt.shape == (1, 3, 7)


def test_empty_batch(rng):
    x, w = np.zeros((0, 2, 5, 5)), rng.standard_normal((3, 2, 3, 3))
    y = run_node("Conv", [x, w])[0]
    assert y.shape == (0, 3, 3, 3)
    dx, dw, db = run_node("ConvGrad", [y, x, w], domain=MS)
    assert dx.shape == x.shape and not dw.any() and not db.any()


# --------------------------------------------------------------------------- through the builder
@pytest.mark.parametrize("op,x_shape,w_shape,attrs", [
    ("Conv", (2, 4, 7), (6, 2, 3), {"group": 2, "strides": [2], "pads": [1, 2]}),
    ("Conv", (2, 3, 5, 6), (4, 3, 3, 2), {"auto_pad": "SAME_LOWER", "dilations": [2, 1]}),
    ("Conv", (1, 4, 4, 5, 4), (4, 1, 2, 3, 2), {"group": 4, "strides": [1, 2, 1], "pads": [1, 0, 1, 0, 1, 1]}),
    ("ConvTranspose", (2, 4, 5), (4, 3, 3), {"group": 2, "strides": [2], "output_padding": [1]}),
    ("ConvTranspose", (1, 2, 4, 3), (2, 3, 2, 3), {"strides": [2, 1], "pads": [1, 0, 0, 1]}),
    ("ConvTranspose", (1, 2, 3, 3, 2), (2, 1, 2, 2, 3), {"group": 2, "auto_pad": "SAME_UPPER", "strides": [2, 1, 2]}),
])
def test_gradcheck_every_element(op, x_shape, w_shape, attrs, rng):
    """Element-by-element central differences, the gradient graph coming from the builder."""
    c_out = w_shape[0] if op == "Conv" else w_shape[1] * attrs.get("group", 1)
    inputs = [rng.standard_normal(x_shape), rng.standard_normal(w_shape), rng.standard_normal(c_out)]
    gradcheck(op, inputs, attrs, rtol=1e-6, atol=FD_ATOL)


def conv_relu_graph(rng, dtype=np.float64):
    g = Graph(name="conv_relu")
    g.add_input("x", dtype, ("N", 3, 6, 6))
    g.add_initializer("w", rng.standard_normal((4, 3, 3, 3)).astype(dtype))
    g.add_initializer("b", rng.standard_normal(4).astype(dtype))
    h = g.add_node("Conv", ["x", "w", "b"], attrs={"pads": [1, 1, 1, 1], "strides": [2, 2]}, name="conv")
    y = g.add_node("Relu", [h], name="relu")
    g.outputs.append(y)
    return g


def test_conv_relu_graph_gradients(rng):
    g = conv_relu_graph(rng)
    gradcheck_graph(g, {"x": rng.standard_normal((2, 3, 6, 6))}, ["w", "b", "x"])


@pytest.mark.parametrize("wrt,expected", [
    (["w", "b"], ["", "w", "b"]),       # first layer: no dX
    (["x"], ["x", "", ""]),             # frozen weights and bias: dX only
    (["x", "b"], ["x", "", "b"]),
])
def test_builder_asks_only_for_needed_gradients(wrt, expected, rng):
    g = conv_relu_graph(rng)
    g.add_input("seed", np.float64, ("N", 4, 3, 3))
    full, grads = build_gradient_graph(g, g.outputs[0], wrt, seeds={g.outputs[0]: "seed"})
    conv_grads = [n for n in full.nodes if n.op_type == "ConvGrad"]
    assert len(conv_grads) == 1
    node = conv_grads[0]
    assert node.domain == MS
    assert node.attrs == {"pads": [1, 1, 1, 1], "strides": [2, 2]}
    assert [bool(o) for o in node.outputs] == [bool(e) for e in expected]
    from minitrain import Executor
    from minitrain.scheduler import schedule
    feeds = {"x": rng.standard_normal((2, 3, 6, 6)), "seed": rng.standard_normal((2, 4, 3, 3))}
    got = Executor(schedule(full, [grads[n] for n in wrt])).run(feeds)
    assert all(got[grads[n]].shape == (feeds["x"].shape if n == "x" else g.initializers[n].shape) for n in wrt)


def test_conv_transpose_builder_emits_one_node(rng):
    g = Graph()
    g.add_input("x", np.float64, (1, 2, 4, 4))
    g.add_initializer("w", rng.standard_normal((2, 3, 3, 3)))
    y = g.add_node("ConvTranspose", ["x", "w"], attrs={"strides": [2, 2], "output_padding": [1, 1]})
    g.outputs.append(y)
    g.add_input("seed", np.float64, (1, 3, 10, 10))
    full, _ = build_gradient_graph(g, y, ["w"], seeds={y: "seed"})
    nodes = [n for n in full.nodes if n.op_type == "ConvTransposeGrad"]
    assert len(nodes) == 1 and nodes[0].outputs[0] == "" and nodes[0].outputs[1] and nodes[0].outputs[2] == ""
    assert nodes[0].attrs["output_padding"] == [1, 1]


# --------------------------------------------------------------------------- bad input
X2 = np.ones((1, 4, 5, 5), np.float32)
W2 = np.ones((6, 2, 3, 3), np.float32)


@pytest.mark.parametrize("op,inputs,attrs,error,words", [
    ("Conv", [X2, W2], {"group": 3}, ShapeError, ["Conv", "4 channels", "group=3"]),
    ("Conv", [X2, np.ones((6, 3, 3, 3), np.float32)], {"group": 1}, ShapeError, ["Conv", "'W'", "3 input channels", "4"]),
    ("Conv", [X2, np.ones((5, 2, 3, 3), np.float32)], {"group": 2}, ShapeError, ["Conv", "'W'", "5", "group=2"]),
    ("Conv", [X2, np.ones((6, 4, 7, 3), np.float32)], {}, ShapeError, ["Conv", "kernel is larger", "7"]),
    ("Conv", [X2, W2], {"group": 2, "pads": [1, -1, 0, 0]}, OpAttributeError, ["Conv", "'pads'", "-1"]),
    ("Conv", [X2, W2], {"group": 2, "strides": [0, 1]}, OpAttributeError, ["Conv", "'strides'", "[0, 1]"]),
    ("Conv", [X2, W2], {"group": 2, "dilations": [1, -2]}, OpAttributeError, ["Conv", "'dilations'", "-2"]),
    ("Conv", [X2, W2], {"group": 2, "pads": [1, 1]}, OpAttributeError, ["Conv", "'pads'", "4 entries"]),
    ("Conv", [X2, W2], {"group": 2, "strides": [1, 1, 1]}, OpAttributeError, ["Conv", "'strides'", "2 entries"]),
    ("Conv", [X2, W2], {"group": 2, "kernel_shape": [3, 2]}, OpAttributeError, ["Conv", "kernel_shape", "[3, 2]"]),
    ("Conv", [X2, W2], {"group": 2, "auto_pad": "SAME"}, OpAttributeError, ["Conv", "auto_pad", "SAME"]),
    ("Conv", [X2, W2], {"group": 2, "auto_pad": "VALID", "pads": [1, 1, 1, 1]}, OpAttributeError,
     ["Conv", "pads", "VALID"]),
    ("Conv", [X2, W2], {"group": 0}, OpAttributeError, ["Conv", "group", "0"]),
    ("Conv", [X2, W2], {"group": 2, "alpha": 1.0}, OpAttributeError, ["Conv", "alpha"]),
    ("Conv", [X2, np.ones((6, 2, 3), np.float32)], {"group": 2}, ShapeError, ["Conv", "rank 3", "rank 4"]),
    ("Conv", [np.ones((4, 5, 5), np.float32)[None, None], W2], {}, ShapeError, ["Conv", "rank 5"]),
    ("Conv", [np.ones((1, 4, 2, 2, 2, 2), np.float32), W2], {}, ShapeError, ["Conv", "rank 6"]),
    ("Conv", [X2, W2.astype(np.float64)], {"group": 2}, DTypeError, ["Conv", "float64", "float32"]),
    ("Conv", [X2, W2, np.ones(6, np.float64)], {"group": 2}, DTypeError, ["Conv", "'B'", "float64"]),
    ("Conv", [X2, W2, np.ones(5, np.float32)], {"group": 2}, ShapeError, ["Conv", "'B'", "(5,)"]),
    ("Conv", [X2.astype(np.int32), W2.astype(np.int32)], {"group": 2}, DTypeError, ["Conv", "int32"]),
    ("ConvGrad", [np.ones((1, 6, 4, 4), np.float32), X2, W2], {"group": 2}, ShapeError,
     ["ConvGrad", "'dY'", "(1, 6, 4, 4)", "(1, 6, 3, 3)"]),
    ("ConvGrad", [np.ones((1, 6, 3, 3), np.float32), X2, W2], {"group": 2, "output_padding": [1, 1]},
     OpAttributeError, ["ConvGrad", "output_padding"]),
    ("ConvGrad", [np.ones((1, 6, 3, 3), np.float64), X2, W2], {"group": 2}, DTypeError, ["ConvGrad", "float64"]),
    ("ConvTranspose", [X2, np.ones((3, 2, 3, 3), np.float32)], {}, ShapeError, ["ConvTranspose", "'W'", "3", "4"]),
    ("ConvTranspose", [X2, np.ones((4, 2, 3, 3), np.float32)], {"group": 3}, ShapeError,
     ["ConvTranspose", "group=3"]),
    ("ConvTranspose", [X2, np.ones((4, 2, 3, 3), np.float32)], {"pads": [4, 3, 3, 0]}, ShapeError,
     ["ConvTranspose", "empty", "pads (4, 3)"]),
    ("ConvTranspose", [X2, np.ones((4, 2, 3, 3), np.float32)], {"output_shape": [5]}, OpAttributeError,
     ["ConvTranspose", "output_shape", "2 entries"]),
    ("ConvTranspose", [X2, np.ones((4, 2, 3, 3), np.float32)], {"output_padding": [-1, 0]}, OpAttributeError,
     ["ConvTranspose", "output_padding", "-1"]),
    ("ConvTransposeGrad", [np.ones((1, 2, 5, 5), np.float32), X2, np.ones((4, 2, 3, 3), np.float32)], {},
     ShapeError, ["ConvTransposeGrad", "'dY'", "(1, 2, 7, 7)"]),
])
def test_bad_input(op, inputs, attrs, error, words):
    domain = MS if op.endswith("Grad") else ""
    with pytest.raises(error) as info:
        run_node(op, inputs, attrs=attrs, domain=domain)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


HUGE_STRIDE_CHILD = """
import numpy as np, minitrain
S = [10 ** 12]
rng = np.random.default_rng(0)
x1, w = rng.standard_normal((1, 2, 1)), rng.standard_normal((2, 1, 3))
dy3, x3, wc = rng.standard_normal((1, 1, 3)), rng.standard_normal((1, 2, 3)), rng.standard_normal((1, 2, 3))
for threads in (1, 2):            # the direct kernels, then the GEMM route (batch 1 < 2 threads)
    minitrain.set_num_threads(threads)
    (y,) = minitrain.run_node("ConvTranspose", [x1, w], attrs={"strides": S})
    np.testing.assert_allclose(y[0, 0], (x1[0, :, 0, None] * w[:, 0]).sum(0), rtol=1e-12)
    dx, dw = minitrain.run_node("ConvTransposeGrad", [dy3, x1, w], attrs={"strides": S},
                                domain="com.microsoft", outputs=["dX", "dW"])
    np.testing.assert_allclose(dx[0, :, 0], w[:, 0] @ dy3[0, 0], rtol=1e-12)
    np.testing.assert_allclose(dw[:, 0], x1[0, :, 0, None] * dy3[0, 0], rtol=1e-12)
    g = np.array([[[1.5]]])
    dx, dw = minitrain.run_node("ConvGrad", [g, x3, wc], attrs={"strides": S}, domain="com.microsoft",
                                outputs=["dX", "dW"])
    np.testing.assert_allclose(dx, 1.5 * wc, rtol=1e-12)
    np.testing.assert_allclose(dw, 1.5 * x3, rtol=1e-12)
print("ok")
"""


def test_plan_cost_does_not_grow_with_the_stride():
    """A stride of 10**12 on 3-element images: planning used to loop over every stride phase
    (4.5 s at 10**7), so this would never finish; in a child process with a time limit, so a
    regression fails instead of hanging the suite."""
    import subprocess
    import sys
    result = subprocess.run([sys.executable, "-c", HUGE_STRIDE_CHILD], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and result.stdout.split() == ["ok"], result.stderr[-2000:]


@pytest.mark.parametrize("attrs", [{"output_padding": [2]}, {"output_padding": [1], "strides": [1]},
                                   {"output_padding": [3], "strides": [2], "dilations": [3]}])
def test_output_padding_must_be_smaller_than_stride_or_dilation(attrs):
    """As PyTorch requires: a larger output_padding only appends outputs no input reaches."""
    x, w = np.ones((1, 2, 4)), np.ones((2, 3, 3))
    with pytest.raises(OpAttributeError, match=r"ConvTranspose: attribute 'output_padding'=\[\d\] must be smaller"):
        run_node("ConvTranspose", [x, w], attrs={"strides": [2], **attrs})
    (y,) = run_node("ConvTranspose", [x, w], attrs={"strides": [2], "output_padding": [1]})
    assert y.shape == (1, 3, 10)


# --------------------------------------------------------------------------- zero input channels
# With no input channels every sum of the convolution is empty: Y is the bias (zeros without
# one), as ONNX's reference evaluator gives, and the gradients are empty or zero.
@pytest.mark.parametrize("with_bias", [True, False])
def test_zero_input_channels_give_the_bias(with_bias, rng):
    bias = rng.standard_normal(3)
    expected = np.broadcast_to((bias if with_bias else np.zeros(3))[:, None], (2, 3, 4))
    optional = [bias] if with_bias else []
    (y,) = run_node("Conv", [np.zeros((2, 0, 5)), np.zeros((3, 0, 2))] + optional)
    np.testing.assert_array_equal(y, expected)
    (y,) = run_node("FusedConv", [np.zeros((2, 0, 5)), np.zeros((3, 0, 2))] + optional,
                    attrs={"activation": "LeakyRelu", "activation_params": [0.5]}, domain=MS)
    np.testing.assert_array_equal(y, np.where(expected > 0, expected, 0.5 * expected))
    (y,) = run_node("ConvTranspose", [np.zeros((2, 0, 5)), np.zeros((0, 3, 3))] + optional)
    np.testing.assert_array_equal(y, np.broadcast_to(expected[:, :, :1], (2, 3, 7)))


@pytest.mark.parametrize("group", [1, 3])
def test_zero_input_channels_gradients(group, rng):
    dy = rng.standard_normal((2, group, 6))
    x, w = np.zeros((2, 0, 5)), np.zeros((0, 1, 2))
    dx, dw, db = run_node("ConvTransposeGrad", [dy, x, w], attrs={"group": group}, domain=MS)
    assert dx.shape == x.shape and dw.shape == w.shape
    np.testing.assert_allclose(db, dy.sum(axis=(0, 2)), rtol=1e-12)
    dy = rng.standard_normal((2, 3, 4))
    dx, dw, db = run_node("ConvGrad", [dy, x, np.zeros((3, 0, 2))], domain=MS)
    assert dx.shape == x.shape and dw.shape == (3, 0, 2)
    np.testing.assert_allclose(db, dy.sum(axis=(0, 2)), rtol=1e-12)
