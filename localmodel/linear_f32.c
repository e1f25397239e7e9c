/* cachegate's float32 linear-layer kernel (localmodel/kernel.py compiles and loads it).
 *
 * Y[rows, out] = X[rows, in] @ W[out, in]^T (+ bias), with W repacked once into tiles of 16
 * output features: Wp[t][i][l] = W[16 t + l][i] (the last tile zero-padded). A decode step
 * multiplies a few rows by every weight once, so it is bound by how fast the weights stream
 * from memory: one tile is one sequential read, each 16-float load of it is multiplied into
 * every row's accumulator (the row's input broadcast), and no horizontal sums are needed.
 *
 * Every output is one chain of fused multiply-adds over i = 0 .. in-1 in order, whatever the
 * number of rows: a row's result is bitwise the same alone or in any batch.
 *
 * Rows go through in chunks of RMAX, each chunk's inputs transposed first (xt[i][r]) so that a
 * step reads them in order; tiles are the outer loop, so each tile comes from memory once and
 * from cache for the other chunks. Vectors are GCC's generic vector extension: AVX-512, AVX2
 * or NEON registers, as the compiler targets the CPU it runs on (-march=native). */
#include <stdlib.h>

typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4))); /* a load at any address */

#ifdef __AVX512F__
#define RMAX 16 /* 16 accumulators + the weight in 32 vector registers */
#else
#define RMAX 6  /* a v16 takes two or four registers without AVX-512 */
#endif

static inline __attribute__((always_inline)) void tile(
    const float *restrict w, const float *restrict xt, float *restrict y,
    const float *restrict bias, long in, long out, long o, const int R) {
  v16 acc[RMAX];
  for (int r = 0; r < R; ++r) acc[r] = (v16){0};
  for (long i = 0; i < in; ++i) {
    v16 wv = *(const v16u *)(w + 16 * i);
    for (int r = 0; r < R; ++r) acc[r] += wv * xt[i * R + r];
  }
  long n = out - o < 16 ? out - o : 16;
  for (int r = 0; r < R; ++r)
    for (long l = 0; l < n; ++l) y[r * out + o + l] = acc[r][l] + (bias ? bias[o + l] : 0.f);
}

typedef void (*tile_fn)(const float *, const float *, float *, const float *, long, long, long);
#define TILE(R)                                                                         \
  static void tile##R(const float *w, const float *xt, float *y, const float *b, long in, \
                      long out, long o) { tile(w, xt, y, b, in, out, o, R); }
TILE(1) TILE(2) TILE(3) TILE(4) TILE(5) TILE(6)
#if RMAX == 16
TILE(7) TILE(8) TILE(9) TILE(10) TILE(11) TILE(12) TILE(13) TILE(14) TILE(15) TILE(16)
static const tile_fn TILES[RMAX + 1] = {0, tile1, tile2, tile3, tile4, tile5, tile6, tile7,
    tile8, tile9, tile10, tile11, tile12, tile13, tile14, tile15, tile16};
#else
static const tile_fn TILES[RMAX + 1] = {0, tile1, tile2, tile3, tile4, tile5, tile6};
#endif

static __thread float *scratch; /* the transposed inputs, one buffer per thread, kept */
static __thread long scratch_floats;

/* 0 on success, -1 if the scratch buffer cannot be allocated. */
int cachegate_linear_f32(const float *wp, const float *x, float *y, const float *bias,
                         long rows, long in, long out) {
  const float *xt = x; /* one row: its own order is already [i][r] */
  if (rows > 1) {
    if (scratch_floats < rows * in) {
      free(scratch);
      scratch = malloc(sizeof(float) * rows * in);
      scratch_floats = scratch ? rows * in : 0;
      if (!scratch) return -1;
    }
    for (long c = 0; c < rows; c += RMAX) {
      long n = rows - c < RMAX ? rows - c : RMAX;
      for (long i = 0; i < in; ++i)
        for (long r = 0; r < n; ++r) scratch[c * in + i * n + r] = x[(c + r) * in + i];
    }
    xt = scratch;
  }
  for (long t = 0; t < (out + 15) / 16; ++t)
    for (long c = 0; c < rows; c += RMAX) {
      long n = rows - c < RMAX ? rows - c : RMAX;
      TILES[n](wp + t * in * 16, xt + c * in, y + c * out, bias, in, out, t * 16);
    }
  return 0;
}

int cachegate_linear_f32_rmax(void) { return RMAX; }
