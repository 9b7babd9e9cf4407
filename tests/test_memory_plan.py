"""Static memory plans: packing never lets two tensors that are live together share a byte,
reuses memory across disjoint lifetimes, and check_disjoint catches a bad plan."""
import numpy as np
import pytest

from minitrain.memory_plan import ALIGNMENT, Block, MemoryPlan, check_disjoint, pack


def peak_live_bytes(plan):
    events = sorted({b.start for b in plan.blocks})
    return max(sum(b.size for b in plan.blocks if b.start <= t < b.end) for t in events)


@pytest.mark.parametrize("seed", range(20))
def test_random_lifetimes_pack_without_overlap_between_peak_and_sum(seed):
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, 100, 60)
    lifetimes = [(int(rng.integers(1, 1 << 16)), int(s), int(s + rng.integers(1, 30))) for s in starts]
    plan = pack(lifetimes)
    check_disjoint(plan)
    assert all(b.offset % ALIGNMENT == 0 for b in plan.blocks)
    assert peak_live_bytes(plan) <= plan.arena_bytes <= plan.total_bytes


def test_a_chain_of_short_lived_tensors_reuses_one_slot():
    plan = pack([(1000, t, t + 1) for t in range(10)])
    assert plan.arena_bytes == 1024 and plan.total_bytes == 10240
    assert {b.offset for b in plan.blocks} == {0}


def test_blocks_keep_the_given_order_and_sizes_round_up():
    plan = pack([(10, 0, 5), (5000, 1, 2)])
    assert [b.size for b in plan.blocks] == [256, 5120]


def test_check_disjoint_names_two_overlapping_live_blocks():
    bad = MemoryPlan((Block(256, 0, 4, 0), Block(256, 2, 6, 128)), 512)
    with pytest.raises(ValueError, match="blocks 0 and 1 are live together"):
        check_disjoint(bad)


def test_a_lifetime_that_ends_before_it_starts_is_refused():
    with pytest.raises(ValueError, match="must end after it starts"):
        pack([(8, 3, 3)])
