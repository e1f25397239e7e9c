/* cachegate's small per-layer ops for the CPU (localmodel/kernel.py compiles and loads them with
 * linear.c and ops.c; localmodel/lean.py calls them): a decoder layer's RMSNorm, with the
 * residual add before it, and its rotary position embedding, in place.
 *
 * As torch ops, an RMSNorm is ~7 ops (widen, square, mean, add, rsqrt, multiply, scale) and the
 * rotation of q and k ~14 (slices, negations, concatenations, products, sums); on one row each
 * op is a few microseconds of dispatch for a few hundred floats of work, ~60 norms and ~30
 * rotations a decode step. Here each is one call. float32 only, one thread (a row is ~1 µs of
 * work: even a 256-token prefill chunk's is not worth waking another), each row on its own, so
 * a row's result does not depend on the rows computed with it. */

/* h[r] = x[r] + delta[r] (h may be x: in place; delta NULL: no add, h unused), then
 * y[r] = w * v / sqrt(mean(v^2) + eps) with v = the row (h[r], or x[r] with no delta), as
 * torch's rms_norm computes it in float32: the mean of squares, rsqrt, the row times it, times
 * w. x, delta, h, y: [rows, n], w: [n]. */
void cachegate_rms_norm(const float *x, const float *delta, float *h, const float *w, float *y,
                        long rows, long n, float eps) {
  for (long r = 0; r < rows; ++r) {
    const float *v = x + r * n;
    if (delta) {
      float *out = h + r * n;
      for (long i = 0; i < n; ++i) out[i] = v[i] + delta[r * n + i];
      v = out;
    }
    float lanes[16] = {0}; /* 16 partial sums, as a vectorised reduction keeps them */
    long i = 0;
    for (; i + 16 <= n; i += 16)
      for (int l = 0; l < 16; ++l) lanes[l] += v[i + l] * v[i + l];
    float sum = 0.f;
    for (int l = 0; l < 16; ++l) sum += lanes[l];
    for (; i < n; ++i) sum += v[i] * v[i];
    float inv = 1.f / __builtin_sqrtf(sum / (float)n + eps);
    float *out = y + r * n;
    for (long j = 0; j < n; ++j) out[j] = w[j] * (v[j] * inv);
  }
}

/* Rotary position embedding in place, rotate-half form (Llama's apply_rotary_pos_emb): for
 * each row r and each of `heads` heads of size d (even) starting at x + r * stride,
 * x1 = the head's first half, x2 = its second: [x1 cos1 - x2 sin1, x2 cos2 + x1 sin2], with
 * cos, sin [rows, d] (the model's, for the row's position; cos1 its first half, cos2 its
 * second). The heads of a row are contiguous (q's then k's: one call for both). */
void cachegate_rope(float *x, long stride, const float *cos, const float *sin, long rows,
                    long heads, long d) {
  long half = d / 2;
  for (long r = 0; r < rows; ++r) {
    const float *c = cos + r * d, *s = sin + r * d;
    for (long h = 0; h < heads; ++h) {
      float *v = x + r * stride + h * d;
      for (long i = 0; i < half; ++i) {
        float a = v[i], b = v[i + half];
        v[i] = a * c[i] - b * s[i];
        v[i + half] = b * c[i + half] + a * s[i + half];
      }
    }
  }
}

/* The kernels this file composes (linear.c, ops.c). */
int cachegate_linear_f32(const float *wp, const float *x, float *y, const float *bias,
                         long rows, long in, long out, int threads);
int cachegate_decode_step(const float *qkv, long stride, void *keys, void *values, int kind,
                          long slots_per_head, const long *writes, const long *slots,
                          const long *lengths, long G, long S, long Hq, long Hkv, long D,
                          float scale, float *out, int threads);
void cachegate_silu_mul(const float *gu, float *y, long rows, long n);
float *cachegate_thread_buffer(int b, long n);

int cachegate_linear_q8(const signed char *wp, const float *scale, const float *x, float *y,
                        const float *bias, long rows, long in, long out, int threads);
int cachegate_decode_step_q8(const float *qkv, long stride, signed char *keys,
                             signed char *values, void *key_scales, void *value_scales, long P,
                             long slots_per_head, const long *writes, const long *bases,
                             const long *slots, const long *lengths, const long *tails,
                             const long *tail_starts, long tail_offset, long G, long S, long Hq,
                             long Hkv, long D, float scale, float *out, int threads);

/* int8 pages (kv_dtype: int8): what cachegate_decode_step_q8 takes beyond the float pages'
 * arguments (its scales, page size, each sequence's tail and its attention's view of it). */
