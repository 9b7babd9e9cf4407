# cython: language_level=3
"""A NumPy data allocator (NEP 49) that serves a step's large allocations from one arena.

While a StepArena is the active handler of the calling thread (`activate`/`restore`), every
NumPy array data allocation of at least `min_bytes` is

  * traced (mode TRACE): served by malloc, its size and lifetime recorded as event numbers
    (one per traced allocation or free; a block still live when tracing stops has end -1);
  * replayed (mode REPLAY): the i-th such allocation of the run is served at offsets[i] in the
    arena when its size is the recorded i-th size, its offset is not -1 (-1: the block outlives
    the step) and no block sharing its bytes (conflicts[i], and i itself) is live.  Otherwise
    it comes from malloc: once a size differs, the rest of the run does (`diverged`).

Smaller allocations, and every allocation while the mode is OFF, come from malloc.  The check
against live blocks makes reuse safe whatever the program allocates: a byte is never handed
out twice while live.  Frees find their block by address; arrays hold a reference to the
handler capsule, which holds the StepArena, so the arena outlives every array in it.
"""
from cpython.pycapsule cimport PyCapsule_Destructor, PyCapsule_GetContext, PyCapsule_New, PyCapsule_SetContext
from cpython.pythread cimport (PyThread_acquire_lock, PyThread_allocate_lock, PyThread_free_lock,
                               PyThread_release_lock, PyThread_type_lock, WAIT_LOCK)
from cpython.ref cimport Py_INCREF, Py_XDECREF, PyObject
from libc.stdint cimport int64_t, uint8_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memcpy, memset, strncpy

import numpy as np

cdef extern from *:
    """
    #define NPY_TARGET_VERSION NPY_1_22_API_VERSION
    #include <numpy/arrayobject.h>
    static int mt_import_numpy(void) { import_array1(-1); return 0; }
    """
    ctypedef struct PyDataMemAllocator:
        void* ctx
        void* (*malloc)(void* ctx, size_t size) noexcept nogil
        void* (*calloc)(void* ctx, size_t nelem, size_t elsize) noexcept nogil
        void* (*realloc)(void* ctx, void* ptr, size_t new_size) noexcept nogil
        void (*free)(void* ctx, void* ptr, size_t size) noexcept nogil
    ctypedef struct PyDataMem_Handler:
        char name[127]
        uint8_t version
        PyDataMemAllocator allocator
    object PyDataMem_SetHandler(object handler)
    int mt_import_numpy() except -1

mt_import_numpy()

cdef enum:
    OFF = 0
    TRACE = 1
    REPLAY = 2

MODES = {OFF: "off", TRACE: "trace", REPLAY: "replay"}


cdef struct State:
    PyThread_type_lock lock
    int mode
    size_t min_bytes
    # the trace: growable arrays of n blocks
    Py_ssize_t n, cap, clock
    size_t* sizes
    int64_t* starts
    int64_t* ends
    void** traced
    # the replayed plan
    Py_ssize_t blocks, next
    char* base
    size_t capacity
    size_t* plan_sizes
    int64_t* offsets
    int64_t* conflict_ptr
    int64_t* conflict_idx
    char* live
    bint diverged
    Py_ssize_t served, fallbacks


cdef void _release_capsule(object capsule) noexcept:
    Py_XDECREF(<PyObject*>PyCapsule_GetContext(capsule))


