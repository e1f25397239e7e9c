"""The engine's side of the disk tier: the KV row format, the measured break-even, the load.

``prefix.offload.DiskTier`` stores what the memory tree evicts and knows nothing of tensors;
this module gives it a :class:`RowCodec` (one row of bytes per token) and decides, per
request, whether a range the disk holds is worth reading::

    n_mem  = tree.match(key).n_cached                          # memory: [0, n_mem)
    n_disk = longest prefix on disk                            # disk:   [0, n_disk)
    if n_disk - n_mem >= break_even.min_tokens:                 # load beats recompute
        read rows [n_mem, n_disk) → the request's KV buffers; prefill from n_disk

The break-even is measured, not assumed (:func:`measure_break_even`): on a CPU a token's
prefill costs milliseconds and its KV reads back in microseconds, so one token pays; on a
GPU prefill is fast enough that short ranges may not.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from localmodel.forward import prefill
from localmodel.kv import KVLayout, RequestCache, TensorKV
from localmodel.kvquant import Int8KV
from localmodel.pages import PagedCache, PagedKV
from prefix import KVSpan, RadixKey
from prefix.offload import DiskStats, DiskTier

__all__ = ["BreakEven", "DiskPrefix", "RowCodec", "measure_break_even"]


class RowCodec:
    """Stored spans ↔ token rows of bytes, one row per token, token-major.

    Token-major, so that any token range of a file is one contiguous read. A float row is
    ``[2, n_layers, n_kv_heads, head_dim]`` (K row ``[0]``, V row ``[1]``) in the stored
    dtype (``kv_dtype``; bfloat16 included: bytes, not numpy floats). An int8 row
    (``dtype=torch.int8``) is int8 K, int8 V, V's per-token scales and the K scales of the
    token's span (per channel), so a row stands alone and an ``Int8KV`` round-trips bit for
    bit (about half the bytes of a float32 row, where memory holds ~4× less).
    """

    def __init__(self, layout: KVLayout, dtype: torch.dtype | None = None) -> None:
        self.layout = layout
        self.dtype = dtype or layout.dtype
        self._row_shape = (2, layout.n_layers, layout.n_kv_heads, layout.head_dim)
        self._kv_shape = self._row_shape[1:]  # [L, H, D]
        elements = math.prod(self._kv_shape)
        if self.dtype == torch.int8:  # bytes: K, V, V scales [L, H], K scales [L, H, D]
            heads = layout.n_layers * layout.n_kv_heads
            self._parts = (elements, elements, 2 * heads, 2 * elements)
            self._bpt = sum(self._parts)
        else:
            self._parts = (0, 0, 0, 0)  # unused
            self._bpt = 2 * elements * torch.empty((), dtype=self.dtype).element_size()

    @property
    def bytes_per_token(self) -> int:
        return self._bpt

    @torch.inference_mode()
    def encode(self, spans: Sequence[KVSpan], start: int, stop: int) -> np.ndarray:
        """Tokens ``[start, stop)`` of the concatenated spans as uint8 ``[stop - start, bpt]``."""
        n = stop - start
        out = torch.empty((n, self._bpt), dtype=torch.uint8)  # [n, bytes per token], CPU
        pos = filled = 0
        for span in spans:
            a, b = max(start - pos, 0), min(stop - pos, len(span))
            pos += len(span)
            if a < b:
                out[filled : filled + b - a] = self._encode_span(span, a, b)
                filled += b - a
        if filled != n:
            raise ValueError(f"RowCodec: spans cover {filled} of tokens {start}…{stop}")
        return out.numpy()

    def decode_into(self, cache: RequestCache | PagedCache, rows: np.ndarray, start: int) -> None:
        """Copy ``rows`` (uint8 ``[n, bpt]``) into ``cache`` at positions ``start…start+n-1``."""
        if self.dtype != torch.int8:
            kv = torch.from_numpy(rows).view(self.dtype).view(len(rows), *self._row_shape)
            cache.load_rows(kv, start)  # kv: [n, 2, L, H, D]
            return
        span = self.decode_int8(rows)  # [L, H, n, D]
        kv = torch.empty((len(rows), *self._row_shape), dtype=self.layout.dtype)
        span.write_into(kv[:, 0].permute(1, 2, 0, 3), kv[:, 1].permute(1, 2, 0, 3))
        cache.load_rows(kv, start)

    def decode_int8(self, rows: np.ndarray) -> Int8KV:
        """Int8 rows → one ``Int8KV`` whose K scales are per token (each row's span's)."""
        n, (k_n, v_n, vs_n, _) = len(rows), self._parts  # NOTE: int8 only
        raw = torch.from_numpy(rows)  # [n, bpt] uint8
        L, H, D = self._kv_shape
        keys = raw[:, :k_n].view(torch.int8).view(n, L, H, D).permute(1, 2, 0, 3)
        values = raw[:, k_n : k_n + v_n].view(torch.int8).view(n, L, H, D).permute(1, 2, 0, 3)
        v_scales = raw[:, k_n + v_n : k_n + v_n + vs_n].view(torch.float16).view(n, L, H, 1)
        k_scales = raw[:, k_n + v_n + vs_n :].view(torch.float16).view(n, L, H, D)
        # NOTE: the K scales vary per token when rows come from several spans, so they are
        # kept per token here ([L, H, n, D]); Int8KV.write_into broadcasts either shape.
        return Int8KV(keys, k_scales.permute(1, 2, 0, 3), values, v_scales.permute(1, 2, 0, 3))

    def _encode_span(self, span: KVSpan, a: int, b: int) -> torch.Tensor:
        """Tokens ``[a, b)`` of one span as rows ``[b - a, bpt]`` (uint8)."""
        if isinstance(span, PagedKV):  # pages of the pool: read out just [a, b), as stored
            span, a, b = span.stored(a, b), 0, b - a
        if self.dtype != torch.int8:
            if not isinstance(span, TensorKV):
                raise TypeError(f"RowCodec: expected TensorKV spans, got {type(span)}")
            rows = torch.empty((b - a, *self._row_shape), dtype=self.dtype)  # [n, 2, L, H, D]
            rows[:, 0].copy_(span.keys[:, :, a:b].permute(2, 0, 1, 3))  # (and off the GPU)
            rows[:, 1].copy_(span.values[:, :, a:b].permute(2, 0, 1, 3))
            return rows.view(torch.uint8).reshape(b - a, -1)
        if isinstance(span, TensorKV):  # a float span (the break-even probe): quantise it
            q = Int8KV.quantize(span.keys[:, :, a:b], span.values[:, :, a:b])
            a, b = 0, b - a
        elif isinstance(span, Int8KV):
            q = span
        else:
            raise TypeError(f"RowCodec: expected Int8KV or TensorKV spans, got {type(span)}")
        n = b - a

        def as_rows(t: torch.Tensor) -> torch.Tensor:  # [L, H, n, x] → [n, bytes]
            return t.permute(2, 0, 1, 3).contiguous().view(torch.uint8).reshape(n, -1)

        k_scales = q.key_scales.expand(-1, -1, len(q), -1)[:, :, a:b]  # [L, H, n, D] per token
        return torch.cat(
            [
                as_rows(q.keys[:, :, a:b].cpu()),
                as_rows(q.values[:, :, a:b].cpu()),
                as_rows(q.value_scales[:, :, a:b].cpu()),
                as_rows(k_scales.cpu()),
            ],
            dim=1,
        )


@dataclass(frozen=True)
class BreakEven:
    """When loading a range of cached KV from disk beats recomputing it.

    Loading ``n`` tokens costs ``load_overhead_s + n * load_s_per_token``; recomputing them
    costs ``n * prefill_s_per_token`` more prefill (the marginal cost: the request's own
    suffix is prefilled either way). ``min_tokens`` is the shortest range where loading
    wins; ``None`` means it never does (recompute). Example (this repo's CPU, SmolLM2 fp32)::

        BreakEven(min_tokens=1, prefill_s_per_token=1.8e-3, load_s_per_token=1.2e-5, ...)
    """

    min_tokens: int | None
    prefill_s_per_token: float
    load_s_per_token: float
    load_overhead_s: float
    measured_tokens: int  # the longest prefill / load timed (0: not measured, see `fixed`)

    @classmethod
    def fixed(cls, min_tokens: int | None) -> BreakEven:
        """A break-even set by hand (tests; a deployment that measured it elsewhere)."""
        return cls(min_tokens, math.nan, math.nan, math.nan, 0)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def measure_break_even(
    model: Any,
    layout: KVLayout,
    tier: DiskTier,
    codec: RowCodec,
    *,
    sizes: tuple[int, int] = (32, 256),
    repeats: int = 2,
) -> BreakEven:
    """Time prefill and disk load of ``sizes`` tokens (best of ``repeats``); fit both as lines.

    The load goes through the tier's real read path on its own directory (a scratch file
    written just before, so the page cache is warm, as it is for recent evictions) and
    the copy into a request cache. Takes about a second on a CPU.
    """
    text_config = model.config.get_text_config(decoder=True)
    large = min(sizes[1], int(text_config.max_position_embeddings))
    small = min(sizes[0], large // 2)
    generator = torch.Generator().manual_seed(0)
    vocab = int(text_config.vocab_size)
    tokens = torch.randint(0, vocab, (1, large), generator=generator).to(layout.device)  # [1, n]
    _prefill_from_zero(model, layout, tokens[:, :8])  # warm-up: allocators, kernels
    caches: dict[int, RequestCache] = {}

    def prefill(n: int) -> None:
        caches[n] = _prefill_from_zero(model, layout, tokens[:, :n])

    prefill_s = {n: _best(repeats, partial(prefill, n)) for n in (small, large)}
    cache = caches[large]  # a real prefix's KV to write and read back
    rows = codec.encode([cache.view(large)], 0, large)
    target = RequestCache.allocate(layout, large)
    with tier.scratch(rows) as read:

        def load(n: int) -> None:
            got = read(n)
            if got is None:
                raise OSError(f"cannot read back the scratch file in {tier.directory}")
            target.truncate(0)
            codec.decode_into(target, got, 0)
            _sync(layout.device)

        load(small)  # warm-up
        load_s = {n: _best(repeats, partial(load, n)) for n in (small, large)}
    prefill_slope = max((prefill_s[large] - prefill_s[small]) / (large - small), 0.0)
    load_slope = max((load_s[large] - load_s[small]) / (large - small), 0.0)
    overhead = max(load_s[small] - small * load_slope, 0.0)
    min_tokens = (
        max(1, math.ceil(overhead / (prefill_slope - load_slope)))
        if prefill_slope > load_slope
        else None
    )
    return BreakEven(min_tokens, prefill_slope, load_slope, overhead, large)


class DiskPrefix:
    """An engine's disk tier: the tier, its codec, the break-even and what it served."""

    def __init__(self, tier: DiskTier, codec: RowCodec, break_even: BreakEven) -> None:
        self.tier = tier
        self.codec = codec
        self.break_even = break_even
        self.hit_tokens = 0  # loaded into requests instead of recomputed

    @classmethod
    def open(
        cls,
        directory: Path,
        max_bytes: int,
        model: Any,
        layout: KVLayout,
        *,
        ttl_s: float | None = None,
        break_even: BreakEven | None = None,
        kv_dtype: torch.dtype | None = None,
    ) -> DiskPrefix:
        """Start a tier in ``directory`` for spans stored in ``kv_dtype`` (default: the
        model's); measure the break-even unless one is given."""
        codec = RowCodec(layout, kv_dtype)
        tier = DiskTier(directory, max_bytes, codec, ttl_s=ttl_s)
        try:
            break_even = break_even or measure_break_even(model, layout, tier, codec)
        except BaseException:
            tier.close()
            raise
        return cls(tier, codec, break_even)

    def load(self, key: RadixKey, cache: RequestCache | PagedCache, n_mem: int) -> int:
        """Extend ``cache`` (holding ``n_mem`` tokens) from disk if that pays; return tokens added.

        A miss, a range shorter than the break-even, or an unreadable file adds nothing:
        the caller prefills from ``n_mem`` as usual.
        """
        min_tokens = self.break_even.min_tokens
        if min_tokens is None:
            return 0
        got = self.tier.read(key, n_mem, min_tokens=min_tokens)
        if got is None:
            return 0
        self.codec.decode_into(cache, got.rows, got.start)
        self.hit_tokens += got.stop - got.start
        return got.stop - got.start

    @property
    def stats(self) -> DiskStats:
        return self.tier.stats

    def close(self) -> None:
        self.tier.close()


# ── helpers ──────────────────────────────────────────────────────────────────────────


@torch.inference_mode()
def _prefill_from_zero(model: Any, layout: KVLayout, tokens: torch.Tensor) -> RequestCache:
    cache = RequestCache.allocate(layout, tokens.shape[1])
    prefill(model, cache, tokens, start=0)
    _sync(layout.device)
    return cache


def _best(repeats: int, fn: Callable[[], object]) -> float:
    """The fastest of ``repeats`` timed calls (the least disturbed by a shared machine)."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
