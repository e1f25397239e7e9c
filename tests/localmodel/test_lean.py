"""Llama-shaped decoder layers in fewer calls (``localmodel.lean``): swapped where they compute
the same, kept where they do not, the model's logits and parameters unchanged, and the two
small C ops (RMSNorm with its residual add, RoPE) against torch."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM
from transformers.cache_utils import DynamicCache
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from localmodel import kernel
from localmodel.batch import Piece, forward
from localmodel.fused import use_fused_norms
from localmodel.lean import LeanDecoderLayer, original_layers, use_lean_layers
from localmodel.loader import LoadedModel
from localmodel.weights import use_native_weights

#: (None where cc did not build them: every test here fails, as test_kernel.py's do)
LIB: Any = kernel.library()


def _llama(**overrides: Any) -> Any:
    config = dict(
        vocab_size=300, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
    )  # fmt: skip
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**(config | overrides))).eval()


def _prepared(model: Any) -> Any:
    """``model`` as the loader leaves it on a CPU: native weights, fused norms."""
    use_native_weights(model)
    use_fused_norms(model)
    return model


@torch.inference_mode()
def _logits(model: Any, ids: torch.Tensor) -> torch.Tensor:
    """A prefill of all but the last 3 tokens, then 3 decode steps; every step's logits."""
    cache = DynamicCache(config=model.config)
    out = [model(input_ids=ids[:, :-3], cache=cache, use_cache=True).logits[0]]
    for i in range(ids.shape[1] - 3, ids.shape[1]):
        out.append(model(input_ids=ids[:, i : i + 1], cache=cache, use_cache=True).logits[0])
    return torch.cat(out)


def test_every_layer_of_a_llama_is_swapped_with_the_same_logits_and_parameters() -> None:
    plain = _llama(attention_bias=True)  # (Qwen2-style biases on q, k, v and o)
    model = _prepared(copy.deepcopy(plain))
    names = [name for name, _ in model.named_parameters()]
    keys = list(model.state_dict())
    want = _logits(model, ids := torch.randint(0, 300, (1, 12)))
    assert use_lean_layers(model) == 3
    assert all(isinstance(layer, LeanDecoderLayer) for layer in model.model.layers)
    got = _logits(model, ids)
    assert (got - want).abs().max() < 1e-5 * want.abs().max()
    assert (got - _logits(plain, ids)).abs().max() < 1e-4  # (and transformers' own model)
    assert [name for name, _ in model.named_parameters()] == names
    assert list(model.state_dict()) == keys
    assert use_lean_layers(model) == 0  # (idempotent)


def test_the_fused_products_read_the_projections_own_bytes_no_copy() -> None:
    model = _prepared(_llama())
    before = sum(p.numel() for p in model.parameters())
    use_lean_layers(model)
    layer = model.model.layers[0]
    attn, mlp = layer.self_attn, layer.mlp
    base = layer.qkv.tiles.data_ptr()
    step = layer.qkv.tiles[0].numel() * 4  # bytes a tile
    assert attn.q_proj.packed.data_ptr() == base
    assert attn.k_proj.packed.data_ptr() == base + attn.q_proj.packed.shape[0] * step
    assert attn.v_proj.packed.data_ptr() == attn.k_proj.packed.data_ptr() + 2 * step
    assert mlp.up_proj.packed.data_ptr() == layer.gate_up.tiles.data_ptr() + 10 * step
    assert sum(p.numel() for p in model.parameters()) == before
    x = torch.randn(3, 64)  # each projection alone still computes its own product
    assert torch.allclose(attn.k_proj(x), x @ attn.k_proj.weight.T, atol=1e-5)


def test_a_layer_that_is_not_llama_shaped_is_kept() -> None:
    torch.manual_seed(0)
    qwen3 = Qwen3ForCausalLM(Qwen3Config(
        vocab_size=300, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
    )).eval()  # fmt: skip  # (q and k are normed per head before RoPE: not a Llama layer)
    assert use_lean_layers(_prepared(qwen3)) == 0
    gelu = _prepared(_llama(hidden_act="gelu"))
    assert use_lean_layers(gelu) == 0
    unpacked = _llama()  # (its products on nn.Linear: nothing to fuse)
    use_fused_norms(unpacked)
    assert use_lean_layers(unpacked) == 0


