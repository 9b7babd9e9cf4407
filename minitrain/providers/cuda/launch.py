"""Launch configuration shared by the CUDA kernels, and the constants cuda/*.cu takes from here.

Block sizes and grid limits live here once.  The constants that both Python and a .cu file need
(a table's row width, a kernel's work per thread) are defined here only and reach nvcc as -D
flags (`DEFINES`, passed by compiler.module), so the two sides cannot drift; the .cu files
refuse to compile without them.
"""
WARP = 32
BLOCK = 256                 # threads of a block, unless a kernel says otherwise
MAX_BLOCK = 1024            # the most threads a block may have (one-block reductions use them all)
WARPS_PER_BLOCK = BLOCK // WARP
MAX_GRID_Y = 65535          # gridDim.y's limit
MAX_GRID_X = 1 << 20        # blocks of a grid-stride launch at most (gridDim.x allows far more)
BLOCKS_PER_SM = 16          # blocks per multiprocessor that fill the device in a grid-stride launch

# constants of cuda/*.cu, passed as -D flags
ROWS_X = 4                  # conv_tiled.cu: outputs of a row per thread of the register-tiled kernels
SUM_COLS_SPLIT = 8          # elementwise.cu: sum_cols' blockDim.y
TABLE_COLS = 6              # optimizer.cu: a tensor row of the multi-tensor table (param, grad, state 1, 2, count,
                            # the gradient's type)
GRAD_HALF, GRAD_BF16 = 1, 2 # multi_tensor.cuh: a row's gradient type, float16 / bfloat16 under float32 parameters
MAX_RANK = 8                # strided.cuh: dims of a strided kernel's plan
NARROW_COLS = 32            # sample_norm.cu: rows this short get a thread each, not a block
GEMM1D_TILE = 8             # conv_gemm1d.cu: a thread's register tile is GEMM1D_TILE x GEMM1D_TILE outputs
GEMM1D_TF32_LINE_NT = 8     # conv_gemm1d_tf32.cu: n-tiles (8 positions each) of a forward / data warp
DEFINES = {"MT_ROWS_X": ROWS_X, "MT_SUM_COLS_SPLIT": SUM_COLS_SPLIT, "MT_TABLE_COLS": TABLE_COLS,
           "MT_GRAD_HALF": GRAD_HALF, "MT_GRAD_BF16": GRAD_BF16,
           "MT_MAX_RANK": MAX_RANK, "MT_NARROW_COLS": NARROW_COLS, "MT_GEMM1D_TILE": GEMM1D_TILE,
           "MT_GEMM1D_TF32_LINE_NT": GEMM1D_TF32_LINE_NT}


def grid_stride_blocks(provider, items, per_block=BLOCK):
    """Blocks for `items` work items, `per_block` to a block, at most BLOCKS_PER_SM per
    multiprocessor of `provider`'s device (each block strides over the rest)."""
    return min(-(-items // per_block), provider.multiprocessors * BLOCKS_PER_SM)
