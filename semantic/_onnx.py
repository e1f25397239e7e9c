"""The embedder's forward pass through ONNX Runtime, exported once from the torch model.

A BERT sentence encoder is exported (``torch.onnx``, the TorchScript exporter: no extra
packages beyond ``onnx``) with its mean pooling, as ``[texts, tokens] -> [texts, hidden]``,
into ``<export_dir>/embedder-<model>-<digest>/model.onnx``; ``int8`` adds ``model.int8.onnx``, the
same graph with its MatMul weights quantised to int8 per channel
(``onnxruntime.quantization.quantize_dynamic``; activations are quantised per call). The
digest names the model's files and this module's export format, so a changed model or exporter
exports again; a file that does not load is exported again once. Later starts only load it.

Why: for one short question, torch's eager forward spends most of its time in per-module
overhead, which ONNX Runtime's fused graph does not pay; docs/benchmarks.md ("Embedder
backends") has the measured speed and agreement with the float32 torch vectors.

Example::

    enc = OnnxEncoder.load(st_model, model_dir, Path("data/models"), int8=False, threads=1)
    pooled = enc(features)                # [n, hidden] float32, mean-pooled, not normalised
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["EXPORT_FORMAT", "OnnxEncoder", "export_name"]

log = logging.getLogger(__name__)

#: Bumped when the exported graph changes; part of the export's directory name.
EXPORT_FORMAT = 1
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class OnnxEncoder:
    """Mean-pooled token embeddings from an ONNX Runtime session (thread-safe)."""

    def __init__(self, path: Path, *, threads: int = 1) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        # NOTE: one intra-op thread per call, like the torch workers: the embedder's own
        # worker threads are the parallelism, and a spinning pool fights them for 2 cores.
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.path = path
        self._session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    @classmethod
    def load(
        cls, model: Any, model_path: str, export_dir: Path, *, int8: bool, threads: int = 1
    ) -> OnnxEncoder:
        """Load the export of sentence-transformers ``model`` (read from ``model_path``).

        Exports it first when missing; a file that fails to load is exported again once.
        Raises ``ValueError`` for a model that is not a mean-pooled BERT-like encoder, and
        whatever the exporter raises when exporting fails.
        """
        directory = export_dir / export_name(model_path)
        path = directory / ("model.int8.onnx" if int8 else "model.onnx")
        if path.exists():
            try:
                return cls(path, threads=threads)
            except Exception as exc:  # a truncated or foreign file: export it again
                log.warning("embedder: %s does not load (%s); exporting it again", path, exc)
        _export(model, directory, int8=int8)
        return cls(path, threads=threads)

    def __call__(self, features: dict[str, Any]) -> np.ndarray:
        """``[n, hidden]`` mean-pooled embeddings of a right-padded tokenised batch."""
        mask = _numpy(features["attention_mask"])  # [n, L]
        feed = {
            "input_ids": _numpy(features["input_ids"]),
            "attention_mask": mask,
            "token_type_ids": _numpy(features["token_type_ids"])
            if "token_type_ids" in features
            else np.zeros_like(mask),
        }
        out: np.ndarray = self._session.run(None, feed)[0]  # [n, hidden]
        return out


def export_name(model_path: str) -> str:
    """``embedder-<model dir name>-<digest>``: the digest covers the model's file names and
    sizes and the export format.

    NOTE: not paths or mtimes, so an image that copies the model and its export elsewhere
    keeps using the export; a model changed in place with the same sizes is caught by the
    agreement check at load (semantic/embedder.py), which exports again.
    """
    root = Path(model_path)
    h = hashlib.sha256(f"{EXPORT_FORMAT}\n".encode())
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(f"{file.relative_to(root)}\t{file.stat().st_size}\n".encode())
    return f"embedder-{root.name}-{h.hexdigest()[:12]}"


def _export(model: Any, directory: Path, *, int8: bool) -> None:
    """Write ``model.onnx`` (and ``model.int8.onnx``) into ``directory``, atomically."""
    modules = list(model)
    names = [type(m).__name__ for m in modules]
    if names[:2] != ["Transformer", "Pooling"] or any(n != "Normalize" for n in names[2:]):
        raise ValueError(f"the onnx backend needs a Transformer + mean Pooling model: {names}")
    if getattr(modules[1], "pooling_mode", None) != "mean":
        raise ValueError("the onnx backend needs mean pooling")
    encoder = getattr(modules[0], "auto_model", None)
    if encoder is None:
        raise ValueError("the onnx backend needs a Hugging Face encoder inside the model")
    directory.mkdir(parents=True, exist_ok=True)
    fp32 = directory / "model.onnx"
    if not fp32.exists() or not _loads(fp32):
        probe = model.preprocess(["an export probe", "a longer probe text for the export"])
        args = tuple(probe[name] for name in _INPUTS)
        with tempfile.TemporaryDirectory(dir=directory) as tmp:
            out = Path(tmp) / "model.onnx"
            with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
                warnings.simplefilter("ignore")  # tracer notes on shapes the axes make dynamic
                torch.onnx.export(
                    _MeanPooled(encoder).eval(),
                    args,
                    str(out),
                    input_names=list(_INPUTS),
                    output_names=["embedding"],
                    dynamic_axes={
                        **{name: {0: "texts", 1: "tokens"} for name in _INPUTS},
                        "embedding": {0: "texts"},
                    },
                    opset_version=17,
                    dynamo=False,
                )
            os.replace(out, fp32)
        log.info("embedder: exported %s", fp32)
    if int8:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        with tempfile.TemporaryDirectory(dir=directory) as tmp:
            out = Path(tmp) / "model.int8.onnx"
            logging.getLogger().disabled, was = True, logging.getLogger().disabled
            try:  # (the quantiser logs a pre-processing hint on the root logger)
                quantize_dynamic(fp32, out, weight_type=QuantType.QInt8, per_channel=True)
            finally:
                logging.getLogger().disabled = was
            os.replace(out, directory / "model.int8.onnx")
        log.info("embedder: quantised %s", directory / "model.int8.onnx")


def _loads(path: Path) -> bool:
    try:
        OnnxEncoder(path)
    except Exception:
        return False
    return True


def _numpy(value: Any) -> np.ndarray:
    array = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
    return np.ascontiguousarray(array, dtype=np.int64)


class _MeanPooled(torch.nn.Module):
    """The encoder's last hidden state averaged over each text's real tokens (what is exported)."""

    def __init__(self, encoder: Any) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
        hidden = self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state  # [n, L, hidden]
        weights = attention_mask.unsqueeze(-1).to(hidden.dtype)  # [n, L, 1]
        return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)  # [n, hidden]