def test_a_layer_that_computes_otherwise_is_kept_with_its_own_tiles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = _prepared(_llama())
    want = _logits(model, ids := torch.randint(0, 300, (1, 10)))
    monkeypatch.setattr(kernel, "rope", lambda *args: None)  # a wrong rotation: no rotation
    assert use_lean_layers(model) == 0
    assert not any(isinstance(layer, LeanDecoderLayer) for layer in model.model.layers)
    q, k = model.model.layers[0].self_attn.q_proj, model.model.layers[0].self_attn.k_proj
    assert q.packed.untyped_storage().data_ptr() != k.packed.untyped_storage().data_ptr()
    assert torch.equal(_logits(model, ids), want)


def test_an_input_the_lean_path_does_not_take_runs_the_original_layer() -> None:
    model = _prepared(_llama())
    use_lean_layers(model)
    layer = model.model.layers[0]
    x = torch.randn(1, 4, 64, requires_grad=True)  # (gradients: transformers' path)
    embeddings = model.model.rotary_emb(x, position_ids=torch.arange(4)[None])
    got = layer(x, position_embeddings=embeddings)
    want = layer.original(x, position_embeddings=embeddings)
    assert got.requires_grad and torch.equal(got, want)


def test_the_bundled_model_runs_lean_layers_with_its_logits(bundled: LoadedModel) -> None:
    model = bundled.model
    assert all(isinstance(layer, LeanDecoderLayer) for layer in model.model.layers)
    ids = bundled.tokenizer("The capital of France is Paris. The capital of Italy is",
                            return_tensors="pt").input_ids  # fmt: skip
    got = _logits(model, ids)
    with original_layers(model) as n:
        assert n == 30 and not isinstance(model.model.layers[0], LeanDecoderLayer)
        want = _logits(model, ids)
    assert isinstance(model.model.layers[0], LeanDecoderLayer)
    assert (got - want).abs().max() < 1e-4
    assert torch.equal(got.argmax(-1), want.argmax(-1))


@pytest.mark.parametrize("rows", [1, 5, 37])
def test_rms_norm_with_and_without_the_residual_add(rows: int) -> None:
    generator = torch.Generator().manual_seed(rows)
    x, delta = torch.randn(2, rows, 70, generator=generator) * 3  # (not a multiple of 16)
    weight = torch.randn(70, generator=generator)
    want = nn.functional.rms_norm(x, (70,), weight, 1e-5)
    assert torch.allclose(kernel.rms_norm(LIB, x, weight, 1e-5), want, rtol=1e-5, atol=1e-6)
    h = torch.full_like(x, float("nan"))
    got = kernel.rms_norm(LIB, x, weight, 1e-5, delta, h)
    assert torch.equal(h, x + delta)
    want = nn.functional.rms_norm(x + delta, (70,), weight, 1e-5)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6)
    same = x.clone()  # (h may be x itself)
    kernel.rms_norm(LIB, same, weight, 1e-5, delta, same)
    assert torch.equal(same, x + delta)


