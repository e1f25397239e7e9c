/* cachegate's linear-layer kernels for the CPU (localmodel/kernel.py compiles and loads them).
 *
 * Y[rows, out] = X[rows, in] @ W[out, in]^T (+ bias), float32 activations, with W repacked once
 * into tiles of 16 output features: Wp[t][i][l] = W[16 t + l][i] (the last tile zero-padded),
 * in float32 (cachegate_linear_f32) or int8 with one float32 scale per output feature
 * (cachegate_linear_q8: W[o][i] = q[o][i] * scale[o]; the scale is applied to the sum).
 *
 * A decode step multiplies a few rows by every weight once, so it is bound by how fast the
 * weights stream from memory: one tile is one sequential read, each 16-weight load (widened
 * to float32 for int8) is multiplied into every row's accumulator with the row's input
 * broadcast, and no horizontal sums are needed.
 *
 * Every output is one chain of fused multiply-adds over i = 0 .. in-1 in order, whatever the
 * number of rows: a row's result is bitwise the same alone or in any batch.
 *
 * Rows go through in chunks of RMAX, each chunk's inputs transposed first (xt[i][r]) so that a
 * step reads them in order; tiles are the outer loop, so each tile comes from memory once and
 * from cache for the other chunks. Vectors are GCC's generic vector extension: AVX-512, AVX2
 * or NEON registers, as the compiler targets the CPU it runs on (-march=native).
 *
 * A call runs on `threads` threads (torch's intra-op threads, passed by kernel.py): its tiles
 * split into contiguous ranges, one an OpenMP thread, each tile computed as on one thread, so
 * the results do not depend on the thread count. Built with -fopenmp, the library uses the
 * OpenMP runtime torch runs on (one pool of threads for both); built without, one thread. */
#ifdef _OPENMP
#include <omp.h>
#else /* (built without OpenMP: its pragmas are ignored, each call runs on one thread) */
static inline int omp_get_thread_num(void) { return 0; }
static inline int omp_get_num_threads(void) { return 1; }
#endif
#include <pthread.h>
#include <stdlib.h>
#include "vec.h"

#ifdef __AVX512F__
#define RMAX 16 /* 16 accumulators + the weight in 32 vector registers */
#else
#define RMAX 6  /* a v16 takes two or four registers without AVX-512 */
#endif

/* One tile (16 outputs from o) for R rows. Q8: w is int8 and scale[o..o+16) applies. */
static inline __attribute__((always_inline)) void tile(
    const void *restrict w, const float *restrict scale, const float *restrict xt,
    float *restrict y, const float *restrict bias, long in, long out, long o, const int R,
    const int Q8) {
  v16 acc[RMAX];
  for (int r = 0; r < R; ++r) acc[r] = (v16){0};
  for (long i = 0; i < in; ++i) {
    v16 wv = Q8 ? widen((const signed char *)w + 16 * i) : *(const v16u *)((const float *)w + 16 * i);
    for (int r = 0; r < R; ++r) acc[r] += wv * xt[i * R + r];
  }
  if (Q8) {
    v16 s = *(const v16u *)(scale + o); /* (scale is padded to whole tiles) */
    for (int r = 0; r < R; ++r) acc[r] *= s;
  }
  long n = out - o < 16 ? out - o : 16;
  for (int r = 0; r < R; ++r)
    for (long l = 0; l < n; ++l) y[r * out + o + l] = acc[r][l] + (bias ? bias[o + l] : 0.f);
}

typedef void (*tile_fn)(const void *, const float *, const float *, float *, const float *,
                        long, long, long);
#define TILE(R)                                                                             \
  static void f32_##R(const void *w, const float *s, const float *xt, float *y,               \
                      const float *b, long in, long out, long o) {                            \
    tile(w, s, xt, y, b, in, out, o, R, 0);                                                   \
  }                                                                                           \
  static void q8_##R(const void *w, const float *s, const float *xt, float *y,                \
                     const float *b, long in, long out, long o) {                             \
    tile(w, s, xt, y, b, in, out, o, R, 1);                                                   \
  }
TILE(1) TILE(2) TILE(3) TILE(4) TILE(5) TILE(6)
#if RMAX == 16
TILE(7) TILE(8) TILE(9) TILE(10) TILE(11) TILE(12) TILE(13) TILE(14) TILE(15) TILE(16)
static const tile_fn F32[RMAX + 1] = {0, f32_1, f32_2, f32_3, f32_4, f32_5, f32_6, f32_7,
    f32_8, f32_9, f32_10, f32_11, f32_12, f32_13, f32_14, f32_15, f32_16};
static const tile_fn Q8[RMAX + 1] = {0, q8_1, q8_2, q8_3, q8_4, q8_5, q8_6, q8_7,
    q8_8, q8_9, q8_10, q8_11, q8_12, q8_13, q8_14, q8_15, q8_16};
#else
static const tile_fn F32[RMAX + 1] = {0, f32_1, f32_2, f32_3, f32_4, f32_5, f32_6};
static const tile_fn Q8[RMAX + 1] = {0, q8_1, q8_2, q8_3, q8_4, q8_5, q8_6};
#endif

