"""Token-prefix KV cache (tier 2): a radix tree over token ids with opaque KV values.

Independent of models and HTTP: `localmodel` matches a prompt against it, prefills only
the unmatched suffix, and inserts the KV it computed. See `RadixCache` for a walk-through.
"""

from prefix.radix import CountSpan, Evicted, KVSpan, Match, RadixCache, RadixKey, RadixStats

__all__ = ["CountSpan", "Evicted", "KVSpan", "Match", "RadixCache", "RadixKey", "RadixStats"]