@pytest.mark.parametrize(("rows", "d"), [(1, 64), (6, 16), (3, 10)])
def test_rope_rotates_q_and_k_in_place_as_transformers_does(rows: int, d: int) -> None:
    generator = torch.Generator().manual_seed(d)
    hq, hk = 4, 2
    qkv = torch.randn(rows, (hq + 2 * hk) * d, generator=generator)
    angles = torch.rand(1, rows, d // 2, generator=generator) * 6
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    q = qkv[:, : hq * d].view(1, rows, hq, d).transpose(1, 2)
    k = qkv[:, hq * d : (hq + hk) * d].view(1, rows, hk, d).transpose(1, 2)
    want_q, want_k = apply_rotary_pos_emb(q, k, cos, sin)
    v = qkv[:, (hq + hk) * d :].clone()
    kernel.rope(LIB, qkv, cos, sin, hq + hk, d)
    assert torch.allclose(q, want_q, atol=1e-6) and torch.allclose(k, want_k, atol=1e-6)
    assert torch.equal(qkv[:, (hq + hk) * d :], v)  # (v is not rotated)
    with pytest.raises(ValueError, match="rope"):
        kernel.rope(LIB, qkv, cos[..., : d // 2], sin, hq + hk, d)


def test_eager_attention_which_transformers_does_not_register_runs_the_original_layer() -> None:
    model = _prepared(_llama())
    use_lean_layers(model)
    ids = torch.randint(0, 300, (1, 9))
    want = _logits(model, ids)
    model.set_attn_implementation("eager")
    got = _logits(model, ids)
    with original_layers(model):
        assert torch.allclose(got, _logits(model, ids), atol=0, rtol=0)
    assert (got - want).abs().max() < 1e-4


def _lean_tiny(kind: str) -> Any:
    from tests.localmodel.test_batch import _tiny

    model = _prepared(_tiny(kind, 512))
    assert use_lean_layers(model) == 2
    return model


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_lean_layers_batch_exactly_and_a_decode_step_is_one_call_bitwise_alone(kind: str) -> None:
    """Batched steps of every composition equal cold forwards; a step of decodes only runs
    each layer in one C call (checked bitwise against the layer's ops at the first such
    step), so a decode alone equals, bitwise, the same decode next to a prefill chunk (which
    runs the layer op by op)."""
    from tests.localmodel.test_batch import _check_compositions, _paged

    model = _lean_tiny(kind)
    _check_compositions(model, 512, _paged(model))
    assert [layer.one_call for layer in model.model.layers] == [True, True]
    make_cache = _paged(model)
    alone, batched, other = make_cache(), make_cache(), make_cache()
    prompt = tuple(range(3, 20))
    forward(model, [Piece(alone, prompt)])
    forward(model, [Piece(batched, prompt)])
    want = forward(model, [Piece(alone, (7,))])[0]  # (one call a layer)
    got = forward(model, [Piece(batched, (7,)), Piece(other, tuple(range(30, 60)))])[0]
    assert torch.equal(got, want)
    want = forward(model, [Piece(alone, (8,))])[0]
    got = forward(model, [Piece(other, (9,)), Piece(batched, (8,))])[1]  # (decodes only)
    assert torch.equal(got, want)


def test_a_one_call_layer_that_disagrees_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.localmodel.test_batch import _check_compositions, _paged

    model = _lean_tiny("llama")
    real = kernel.decoder_layer
    monkeypatch.setattr(kernel, "decoder_layer", lambda *args: real(*args) + 1e-3)
    _check_compositions(model, 512, _paged(model))  # (every step's logits still right)
    assert [layer.one_call for layer in model.model.layers] == [False, False]


def test_a_batch_of_prompts_without_position_ids_runs_lean_as_transformers_runs_it() -> None:
    """No position_ids: transformers makes one row of positions, [1, n], and one rotary
    embedding for every prompt of the batch (its RoPE broadcasts it)."""
    model = _prepared(_llama())
    use_lean_layers(model)
    ids = torch.randint(0, 300, (2, 7))
    with torch.inference_mode():
        got = model(ids).logits
        with original_layers(model):
            want = model(ids).logits
    assert (got - want).abs().max() < 1e-5 * want.abs().max()


def test_a_cast_and_back_leaves_the_fused_products_and_the_one_call_layer_on_the_weights() -> None:
    """``.half()`` then ``.float()`` gives every parameter new memory and frees the old: the
    fused tiles and the addresses the C layer reads follow (they pointed into freed memory and
    stale tiles), and the lean layers compute what transformers' compute on the weights."""
    from tests.localmodel.test_batch import _check_compositions, _paged

    model = _lean_tiny("llama")
    model.half()
    model.float()
    layer = model.model.layers[0]
    attn, mlp = layer.self_attn, layer.mlp
    assert layer.params.norm1 == layer.input_layernorm.weight.data_ptr()
    assert layer.params.o == attn.o_proj.packed.data_ptr()
    assert layer.params.down == mlp.down_proj.packed.data_ptr()
    assert layer.params.qkv == attn.q_proj.packed.data_ptr() == layer.qkv.tiles.data_ptr()
    ids = torch.arange(5, 17)[None]
    with torch.inference_mode():
        got = model(ids).logits
        with original_layers(model):
            want = model(ids).logits
    assert (got - want).abs().max() < 1e-5 * want.abs().max()
    _check_compositions(model, 512, _paged(model))  # (decode steps in one call among them)
    assert [layer.one_call for layer in model.model.layers] == [True, True]


def test_shared_memory_stays_what_every_projection_and_the_one_call_layer_read() -> None:
    """``share_memory()`` moves each storage into shared memory (new addresses): the C layer
    follows, and q|k|v, gate|up stay views of their one (shared) storage, not copies."""
    from tests.localmodel.test_batch import _check_compositions, _paged

    model = _lean_tiny("llama")
    model.share_memory()
    layer = model.model.layers[0]
    attn, mlp = layer.self_attn, layer.mlp
    assert all(p.is_shared() for p in model.parameters())
    assert layer.qkv.tiles.data_ptr() == attn.q_proj.packed.data_ptr() == layer.params.qkv
    assert layer.gate_up.tiles.data_ptr() == mlp.gate_proj.packed.data_ptr()
    assert layer.params.norm1 == layer.input_layernorm.weight.data_ptr()
    _check_compositions(model, 512, _paged(model))
    assert [layer.one_call for layer in model.model.layers] == [True, True]


def test_a_copied_model_fuses_its_own_tensors_and_reads_them_in_one_call() -> None:
    """``copy.deepcopy`` of a lean model (ctypes refuses to copy LayerParams' pointers): the
    copy's fused products and C layer read the copy's tensors, and it computes the same."""
    from tests.localmodel.test_batch import _check_compositions, _paged

    model = _lean_tiny("qwen2")
    copied = copy.deepcopy(model)
    layer = copied.model.layers[0]
    assert layer.params.o == layer.self_attn.o_proj.packed.data_ptr()
    assert layer.params.o != model.model.layers[0].params.o
    assert layer.self_attn.q_proj.packed.data_ptr() == layer.qkv.tiles.data_ptr()
    assert layer.original.self_attn is layer.self_attn
    ids = torch.arange(5, 17)[None]
    with torch.inference_mode():
        assert torch.equal(copied(ids).logits, model(ids).logits)
    _check_compositions(copied, 512, _paged(copied))
    assert [layer.one_call for layer in copied.model.layers] == [True, True]


@pytest.mark.parametrize(("rows", "n"), [(1, 64), (3, 70)])
def test_silu_mul_is_torchs(rows: int, n: int) -> None:
    generator = torch.Generator().manual_seed(n)
    gate_up = torch.randn(rows, 2 * n, generator=generator) * 8
    gate_up[0, :4] = torch.tensor([-200.0, 200.0, 0.0, -0.0])  # (e^-|g| underflows; zeros)
    got = kernel.silu_mul(LIB, gate_up)
    want = nn.functional.silu(gate_up[:, :n]) * gate_up[:, n:]
    assert torch.allclose(got, want, rtol=1e-6, atol=1e-6)


def test_the_one_call_layer_checks_what_it_is_given() -> None:
    model = _lean_tiny("llama")
    layer = model.model.layers[0]
    with pytest.raises(ValueError, match="layer_params"):  # (o's tiles for gate|up's)
        kernel.layer_params((layer.input_layernorm.weight,) * 2, 1e-6,
                            (layer.qkv.tiles, layer.gate_up.tiles, layer.gate_up.tiles,
                             layer.mlp.down_proj.packed), (None,) * 4, (64, 4, 2, 16, 128), 0.25)  # fmt: skip
    pages = torch.zeros(2, 8, 16), torch.zeros(2, 8, 16)
    x, cos = torch.randn(1, 64), torch.ones(1, 16)
    slots, lengths = torch.tensor([[0, 1, 2]]), torch.tensor([3])
    with pytest.raises(ValueError, match="last slot"):  # (the new token's slot is 2, not 5)
        kernel.decoder_layer(LIB, layer.params, x, cos, cos, pages,
                             (torch.tensor([5]), slots, lengths))  # fmt: skip
    assert not pages[0].any() and not pages[1].any()  # (nothing written)
    with pytest.raises(ValueError, match="laid out"):
        kernel.decoder_layer(LIB, layer.params, x[:, :32], cos, cos, pages,
                             (torch.tensor([2]), slots, lengths))  # fmt: skip


@pytest.mark.parametrize("bad", ["strided values", "float64 cos"])
def test_the_one_call_layer_refuses_tensors_it_would_read_or_write_past(bad: str) -> None:
    """Shapes right but not the memory the C side walks: V pages a strided view (its writes
    would land in another head's rows, or past an expanded tensor's memory), cos and sin in
    another dtype (read as float32: past a half-precision tensor's end)."""
    layer = _lean_tiny("llama").model.layers[0]
    keys, room = torch.zeros(2, 8, 16), torch.zeros(2, 8, 32)
    values = room[..., :16] if bad == "strided values" else torch.zeros(2, 8, 16)
    x, cos = torch.randn(1, 64), torch.ones(1, 16, dtype=torch.float64)
    cos = cos if bad == "float64 cos" else cos.float()
    step = torch.tensor([2]), torch.tensor([[0, 1, 2]]), torch.tensor([3])
    with pytest.raises(ValueError, match="laid out"):
        kernel.decoder_layer(LIB, layer.params, x, cos, cos, (keys, values), step)
    assert not keys.any() and not values.any() and not room.any()  # (nothing written)


def test_loaded_weights_reach_the_fused_products_and_the_one_call_layer() -> None:
    from tests.localmodel.test_batch import _check_compositions, _paged

    model = _lean_tiny("qwen2")  # (biases: the fused ones are copies)
    other = _lean_tiny("qwen2")
    state = {name: t + 0.01 * torch.randn_like(t) for name, t in model.state_dict().items()}
    model.load_state_dict(state)
    layer = model.model.layers[1]
    assert torch.equal(layer.qkv.bias[:64], state["model.layers.1.self_attn.q_proj.bias"])
    assert layer.self_attn.q_proj.packed.data_ptr() == layer.qkv.tiles.data_ptr()
    _check_compositions(model, 512, _paged(model))  # (against its own cold forward)
    with original_layers(model), torch.inference_mode():
        ids = torch.arange(5, 17)[None]
        want = model(ids).logits
    with torch.inference_mode():
        assert (model(ids).logits - want).abs().max() < 1e-4
        assert (other(ids).logits - want).abs().max() > 1e-3  # (the weights did change)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_pages_decode_in_one_call_where_it_rounds_as_torch(dtype: torch.dtype) -> None:
    """bfloat16 pages: the one C call writes the new K/V rounded as torch rounds them, so a
    decode alone (one call a layer) equals, bitwise, the same decode next to a prefill chunk
    (op by op); float16 pages keep the ops (the call does not write them)."""
    from localmodel.batch import use_batched_attention
    from localmodel.kv import KVLayout
    from localmodel.pages import PagedCache, PagePool

    model = _lean_tiny("llama")
    use_batched_attention(model)
    pool = PagePool(KVLayout.of(model), n_pages=100, page_size=4, dtype=dtype)
    alone, batched, other = (PagedCache(pool, 64) for _ in range(3))
    for cache in (alone, batched):
        forward(model, [Piece(cache, tuple(range(3, 20)))])
    for token in (7, 8, 9):
        want = forward(model, [Piece(alone, (token,))])[0]
        got = forward(model, [Piece(batched, (token,)), Piece(other, (token + 30,) * 5)])[0]
        assert torch.equal(got, want)
    one_call = dtype is torch.bfloat16
    assert [layer.one_call for layer in model.model.layers] == [one_call or None] * 2


def test_int8_pages_decode_in_one_call_writing_what_the_ops_write() -> None:
    """int8 pages (``kv_dtype: int8``): the one C call quantises the new V per token and puts
    the new K in its sequence's tail, quantising a page per channel when it fills, bitwise as
    ``PagedCache`` does it; so a decode alone (one call a layer) equals, bitwise, the same
    decode next to a prefill chunk (op by op), step after step across page boundaries, and
    both sequences' pages, scales and tails read back the same."""
    from localmodel.batch import use_batched_attention
    from localmodel.kv import KVLayout
    from localmodel.pages import PagedCache, PagePool

    model = _lean_tiny("llama")
    use_batched_attention(model)
    pool = PagePool(KVLayout.of(model), n_pages=100, page_size=4, dtype=torch.int8)
    alone, batched, other = (PagedCache(pool, 64) for _ in range(3))
    for cache in (alone, batched):
        forward(model, [Piece(cache, tuple(range(3, 20)))])  # (17 tokens: a page part filled)
    for token in range(7, 17):  # (pages fill at the 3rd, 7th and 11th step)
        want = forward(model, [Piece(alone, (token,))])[0]
        got = forward(model, [Piece(batched, (token,)), Piece(other, (token + 30,) * 5)])[0]
        assert torch.equal(got, want)
        for a, b in zip(pool.gather(alone.table, 0, alone.length),
                        pool.gather(batched.table, 0, batched.length), strict=True):  # fmt: skip
            assert torch.equal(a, b)
        r = alone.length % 4
        assert torch.equal(alone._tail[:, :, :r], batched._tail[:, :, :r])
    assert [layer.one_call for layer in model.model.layers] == [True, True]


def test_the_one_call_layer_on_int8_pages_refuses_a_tail_that_is_not_its_sequences() -> None:
    """int8 pages: a sequence whose new token does not fill its page attends to its tail, so
    the tail given for attention must be the one written, starting at its page's first
    position; a token that fills it must have none (its K is in the page by then)."""
    layer = _lean_tiny("llama").model.layers[0]
    keys, values = torch.zeros(2, 8, 16, dtype=torch.int8), torch.zeros(2, 8, 16, dtype=torch.int8)
    scales = torch.zeros(2, 2, 16, dtype=torch.float16), torch.zeros(2, 8, dtype=torch.float16)
    tail = torch.zeros(1, 2, 4, 16)  # [L, H, P, D]
    x, cos = torch.randn(1, 64), torch.ones(1, 16)
    step = torch.tensor([2]), torch.tensor([[0, 1, 2]]), torch.tensor([3])  # (position 2 of 4)
    base = torch.tensor([tail.data_ptr()])
    for addresses, starts in (([0], [0]), ([tail.data_ptr()], [1]), ([tail.data_ptr() + 64], [0])):
        q8 = kernel.q8_pages(scales, base, (torch.tensor(addresses), torch.tensor(starts), 0))
        with pytest.raises(ValueError, match="each tail its sequence's"):
            kernel.decoder_layer(LIB, layer.params, x, cos, cos, (keys, values), step, q8)
    assert not keys.any() and not values.any() and not tail.any()  # (nothing written)
    q8 = kernel.q8_pages(scales, base, (base, torch.tensor([0]), 0))
    kernel.decoder_layer(LIB, layer.params, x, cos, cos, (keys, values), step, q8)
    assert values[:, 2].any() and tail[0, :, 2].any() and not keys.any()  # (V in, K in the tail)


def test_int8_weights_run_lean_decode_steps_in_one_call_with_their_products() -> None:
    """``weights: int8``: q|k|v and gate|up stacked as int8 tiles with their scales; up to
    16 rows (decode steps) the stacked product on cachegate's int8 kernel, and a step of
    decodes in one C call; above (prefill chunks) each projection's own product. Step by
    step (the int8 layer's path depends on a pass's rows), the logits are those of the same
    model with transformers' layers."""
    from localmodel.batch import use_batched_attention
    from localmodel.weights import Int8Linear, use_int8_weights
    from tests.localmodel.test_batch import _STEPS, _paged, _tiny

    model = _tiny("qwen2", 512)
    use_int8_weights(model)
    use_fused_norms(model)
    reference = copy.deepcopy(model)  # (its layers as transformers runs them)
    assert use_lean_layers(model) == 2
    q = model.model.layers[0].self_attn.q_proj
    assert isinstance(q, Int8Linear) and q.tiles8 is not None
    assert q.tiles8[0].data_ptr() == model.model.layers[0].qkv.tiles.data_ptr()  # (a view)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 512, (n,), generator=gen).tolist() for n in (1, 9, 40, 23, 30)]
    runs = []
    for m in (model, reference):
        use_batched_attention(m)
        make_cache = _paged(m)
        caches = [make_cache() for _ in prompts]
        logits = []
        for step in _STEPS:  # (whole prefills, chunks past 16 rows, decodes alone)
            fed = [(i, t if isinstance(t, list) else prompts[i][t]) for i, t in step]
            logits.append(forward(m, [Piece(caches[i], tuple(t)) for i, t in fed]))
        runs.append(logits)
    for got, want in zip(*runs, strict=True):
        assert (got - want).abs().max() < 1e-4
    assert [layer.one_call for layer in model.model.layers] == [True, True]


def test_an_int8_layer_that_computes_otherwise_is_kept_with_its_own_tiles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from localmodel.weights import use_int8_weights
    from tests.localmodel.test_batch import _tiny

    model = _tiny("llama", 512)
    use_int8_weights(model)
    use_fused_norms(model)
    ids = torch.randint(0, 512, (1, 10))
    with torch.inference_mode():
        want = model(ids).logits
    monkeypatch.setattr(kernel, "rope", lambda *args: None)  # a wrong rotation: no rotation
    assert use_lean_layers(model) == 0
    q, k = model.model.layers[0].self_attn.q_proj, model.model.layers[0].self_attn.k_proj
    assert q.tiles8 is not None and k.tiles8 is not None
    assert q.tiles8[0].untyped_storage().data_ptr() != k.tiles8[0].untyped_storage().data_ptr()
    with torch.inference_mode():
        assert torch.equal(model(ids).logits, want)
