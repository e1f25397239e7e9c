/* cachegate's attention kernel for the CPU (localmodel/kernel.py compiles and loads it with
 * linear.c): float32 queries and outputs over K/V pages in float32, bfloat16 or float16 (widened
 * to float32 in registers, as exactly as torch's .to(float32) does).
 *
 * cachegate_decode_attention: one new token per sequence attending to its own cached K/V,
 * read in place from the pages by slot. As torch ops, a decode step's attention is, in each
 * layer, a gather of every sequence's K and V out of the pages (padded to the longest) and an
 * SDPA call over them. Here it is one call with no copy and no padding, so a sequence's
 * result does not depend on the others in the batch. A call runs on `threads` threads (as
 * linear.c's), its (sequence, query head) pairs dealt among them, each computed as on one
 * thread.
 *
 * cachegate_decode_attention_q8: the same over int8 pages, de-quantised as they are read.
 *
 * cachegate_decode_step: cachegate_decode_attention for a step of decoding sequences only
 * (localmodel.lean, via localmodel.batch), each sequence's new K/V written into its slot of
 * float32 or bfloat16 pages first and its query read where the layer's projections left it: one call a
 * layer where the write, the query's copy and the attention were ~10 tensor ops and ~70 µs of
 * Python (measured).
 *
 * cachegate_silu_mul: a gated MLP's activation (localmodel.lean). */
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#else /* (built without OpenMP: its pragmas are ignored, each call runs on one thread) */
static inline int omp_get_thread_num(void) { return 0; }
static inline int omp_get_num_threads(void) { return 1; }
#endif
#include <stdlib.h>

#include "vec.h"

typedef unsigned short u16x16 __attribute__((vector_size(32), aligned(2)));
typedef unsigned int u32x16 __attribute__((vector_size(64)));
#if defined(__FLT16_MAX__) && !defined(CACHEGATE_NO_FLOAT16) /* GCC >= 12 on x86, clang */
typedef _Float16 h16 __attribute__((vector_size(32), aligned(2)));
#define HAVE_FLOAT16 1
#endif

/* IEEE half bits to float32 (exact): the pages' reads for compilers without _Float16, and the
 * int8 scales write_q8 rounds (any compiler). */
static inline float half_bits(unsigned short h) {
  unsigned int sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
  union { unsigned int u; float f; } r;
  if (exp == 0x1f)
    r.u = sign | 0x7f800000u | (man << 13); /* inf, nan */
  else if (exp)
    r.u = sign | ((exp + 112) << 23) | (man << 13); /* normal: rebias 15 -> 127 */
  else {
    r.f = (float)man * 5.9604644775390625e-8f; /* zero, subnormal: man * 2^-24 */
    r.u |= sign;
  }
  return r.f;
}

/* The pages' element type (kernel.py passes it). */
enum { F32 = 0, BF16 = 1, F16 = 2 };

/* 16 consecutive elements of a page row as float32 (bfloat16: the top half of a float32). */
static inline __attribute__((always_inline)) v16 load16(const void *p, const int kind) {
  if (kind == BF16) return (v16)(__builtin_convertvector(*(const u16x16 *)p, u32x16) << 16);
#ifdef HAVE_FLOAT16
  if (kind == F16) return __builtin_convertvector(*(const h16 *)p, v16);
#else
  if (kind == F16) {
    v16 r;
    for (int l = 0; l < 16; ++l) r[l] = half_bits(((const unsigned short *)p)[l]);
    return r;
  }
#endif
  return *(const v16u *)p;
}

/* Element i of a page row as float32. */
static inline __attribute__((always_inline)) float load1(const void *p, long i, const int kind) {
  if (kind == BF16) {
    union { unsigned int u; float f; } w = {(unsigned int)((const unsigned short *)p)[i] << 16};
    return w.f;
  }
#ifdef HAVE_FLOAT16
  if (kind == F16) return (float)((const _Float16 *)p)[i];
#else
  if (kind == F16) return half_bits(((const unsigned short *)p)[i]);
#endif
  return ((const float *)p)[i];
}

/* The size in bytes of an element of each kind. */
static const long BYTES[3] = {4, 2, 2};

/* q . row, the row's elements of `kind`, a key at a time (any head size). */
static inline __attribute__((always_inline)) float dot(const float *q, const void *row, long n,
                                                       const int kind) {
  v16 acc = {0};
  long i = 0;
  for (; i + 16 <= n; i += 16)
    acc += *(const v16u *)(q + i) * load16((const char *)row + i * BYTES[kind], kind);
  float s = 0.f;
  for (int l = 0; l < 16; ++l) s += acc[l];
  for (; i < n; ++i) s += q[i] * load1(row, i, kind);
  return s;
}


