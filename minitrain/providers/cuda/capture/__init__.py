"""Whole-step CUDA Graph capture and the memory and transfer helpers around it: the step's
warm-up/record/capture/replay (step_graph.py), the arena its allocations come from
(arena.py), and the pinned-memory rings for small uploads (uploads.py) and asynchronous
fetches (fetch.py)."""
