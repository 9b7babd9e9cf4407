"""Every registered kernel against the op table (op_table.py), parametrized from the registry
itself: one test per (domain, op, version range, provider, element type).

- test_forward: the CPU kernel against the row's NumPy reference (float64 CPU kernel where the
  row has none), on contiguous and non-contiguous inputs, leaving its inputs as they were.
- test_gradient: central differences in float64 of every differentiable input, through the
  op's gradient builder and the gradient kernels it emits (minitrain.gradcheck).
- test_cuda_against_cpu: each CUDA kernel against the CPU kernel (float16 and bfloat16 against
  float32 on the same rounded inputs), or the reference where the CPU has no kernel, on contiguous and
  non-contiguous inputs.  Without a usable CUDA provider its kernels cannot be listed: one
  placeholder case stands for them, skipped like every `cuda` test.
- test_every_kernel_has_a_row: a kernel registered without a row fails, by name.
- test_row_matches_the_schema, test_gradient_op_is_emitted_by_its_forward_op: the table's own
  claims (output names, differentiable inputs, which builder reaches a gradient op).
"""
import numpy as np
import pytest

from cuda_parity import HALF_TYPES, TOLERANCE, noncontiguous
from minitrain import run_node
from minitrain.bfloat16 import is_float
from minitrain.errors import ProviderUnavailableError
from minitrain.gradcheck import gradcheck
from minitrain.ops import get_gradient_builder, get_schema
from minitrain.providers import get_provider
from minitrain.registry import find, registered_kernels
from op_table import ROWS, row_for

NEWEST_OPSET = 100     # above every opset: what is in force there is each op's newest version


def _cuda_unavailable():
    """Why the CUDA provider cannot run here, or None (importing it registers its kernels)."""
    try:
        get_provider("cuda")
    except ProviderUnavailableError as e:
        return str(e)
    return None


CUDA_MISSING = _cuda_unavailable()


def kernel_id(kdef, dtype=None):
    domain = {"": "", "com.microsoft": "ms.", "ai.minitrain.fused": "fused."}.get(kdef.domain, kdef.domain + ".")
    end = "" if kdef.end_version is None else kdef.end_version
    return f"{domain}{kdef.op_type}-v{kdef.since_version}-{end}-{kdef.provider}" + (f"-{dtype}" if dtype else "")


def package_kernels():
    """The KernelDefs that minitrain's own modules register (test modules register a few of
    their own, for made-up ops and providers)."""
    def module(k):
        return find(k.op_type, k.domain, k.since_version, k.provider, k.type_constraints["T"][0])[1].__module__
    return [k for k in registered_kernels() if module(k).startswith("minitrain.")]


def kernels(provider, dtypes=None):
    """(KernelDef, dtype) params of every kernel minitrain registers for `provider`."""
    return [pytest.param(k, np.dtype(t), id=kernel_id(k, np.dtype(t)))
            for k in package_kernels() if k.provider == provider
            for t in k.type_constraints["T"] if dtypes is None or np.dtype(t) in dtypes]


def row_of(kdef):
    row = row_for(kdef.domain, kdef.op_type, kdef.since_version)
    assert row is not None, f"{kernel_id(kdef)} has no row in op_table.ROWS"
    return row


def runs(kdef, row, first=1):
    """(n, case, opset) for the row's cases this kernel serves, each at the first opset of the
    kernel's range (not before `first`) whose schema takes its attributes."""
    found = [(n, case, max(kdef.since_version, case.since, first)) for n, case in enumerate(row.cases)]
    found = [(n, case, opset) for n, case, opset in found if kdef.holds(opset)]
    assert found, f"{kernel_id(kdef)}: no case of its row runs at its versions"
    return found


def wanted_outputs(row, case, schema):
    return [name for name in (case.outputs or row.outputs) if name in schema.outputs]


def cast(kdef, schema, inputs, dtype):
    """The inputs of the kernel's element type cast to `dtype`: those typed T (or by another float
    type variable, BatchNormalization's T1 and T2: the table runs every float input in one type),
    or typed by a list that holds all of T's types (MemcpyFromHost's any type, Dropout's ratio)."""
    own = set(kdef.type_constraints["T"])
    out = []
    for i, x in enumerate(inputs):
        spec = schema.inputs[min(i, len(schema.inputs) - 1)]
        typed = isinstance(spec.types, str) or (not isinstance(spec.types, str) and own <= {np.dtype(t) for t in spec.types})
        out.append(x.astype(dtype) if typed and isinstance(x, np.ndarray) else x)
    return out


def fresh(inputs):
    return [None if x is None else x.copy() for x in inputs]


