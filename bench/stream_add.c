/* STREAM's Add kernel, c = a + b over float32, as the benchmark's ceiling for kernels that
   read two arrays and write a third of the same size (the activation gradients): plain C, an
   OpenMP loop split statically over `threads`, plain stores (on the guests measured so far,
   non-temporal stores were no faster at these sizes).  bench/roofline.py builds it. */
void stream_add(const float* a, const float* b, float* c, long n, int threads) {
    long i;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (i = 0; i < n; i++)
        c[i] = a[i] + b[i];
}
