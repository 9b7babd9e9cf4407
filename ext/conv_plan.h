/* The plan of a direct convolution (ext/conv_direct.pyx), built in Python by
   minitrain/providers/cpu/conv.py: one byte buffer holding, in order,
     an mt_conv_plan                   the geometry;
     nph phase triples (int64)          (rd, rh, rw): the stride phases of the packed image;
     nsub mt_conv_sub records           the sub-problems;
     noff tap offsets (int64)           the sub-problems' tap offsets into the packed grid.
   Python mirrors both structs as NumPy structured dtypes and checks them against
   mt_conv_layout() once, at import. */
#ifndef MINITRAIN_CONV_PLAN_H
#define MINITRAIN_CONV_PLAN_H
#include <stddef.h>
#include <stdint.h>

/* G groups; C image and M output channels per group; (Ud, Uh, Uw) the grid of one phase;
   L buffer entries per channel and sample; B samples per work item; nph phases; (ID, IH, IW)
   the image; (SD, SH, SW) strides; (PD, PH, PW) leading pads; nsub sub-problems; noff tap
   offsets.  KU > 0 selects the width-unrolled grid: every image channel c becomes KU grid
   channels c * KU + kw holding columns ow * SW + kw * DW - PW of the image (ow < OW), the B
   samples of an item side by side in each grid row (Uw = B * OW), so that the taps left are
   whole-row shifts and no grid point is a garbage column.  KU = 0: the shifted grid. */
#define MT_CONV_PLAN_FIELDS(X)                                                                  \
    X(G) X(C) X(M) X(Ud) X(Uh) X(Uw) X(L) X(B) X(nph) X(ID) X(IH) X(IW) X(SD) X(SH) X(SW)     \
    X(PD) X(PH) X(PW) X(nsub) X(noff) X(KU) X(OW) X(DW)

/* A sub-problem computes an Od x Oh x Ow output grid (Pext grid positions: the last valid one
   + 1) from `taps` taps whose offsets start at offsets[off_index] and whose packed weight
   starts at w_index; its point (od, oh, ow) of channel plane q goes to
   y[q * ycol + ybase + od * ysd + oh * ysh + ow * ysw]. */
#define MT_CONV_SUB_FIELDS(X)                                                                   \
    X(Od) X(Oh) X(Ow) X(Pext) X(taps) X(off_index) X(w_index) X(ycol) X(ysd) X(ysh) X(ysw) X(ybase)

#define MT_CONV_FIELD(name) int64_t name;
typedef struct { MT_CONV_PLAN_FIELDS(MT_CONV_FIELD) } mt_conv_plan;
typedef struct { MT_CONV_SUB_FIELDS(MT_CONV_FIELD) } mt_conv_sub;
#undef MT_CONV_FIELD

/* The layout of a struct as (name, byte offset) pairs, its size and field count. */
typedef struct {
    const char* const* names;
    const size_t* offsets;
    size_t count, size;
} mt_conv_layout_t;

#define MT_CONV_NAME(name) #name,
#define MT_CONV_PLAN_OFFSET(name) offsetof(mt_conv_plan, name),
#define MT_CONV_SUB_OFFSET(name) offsetof(mt_conv_sub, name),
static const char* const mt_conv_plan_names[] = {MT_CONV_PLAN_FIELDS(MT_CONV_NAME)};
static const size_t mt_conv_plan_offsets[] = {MT_CONV_PLAN_FIELDS(MT_CONV_PLAN_OFFSET)};
static const char* const mt_conv_sub_names[] = {MT_CONV_SUB_FIELDS(MT_CONV_NAME)};
static const size_t mt_conv_sub_offsets[] = {MT_CONV_SUB_FIELDS(MT_CONV_SUB_OFFSET)};
#undef MT_CONV_NAME
#undef MT_CONV_PLAN_OFFSET
#undef MT_CONV_SUB_OFFSET

/* which = 0: mt_conv_plan, 1: mt_conv_sub. */
static inline mt_conv_layout_t mt_conv_layout(int which) {
    mt_conv_layout_t r;
    if (which == 0) {
        r.names = mt_conv_plan_names;
        r.offsets = mt_conv_plan_offsets;
        r.count = sizeof(mt_conv_plan_offsets) / sizeof(size_t);
        r.size = sizeof(mt_conv_plan);
    } else {
        r.names = mt_conv_sub_names;
        r.offsets = mt_conv_sub_offsets;
        r.count = sizeof(mt_conv_sub_offsets) / sizeof(size_t);
        r.size = sizeof(mt_conv_sub);
    }
    return r;
}

#endif