cdef class StepArena:
    """The allocator state; see the module docstring."""
    cdef PyDataMem_Handler handler
    cdef State s

    def __cinit__(self, size_t min_bytes=4096):
        memset(&self.s, 0, sizeof(State))
        self.s.lock = PyThread_allocate_lock()
        if self.s.lock == NULL:
            raise MemoryError("StepArena: cannot allocate a lock")
        self.s.min_bytes = min_bytes
        strncpy(self.handler.name, b"minitrain_step_arena", 126)
        self.handler.version = 1
        self.handler.allocator.ctx = <void*>&self.s
        self.handler.allocator.malloc = _malloc
        self.handler.allocator.calloc = _calloc
        self.handler.allocator.realloc = _realloc
        self.handler.allocator.free = _free

    def __dealloc__(self):
        free(self.s.sizes); free(self.s.starts); free(self.s.ends); free(self.s.traced)
        _drop_plan(&self.s)
        if self.s.lock != NULL:
            PyThread_free_lock(self.s.lock)

    @property
    def mode(self):
        return MODES[self.s.mode]

    @property
    def diverged(self):
        """Whether the last replay asked for another size than the plan's at some point."""
        return bool(self.s.diverged)

    @property
    def served(self):
        """Allocations served from the arena since this object was made."""
        return self.s.served

    @property
    def fallbacks(self):
        """Planned allocations served by malloc because a block sharing their bytes was live."""
        return self.s.fallbacks

    @property
    def arena_bytes(self):
        return self.s.capacity

    def activate(self):
        """Make this the calling thread's NumPy allocator; returns the handler it replaces (give
        it to `restore`)."""
        capsule = PyCapsule_New(&self.handler, b"mem_handler", <PyCapsule_Destructor>_release_capsule)
        Py_INCREF(self)
        PyCapsule_SetContext(capsule, <void*>self)
        return PyDataMem_SetHandler(capsule)

    def restore(self, previous):
        PyDataMem_SetHandler(previous)

    def trace(self):
        """Start recording (a new trace)."""
        PyThread_acquire_lock(self.s.lock, WAIT_LOCK)
        self.s.n = 0
        self.s.clock = 0
        self.s.mode = TRACE
        PyThread_release_lock(self.s.lock)

    def replay(self):
        """Start a run served from the loaded plan."""
        if self.s.base == NULL:
            raise RuntimeError("StepArena.replay: no plan loaded")
        PyThread_acquire_lock(self.s.lock, WAIT_LOCK)
        self.s.next = 0
        self.s.diverged = False
        self.s.mode = REPLAY
        PyThread_release_lock(self.s.lock)

    def stop(self):
        """Stop tracing or replaying; returns how many recorded allocations the run made."""
        PyThread_acquire_lock(self.s.lock, WAIT_LOCK)
        made = self.s.next if self.s.mode == REPLAY else self.s.n
        self.s.mode = OFF
        PyThread_release_lock(self.s.lock)
        return made

    def traced_blocks(self):
        """(sizes, starts, ends) of the last trace as int64 arrays; end -1: still live."""
        out = np.empty((3, self.s.n), dtype=np.int64)
        cdef Py_ssize_t i
        for i in range(self.s.n):
            out[0, i] = self.s.sizes[i]
            out[1, i] = self.s.starts[i]
            out[2, i] = self.s.ends[i]
        return out[0], out[1], out[2]

    def load(self, sizes, offsets, conflict_ptr, conflict_idx, size_t arena_bytes):
        """Take a plan: per recorded block its size and offset (-1: from malloc), and in CSR
        form the blocks sharing bytes with it.  Refused while blocks of the old plan are live."""
        cdef Py_ssize_t n = len(sizes), m = len(conflict_idx), i
        cdef State* s = &self.s
        if len(offsets) != n or len(conflict_ptr) != n + 1:
            raise ValueError("StepArena.load: the plan's arrays disagree in length")
        for i in range(n):
            if offsets[i] >= 0 and <size_t>offsets[i] + <size_t>sizes[i] > arena_bytes:
                raise ValueError(f"StepArena.load: block {i} ends past the arena ({arena_bytes} bytes)")
        PyThread_acquire_lock(s.lock, WAIT_LOCK)
        try:
            for i in range(s.blocks):
                if s.live[i]:
                    raise RuntimeError("StepArena.load: blocks of the old plan are still live")
            _drop_plan(s)
            s.plan_sizes = <size_t*>malloc(max(n, 1) * sizeof(size_t))
            s.offsets = <int64_t*>malloc(max(n, 1) * sizeof(int64_t))
            s.conflict_ptr = <int64_t*>malloc((n + 1) * sizeof(int64_t))
            s.conflict_idx = <int64_t*>malloc(max(m, 1) * sizeof(int64_t))
            s.live = <char*>calloc(max(n, 1), 1)
            s.base = <char*>mt_arena_alloc(arena_bytes)
            if (s.plan_sizes == NULL or s.offsets == NULL or s.conflict_ptr == NULL
                    or s.conflict_idx == NULL or s.live == NULL or s.base == NULL):
                _drop_plan(s)
                raise MemoryError(f"StepArena.load: cannot allocate an arena of {arena_bytes} bytes")
            for i in range(n):
                s.plan_sizes[i] = sizes[i]
                s.offsets[i] = offsets[i]
            for i in range(n + 1):
                s.conflict_ptr[i] = conflict_ptr[i]
            for i in range(m):
                s.conflict_idx[i] = conflict_idx[i]
            s.blocks = n
            s.capacity = arena_bytes
        finally:
            PyThread_release_lock(s.lock)

    def live_blocks(self):
        """Indices of the plan's blocks now live in the arena."""
        return [i for i in range(self.s.blocks) if self.s.live[i]]

    def address_range(self):
        """(first, one past the last) address of the arena; (0, 0) without a plan."""
        if self.s.base == NULL:
            return (0, 0)
        return (<size_t>self.s.base, <size_t>self.s.base + self.s.capacity)


