// Deterministic block-wide sums in double, for the reductions of cuda/loss.cu, optimizer.cu,
// reduce.cu and reduce_norm.cu: the same inputs in the same launch shape always add up in the
// same order, so a loss or a gradient norm is bitwise reproducible (a resumed run repeats its steps).
#pragma once

// The sum of every thread's v, returned to thread 0 (blockDim.x a multiple of 32, <= 1024).
// Every thread of the block must call it; it may be called again in the same kernel.
__device__ __forceinline__ double block_sum(double v) {
    __shared__ double warp_sums[32];
    __syncthreads();    // an earlier call's readers are done with warp_sums
    for (int s = 16; s > 0; s >>= 1) v += __shfl_down_sync(0xffffffffu, v, s);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    v = 0.0;
    if (warp == 0) {
        if (lane < (int)(blockDim.x >> 5)) v = warp_sums[lane];
        for (int s = 16; s > 0; s >>= 1) v += __shfl_down_sync(0xffffffffu, v, s);
    }
    return v;
}