def run(kdef, row, case, opset, inputs, provider="cpu"):
    """The case's outputs by name, then the in-place inputs after the call (`input i`)."""
    schema = get_schema(kdef.op_type, kdef.domain, opset)
    names = wanted_outputs(row, case, schema)
    updated = [i for i in row.in_place if i < len(inputs)]
    args = list(inputs)
    if provider != "cpu":
        prov = get_provider(provider)
        args = [prov.from_numpy(x) if i in updated else x for i, x in enumerate(args)]
    got = run_node(kdef.op_type, args, attrs=case.attrs, domain=kdef.domain, opset=opset, provider=provider,
                   outputs=names, output_shapes=case.output_shapes)
    result = dict(zip(names, got))
    result.update({f"input {i}": args[i] for i in updated})
    if provider != "cpu":
        result = {k: v if isinstance(v, np.ndarray) else prov.to_numpy(v) for k, v in result.items()}
    return result


def assert_close(what, got, expected, dtype):
    """Shapes equal; float values to the tolerance of `dtype` (scaled by the largest expected
    magnitude), other values exactly and of the same dtype."""
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape, f"{what}: shape {got.shape}, expected {expected.shape}"
    if is_float(expected.dtype):
        rtol, atol = TOLERANCE[np.dtype(dtype).name]
        scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol * scale,
                                   err_msg=what)
    else:
        assert got.dtype == expected.dtype, f"{what}: dtype {got.dtype}, expected {expected.dtype}"
        np.testing.assert_array_equal(got, expected, err_msg=what)


def output_dtype(row, case, dtype):
    """The dtype of the float outputs: the kernel's element type `dtype`, unless the row derives
    it from the attributes (Cast's `to`)."""
    return np.dtype(row.output_dtype(case.attrs)) if row.output_dtype else dtype


def compare(what, got, expected, dtype, random):
    """Every expected output: float ones of `dtype`; values unless they were drawn at random."""
    for name, value in expected.items():
        assert name in got, f"{what}: no output {name!r}"
        if is_float(np.asarray(value).dtype):
            assert got[name].dtype == dtype, f"{what} {name}: dtype {got[name].dtype}, expected {dtype}"
        if random:
            assert got[name].shape == np.shape(value), f"{what} {name}: shape {got[name].shape}"
        else:
            assert_close(f"{what} {name}", got[name], value, dtype)


def reference_outputs(row, case, opset, kdef, inputs):
    """The row's reference on float64 copies of `inputs` (their values as rounded), for the
    outputs the case asks for; {} without a reference."""
    schema = get_schema(kdef.op_type, kdef.domain, opset)
    wide = [x.astype(np.float64) if isinstance(x, np.ndarray) and is_float(x.dtype) else x for x in inputs]
    found = (row.reference(wide, case.attrs) if row.reference else None) or {}
    return {k: v for k, v in found.items() if k in wanted_outputs(row, case, schema) or k.startswith("input ")}


def cpu_outputs(row, case, opset, kdef, inputs, dtype):
    """The CPU kernel's outputs at `dtype` on `inputs` (cast), or None where the CPU has none."""
    if not any(k.provider == "cpu" and k.holds(opset) and dtype in k.type_constraints["T"]
               for k in registered_kernels(kdef.op_type, kdef.domain)):
        return None
    schema = get_schema(kdef.op_type, kdef.domain, opset)
    return run(kdef, row, case, opset, cast(kdef, schema, fresh(inputs), dtype))


@pytest.mark.parametrize("kdef,dtype", kernels("cpu"))
def test_forward(kdef, dtype):
    row = row_of(kdef)
    for n, case, opset in runs(kdef, row):
        what = f"{kernel_id(kdef, dtype)} case {n} at opset {opset} {case.attrs}"
        inputs = cast(kdef, get_schema(kdef.op_type, kdef.domain, opset), case.build(np.random.default_rng(n)), dtype)
        kept = fresh(inputs)
        got = run(kdef, row, case, opset, fresh(inputs))
        expected = reference_outputs(row, case, opset, kdef, inputs)
        if dtype != np.float64:
            expected = {**(cpu_outputs(row, case, opset, kdef, inputs, np.dtype(np.float64)) or {}), **expected}
        compare(what, got, expected, output_dtype(row, case, dtype), case.random)
        if not case.random:
            strided = run(kdef, row, case, opset, [None if x is None else noncontiguous(x) for x in fresh(inputs)])
            outputs = {k: v for k, v in got.items() if not k.startswith("input ")}  # in place: on contiguous copies
            compare(what + " non-contiguous", strided, outputs, output_dtype(row, case, dtype), False)
        for i, (x, before) in enumerate(zip(inputs, kept)):
            if x is not None:
                np.testing.assert_array_equal(x, before, err_msg=f"{what}: input {i} was written")


