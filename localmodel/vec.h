/* What cachegate's kernels (linear.c, ops.c) share: GCC's generic vectors of 16 lanes (AVX-512,
 * AVX2 or NEON registers, as the compiler targets the CPU it runs on: -march=native) and the
 * widening of 16 int8 weights to float32. kernel.py copies it beside the sources it compiles. */
#ifndef CACHEGATE_VEC_H
#define CACHEGATE_VEC_H
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4))); /* a load at any address */
typedef signed char q16u __attribute__((vector_size(16), aligned(1)));
typedef int i16 __attribute__((vector_size(64)));

/* 16 int8 elements as float32. NOTE: GCC widens a generic int8 vector lane by lane (measured:
 * 2x slower than the float32 tiles), so x86 takes the one-instruction widenings. */
static inline __attribute__((always_inline)) v16 widen(const signed char *p) {
#if defined(__AVX512F__)
  return (v16)_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
#elif defined(__AVX2__)
  __m128i q = _mm_loadu_si128((const __m128i *)p);
  union { __m256 h[2]; v16 v; } u;
  u.h[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
  u.h[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8)));
  return u.v;
#else
  return __builtin_convertvector(__builtin_convertvector(*(const q16u *)p, i16), v16);
#endif
}
#endif
