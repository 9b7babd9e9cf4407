"""A step's device memory as one arena: record the allocations a step makes (sizes, and when
each is made and freed), pack them with memory_plan.pack, then hand out the same allocations,
in the same order, at their planned offsets.

A step is deterministic: for one plan and input signature it asks for the same sizes in the
same order every time, so the i-th allocation of a later run is the i-th of the recorded one.
`ArenaAllocator` checks that and raises ArenaMismatch otherwise.
"""
from __future__ import annotations

import pycuda.driver as driver

from ....errors import MinitrainError
from ....memory_plan import check_disjoint, pack


class ArenaMismatch(MinitrainError):
    """A run asked for other allocations than the recorded step."""


class _Block(driver.PointerHolderBase):
    """A device address handed to a GPUArray as its `gpudata`; tells its owner when it goes."""

    def __init__(self, pointer, owner, index, allocation=None):
        super().__init__()
        self.pointer, self.owner, self.index, self.allocation = pointer, owner, index, allocation

    def get_pointer(self):
        return self.pointer

    def __int__(self):
        return self.pointer

    __index__ = __int__

    def __del__(self):
        self.owner.freed(self.index)


class AllocationTrace:
    """An allocator (nbytes -> gpudata) that takes memory from `allocate` and records each
    allocation's size and lifetime in events: [made, freed), or live to the end of the trace."""

    def __init__(self, allocate):
        self._allocate = allocate
        self.sizes, self.starts, self.ends = [], [], []
        self.clock = 0
        self.finished = False

    def __call__(self, nbytes):
        allocation = self._allocate(nbytes)
        index = len(self.sizes)
        self.sizes.append(int(nbytes))
        self.starts.append(self._tick())
        self.ends.append(None)
        return _Block(int(allocation), self, index, allocation)

    def _tick(self):
        self.clock += 1
        return self.clock - 1

    def freed(self, index):
        if not self.finished:
            self.ends[index] = self._tick()

    def finish(self):
        """Stop recording; allocations still alive stay live to the end."""
        self.finished = True

    def plan(self):
        """The MemoryPlan of the recorded allocations."""
        end = self.clock + 1
        plan = pack([(size, start, end if stop is None else stop)
                     for size, start, stop in zip(self.sizes, self.starts, self.ends)])
        check_disjoint(plan)
        return plan


class ArenaAllocator:
    """Allocations of one device arena at a MemoryPlan's offsets, in the recorded order."""

    def __init__(self, provider, plan, sizes):
        self.plan, self.sizes = plan, list(sizes)
        self.memory = provider.pool.allocate(max(plan.arena_bytes, 1))
        self.base = int(self.memory)
        self.next = 0

    def __call__(self, nbytes):
        index = self.next
        if index >= len(self.sizes) or self.sizes[index] != nbytes:
            expected = self.sizes[index] if index < len(self.sizes) else "none"
            raise ArenaMismatch(f"step arena: allocation #{index} asks for {nbytes} bytes, the recorded step "
                                f"made {expected}")
        self.next += 1
        return _Block(self.base + self.plan.blocks[index].offset, self, index)

    def freed(self, index):
        """Arena blocks are reused by plan, not on free."""

    def finish(self):
        """Check that the run made every recorded allocation."""
        if self.next != len(self.sizes):
            raise ArenaMismatch(f"step arena: the run made {self.next} allocations, the recorded step "
                                f"{len(self.sizes)}")