def gradient_opset(kdef):
    """The first opset of the kernel's range where its op has a gradient (and the row allows
    it), or None."""
    row = row_for(kdef.domain, kdef.op_type, kdef.since_version)
    builder = get_gradient_builder(kdef.op_type, kdef.domain, kdef.end_version or NEWEST_OPSET)
    if row is None or builder is None:
        return None
    opset = max(kdef.since_version, builder.since_version, row.gradient_since)
    return opset if kdef.holds(opset) else None


@pytest.mark.parametrize("kdef,dtype", [p for p in kernels("cpu", [np.dtype(np.float64)])
                                        if gradient_opset(p.values[0])])
def test_gradient(kdef, dtype):
    row = row_of(kdef)
    assert row.differentiable, f"{kernel_id(kdef)} has a gradient builder; its row names no differentiable input"
    for n, case, opset in runs(kdef, row, gradient_opset(kdef)):
        if not case.gradient:
            continue
        inputs = case.build(np.random.default_rng(n))
        wrt = [i for i in row.differentiable if i < len(inputs) and inputs[i] is not None]
        gradcheck(kdef.op_type, inputs, case.attrs, domain=kdef.domain, opset=opset, wrt=wrt,
                  output_shapes=case.output_shapes, outputs=row.differentiable_outputs)


@pytest.mark.parametrize("row", [r for r in ROWS if r.gradient_of], ids=lambda r: r.op)
def test_gradient_op_is_emitted_by_its_forward_op(row):
    """A gradient op's row leans on its forward op's gradient check: that check must reach it."""
    domain, op = row.gradient_of
    builders = [get_gradient_builder(op, domain, opset) for opset in range(1, NEWEST_OPSET + 1)]
    assert any(b is not None and row.op in b.emits for b in builders), f"no gradient builder of {op} emits {row.op}"


def _cuda_params():
    if CUDA_MISSING:
        return [pytest.param(None, None, id="cuda-provider-unavailable")]
    return kernels("cuda")


@pytest.mark.cuda
@pytest.mark.parametrize("kdef,dtype", _cuda_params())
def test_cuda_against_cpu(kdef, dtype):
    """float16 and bfloat16 against the CPU's float32 on the same rounded inputs; the reference
    where the CPU has no kernel (the copies between memories)."""
    if kdef is None:
        pytest.skip(CUDA_MISSING)
    row = row_of(kdef)
    cpu_dtype = np.dtype(np.float32) if dtype.name in HALF_TYPES else dtype
    for n, case, opset in runs(kdef, row):
        what = f"{kernel_id(kdef, dtype)} case {n} at opset {opset} {case.attrs}"
        inputs = cast(kdef, get_schema(kdef.op_type, kdef.domain, opset), case.build(np.random.default_rng(n)), dtype)
        got = run(kdef, row, case, opset, fresh(inputs), provider="cuda")
        expected = cpu_outputs(row, case, opset, kdef, inputs, cpu_dtype)
        if expected is None:
            expected = reference_outputs(row, case, opset, kdef, inputs)
            assert expected, f"{what}: the CPU has no kernel and the row no reference"
        compare(what, got, expected, output_dtype(row, case, dtype), case.random)
        if not case.random:
            strided = [x if x is None or i in row.in_place else noncontiguous(x) for i, x in enumerate(fresh(inputs))]
            compare(what + " non-contiguous", run(kdef, row, case, opset, strided, provider="cuda"), expected,
                    output_dtype(row, case, dtype), False)


def test_every_kernel_has_a_row():
    missing = sorted({kernel_id(k) for k in package_kernels() if row_for(k.domain, k.op_type, k.since_version) is None})
    assert not missing, f"kernels without a row in op_table.ROWS: {', '.join(missing)}"


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.op}-v{r.since}")
def test_row_matches_the_schema(row):
    """Output names and differentiable inputs as the op declares them."""
    schema = get_schema(row.op, row.domain, None)
    assert tuple(row.outputs) == tuple(schema.outputs), f"{row.op}: row outputs {row.outputs}, schema {schema.outputs}"
    builder = get_gradient_builder(row.op, row.domain, NEWEST_OPSET)
    declared = () if builder is None else builder.differentiable
    if declared is not None:
        assert set(row.differentiable) <= set(declared), f"{row.op}: {row.differentiable} vs builder's {declared}"