struct cachegate_q8_pages {
  void *key_scales, *value_scales;
  long page_size;
  const long *bases, *tails, *tail_starts;
  long tail_offset;
};

/* One Llama-shaped decoder layer as localmodel/lean.py holds it: the weights in tiles
 * (linear.c's layout; q|k|v and gate|up each stacked into one weight), biases or NULL; the
 * tiles float32, or int8 with their scales (the *_scale pointers; NULL for float32). */
struct cachegate_layer {
  const float *norm1, *norm2;
  const void *qkv;
  const float *qkv_bias;
  const void *o;
  const float *o_bias;
  const void *gate_up;
  const float *gate_up_bias;
  const void *down;
  const float *down_bias;
  const float *qkv_scale, *o_scale, *gate_up_scale, *down_scale;
  long hidden, heads, kv_heads, head_dim, intermediate;
  float eps, scale;
};

/* y = x w^T + bias on linear.c's kernel for the tiles' kind (int8 where `scale` is given). */
static int product(const void *w, const float *scale, const float *x, float *y,
                   const float *bias, long rows, long in, long out, int threads) {
  if (scale) return cachegate_linear_q8(w, scale, x, y, bias, rows, in, out, threads);
  return cachegate_linear_f32(w, x, y, bias, rows, in, out, threads);
}

/* A decode step of G sequences (one new token each) through layer `l`, on float32 or bfloat16
 * pages (`kind`, as cachegate_decode_step takes it), or int8 pages where `q8` is given (then
 * `kind` is unused and the step's K/V go through cachegate_decode_step_q8):
 * x [G, hidden] the residual stream in, y [G, hidden] out; cos, sin [G, head_dim] each
 * sequence's rotary embedding; keys, values, writes, slots, lengths, S as
 * cachegate_decode_step takes them. The same ops, in the same order, as lean.py's forward:
 * norm, q|k|v, RoPE, K/V written and attention, o, residual add and norm, gate|up, SiLU x up,
 * down, residual add. 0 on success, -1 out of memory, -2 arguments out of bounds (see
 * cachegate_decode_step: then nothing was written). */
int cachegate_decoder_layer(const struct cachegate_layer *l, const float *x, float *y,
                            const float *cos, const float *sin, void *keys, void *values,
                            int kind, long slots_per_head, const long *writes, const long *slots,
                            const long *lengths, long G, long S, int threads,
                            const struct cachegate_q8_pages *q8) {
  const long H = l->hidden, D = l->head_dim, I = l->intermediate;
  const long Q = l->heads * D, KV = l->kv_heads * D, QKV = Q + 2 * KV;
  /* activations: normed [G, H], qkv [G, QKV], attention [G, Q], o [G, H], gate|up [G, 2I],
   * act [G, I] (each G rows), in this thread's buffer */
  float *buf = cachegate_thread_buffer(2, G * (2 * H + QKV + Q + 3 * I));
  if (!buf) return -1;
  float *normed = buf, *qkv = normed + G * H, *att = qkv + G * QKV, *o = att + G * Q;
  float *gu = o + G * H, *act = gu + G * 2 * I;
  cachegate_rms_norm(x, 0, 0, l->norm1, normed, G, H, l->eps);
  int failed = product(l->qkv, l->qkv_scale, normed, qkv, l->qkv_bias, G, H, QKV, threads);
  if (failed) return failed;
  cachegate_rope(qkv, QKV, cos, sin, G, l->heads + l->kv_heads, D);
  if (q8)
    failed = cachegate_decode_step_q8(qkv, QKV, keys, values, q8->key_scales, q8->value_scales,
                                      q8->page_size, slots_per_head, writes, q8->bases, slots,
                                      lengths, q8->tails, q8->tail_starts, q8->tail_offset, G, S,
                                      l->heads, l->kv_heads, D, l->scale, att, threads);
  else
    failed = cachegate_decode_step(qkv, QKV, keys, values, kind, slots_per_head, writes, slots,
                                   lengths, G, S, l->heads, l->kv_heads, D, l->scale, att,
                                   threads);
  if (failed) return failed;
  failed = product(l->o, l->o_scale, att, o, l->o_bias, G, Q, H, threads);
  if (failed) return failed;
  cachegate_rms_norm(x, o, y, l->norm2, normed, G, H, l->eps); /* y = x + o */
  failed = product(l->gate_up, l->gate_up_scale, normed, gu, l->gate_up_bias, G, H, 2 * I,
                   threads);
  if (failed) return failed;
  cachegate_silu_mul(gu, act, G, I);
  failed = product(l->down, l->down_scale, act, o, l->down_bias, G, I, H, threads);
  if (failed) return failed;
  for (long i = 0; i < G * H; ++i) y[i] += o[i];
  return 0;
}
