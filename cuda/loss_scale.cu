// LossScaleUpdate: the dynamic loss scale's step (PyTorch's _amp_update_scale_), one thread,
// reading the optimizer's global gradient norm from device memory and writing scale,
// growth_tracker and skipped in place, so a captured step never asks the host.
#include "common.cuh"

template <typename T>
__device__ void loss_scale_update_impl(const T* grad_norm, float* scale, int64_t* growth_tracker, int64_t* skipped,
                                       bool* found_inf, float growth_factor, float backoff_factor,
                                       int64_t growth_interval) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    const bool overflow = !isfinite((double)to_acc<T>(grad_norm[0]));
    found_inf[0] = overflow;
    if (overflow) {
        scale[0] *= backoff_factor;
        growth_tracker[0] = 0;
        skipped[0] += 1;
    } else if (growth_tracker[0] + 1 >= growth_interval) {
        const float grown = scale[0] * growth_factor;
        if (isfinite(grown)) scale[0] = grown;
        growth_tracker[0] = 0;
    } else {
        growth_tracker[0] += 1;
    }
}

#define LOSS_SCALE_UPDATE(T, S)                                                                            \
    extern "C" __global__ void loss_scale_update_##S(const T* grad_norm, float* scale, int64_t* tracker,    \
                                                     int64_t* skipped, bool* found_inf, float growth_factor, \
                                                     float backoff_factor, int64_t growth_interval) {        \
        loss_scale_update_impl<T>(grad_norm, scale, tracker, skipped, found_inf, growth_factor, backoff_factor, \
                                  growth_interval);                                                          \
    }
MT_FOR_FLOATS(LOSS_SCALE_UPDATE)