/* e^x for x <= 0, 16 lanes: x = n ln2 + r with |r| <= ln2/2, e^r by its Taylor polynomial of
 * degree 7 (relative error < 1e-8 before rounding), times 2^n built in the exponent bits.
 * Below -87 (e^-87 ~ 1.6e-38, the smallest normal float's order) it returns e^-87: against
 * the row's largest score's e^0 = 1 such a weight is nothing. libm's expf, one lane at a time,
 * took most of a step's attention (measured: 5 ms of a ~50 ms 8-sequence step). */
static inline __attribute__((always_inline)) v16 exp_neg(v16 x) {
  const v16 shift = (v16){0} + 12582912.f; /* 1.5 * 2^23: adding it rounds to an integer */
  const v16 low = (v16){0} - 87.f;
  i16 below = x < low; /* lanes: -1 where x < -87, else 0 */
  x = (v16)(((i16)x & ~below) | ((i16)low & below));
  v16 n = (x * 1.44269504088896341f + shift) - shift;
  v16 r = x - n * 0.693145751953125f - n * 1.42860682030941723e-06f; /* ln2, hi + lo */
  v16 p = 1.f / 5040 + r * (1.f / 40320);
  p = 1.f / 720 + r * p;
  p = 1.f / 120 + r * p;
  p = 1.f / 24 + r * p;
  p = 1.f / 6 + r * p;
  p = 0.5f + r * p;
  p = 1.f + r * p;
  p = 1.f + r * p;
  i16 bits = (__builtin_convertvector(n, i16) + 127) << 23;
  return p * (v16)bits;
}

/* y += a * row, the row's elements of `kind`. */
static inline __attribute__((always_inline)) void axpy(float *restrict y, const void *row,
                                                        float a, long n, const int kind) {
  for (long i = 0; i < n; ++i) y[i] += a * load1(row, i, kind);
}

/* This thread's buffer b with room for n floats (linear.c: kept for the thread's next call,
 * freed when it ends); NULL if out of memory. Buffer 1 holds one sequence's attention scores. */
float *cachegate_thread_buffer(int b, long n);

/* Lane sums of 16 vectors, a[i]'s in lane rev4(i) (rev4: the 4-bit reversal), so a caller
 * that fills a[i] with key rev4(i) gets key i's sum in lane i: four rounds of pairing halves,
 * 15 adds and 30 shuffles in all, against ~20 dependent scalar instructions a key summed alone. */
