/* Batched 2-D transposes for the Transpose kernel (ext/transpose.pyx): dst[b][j][i] = src[b][i][j]
   for b < batches, i < rows, j < cols.  Elements move as 4- or 8-byte words, so one kernel
   serves every element type of that size.

   The work goes in tiles of 8 x 8 words: a tile reads 8 row segments and writes 8 column
   segments, so that both sides touch whole 32- or 64-byte pieces of cache lines instead of one
   word per line, as an element-by-element copy along either side does (NumPy's copy of an
   NCHW <-> NHWC permute).  Where the build has AVX, a 4-byte tile is transposed in registers
   (three rounds of shuffles); the edges and the 8-byte tiles are copied word by word. */
#ifndef MT_TRANSPOSE_H
#define MT_TRANSPOSE_H

#include <stdint.h>
#include <string.h>

#define MT_TRANSPOSE_TILE 8

#if defined(__AVX__)
typedef uint32_t mt_tr_v8 __attribute__((vector_size(32)));

static inline mt_tr_v8 mt_tr_load(const uint32_t* p)
{
    mt_tr_v8 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void mt_tr_store(uint32_t* p, mt_tr_v8 v) { memcpy(p, &v, sizeof v); }

/* The 8 x 8 tile of 4-byte words at src (row stride src_stride) written transposed to dst (row
   stride dst_stride): pairs of rows interleaved, then pairs of pairs, then the 128-bit halves. */
static inline void mt_tr_tile32(const uint32_t* src, long src_stride, uint32_t* dst, long dst_stride)
{
    mt_tr_v8 r[8], t[8], u[8];
    for (int i = 0; i < 8; i++)
        r[i] = mt_tr_load(src + i * src_stride);
    for (int i = 0; i < 8; i += 2) {
        t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
        t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = __builtin_shufflevector(t[i], t[i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
        u[i + 1] = __builtin_shufflevector(t[i], t[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
        u[i + 2] = __builtin_shufflevector(t[i + 1], t[i + 3], 0, 1, 8, 9, 4, 5, 12, 13);
        u[i + 3] = __builtin_shufflevector(t[i + 1], t[i + 3], 2, 3, 10, 11, 6, 7, 14, 15);
    }
    for (int j = 0; j < 4; j++) {
        mt_tr_store(dst + j * dst_stride, __builtin_shufflevector(u[j], u[j + 4], 0, 1, 2, 3, 8, 9, 10, 11));
        mt_tr_store(dst + (j + 4) * dst_stride, __builtin_shufflevector(u[j], u[j + 4], 4, 5, 6, 7, 12, 13, 14, 15));
    }
}
#define MT_TR_TILE32(src, src_stride, dst, dst_stride) mt_tr_tile32(src, src_stride, dst, dst_stride)
#else
#define MT_TR_TILE32(src, src_stride, dst, dst_stride) mt_tr_block_u32(src, src_stride, dst, dst_stride, 8, 8)
#endif

/* One plane's transpose (rows x cols words at src -> cols x rows at dst), for a word type WORD:
   whole tiles through TILE, the edge rows and columns word by word. */
#define MT_TR_DEFINE(WORD, SUFFIX, TILE)                                                            \
static inline void mt_tr_block_##SUFFIX(const WORD* src, long src_stride, WORD* dst, long dst_stride, \
                                        long rows, long cols)                                        \
{                                                                                                    \
    for (long j = 0; j < cols; j++)                                                                  \
        for (long i = 0; i < rows; i++)                                                              \
            dst[j * dst_stride + i] = src[i * src_stride + j];                                       \
}                                                                                                    \
                                                                                                     \
static void mt_transpose_plane_##SUFFIX(const WORD* src, WORD* dst, long rows, long cols)            \
{                                                                                                    \
    const long T = MT_TRANSPOSE_TILE;                                                                \
    long i0 = 0, j0;                                                                                 \
    for (; i0 + T <= rows; i0 += T) {                                                                \
        for (j0 = 0; j0 + T <= cols; j0 += T)                                                        \
            TILE(src + i0 * cols + j0, cols, dst + j0 * rows + i0, rows);                            \
        mt_tr_block_##SUFFIX(src + i0 * cols + j0, cols, dst + j0 * rows + i0, rows, T, cols - j0);  \
    }                                                                                                \
    mt_tr_block_##SUFFIX(src + i0 * cols, cols, dst + i0, rows, rows - i0, cols);                    \
}

#define MT_TR_TILE64(src, src_stride, dst, dst_stride) mt_tr_block_u64(src, src_stride, dst, dst_stride, 8, 8)

MT_TR_DEFINE(uint32_t, u32, MT_TR_TILE32)
MT_TR_DEFINE(uint64_t, u64, MT_TR_TILE64)

#endif
