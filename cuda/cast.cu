// Cast between element types (ONNX Cast), and MixedPrecisionScale: Y = Cast<to>(X * S), the
// unscaling of a loss-scaled gradient fused with its cast to the master weight's type.
//
// A kernel per destination type, instantiated for every source type of MT_FOR_FLOATS and for
// bool (b8): cast_to_<dst>_<src>, and mp_scale_to_<dst>_<src> for the float destinations and
// float sources.  Every source widens exactly to double (bool to 0 or 1), so a conversion rounds
// once, as NumPy's astype does.
#include "common.cuh"

template <typename T> __device__ __forceinline__ double wide(T x) { return (double)to_acc<T>(x); }
template <> __device__ __forceinline__ double wide<bool>(bool x) { return x ? 1.0 : 0.0; }

template <typename U> __device__ __forceinline__ U narrow(double x) { return (U)x; }
template <> __device__ __forceinline__ __half narrow<__half>(double x) { return __double2half(x); }
template <> __device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(double x) { return __double2bfloat16(x); }
template <> __device__ __forceinline__ bool narrow<bool>(double x) { return x != 0.0; }

template <typename T, typename U> __device__ __forceinline__ U convert(T x) {
    return narrow<U>(wide<T>(x));
}

template <typename T, typename U> __device__ void cast_impl(const T* x, U* y, int64_t n) {
    GRID_STRIDE_LOOP(i, n) y[i] = convert<T, U>(x[i]);
}

// x * s in float (double for a double source), rounded once to U.
template <typename T, typename U> __device__ void mp_scale_impl(const float* s, const T* x, U* y, int64_t n) {
    typedef acc_t<T> A;
    const A scale = (A)s[0];
    GRID_STRIDE_LOOP(i, n) y[i] = narrow<U>((double)(to_acc<T>(x[i]) * scale));
}

#define CAST_KERNEL(U, D, T, S)                                                                  \
    extern "C" __global__ void cast_to_##D##_##S(const T* x, U* y, int64_t n) { cast_impl(x, y, n); }
#define SCALE_KERNEL(U, D, T, S)                                                                 \
    CAST_KERNEL(U, D, T, S)                                                                      \
    extern "C" __global__ void mp_scale_to_##D##_##S(const float* s, const T* x, U* y, int64_t n) { \
        mp_scale_impl(s, x, y, n);                                                               \
    }
#define TO_F16(T, S) SCALE_KERNEL(__half, f16, T, S)
#define TO_F32(T, S) SCALE_KERNEL(float, f32, T, S)
#define TO_F64(T, S) SCALE_KERNEL(double, f64, T, S)
#define TO_BF16(T, S) SCALE_KERNEL(__nv_bfloat16, bf16, T, S)
#define TO_I32(T, S) CAST_KERNEL(int32_t, i32, T, S)
#define TO_I64(T, S) CAST_KERNEL(int64_t, i64, T, S)
#define TO_B8(T, S) CAST_KERNEL(bool, b8, T, S)
MT_FOR_FLOATS(TO_F16)
MT_FOR_FLOATS(TO_F32)
MT_FOR_FLOATS(TO_F64)
MT_FOR_FLOATS(TO_BF16)
MT_FOR_FLOATS(TO_I32)
MT_FOR_FLOATS(TO_I64)
MT_FOR_FLOATS(TO_B8)
#define FROM_BOOL(U, D) CAST_KERNEL(U, D, bool, b8)
FROM_BOOL(__half, f16)
FROM_BOOL(__nv_bfloat16, bf16)
FROM_BOOL(float, f32)
FROM_BOOL(double, f64)
FROM_BOOL(int32_t, i32)
FROM_BOOL(int64_t, i64)
FROM_BOOL(bool, b8)