#if (defined(__clang__) || __GNUC__ >= 12) && !defined(CACHEGATE_OLD_SHUFFLE)
#define HALVES(u, v, w) \
  (__builtin_shufflevector(u, v, W##w##LO) + __builtin_shufflevector(u, v, W##w##HI))
#else /* GCC before 12: the same lanes through __builtin_shuffle's index vectors */
#define HALVES(u, v, w) \
  (__builtin_shuffle(u, v, (i16){W##w##LO}) + __builtin_shuffle(u, v, (i16){W##w##HI}))
#endif
#define W8LO 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define W8HI 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define W4LO 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27
#define W4HI 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define W2LO 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define W2HI 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define W1LO 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30
#define W1HI 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31
static const int REV4[16] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15};

static inline __attribute__((always_inline)) v16 sums16(const v16 *a) {
  v16 b[8], c[4], d[2];
  for (int i = 0; i < 8; ++i) b[i] = HALVES(a[2 * i], a[2 * i + 1], 8);
  for (int i = 0; i < 4; ++i) c[i] = HALVES(b[2 * i], b[2 * i + 1], 4);
  for (int i = 0; i < 2; ++i) d[i] = HALVES(c[2 * i], c[2 * i + 1], 2);
  return HALVES(d[0], d[1], 1);
}

/* softmax(scores[0 .. n)) in place, unnormalised; returns the weights' sum. */
static inline __attribute__((always_inline)) float weights(float *scores, long n) {
  float top = -INFINITY;
  for (long j = 0; j < n; ++j) top = scores[j] > top ? scores[j] : top;
  for (long j = n; j < (n + 15) / 16 * 16; ++j) scores[j] = top; /* (weights 1, unused) */
  v16 sum = {0};
  for (long j = 0; j < n; j += 16) {
    v16 e = exp_neg(*(v16u *)(scores + j) - top);
    *(v16u *)(scores + j) = e;
    sum += j + 16 <= n ? e : (v16){0}; /* the last vector: its lanes up to n only */
  }
  float total = 0.f;
  for (int l = 0; l < 16; ++l) total += sum[l];
  for (long j = n / 16 * 16; j < n; ++j) total += scores[j];
  return total;
}

/* One query head over one sequence's n keys; D a multiple of 16 known when inlined, so q and
 * the output stay in registers: 16 keys' scores at a time (sums16), then V weighted. */
static inline __attribute__((always_inline)) void head_fixed(
    const int D, const int kind, const float *restrict qh, const char *k, const char *v,
    const long *slot, long n, float scale, float *restrict scores, float *restrict o) {
  const long row = D * BYTES[kind];
  v16 qv[D / 16], ov[D / 16];
  for (int c = 0; c < D / 16; ++c) qv[c] = *(const v16u *)(qh + 16 * c), ov[c] = (v16){0};
  for (long j = 0; j < n; j += 16) {
    v16 a[16];
    for (int i = 0; i < 16; ++i) {
      long key = j + REV4[i] < n ? j + REV4[i] : n - 1; /* past n: any key (lane unused) */
      const char *kr = k + slot[key] * row;
      v16 acc = qv[0] * load16(kr, kind);
      for (int c = 1; c < D / 16; ++c) acc += qv[c] * load16(kr + 16 * c * BYTES[kind], kind);
      a[i] = acc;
    }
    *(v16u *)(scores + j) = scale * sums16(a);
  }
  float inv = 1.f / weights(scores, n);
  for (long j = 0; j < n; ++j) {
    const char *vr = v + slot[j] * row;
    for (int c = 0; c < D / 16; ++c) ov[c] += scores[j] * load16(vr + 16 * c * BYTES[kind], kind);
  }
  for (int c = 0; c < D / 16; ++c) *(v16u *)(o + 16 * c) = ov[c] * inv;
}

/* Any head size: a key at a time. */
static inline __attribute__((always_inline)) void head_any(
    long D, const int kind, const float *qh, const char *k, const char *v, const long *slot,
    long n, float scale, float *scores, float *o) {
  const long row = D * BYTES[kind];
  for (long j = 0; j < n; ++j) scores[j] = scale * dot(qh, k + slot[j] * row, D, kind);
  float inv = 1.f / weights(scores, n);
  for (long i = 0; i < D; ++i) o[i] = 0.f;
  for (long j = 0; j < n; ++j) axpy(o, v + slot[j] * row, scores[j], D, kind);
  for (long i = 0; i < D; ++i) o[i] *= inv;
}

/* One query head, the head size and the pages' kind dispatched to a specialised copy. */
#define HEAD(KIND)                                                                            \
  static void head_##KIND(long D, const float *qh, const char *k, const char *v,              \
                          const long *slot, long n, float scale, float *scores, float *o) {    \
    if (D == 64)                                                                              \
      head_fixed(64, KIND, qh, k, v, slot, n, scale, scores, o);                              \
    else if (D == 128)                                                                        \
      head_fixed(128, KIND, qh, k, v, slot, n, scale, scores, o);                             \
    else                                                                                      \
      head_any(D, KIND, qh, k, v, slot, n, scale, scores, o);                                 \
  }
HEAD(F32) HEAD(BF16) HEAD(F16)
typedef void (*head_fn)(long, const float *, const char *, const char *, const long *, long,
                        float, float *, float *);
static const head_fn HEADS[3] = {head_F32, head_BF16, head_F16};

/* Whether every read the call makes is inside its arguments: whole groups of query heads per
 * K/V head (else head h / (Hq / Hkv) runs past the pages, or divides by zero), each sequence
 * 1 .. S keys (its new token at least; more would read past its row of slots and write past
 * the scores buffer), every slot it reads inside a head's slots. */
static int valid(long slots_per_head, const long *slots, const long *lengths, long G, long S,
                 long Hq, long Hkv, long D) {
  if (G < 0 || S < 0 || Hq < 0 || Hkv < 1 || D < 1 || Hq % Hkv) return 0;
  for (long g = 0; g < G; ++g) {
    if (lengths[g] < 1 || lengths[g] > S) return 0;
    for (long j = 0; j < lengths[g]; ++j)
      if (slots[g * S + j] < 0 || slots[g * S + j] >= slots_per_head) return 0;
  }
  return 1;
}

/* (Sequence, head) pairs a thread takes at least: fewer are not worth a thread. */
#define MIN_HEADS 8

/* fn(ctx, g, h, scores) for every (sequence g, head h < H) pair of G sequences of up to S keys,
 * on up to `threads` threads, each with a scores buffer of its own (`rows` rows of S, each
 * padded to whole vectors: a pair may compute several query heads). 0, or -1 if out of
 * memory. */
typedef void (*pair_fn)(const void *ctx, long g, long h, float *scores);
static int over_pairs(long G, long H, long S, long rows, int threads, pair_fn fn,
                      const void *ctx) {
  if (G == 0) return 0;
  long padded = (S + 15) / 16 * 16; /* whole vectors for exp_neg */
  long items = G * H, parts = items / MIN_HEADS < threads ? items / MIN_HEADS : threads;
  if (parts < 1) parts = 1;
  int failed = 0;
  /* (on the whole pool, the pairs dealt to `parts` of its threads: as linear.c's run) */
#pragma omp parallel num_threads(parts > 1 ? threads : 1) if (parts > 1) reduction(| : failed)
  {
    long part = omp_get_thread_num();
    long step = omp_get_num_threads() < parts ? omp_get_num_threads() : parts;
    float *buffer = part < step ? cachegate_thread_buffer(1, rows * padded) : 0;
    /* (sequence, head) pairs dealt round-robin: sequences of different lengths mix */
    for (long i = part; buffer && i < items; i += step) fn(ctx, i / H, i % H, buffer);
    failed |= part < step && !buffer;
  }
  return failed ? -1 : 0;
}

/* A call of cachegate_decode_attention (sequence g's query heads at q + g * q_stride). */
struct attention {
  const float *q;
  long q_stride;
  const void *keys, *values;
  int kind;
  long slots_per_head;
  const long *slots, *lengths;
  long S, Hq, Hkv, D;
  float scale;
  float *out;
};

static void attend_pair(const void *ctx, long g, long h, float *scores) {
  const struct attention *a = ctx;
  long head = (h / (a->Hq / a->Hkv)) * a->slots_per_head * a->D * BYTES[a->kind]; /* bytes */
  HEADS[a->kind](a->D, a->q + g * a->q_stride + h * a->D, (const char *)a->keys + head,
                 (const char *)a->values + head, a->slots + g * a->S, a->lengths[g], a->scale,
                 scores, a->out + (g * a->Hq + h) * a->D);
}

static int attend(const float *q, long q_stride, const void *keys, const void *values, int kind,
                  long slots_per_head, const long *slots, const long *lengths, long G, long S,
                  long Hq, long Hkv, long D, float scale, float *out, int threads) {
  struct attention a = {q, q_stride, keys, values, kind, slots_per_head, slots, lengths,
                        S, Hq, Hkv, D, scale, out};
  return over_pairs(G, Hq, S, 1, threads, attend_pair, &a);
}

/* q: [G, Hq, D]; keys, values: one layer of the pool, [Hkv, slots_per_head, D], elements of
 * `kind` (0 float32, 1 bfloat16, 2 float16); slots: [G, S], sequence g's K/V at
 * slots[g][0 .. lengths[g]); out: [G, Hq, D]. Query head h reads K/V head h / (Hq / Hkv)
 * (grouped-query attention). On up to `threads` threads. 0 on success, -1 if out of memory,
 * -2 if the arguments are not what `valid` takes (nothing read or written). */
int cachegate_decode_attention(const float *q, const void *keys, const void *values, int kind,
                               long slots_per_head, const long *slots, const long *lengths,
                               long G, long S, long Hq, long Hkv, long D, float scale,
                               float *out, int threads) {
  if (kind < F32 || kind > F16 || !valid(slots_per_head, slots, lengths, G, S, Hq, Hkv, D))
    return -2;
  return attend(q, Hq * D, keys, values, kind, slots_per_head, slots, lengths, G, S, Hq, Hkv, D,
                scale, out, threads);
}

/* float32 to bfloat16 bits, rounding to nearest even as torch's .to(torch.bfloat16) does (NaN:
 * its quiet NaN). */
static inline unsigned short bfloat16_bits(float f) {
  union { float f; unsigned int u; } w = {f};
  if (f != f) return 0x7fc0;
  return (unsigned short)((w.u + 0x7fffu + ((w.u >> 16) & 1u)) >> 16);
}

/* A decode step's attention in one layer, its new K/V written first: sequence g's row of the
 * layer's projections is qkv + g * stride, [q (Hq heads) | k (Hkv heads) | v (Hkv heads)] of
 * D floats each; its new token's K and V go into slot writes[g] of the pages keys, values
 * ([Hkv, slots_per_head, D], float32 or bfloat16: `kind`, rounded as torch rounds), which must
 * be slots[g][lengths[g] - 1]; then as cachegate_decode_attention, q read in place. Return
 * values as it; -2 also if a write slot is not the sequence's last, or `kind` is float16
 * (nothing written). */
int cachegate_decode_step(const float *qkv, long stride, void *keys, void *values, int kind,
                          long slots_per_head, const long *writes, const long *slots,
                          const long *lengths, long G, long S, long Hq, long Hkv, long D,
                          float scale, float *out, int threads) {
  if (!valid(slots_per_head, slots, lengths, G, S, Hq, Hkv, D) || stride < (Hq + 2 * Hkv) * D)
    return -2;
  if (kind != F32 && kind != BF16) return -2;
  for (long g = 0; g < G; ++g)
    if (writes[g] != slots[g * S + lengths[g] - 1]) return -2;
  for (long g = 0; g < G; ++g) {
    const float *k = qkv + g * stride + Hq * D, *v = k + Hkv * D;
    for (long h = 0; h < Hkv; ++h) {
      long at = (h * slots_per_head + writes[g]) * D;
      if (kind == F32) {
        for (long i = 0; i < D; ++i)
          ((float *)keys)[at + i] = k[h * D + i], ((float *)values)[at + i] = v[h * D + i];
      } else {
        for (long i = 0; i < D; ++i) {
          ((unsigned short *)keys)[at + i] = bfloat16_bits(k[h * D + i]);
          ((unsigned short *)values)[at + i] = bfloat16_bits(v[h * D + i]);
        }
      }
    }
  }
  return attend(qkv, stride, keys, values, kind, slots_per_head, slots, lengths, G, S, Hq, Hkv,
                D, scale, out, threads);
}

/* y[r][i] = silu(gu[r][i]) * gu[r][n + i] (a gated MLP's activation: gate and up side by side in
 * each row of gu [rows, 2n]; y [rows, n]), silu(g) = g * sigmoid(g), sigmoid from e^-|g|. */
void cachegate_silu_mul(const float *gu, float *y, long rows, long n) {
  for (long r = 0; r < rows; ++r) {
    const float *g = gu + r * 2 * n, *u = g + n;
    float *o = y + r * n;
    long i = 0;
    for (; i + 16 <= n; i += 16) {
      v16 gv = *(const v16u *)(g + i);
      const i16 sign = (i16){0} + (int)0x80000000u;
      v16 t = exp_neg((v16)((i16)gv | sign)); /* e^-|g| */
      i16 positive = gv >= 0; /* lanes: -1 where g >= 0, else 0 */
      v16 top = (v16)(((i16)((v16){0} + 1.f) & positive) | ((i16)t & ~positive));
      v16 sig = top / (1.f + t);
      *(v16u *)(o + i) = gv * sig * *(const v16u *)(u + i);
    }
    for (; i < n; ++i) {
      float t = expf(-fabsf(g[i]));
      o[i] = g[i] * ((g[i] >= 0 ? 1.f : t) / (1.f + t)) * u[i];
    }
  }
}

/* Key j of a sequence in int8 pages as attention reads it, into kr (C vectors): K = q8 * its
 * page's per-channel scale (float16), as torch's dequantisation computes it; from tail_start
 * on, the sequence's full-precision tail rows. */
static inline __attribute__((always_inline)) void key_q8(
    v16 *kr, long C, const signed char *k, const void *ks, long P, const long *slot, long j,
    const float *tail, long tail_start) {
  if (j >= tail_start) {
    const float *t = tail + (j - tail_start) * C * 16;
    for (long c = 0; c < C; ++c) kr[c] = *(const v16u *)(t + 16 * c);
    return;
  }
  const signed char *q8 = k + slot[j] * C * 16;
  const char *sr = (const char *)ks + (slot[j] / P) * C * 16 * 2;
  for (long c = 0; c < C; ++c) kr[c] = widen(q8 + 16 * c) * load16(sr + 32 * c, F16);
}

/* One query head over n keys in int8 pages, any head size: a key and a channel at a time. */
static void head_q8_any(long D, const float *qh, const signed char *k, const signed char *v,
                        const void *ks, const void *vs, long P, const long *slot, long n,
                        const float *tail, long tail_start, float scale, float *scores,
                        float *o) {
  for (long j = 0; j < n; ++j) {
    float s = 0.f;
    if (j >= tail_start) {
      for (long i = 0; i < D; ++i) s += qh[i] * tail[(j - tail_start) * D + i];
    } else {
      const signed char *kr = k + slot[j] * D;
      const char *sr = (const char *)ks + (slot[j] / P) * D * 2;
      for (long i = 0; i < D; ++i) s += qh[i] * ((float)kr[i] * load1(sr, i, F16));
    }
    scores[j] = scale * s;
  }
  float inv = 1.f / weights(scores, n);
  for (long i = 0; i < D; ++i) o[i] = 0.f;
  for (long j = 0; j < n; ++j) {
    const signed char *vr = v + slot[j] * D;
    float w = scores[j] * load1(vs, slot[j], F16);
    long i = 0;
    for (; i + 16 <= D; i += 16) *(v16u *)(o + i) += w * widen(vr + i);
    for (; i < D; ++i) o[i] += w * (float)vr[i];
  }
  for (long i = 0; i < D; ++i) o[i] *= inv;
}

/* The R query heads of one K/V head (qh, o: R rows of D) over one sequence's n keys in int8
 * pages: K as key_q8 reads it, V = q8 * its token's scale (float16, vs[slot]); keys from
 * tail_start on are the sequence's full-precision tail rows (float32, tail + (j - tail_start)
 * * D), as its partly filled last page keeps them. Each block of 16 keys is de-quantised
 * once for all R heads; each head's scores (16 at a time, sums16; scores: R rows `padded`
 * apart), weights and output (in registers) are computed as they would be alone, in the same
 * order. Head sizes that are a multiple of 16 up to 256, inlined with D known (64, 128:
 * group_q8) so the vector loops unroll; any other, head_q8_any, a head at a time. */
static inline __attribute__((always_inline)) void group_q8_d(
    const long D, long R, const float *qh, const signed char *k, const signed char *v,
    const void *ks, const void *vs, long P, const long *slot, long n, const float *tail,
    long tail_start, float scale, float *scores, long padded, float *o) {
  if (D % 16 || D > 256) {
    for (long r = 0; r < R; ++r)
      head_q8_any(D, qh + r * D, k, v, ks, vs, P, slot, n, tail, tail_start, scale,
                  scores + r * padded, o + r * D);
    return;
  }
  const long C = D / 16;
  v16 kb[16][16];
  for (long j = 0; j < n; j += 16) {
    for (int i = 0; i < 16; ++i) /* past n: any key (lane unused) */
      key_q8(kb[i], C, k, ks, P, slot, j + REV4[i] < n ? j + REV4[i] : n - 1, tail, tail_start);
    for (long r = 0; r < R; ++r) {
      v16 qv[16], a[16];
      for (long c = 0; c < C; ++c) qv[c] = *(const v16u *)(qh + r * D + 16 * c);
      for (int i = 0; i < 16; ++i) {
        v16 acc = {0};
        for (long c = 0; c < C; ++c) acc += qv[c] * kb[i][c];
        a[i] = acc;
      }
      *(v16u *)(scores + r * padded + j) = scale * sums16(a);
    }
  }
  for (long r = 0; r < R; ++r) {
    float *sr = scores + r * padded, inv = 1.f / weights(sr, n);
    v16 ov[16];
    for (long c = 0; c < C; ++c) ov[c] = (v16){0};
    for (long j = 0; j < n; ++j) {
      const signed char *vr = v + slot[j] * D;
      float w = sr[j] * load1(vs, slot[j], F16);
      for (long c = 0; c < C; ++c) ov[c] += w * widen(vr + 16 * c);
    }
    for (long c = 0; c < C; ++c) *(v16u *)(o + r * D + 16 * c) = ov[c] * inv;
  }
}

static void group_q8(long D, long R, const float *qh, const signed char *k, const signed char *v,
                     const void *ks, const void *vs, long P, const long *slot, long n,
                     const float *tail, long tail_start, float scale, float *scores,
                     long padded, float *o) {
  if (D == 64)
    group_q8_d(64, R, qh, k, v, ks, vs, P, slot, n, tail, tail_start, scale, scores, padded, o);
  else if (D == 128)
    group_q8_d(128, R, qh, k, v, ks, vs, P, slot, n, tail, tail_start, scale, scores, padded, o);
  else
    group_q8_d(D, R, qh, k, v, ks, vs, P, slot, n, tail, tail_start, scale, scores, padded, o);
}

/* A call of cachegate_decode_attention_q8. */
struct attention_q8 {
  const float *q;
  long q_stride; /* sequence g's query heads at q + g * q_stride */
  const signed char *keys, *values;
  const void *key_scales, *value_scales;
  long P, slots_per_head;
  const long *slots, *lengths, *tails, *tail_starts;
  long tail_offset, S, Hq, Hkv, D;
  float scale;
  float *out;
};

/* Sequence g's query heads of K/V head hk (grouped-query attention: heads hk * R .. + R). */
static void attend_pair_q8(const void *ctx, long g, long hk, float *scores) {
  const struct attention_q8 *a = ctx;
  long R = a->Hq / a->Hkv, n = a->slots_per_head, D = a->D, first = g * a->Hq + hk * R;
  const float *tail = a->tails[g] ? (const float *)(a->tails[g] + a->tail_offset) + hk * a->P * D
                                  : 0;
  group_q8(D, R, a->q + g * a->q_stride + hk * R * D, a->keys + hk * n * D, a->values + hk * n * D,
           (const char *)a->key_scales + hk * (n / a->P) * D * 2,
           (const char *)a->value_scales + hk * n * 2, a->P, a->slots + g * a->S, a->lengths[g],
           tail, tail ? a->tail_starts[g] : a->lengths[g], a->scale, scores,
           (a->S + 15) / 16 * 16, a->out + first * D);
}

/* cachegate_decode_attention over int8 pages (kv_dtype: int8), dequantised as they are read:
 * keys, values int8 [Hkv, slots_per_head, D]; key_scales float16 [Hkv, slots_per_head / P, D]
 * (per page and channel), value_scales float16 [Hkv, slots_per_head] (per token); P the page
 * size. Sequence g's keys from tail_starts[g] on (at most P of them, the new token's last)
 * are float32 rows at address tails[g] + tail_offset, [Hkv, P, D] (its full-precision tail);
 * tails[g] == 0: none. Return values as cachegate_decode_attention. */
int cachegate_decode_attention_q8(const float *q, const signed char *keys,
                                  const signed char *values, const void *key_scales,
                                  const void *value_scales, long P, long slots_per_head,
                                  const long *slots, const long *lengths, const long *tails,
                                  const long *tail_starts, long tail_offset, long G, long S,
                                  long Hq, long Hkv, long D, float scale, float *out,
                                  int threads) {
  if (P < 1 || slots_per_head % P || !valid(slots_per_head, slots, lengths, G, S, Hq, Hkv, D))
    return -2;
  for (long g = 0; g < G; ++g) {
    long start = tails[g] ? tail_starts[g] : lengths[g];
    if (start < 0 || start > lengths[g] || lengths[g] - start > P) return -2;
  }
  struct attention_q8 a = {q, Hq * D, keys, values, key_scales, value_scales, P, slots_per_head,
                          slots, lengths, tails, tail_starts, tail_offset, S, Hq, Hkv, D, scale,
                          out};
  return over_pairs(G, Hkv, S, Hq / Hkv, threads, attend_pair_q8, &a);
}

/* float32 -> IEEE half bits, rounded to nearest even as torch's .to(float16), for f >= 2^-14
 * (a normal half: what kvquant._scales gives), inf or NaN. */
static inline unsigned short half_of(float f) {
  union { float f; unsigned int u; } w = {f};
  unsigned int sign = (w.u >> 16) & 0x8000u, a = w.u & 0x7fffffffu;
  if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u);   /* NaN */
  if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  /* 65520 and up: inf */
  a -= 0x38000000u;                                                /* exponent 127 -> 15 */
  return (unsigned short)(sign | ((a + 0xfffu + ((a >> 13) & 1u)) >> 13));
}

/* The largest |x[i * step]| of n, NaN if any is (as torch's abs().amax()). */
static inline float absmax(const float *x, long n, long step) {
  float m = 0.f;
  for (long i = 0; i < n; ++i) {
    float a = fabsf(x[i * step]);
    if (a != a || a > m) m = a;
    if (m != m) break;
  }
  return m;
}

/* kvquant._scales: absmax / 127, at least 2^-14, as float16 bits. */
static inline unsigned short scale_of(float m) {
  float s = m / 127.f;
  return half_of(s < 6.103515625e-05f ? 6.103515625e-05f : s); /* (NaN stays NaN) */
}

/* kvquant._round: x / scale rounded half to even, clamped to +-127. */
static inline signed char q8_of(float x, float s) {
  float r = __builtin_rintf(x / s);
  return (signed char)(r > 127.f ? 127.f : r < -127.f ? -127.f : r);
}

/* A decode step's new K/V into int8 pages, as PagedPool.write_int8_values and
 * PagedCache.write_keys write them (bitwise): sequence g's V (qkv + g * stride past its q and
 * k) quantised per token and K/V head into slot writes[g], its scale beside; its K into row
 * writes[g] % P of its full-precision tail (float32 [Hkv, P, D] at bases[g] + tail_offset);
 * and when that row is its page's last, the page's K quantised per channel from the tail, its
 * scales into key_scales (float16 [Hkv, slots_per_head / P, D]). */
static void write_q8(const float *qkv, long stride, signed char *keys, signed char *values,
                     unsigned short *key_scales, unsigned short *value_scales, long P,
                     long slots_per_head, const long *writes, const long *bases,
                     long tail_offset, long G, long Hq, long Hkv, long D) {
  for (long g = 0; g < G; ++g) {
    const float *k = qkv + g * stride + Hq * D, *v = k + Hkv * D;
    long slot = writes[g], r = slot % P, page = slot / P;
    float *tail = (float *)(bases[g] + tail_offset);
    for (long h = 0; h < Hkv; ++h) {
      const float *vh = v + h * D, *kh = k + h * D;
      float *th = tail + h * P * D;
      long at = h * slots_per_head + slot;
      unsigned short bits = scale_of(absmax(vh, D, 1));
      float s = half_bits(bits);
      value_scales[at] = bits;
      for (long i = 0; i < D; ++i) values[at * D + i] = q8_of(vh[i], s), th[r * D + i] = kh[i];
      if (r < P - 1) continue;
      signed char *kp = keys + (h * slots_per_head + page * P) * D;
      unsigned short *ks = key_scales + (h * (slots_per_head / P) + page) * D;
      for (long i = 0; i < D; ++i) {
        ks[i] = scale_of(absmax(th + i, P, D));
        float c = half_bits(ks[i]);
        for (long j = 0; j < P; ++j) kp[j * D + i] = q8_of(th[j * D + i], c);
      }
    }
  }
}

/* cachegate_decode_step over int8 pages (kv_dtype: int8): each sequence's new K/V written as
 * write_q8 writes them (bases[g]: the address of its tail, [L, Hkv, P, D] float32, never 0),
 * then cachegate_decode_attention_q8 with the query read in place (tails, tail_starts as it
 * takes them: 0 for a sequence whose new token filled its page, else its tail, starting at
 * its page's first position). Return values as it; -2 also if a write slot is not the
 * sequence's last, or the tails disagree with the writes (nothing written). */
int cachegate_decode_step_q8(const float *qkv, long stride, signed char *keys,
                             signed char *values, void *key_scales, void *value_scales, long P,
                             long slots_per_head, const long *writes, const long *bases,
                             const long *slots, const long *lengths, const long *tails,
                             const long *tail_starts, long tail_offset, long G, long S, long Hq,
                             long Hkv, long D, float scale, float *out, int threads) {
  if (P < 1 || slots_per_head % P || !valid(slots_per_head, slots, lengths, G, S, Hq, Hkv, D) ||
      stride < (Hq + 2 * Hkv) * D)
    return -2;
  for (long g = 0; g < G; ++g) {
    long last = lengths[g] - 1, r = last % P;
    if (writes[g] != slots[g * S + last] || writes[g] % P != r || !bases[g]) return -2;
    if (r == P - 1 ? tails[g] != 0 : tails[g] != bases[g] || tail_starts[g] != last - r)
      return -2;
  }
  write_q8(qkv, stride, keys, values, key_scales, value_scales, P, slots_per_head, writes, bases,
           tail_offset, G, Hq, Hkv, D);
  struct attention_q8 a = {qkv, stride, keys, values, key_scales, value_scales, P,
                          slots_per_head, slots, lengths, tails, tail_starts, tail_offset, S, Hq,
                          Hkv, D, scale, out};
  return over_pairs(G, Hkv, S, Hq / Hkv, threads, attend_pair_q8, &a);
}