/* Tiles a thread takes at least: fewer are not worth a thread. */
#define MIN_TILES 4

/* The kernels' per-thread float buffers: 0, this file's transposed inputs; 1, ops.c's
 * attention scores; 2, layer.c's decoder layer's activations. Each is kept for its thread's next call, and held under a pthread key too,
 * whose destructor frees it when the thread ends (where no key can be created, it is kept). */
enum { BUFFERS = 3 };
static __thread float *buffers[BUFFERS];
static __thread long buffer_floats[BUFFERS];
static pthread_key_t buffer_keys[BUFFERS];
static int buffer_keyed[BUFFERS];
static pthread_once_t buffer_once = PTHREAD_ONCE_INIT;
static void buffer_keys_create(void) {
  for (int b = 0; b < BUFFERS; ++b) buffer_keyed[b] = !pthread_key_create(&buffer_keys[b], free);
}

/* This thread's buffer `b` with room for n floats; NULL if out of memory. */
float *cachegate_thread_buffer(int b, long n) {
  if (buffer_floats[b] < n) {
    free(buffers[b]);
    buffers[b] = malloc(sizeof(float) * n);
    buffer_floats[b] = buffers[b] ? n : 0;
    pthread_once(&buffer_once, buffer_keys_create);
    if (buffer_keyed[b]) pthread_setspecific(buffer_keys[b], buffers[b]);
  }
  return buffers[b];
}

/* x transposed in chunks of RMAX rows (one row: x itself); NULL if out of memory. */
static const float *transposed(const float *x, long rows, long in) {
  if (rows == 1) return x; /* one row: its own order is already [i][r] */
  float *scratch = cachegate_thread_buffer(0, rows * in);
  if (!scratch) return 0;
  for (long c = 0; c < rows; c += RMAX) {
    long n = rows - c < RMAX ? rows - c : RMAX;
    for (long i = 0; i < in; ++i)
      for (long r = 0; r < n; ++r) scratch[c * in + i * n + r] = x[(c + r) * in + i];
  }
  return scratch;
}

/* One call's work: its tiles, split among threads by whole tiles. */
struct job {
  const tile_fn *fns;
  const char *wp;
  long tile_bytes;
  const float *scale, *xt, *bias;
  float *y;
  long rows, in, out, tiles;
};

/* Part `part` of `parts` of the tiles (contiguous ranges). */
static void tiles_part(const struct job *j, long part, long parts) {
  for (long t = j->tiles * part / parts; t < j->tiles * (part + 1) / parts; ++t)
    for (long c = 0; c < j->rows; c += RMAX) {
      long n = j->rows - c < RMAX ? j->rows - c : RMAX;
      j->fns[n](j->wp + t * j->tile_bytes, j->scale, j->xt + c * j->in, j->y + c * j->out,
                j->bias, j->in, j->out, t * 16);
    }
}

static int run(const tile_fn *fns, const char *wp, long tile_bytes, const float *scale,
               const float *x, float *y, const float *bias, long rows, long in, long out,
               int threads) {
  if (rows == 0) return 0; /* nothing to compute (nor a buffer to take: a new thread has none) */
  const float *xt = transposed(x, rows, in);
  if (!xt) return -1;
  struct job j = {fns, wp, tile_bytes, scale, xt, bias, y, rows, in, out, (out + 15) / 16};
  long parts = j.tiles / MIN_TILES < threads ? j.tiles / MIN_TILES : threads;
  if (parts <= 1) {
    tiles_part(&j, 0, 1);
    return 0;
  }
  /* On the whole pool (`threads`, torch's teams' size), the tiles dealt to `parts` of them:
   * libgomp ends the threads a smaller team leaves out, and the next larger region (torch's
   * ops) starts new ones. */
#pragma omp parallel num_threads(threads)
  {
    long team = omp_get_num_threads() < parts ? omp_get_num_threads() : parts;
    if (omp_get_thread_num() < team) tiles_part(&j, omp_get_thread_num(), team);
  }
  return 0;
}

/* 1 when built with OpenMP (calls split over their `threads`), else 0 (one thread a call). */
int cachegate_openmp(void) {
#ifdef _OPENMP
  return 1;
#else
  return 0;
#endif
}

/* 0 on success, -1 if the scratch buffer cannot be allocated. bias may be NULL. */
int cachegate_linear_f32(const float *wp, const float *x, float *y, const float *bias,
                         long rows, long in, long out, int threads) {
  return run(F32, (const char *)wp, in * 16 * (long)sizeof(float), 0, x, y, bias, rows, in, out,
             threads);
}

/* The same with int8 tiles and scale[] padded to whole tiles (ceil(out/16) * 16 floats). */
int cachegate_linear_q8(const signed char *wp, const float *scale, const float *x, float *y,
                        const float *bias, long rows, long in, long out, int threads) {
  return run(Q8, (const char *)wp, in * 16, scale, x, y, bias, rows, in, out, threads);
}
