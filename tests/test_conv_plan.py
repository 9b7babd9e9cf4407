"""The direct convolution's plan: ext/conv_plan.h's structs, mirrored by NumPy dtypes in
providers/cpu/conv.py, their layout checked against the build; conv_direct refuses a plan whose
sections disagree with its length."""
import numpy as np
import pytest

from minitrain._ext import conv_direct
from minitrain.ops.conv_geometry import geometry_for
from minitrain.providers.cpu import conv as cpu_conv


def test_dtypes_match_the_c_structs():
    layout = conv_direct.plan_layout()
    assert layout["plan"][0] == cpu_conv.PLAN_HEAD.itemsize
    assert [name for name, _ in layout["sub"][1]] == list(cpu_conv.PLAN_SUB.names)
    cpu_conv.check_plan_layout(layout)


def test_a_layout_mismatch_is_refused_at_import():
    layout = conv_direct.plan_layout()
    size, fields = layout["sub"]
    swapped = [fields[1], fields[0]] + fields[2:]
    with pytest.raises(ImportError, match="sub struct"):
        cpu_conv.check_plan_layout({**layout, "sub": (size, swapped)})
    with pytest.raises(ImportError, match="plan struct"):
        cpu_conv.check_plan_layout({**layout, "plan": (layout["plan"][0] + 8, layout["plan"][1])})


def _plan(x_shape=(2, 3, 9, 9), w_shape=(4, 3, 3, 3)):
    geom = geometry_for("conv", "Conv", x_shape, w_shape, {"strides": [2, 2]})
    plan, _, _ = cpu_conv.direct_plan(geom, x_shape[0], 8, 16, 8, 1)
    return plan


def test_plan_fields_read_back_by_name():
    plan = _plan()
    head = plan[:cpu_conv.PLAN_HEAD.itemsize].view(cpu_conv.PLAN_HEAD)[0]
    assert (head["G"], head["C"], head["M"]) == (1, 3, 4)
    assert (head["IH"], head["IW"], head["SH"], head["SW"]) == (9, 9, 2, 2)
    assert (head["nph"], head["nsub"], head["noff"]) == (4, 1, 9)
    start = cpu_conv.PLAN_HEAD.itemsize + 3 * 8 * head["nph"]
    sub = plan[start:start + cpu_conv.PLAN_SUB.itemsize].view(cpu_conv.PLAN_SUB)[0]
    assert (sub["Od"], sub["Oh"], sub["Ow"], sub["taps"], sub["off_index"]) == (1, 4, 4, 9, 0)
    assert not plan.flags.writeable


def _run(plan, rng):
    x, w = rng.standard_normal((2, 3, 9, 9)), rng.standard_normal((4, 3, 3, 3))
    wp = cpu_conv._pack_weight_a(w, 1, 4, 3, 9, 4)
    y = np.empty(2 * 4 * 16)
    scratch = np.zeros((1, 1 << 14))
    conv_direct.forward(x.reshape(-1), wp.reshape(-1), np.empty(0), y, plan, 2, 0, 4, 1, scratch, scratch.copy(),
                        np.zeros((1, 64), np.intp), 1)


def test_a_plan_of_the_wrong_length_is_refused(rng):
    plan = _plan()
    with pytest.raises(ValueError, match="shorter than its head"):
        _run(plan[:40].copy(), rng)
    with pytest.raises(ValueError, match="sections disagree"):
        _run(plan[:-8].copy(), rng)


def test_taps_outside_the_offsets_are_refused(rng):
    plan = _plan()
    bad = plan.copy()
    start = cpu_conv.PLAN_HEAD.itemsize + 3 * 8 * 4
    bad[start:start + cpu_conv.PLAN_SUB.itemsize].view(cpu_conv.PLAN_SUB)[0]["off_index"] = 1
    with pytest.raises(ValueError, match="outside the plan's offsets"):
        _run(bad, rng)


@pytest.mark.parametrize("x_shape,w_shape,group,mr", [((2, 6, 5, 5), (4, 3, 3, 3), 2, 4), ((2, 5, 7), (6, 5, 3), 1, 8),
                                                      ((1, 3, 4, 4, 4), (2, 3, 2, 3, 2), 1, 2)])
def test_flipped_weight_packed_in_one_copy(rng, x_shape, w_shape, group, mr):
    """_pack_flipped_weight_a equals kernel A's packing of flipped_weight, also where the image
    channels per group are no multiple of the row block (zero rows)."""
    attrs = {"group": group, "pads": [1] * (2 * (len(x_shape) - 2))}
    geom = geometry_for("conv", "Conv", x_shape, w_shape, attrs)
    w = rng.standard_normal(w_shape)
    g, m, c = group, w_shape[0] // group, x_shape[1] // group
    taps = int(np.prod(w_shape[2:]))
    expected = cpu_conv._pack_weight_a(cpu_conv.flipped_weight(w, geom), g, c, m, taps, mr)
    np.testing.assert_array_equal(cpu_conv._pack_flipped_weight_a(w, geom, mr), expected)
