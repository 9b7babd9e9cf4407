// spin: one thread busy-waits `cycles` clock cycles and so holds its stream: the work queued
// behind it then runs back to back, and events between its kernels time the GPU alone, not the
// host's launch gaps (minitrain.profiling).
#include "common.cuh"

extern "C" __global__ void spin(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}