cdef extern from *:
    """
    #include <stdlib.h>
    #if defined(__linux__)
    #include <sys/mman.h>
    #endif
    /* The arena's memory: page-aligned; from 4 MiB on aligned to 2 MiB and marked for
       transparent huge pages, as NumPy marks its own large arrays (fewer TLB misses over a
       step's working set). */
    static void* mt_arena_alloc(size_t nbytes) {
        const size_t huge = (size_t)2 << 20;
        const size_t align = nbytes >= 2 * huge ? huge : 4096;
        void* p = NULL;
        if (posix_memalign(&p, align, nbytes ? nbytes : 1) != 0)
            return NULL;
    #if defined(__linux__) && defined(MADV_HUGEPAGE)
        if (align == huge)
            madvise(p, nbytes, MADV_HUGEPAGE);
    #endif
        return p;
    }
    """
    void* mt_arena_alloc(size_t nbytes) nogil


cdef void _drop_plan(State* s) noexcept nogil:
    free(s.base); free(s.plan_sizes); free(s.offsets)
    free(s.conflict_ptr); free(s.conflict_idx); free(s.live)
    s.base = NULL
    s.plan_sizes = NULL
    s.offsets = NULL
    s.conflict_ptr = NULL
    s.conflict_idx = NULL
    s.live = NULL
    s.blocks = 0
    s.capacity = 0


cdef bint _grow_trace(State* s) noexcept nogil:
    cdef Py_ssize_t cap = s.cap * 2 if s.cap else 64
    cdef size_t* sizes = <size_t*>realloc(s.sizes, cap * sizeof(size_t))
    if sizes != NULL:
        s.sizes = sizes
    cdef int64_t* starts = <int64_t*>realloc(s.starts, cap * sizeof(int64_t))
    if starts != NULL:
        s.starts = starts
    cdef int64_t* ends = <int64_t*>realloc(s.ends, cap * sizeof(int64_t))
    if ends != NULL:
        s.ends = ends
    cdef void** traced = <void**>realloc(s.traced, cap * sizeof(void*))
    if traced != NULL:
        s.traced = traced
    if sizes == NULL or starts == NULL or ends == NULL or traced == NULL:
        return False
    s.cap = cap
    return True


