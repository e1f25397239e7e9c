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
from prefix import KVSpan, RadixKey
from prefix.offload import DiskStats, DiskTier

__all__ = ["BreakEven", "DiskPrefix", "RowCodec", "measure_break_even"]


class RowCodec:
    """``TensorKV`` spans ↔ token rows: ``[2, n_layers, n_kv_heads, head_dim]`` per token, as bytes.

    Token-major, so that any token range of a file is one contiguous read; K is row
    ``[0]``, V row ``[1]``, in the model's dtype (bfloat16 included: bytes, not numpy floats).
    """

    def __init__(self, layout: KVLayout) -> None:
        self.layout = layout
        self._row_shape = (2, layout.n_layers, layout.n_kv_heads, layout.head_dim)

    @property
    def bytes_per_token(self) -> int:
        return self.layout.bytes_per_token

    @torch.inference_mode()
    def encode(self, spans: Sequence[KVSpan], start: int, stop: int) -> np.ndarray:
        """Tokens ``[start, stop)`` of the concatenated spans as uint8 ``[stop - start, bpt]``."""
        n = stop - start
        out = torch.empty((n, *self._row_shape), dtype=self.layout.dtype)  # [n, 2, L, H, D], CPU
        pos = filled = 0
        for span in spans:
            if not isinstance(span, TensorKV):
                raise TypeError(f"RowCodec: expected TensorKV spans, got {type(span)}")
            a, b = max(start - pos, 0), min(stop - pos, len(span))
            pos += len(span)
            if a < b:  # span: [L, H, tokens, D] → rows [b - a, L, H, D] (and off the GPU)
                out[filled : filled + b - a, 0].copy_(span.keys[:, :, a:b].permute(2, 0, 1, 3))
                out[filled : filled + b - a, 1].copy_(span.values[:, :, a:b].permute(2, 0, 1, 3))
                filled += b - a
        if filled != n:
            raise ValueError(f"RowCodec: spans cover {filled} of tokens {start}…{stop}")
        return out.view(torch.uint8).reshape(n, -1).numpy()

    def decode_into(self, cache: RequestCache, rows: np.ndarray, start: int) -> None:
        """Copy ``rows`` (uint8 ``[n, bpt]``) into ``cache`` at positions ``start…start+n-1``."""
        kv = torch.from_numpy(rows).view(self.layout.dtype).view(len(rows), *self._row_shape)
        cache.load_rows(kv, start)  # kv: [n, 2, L, H, D]


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
    ) -> DiskPrefix:
        """Start a tier in ``directory``; measure the break-even unless one is given."""
        codec = RowCodec(layout)
        tier = DiskTier(directory, max_bytes, codec, ttl_s=ttl_s)
        try:
            break_even = break_even or measure_break_even(model, layout, tier, codec)
        except BaseException:
            tier.close()
            raise
        return cls(tier, codec, break_even)

    def load(self, key: RadixKey, cache: RequestCache, n_mem: int) -> int:
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
