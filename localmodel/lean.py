"""Llama-shaped decoder layers in fewer calls, where they compute the same.

A decoder layer of a Llama-shaped model (Llama, SmolLM2, Qwen2, Mistral: an RMSNorm, q/k/v/o
projections with rotate-half RoPE, an RMSNorm, a SiLU-gated MLP), as transformers runs it, is
~80 tensor ops and ~12 module calls. On a one-row decode step that is dispatch, not work:
measured on the bundled model on this project's CPU (one thread), a step took ~33 ms of which
the seven products (cachegate's kernel, ``localmodel.kernel``) ~25 ms, the attention's write,
gather and call ~2.3 ms, the norms ~2 ms. A :class:`LeanDecoderLayer` runs the same layer as

    norm (C) → q|k|v, one product → RoPE on q and k in place (C) → the cache and the model's
    attention function, as transformers calls them → o → residual add + norm (C) → gate|up,
    one product → SiLU × up (C) → down → residual add

and, in a step where every sequence decodes one token on float32, bfloat16 or int8 pages (``BatchCache``'s
``decoding``: the scheduler's common step), as **one C call** (``kernel.decoder_layer``,
``layer.c``) that runs those very kernels in that order, the new K/V written into the pages and
attended in place. The one call is checked at the layer's first such step against the ops
above, bitwise (the same kernels in the same order give the same bits; a layer where they
do not keeps the ops), so a sequence's logits are the same whether its step runs in one call
or next to a prefill chunk op by op. Measured by ``bench/engine.py`` (decoder layers side by
side, two runs): single-stream decode 1.25–1.36× transformers' layers, 8-stream decode
1.15–1.21×.

Fusing the products needs no copy of a weight: ``pack`` lays a weight out in tiles of 16 output
features (``[tiles, in, 16]``), so the q, k and v tiles one after the other are the tiles of
the three stacked, and each projection's ``packed`` becomes a view into them (the model's
parameters and ``state_dict`` are as before; ``load_state_dict``, a cast (``.to()``,
``.half()``, ``.float()``) or ``share_memory()`` that moves a parameter, and a copy re-fuse,
so the raw addresses the C layer reads always are the parameters'). The cache
(``cache.update``) and the attention function (``config._attn_implementation``, e.g.
``localmodel.batch``'s batched one) are called as transformers calls them elsewhere, so the
paged and batched paths are unchanged.

The swap is by checking, as ``localmodel.fused`` does: a layer is replaced only if it has
exactly those parts (no q/k norms, no sliding window, SiLU, projections with whole tiles, all
``NativeLinear`` (float32) or all ``Int8Linear`` on cachegate's int8 kernel: ``weights: int8``,
whose stacked products are int8 tiles with their scales up to ``INT8_KERNEL_ROWS`` rows, each
projection's own product above, and whose decode steps run in one call up to that many rows) and, on random input at a prefill then a decode step, its output
equals the original layer's to float32 rounding (max |Δ| ≤ 1e-5 of the largest output). Any
input the lean path does not take (not float32 on the CPU, gradients, eager attention) runs
the original layer's forward.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from transformers.activations import SiLUActivation
from transformers.cache_utils import DynamicCache
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from localmodel import kernel
from localmodel.batch import BatchCache
from localmodel.fused import FusedRMSNorm
from localmodel.weights import INT8_KERNEL_ROWS, Int8Linear, NativeLinear

__all__ = ["LeanDecoderLayer", "layer_counts", "original_layers", "use_lean_layers"]

logger = logging.getLogger("cachegate.localmodel")

_LAYER_PARTS = {"self_attn", "mlp", "input_layernorm", "post_attention_layernorm"}
_ATTENTION_PARTS = {"q_proj", "k_proj", "v_proj", "o_proj"}
_MLP_PARTS = {"gate_proj", "up_proj", "down_proj", "act_fn"}


class LeanDecoderLayer(nn.Module):
    """A Llama-shaped decoder layer (``original``'s parts, shared) in fewer calls.

    Its children are the original layer's (``self_attn``, ``mlp``, the two norms), so the
    model's parameter names and ``state_dict`` do not change; ``original`` is kept outside
    the module tree to run any input the lean path does not take.
    """

    self_attn: Any
    mlp: Any
    input_layernorm: FusedRMSNorm
    post_attention_layernorm: FusedRMSNorm
    original: Any

    def __init__(self, original: Any) -> None:
        super().__init__()
        attn, mlp = original.self_attn, original.mlp
        self.self_attn, self.mlp = attn, mlp
        self.input_layernorm = original.input_layernorm
        self.post_attention_layernorm = original.post_attention_layernorm
        self.__dict__["original"] = original  # (not a child: its parts are ours)
        self.layer_idx: int = attn.layer_idx
        self.head_dim: int = attn.head_dim
        self.q_size: int = attn.q_proj.out_features
        self.kv_size: int = attn.k_proj.out_features
        self.intermediate: int = mlp.gate_proj.out_features
        #: whether a decode step's whole layer in one C call computed what this forward does
        #: (checked at the first such step, bitwise): None until then
        self.one_call: bool | None = None
        self._fuse()
        self.register_load_state_dict_post_hook(_fuse_after_load)

    def _fuse(self) -> None:
        """Stack q|k|v and gate|up (each projection's tiles then a view of its share) and
        describe the layer to the C kernel (``kernel.decoder_layer``)."""
        attn, mlp = self.self_attn, self.mlp
        self.qkv = _fuse(attn.q_proj, attn.k_proj, attn.v_proj)
        self.gate_up = _fuse(mlp.gate_proj, mlp.up_proj)
        attn.o_proj._derive(), mlp.down_proj._derive()  # (a cast leaves their bias_data behind)
        norms = (self.input_layernorm, self.post_attention_layernorm)
        o, down = attn.o_proj, mlp.down_proj
        int8 = isinstance(o, Int8Linear)
        self.int8 = int8
        tiles = (self.qkv.tiles, o.tiles8[0] if int8 else o.packed, self.gate_up.tiles,
                 down.tiles8[0] if int8 else down.packed)  # fmt: skip
        kind = torch.int8 if int8 else torch.float32
        #: what the C layer reads; None where a cast left weights that are not float32 (or
        #: int8 tiles) on the CPU (the lean path is then not taken)
        self.params: kernel.LayerParams | None = None
        weight = norms[0].weight
        if all(t.dtype is kind and t.is_cpu for t in tiles) and weight.dtype is torch.float32:
            self.params = kernel.layer_params(
                norms=(weight, norms[1].weight), eps=norms[0].eps, tiles=tiles,
                biases=(self.qkv.bias, o.bias_data, self.gate_up.bias, down.bias_data),
                scales=_scales(self.qkv, o, self.gate_up, down) if int8 else None,
                sizes=(weight.shape[0], self.q_size // self.head_dim,
                       self.kv_size // self.head_dim, self.head_dim, self.intermediate),
                scale=attn.scaling,
            )  # fmt: skip
        self._fused_at = self._addresses()

    def _apply(self, fn: Any, recurse: bool = True) -> LeanDecoderLayer:
        """``.to()``, ``.half()``, ``.float()``, ``share_memory()``…: torch gives a converted
        parameter new memory (its ``.data``) and frees the old, which the fused tiles and the
        C layer's addresses would still point into: they follow, as after ``load_state_dict``."""
        super()._apply(fn, recurse)
        if self._addresses() != self._fused_at:
            self._fuse()
        return self

    def _addresses(self) -> tuple[int, ...]:
        return tuple(p.data_ptr() for p in self.parameters())

    def __getstate__(self) -> dict[str, Any]:
        """A copy (``copy.deepcopy``, pickle) without the fused tiles and the C layer's
        addresses (ctypes refuses to copy a structure of pointers, and they are this layer's
        memory): the copy fuses its own (:meth:`__setstate__`)."""
        state = self.__dict__.copy()
        for name in ("qkv", "gate_up", "params", "_fused_at"):
            del state[name]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._fuse()

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cache: Any = None,
        use_cache: bool | None = False,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        lib = kernel.library()
        x = hidden_states
        attn = self.self_attn
        interface = ALL_ATTENTION_FUNCTIONS.get(attn.config._attn_implementation)
        lean = (
            interface is not None  # (eager, which transformers does not register: theirs)
            and x.dtype is torch.float32
            and x.is_cpu
            and not x.requires_grad
            and position_embeddings is not None
            and "past_key_values" not in kwargs  # (the deprecated name: the original renames it)
            and self.params is not None
        )
        if lib is None or not lean:
            return self.original(
                x, attention_mask=attention_mask, position_ids=position_ids, cache=cache,
                use_cache=use_cache, position_embeddings=position_embeddings, **kwargs,
            )  # fmt: skip
        assert position_embeddings is not None
        *lead, hidden = x.shape  # [batch, n, hidden]
        x = x.reshape(-1, hidden).contiguous()
        decoding = isinstance(cache, BatchCache) and cache.decoding
        decoding = decoding and (not self.int8 or x.shape[0] <= INT8_KERNEL_ROWS)
        if decoding and self.one_call:
            return cache.decoder_layer(self.layer_idx, self.params, x, *position_embeddings).view(
                *lead, hidden
            )
        h = self._forward(lib, interface, x, lead, position_embeddings, attention_mask, cache,
                          kwargs)  # fmt: skip
        if decoding and self.one_call is None:  # the first decode step: the C layer, checked
            self.one_call = _same_step(self, cache, x, position_embeddings, h)
        return h.view(*lead, hidden)

    def _forward(
        self,
        lib: Any,
        interface: Any,
        x: torch.Tensor,
        lead: list[int],
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None,
        cache: Any,
        kwargs: dict[str, Any],
    ) -> torch.Tensor:
        """The layer on ``x`` ``[rows, hidden]`` (contiguous; ``lead`` = [batch, n]), op by op:
        ``[rows, hidden]``."""
        rows, d, attn = x.shape[0], self.head_dim, self.self_attn
        normed = kernel.rms_norm(lib, x, self.input_layernorm.weight, self.input_layernorm.eps)
        qkv = self.qkv(lib, normed)  # [rows, q + 2 kv]
        # [batch, n, d]; NOTE: [1, n, d] for every row of a batch where the model was given no
        # position_ids (transformers' apply_rotary_pos_emb broadcasts it; the C RoPE cannot)
        cos, sin = (t.expand(*lead, d) for t in position_embeddings)
        kernel.rope(lib, qkv, cos, sin, (self.q_size + self.kv_size) // d, d)
        shape = (*lead, -1, d)
        q_end, k_end = self.q_size, self.q_size + self.kv_size
        query = qkv[:, :q_end].view(shape).transpose(-3, -2)  # [batch, heads, n, d]
        key = qkv[:, q_end:k_end].view(shape).transpose(-3, -2)
        value = qkv[:, k_end:].view(shape).transpose(-3, -2)
        if cache is not None:
            key, value = cache.update(key, value, self.layer_idx, kwargs=kwargs)
        out, _ = interface(
            attn, query, key, value, attention_mask,
            dropout=0.0 if not attn.training else attn.attention_dropout,
            scaling=attn.scaling, **kwargs,
        )  # fmt: skip
        out = attn.o_proj(out.reshape(rows, -1).contiguous())
        h = torch.empty_like(x)
        norm = self.post_attention_layernorm
        normed = kernel.rms_norm(lib, x, norm.weight, norm.eps, out, h)  # h = x + out
        act = kernel.silu_mul(lib, self.gate_up(lib, normed))  # [rows, intermediate]
        h += self.mlp.down_proj(act)
        return h


def _same_step(
    layer: LeanDecoderLayer,
    cache: BatchCache,
    x: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor],
    want: torch.Tensor,
) -> bool:
    """Whether the whole layer in one C call gives ``want`` (this step's output, op by op)
    bitwise: it computes the same ops in the same order (and writes the same K/V again)."""
    got = cache.decoder_layer(layer.layer_idx, layer.params, x, *position_embeddings)
    same = torch.equal(got, want)
    if not same:
        logger.warning("localmodel: decoder layer %d: the one-call decode step disagrees with "
                       "its ops; not used", layer.layer_idx)  # fmt: skip
    return same


def _scales(
    qkv: _Fused, o: Int8Linear, gate_up: _Fused, down: Int8Linear
) -> tuple[torch.Tensor, ...]:
    """An int8 layer's four products' scales, as ``kernel.layer_params`` takes them."""
    assert qkv.scales is not None and gate_up.scales is not None
    assert o.tiles8 is not None and down.tiles8 is not None
    return qkv.scales, o.tiles8[1], gate_up.scales, down.tiles8[1]


def _fuse_after_load(layer: LeanDecoderLayer, incompatible_keys: Any) -> None:
    """After ``load_state_dict``: the fused tiles and biases, and what the C layer reads,
    follow the loaded weights (the biases are copies; a projection's tiles may be new)."""
    attn, mlp = layer.self_attn, layer.mlp
    for p in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj,
              mlp.down_proj):  # fmt: skip
        p._derive()  # (int8: its tiles from the loaded weight, before they are stacked)
    layer._fuse()


class _Fused:
    """Stacked projections as one product: their tiles, one after the other (a view of each
    projection's share is what that projection keeps), and their biases. int8 projections
    (``Int8Linear``): their int8 tiles and scales; above :data:`INT8_KERNEL_ROWS` rows each
    projection computes its own product (its widened bfloat16 one), as it would alone."""

    def __init__(
        self,
        tiles: torch.Tensor,
        out: int,
        bias: torch.Tensor | None,
        scales: torch.Tensor | None = None,
        parts: tuple[nn.Module, ...] = (),
    ) -> None:
        self.tiles, self.out, self.bias, self.scales, self.parts = tiles, out, bias, scales, parts

    def __call__(self, lib: Any, x: torch.Tensor) -> torch.Tensor:
        if self.scales is None:
            return kernel.linear(lib, self.tiles, x, self.out, self.bias)
        if x.shape[0] <= INT8_KERNEL_ROWS:
            return kernel.linear_q8(lib, self.tiles, self.scales, x, self.out, self.bias)
        return torch.cat([part(x) for part in self.parts], dim=-1)


def _fuse(*parts: Any) -> _Fused:
    """One product for ``parts`` (``NativeLinear``s, or ``Int8Linear``s: same inputs, each a
    whole number of tiles): their tiles (and int8 scales) copied once into one tensor (float32
    tiles: unless they lie one after the other in one already), each part's then a view of
    its share."""
    int8 = isinstance(parts[0], Int8Linear)
    own: list[torch.Tensor] = [p.tiles8[0] if int8 else p.packed.data for p in parts]
    tiles = None if int8 else _stacked(parts)
    if tiles is None:
        tiles = torch.cat(own)  # [Σ tiles, in, 16]
    scales = torch.cat([p.tiles8[1] for p in parts]) if int8 else None  # [Σ tiles · 16]
    start, T = 0, kernel.TILE
    for p, t in zip(parts, own, strict=True):
        n = int(t.shape[0])
        if scales is not None:
            p.tiles8 = (tiles[start : start + n], scales[start * T : (start + n) * T])
        else:
            p.packed = nn.Parameter(tiles[start : start + n], requires_grad=False)
            p._derive()
        start += n
    biases = [p.bias_data for p in parts]
    if all(b is None for b in biases):
        bias = None
    else:
        bias = torch.cat([torch.zeros(p.out_features) if b is None else b
                          for p, b in zip(parts, biases, strict=True)])  # fmt: skip
    out = sum(p.out_features for p in parts)
    return _Fused(tiles, out, bias, scales, parts if int8 else ())


def _stacked(parts: tuple[NativeLinear, ...]) -> torch.Tensor | None:
    """The tiles of ``parts`` as one tensor where they are views one after the other of one
    storage (a fused layer's, after ``share_memory()`` or an in-place load): the same
    memory, so that a shared or loaded storage stays the one every projection reads."""
    first = parts[0].packed.data
    storage, at = first.untyped_storage().data_ptr(), first.storage_offset()
    for p in parts:
        t = p.packed.data
        if (t.untyped_storage().data_ptr() != storage or t.storage_offset() != at
                or not t.is_contiguous() or t.dtype != first.dtype
                or t.shape[1:] != first.shape[1:]):  # fmt: skip
            return None
        at += t.numel()
    n = sum(p.packed.shape[0] for p in parts)
    return first.as_strided((n, *first.shape[1:]), first.stride(), first.storage_offset())


def use_lean_layers(model: Any) -> int:
    """Replace each decoder layer of ``model`` that :class:`LeanDecoderLayer` computes the
    same (see the module's docstring); return how many were replaced."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    rotary = getattr(getattr(model, "model", None), "rotary_emb", None)
    if not isinstance(layers, nn.ModuleList) or rotary is None or kernel.library() is None:
        return 0
    swapped = 0
    for i, layer in enumerate(layers):
        if isinstance(layer, LeanDecoderLayer) or not _shaped(layer):
            continue
        lean = LeanDecoderLayer(layer)
        try:
            same = _same(layer, lean, rotary, model.config)
        except Exception:  # (an architecture the check cannot run on: theirs, as loaded)
            logger.exception("localmodel: checking a lean decoder layer failed")
            same = False
        if same:
            layers[i] = lean
            swapped += 1
        else:
            _unfuse(lean)
    return swapped


def layer_counts(model: Any) -> dict[str, int]:
    """``decoder``: the model's decoder layers; ``lean``: those that run as
    :class:`LeanDecoderLayer`; ``one_call``: those whose decode steps run in one C call
    (checked at their first decode step: 0 before any)."""
    layers = getattr(getattr(model, "model", None), "layers", [])
    lean = [layer for layer in layers if isinstance(layer, LeanDecoderLayer)]
    return {"decoder": len(layers), "lean": len(lean),
            "one_call": sum(1 for layer in lean if layer.one_call)}  # fmt: skip


@contextlib.contextmanager
def original_layers(model: Any) -> Iterator[int]:
    """Within the block, ``model`` runs its decoder layers as transformers does (the lean ones
    swapped back; yields how many): for side-by-side measures and tests. NOTE: not while
    another thread runs the model."""
    layers = getattr(getattr(model, "model", None), "layers", [])
    lean = {i: layer for i, layer in enumerate(layers) if isinstance(layer, LeanDecoderLayer)}
    for i, layer in lean.items():
        layers[i] = layer.original
    try:
        yield len(lean)
    finally:
        for i, layer in lean.items():
            layers[i] = layer


def _shaped(layer: nn.Module) -> bool:
    """Whether ``layer`` has exactly a Llama-shaped layer's parts, on the native kernel
    (float32 tiles, or int8 ones)."""
    children: dict[str, Any] = dict(layer.named_children())
    if set(children) != _LAYER_PARTS:
        return False
    attn, mlp = children["self_attn"], children["mlp"]
    if set(dict(attn.named_children())) != _ATTENTION_PARTS:
        return False
    if set(dict(mlp.named_children())) != _MLP_PARTS or type(mlp.act_fn) is not SiLUActivation:
        return False
    if getattr(attn, "sliding_window", None) is not None:
        return False
    norms = (children["input_layernorm"], children["post_attention_layernorm"])
    if not all(isinstance(n, FusedRMSNorm) for n in norms) or norms[0].eps != norms[1].eps:
        return False  # (the C layer takes one eps)
    projections = [getattr(attn, n) for n in sorted(_ATTENTION_PARTS)]
    projections += [mlp.gate_proj, mlp.up_proj, mlp.down_proj]
    native = all(type(p) is NativeLinear and p.packed.dtype is torch.float32 for p in projections)
    int8 = all(type(p) is Int8Linear and p.tiles8 is not None for p in projections)
    if not (native or int8):
        return False
    d = getattr(attn, "head_dim", 0)
    whole = all(p.out_features % kernel.TILE == 0 for p in projections)
    return whole and d > 0 and d % 2 == 0 and attn.q_proj.out_features % d == 0


@torch.inference_mode()
def _same(original: nn.Module, lean: LeanDecoderLayer, rotary: nn.Module, config: Any) -> bool:
    """Whether ``lean`` computes ``original``'s output to float32 rounding: random hidden
    states, a 5-token prefill then one decode step, each over a cache of its own."""
    generator = torch.Generator().manual_seed(0)
    hidden = lean.input_layernorm.weight.shape[0]
    x = torch.randn(1, 6, hidden, generator=generator)
    caches = (DynamicCache(config=config), DynamicCache(config=config))
    for start, stop in ((0, 5), (5, 6)):
        positions = torch.arange(start, stop)[None]
        embeddings = rotary(x, position_ids=positions)
        mask = None if stop - start == 1 else _causal(stop - start)
        outs = [
            layer(x[:, start:stop], attention_mask=mask, position_ids=positions, cache=cache,
                  use_cache=True, position_embeddings=embeddings)
            for layer, cache in zip((original, lean), caches, strict=True)
        ]  # fmt: skip
        if outs[0].shape != outs[1].shape:
            return False
        # (a product's sums in another order: ~1e-6 of the largest output; a wrong one is ~1)
        if (outs[0] - outs[1]).abs().max() > 1e-5 * outs[0].abs().max():
            return False
    return True


def _causal(n: int) -> torch.Tensor:
    """``[1, 1, n, n]`` boolean causal mask (sdpa's and eager's form for a fresh prefill)."""
    return torch.ones(n, n, dtype=torch.bool).tril()[None, None]


def _unfuse(lean: Any) -> None:
    """Give each projection of a layer that is not swapped its own tiles back (not views)."""
    attn, mlp = lean.self_attn, lean.mlp
    for p in (attn.q_proj, attn.k_proj, attn.v_proj, mlp.gate_proj, mlp.up_proj):
        if not isinstance(p, Int8Linear):  # (int8: _derive packs its tiles afresh)
            p.packed = nn.Parameter(p.packed.data.clone(), requires_grad=False)
        p._derive()
    logger.info("localmodel: decoder layer %d kept as transformers runs it", lean.layer_idx)