cdef void* _take(State* s, size_t size, bint zero) noexcept nogil:
    """The memory of one allocation (the lock held)."""
    cdef void* p
    cdef Py_ssize_t i, k
    cdef bint clash
    if s.mode == TRACE and size >= s.min_bytes:
        p = calloc(size, 1) if zero else malloc(size)
        if p != NULL and (s.n < s.cap or _grow_trace(s)):
            s.sizes[s.n] = size
            s.starts[s.n] = s.clock
            s.ends[s.n] = -1
            s.traced[s.n] = p
            s.n += 1
            s.clock += 1
        return p
    if s.mode == REPLAY and size >= s.min_bytes and not s.diverged:
        if s.next >= s.blocks or s.plan_sizes[s.next] != size:
            s.diverged = True
        else:
            i = s.next
            s.next += 1
            if s.offsets[i] >= 0:
                clash = s.live[i]
                k = s.conflict_ptr[i]
                while not clash and k < s.conflict_ptr[i + 1]:
                    clash = s.live[s.conflict_idx[k]]
                    k += 1
                if not clash:
                    s.live[i] = 1
                    s.served += 1
                    p = s.base + s.offsets[i]
                    if zero:
                        memset(p, 0, size)
                    return p
                s.fallbacks += 1
    return calloc(size, 1) if zero else malloc(size)


cdef Py_ssize_t _arena_block(State* s, void* ptr) noexcept nogil:
    """The live plan block at `ptr`, or -1 when ptr is not in the arena."""
    cdef Py_ssize_t i
    if s.base == NULL or <char*>ptr < s.base or <char*>ptr >= s.base + s.capacity:
        return -1
    for i in range(s.blocks):
        if s.live[i] and s.base + s.offsets[i] == <char*>ptr:
            return i
    return -1


cdef void _end_trace_of(State* s, void* ptr) noexcept nogil:
    """Record the free of a traced block (the lock held)."""
    cdef Py_ssize_t i
    if s.mode != TRACE:
        return
    for i in range(s.n):
        if s.traced[i] == ptr and s.ends[i] < 0:
            s.ends[i] = s.clock
            s.clock += 1
            return


cdef void* _malloc(void* ctx, size_t size) noexcept nogil:
    cdef State* s = <State*>ctx
    PyThread_acquire_lock(s.lock, WAIT_LOCK)
    cdef void* p = _take(s, size, False)
    PyThread_release_lock(s.lock)
    return p


cdef void* _calloc(void* ctx, size_t nelem, size_t elsize) noexcept nogil:
    cdef State* s = <State*>ctx
    if elsize and nelem > (<size_t>-1) / elsize:
        return NULL
    PyThread_acquire_lock(s.lock, WAIT_LOCK)
    cdef void* p = _take(s, nelem * elsize, True)
    PyThread_release_lock(s.lock)
    return p


cdef void* _realloc(void* ctx, void* ptr, size_t new_size) noexcept nogil:
    """An arena block moves out to malloc (keeping its contents); other memory is realloc'd."""
    cdef State* s = <State*>ctx
    cdef void* p = NULL
    cdef Py_ssize_t i
    if ptr == NULL:
        return _malloc(ctx, new_size)
    PyThread_acquire_lock(s.lock, WAIT_LOCK)
    i = _arena_block(s, ptr)
    if i >= 0:
        p = malloc(new_size)
        if p != NULL:
            memcpy(p, ptr, s.plan_sizes[i] if s.plan_sizes[i] < new_size else new_size)
            s.live[i] = 0
    else:
        _end_trace_of(s, ptr)
    PyThread_release_lock(s.lock)
    return p if i >= 0 else realloc(ptr, new_size)


cdef void _free(void* ctx, void* ptr, size_t size) noexcept nogil:
    cdef State* s = <State*>ctx
    cdef Py_ssize_t i
    if ptr == NULL:
        return
    PyThread_acquire_lock(s.lock, WAIT_LOCK)
    i = _arena_block(s, ptr)
    if i >= 0:
        s.live[i] = 0
    else:
        _end_trace_of(s, ptr)
    PyThread_release_lock(s.lock)
    if i < 0:
        free(ptr)
