"""Static memory plans: tensors with known sizes and lifetimes packed into one arena.

A lifetime is a half-open interval [start, end) of event numbers (an allocation and its free,
in the order the step makes them); two tensors whose lifetimes intersect must not share a byte.
`pack` places the tensors greedily, largest first, each at the lowest aligned offset that no
placed tensor with an intersecting lifetime covers (best fit among the gaps), as ONNX Runtime's
and TVM's planners do; `check_disjoint` verifies a plan over every pair that is live together.
"""
from __future__ import annotations

from dataclasses import dataclass

ALIGNMENT = 256


@dataclass(frozen=True)
class Block:
    """One tensor of a plan: `size` bytes live over [start, end), placed at `offset`."""
    size: int
    start: int
    end: int
    offset: int = 0

    def overlaps_in_time(self, other):
        return self.start < other.end and other.start < self.end

    def overlaps_in_space(self, other):
        return self.offset < other.offset + other.size and other.offset < self.offset + self.size


@dataclass(frozen=True)
class MemoryPlan:
    """The placed blocks (in the order given to `pack`) and the arena's size in bytes."""
    blocks: tuple
    arena_bytes: int

    @property
    def total_bytes(self):
        """What the tensors would take without sharing: the sum of their sizes."""
        return sum(b.size for b in self.blocks)


def aligned(size, alignment=ALIGNMENT):
    return -(-size // alignment) * alignment


def pack(lifetimes, alignment=ALIGNMENT):
    """Place tensors given as (size, start, end) triples; returns a MemoryPlan."""
    blocks = [Block(aligned(max(int(size), 1), alignment), int(start), int(end))
              for size, start, end in lifetimes]
    for block in blocks:
        if block.end <= block.start:
            raise ValueError(f"memory plan: a lifetime must end after it starts, got [{block.start}, {block.end})")
    order = sorted(range(len(blocks)), key=lambda i: (-blocks[i].size, blocks[i].start))
    placed = []
    arena = 0
    for i in order:
        block = blocks[i]
        busy = sorted((b.offset, b.offset + b.size) for b in placed if b.overlaps_in_time(block))
        offset = _best_gap(busy, block.size)
        block = blocks[i] = Block(block.size, block.start, block.end, offset)
        placed.append(block)
        arena = max(arena, offset + block.size)
    return MemoryPlan(tuple(blocks), arena)


def _best_gap(busy, size):
    """The start of the smallest gap between the busy ranges (sorted) that holds `size`, or the
    end of the last range when none does."""
    best, best_room, cursor = None, None, 0
    for begin, end in busy:
        room = begin - cursor
        if room >= size and (best_room is None or room < best_room):
            best, best_room = cursor, room
        cursor = max(cursor, end)
    return cursor if best is None else best


def check_disjoint(plan):
    """Raise ValueError naming the first two blocks that are live together and share bytes."""
    blocks = sorted(enumerate(plan.blocks), key=lambda item: item[1].start)
    for n, (i, a) in enumerate(blocks):
        for j, b in blocks[n + 1:]:
            if b.start >= a.end:
                break
            if a.overlaps_in_space(b):
                raise ValueError(f"memory plan: blocks {i} and {j} are live together and overlap: {a}, {b}")
        if a.offset + a.size > plan.arena_bytes:
            raise ValueError(f"memory plan: block {i} ends past the arena ({plan.arena_bytes} bytes): {a}")
