/* Work below which a kernel runs on one thread: every parallel threshold of minitrain's CPU
   kernels, in one place.  The rule behind all of them: handing a loop to a second thread costs
   a parallel region (a few microseconds with the bounded spin of minitrain/threads.py, tens
   when a sleeping thread must wake), so a loop goes parallel only when one core would take
   several times that.  The counts differ by how much work one element is.  Measurements behind
   them: docs/measurements.md ("Parallel thresholds"). */
#ifndef MINITRAIN_THRESHOLDS_H
#define MINITRAIN_THRESHOLDS_H

/* Elements of a loop with index arithmetic or a branch per element (pooling's general window
   loops, MaxPoolGrad's scatter). */
#define MT_MIN_PARALLEL_GATHER 16384
/* Elements of a loop with a few loads and flops or one exp per element (activations and
   their gradients, softmax, batch normalisation, losses, bias-gradient sums). */
#define MT_MIN_PARALLEL_ELEMENTWISE 32768
/* Elements of a reduction of per-thread accumulators (one add per element and row). */
#define MT_MIN_PARALLEL_REDUCE 65536
/* Elements of an optimizer update (a few arrays read and written, no transcendentals). */
#define MT_MIN_PARALLEL_UPDATE 131072
/* Elements of a vectorised streaming loop (pooling's k = s = 2 and row kernels, the flat
   average pooling): about a nanosecond each, so this is some 50 us of one core's work. */
#define MT_MIN_PARALLEL_STREAM (1 << 19)
/* Multiply-adds of a depthwise convolution (ext/conv_depthwise.pyx): a vector FMA per two
   loads, a few per image point, so about 0.1-0.2 ns each; this is some 50 us of one core. */
#define MT_MIN_PARALLEL_DEPTHWISE_MACS (1 << 18)
/* Multiply-adds of a GEMM below which BLAS runs on one thread (minitrain/providers/cpu/blas.py):
   waking BLAS's own pool, which then spins, costs more than a product of a few MFLOP. */
#define MT_MIN_PARALLEL_GEMM_MACS (1 << 23)
/* Multiply-adds of a GEMM from which, below MT_MIN_PARALLEL_GEMM_MACS, its rows are split over
   the OpenMP threads, one single-threaded BLAS call each (ext/gemm_rows.pyx): some 5 us of one
   core's work, a few times a parallel region's start. */
#define MT_MIN_SPLIT_GEMM_MACS (1 << 19)

#endif
