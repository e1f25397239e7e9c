"""Forward passes through ONNX Runtime, exported once from the torch models.

Two graphs are exported (``torch.onnx``, the TorchScript exporter: no extra packages beyond
``onnx``), each with dynamic batch and token axes:

- the embedder (:class:`OnnxEncoder`): a BERT sentence encoder with its mean pooling, as
  ``[texts, tokens] -> [texts, hidden]``, into ``<export_dir>/embedder-<model>-<digest>/model.onnx``;
  the quantised variants (:data:`QUANTISED`) sit beside it: ``int8`` (``model.int8.onnx``) has its
  MatMul weights quantised to int8 per channel (``onnxruntime.quantization.quantize_dynamic``;
  activations are quantised per call, one scale for the whole input); ``int8-block``
  (``model.int8-block.onnx``) has them in int8 blocks of :data:`BLOCK` input features with a
  scale each (ONNX Runtime's ``MatMulNBits``, 8 bits, symmetric), multiplied with activations
  quantised per row and block (its ``accuracy_level`` 4): finer scales on both sides, so its
  vectors stay much nearer float32's;
- the pair verifier (:class:`OnnxClassifier`): a sequence classifier (for the shipped verifier,
  the bundled MiniLM with the verifier's delta applied) as ``[pairs, tokens] -> [pairs]``, its
  raw first logit, into ``<export_dir>/verifier-<digest>/model.onnx``; ``int8`` adds
  ``model.int8.onnx``, quantised the same way as the embedder's.

The digest names the model's files and this module's export format, so a changed model or
exporter exports again; a file that does not load is exported again once. Later starts only
load it. The callers (semantic/embedder.py, semantic/verifier.py) check a loaded graph against
torch on fixed probes with :func:`load_checked` and run on torch when it disagrees.

Why: for one short question, torch's eager forward spends most of its time in per-module
overhead, which ONNX Runtime's fused graph does not pay; docs/benchmarks.md ("Embedder
backends", and the verifier's section) has the measured speed and agreement with torch.

Example::

    enc = OnnxEncoder.load(st_model, model_dir, Path("data/models"), int8=False, threads=1)
    pooled = enc(features)                # [n, hidden] float32, mean-pooled, not normalised
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import shutil
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from prefix.dirlock import claim_dir, lock_path, unused

__all__ = [
    "EXPORT_FORMAT",
    "OnnxClassifier",
    "OnnxEncoder",
    "OnnxGraph",
    "export_name",
    "graph_file",
    "load_checked",
    "verifier_export_name",
]

log = logging.getLogger(__name__)

#: Bumped when the exported graph changes; part of the export's directory name.
EXPORT_FORMAT = 1
#: The quantised graphs beside ``model.onnx``, by kind: their file names.
QUANTISED = {"int8": "model.int8.onnx", "int8-block": "model.int8-block.onnx"}
#: Input features per weight scale in ``int8-block`` (MiniLM's 384 and 1536 are multiples).
BLOCK = 128
_NBITS = "onnxruntime.quantization.matmul_nbits_quantizer"
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")

G = TypeVar("G", bound="OnnxGraph")


class OnnxGraph:
    """An exported graph's ONNX Runtime session over tokenised inputs (thread-safe)."""

    def __init__(self, path: Path, *, threads: int = 1) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        # NOTE: one intra-op thread per call, like the torch workers: the callers' own
        # worker threads are the parallelism, and a spinning pool fights them for 2 cores.
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.path = path
        #: int8 weights (``model.int8.onnx``): activations are quantised per call, over the
        #: whole input, so a row's output depends on the other rows of the call
        self.int8 = path.name == graph_file("int8")
        self._session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self._inputs = [i.name for i in self._session.get_inputs()]

    def __call__(self, features: dict[str, Any]) -> np.ndarray:
        """The graph's first output for a right-padded tokenised batch (token type 0 if absent)."""
        mask = _numpy(features["attention_mask"])  # [n, L]
        feed = {
            name: _numpy(features[name]) if name in features else np.zeros_like(mask)
            for name in self._inputs
        }
        out: np.ndarray = self._session.run(None, feed)[0]
        return out

    @classmethod
    def _load(cls: type[G], path: Path, export: Callable[[], None], threads: int, what: str) -> G:
        """Open ``path``, exporting it first when missing or when it fails to load."""
        if path.exists():
            try:
                return cls(path, threads=threads)
            except Exception as exc:  # a truncated or foreign file: export it again
                log.warning("%s: %s does not load (%s); exporting it again", what, path, exc)
        export()
        return cls(path, threads=threads)


class OnnxEncoder(OnnxGraph):
    """Mean-pooled token embeddings ``[n, hidden]`` (the embedder's graph)."""

    @classmethod
    def load(
        cls,
        model: Any,
        model_path: str,
        export_dir: Path,
        *,
        quantised: str | None = None,
        threads: int = 1,
    ) -> OnnxEncoder:
        """Load the export of sentence-transformers ``model`` (read from ``model_path``):
        float32, or the :data:`QUANTISED` kind ``quantised``.

        Exports it first when missing; a file that fails to load is exported again once.
        Raises ``ValueError`` for a model that is not a mean-pooled BERT-like encoder, and
        whatever the exporter raises when exporting fails.
        """
        directory = export_dir / export_name(model_path)
        path = directory / graph_file(quantised)
        export = functools.partial(_export, model, directory, quantised)
        return cls._load(path, export, threads, "embedder")


class OnnxClassifier(OnnxGraph):
    """The raw first logit ``[n]`` of a Hugging Face sequence classifier (the verifier's graph)."""

    @classmethod
    def load(
        cls, model: Any, tokenizer: Any, directory: Path, *, int8: bool = False, threads: int = 1
    ) -> OnnxClassifier:
        """Load ``directory/model.onnx`` (``int8``: ``model.int8.onnx``), exporting ``model``
        (tokenised by ``tokenizer``) first when it is missing or does not load."""

        def export() -> None:
            fp32 = directory / "model.onnx"
            if not fp32.exists() or not _loads(fp32):
                _export_classifier(model, tokenizer, fp32)
            if int8:
                _quantize(fp32, "verifier", "int8")

        path = directory / graph_file("int8" if int8 else None)
        return cls._load(path, export, threads, "verifier")


def load_checked(
    load: Callable[[], G], disagreement: Callable[[G], str], redo: Callable[[], None]
) -> tuple[G | None, str]:
    """``(graph, "")`` when ``load()`` gives a graph in which ``disagreement`` (its outputs
    compared with torch's, or with recorded ones, on fixed probes) finds nothing; else
    ``(None, why)``, ``why`` being "could not be loaded: ..." or "disagrees: <disagreement>".
    A graph that disagrees is thrown away (``redo``: delete its files) and loaded, so
    exported, once more: a stale or foreign file is harmless. One that cannot be thrown away
    (an export directory the process may only read: the container image's baked exports) is
    not used either.
    """
    why = ""
    for attempt in range(2):
        try:
            graph = load()
        except Exception as exc:
            return None, f"could not be loaded: {exc!r}"
        try:
            why = disagreement(graph)
        except Exception as exc:  # a foreign graph: other inputs or output shapes
            why = f"fails on the probes: {exc!r}"
        if not why:
            return graph, ""
        if attempt == 0:
            try:
                redo()
            except OSError as exc:
                return None, f"disagrees: {why} (and cannot be exported again: {exc})"
    return None, f"disagrees: {why}"


def export_name(model_path: str) -> str:
    """``embedder-<model dir name>-<digest>``: the digest covers the model's file names and
    sizes and the export format.

    NOTE: not paths or mtimes, so an image that copies the model and its export elsewhere
    keeps using the export; a model changed in place with the same sizes is caught by the
    agreement check at load (semantic/embedder.py), which exports again.
    """
    root = Path(model_path)
    h = hashlib.sha256(f"{EXPORT_FORMAT}\n".encode())
    _digest_files(h, root, contents=False)
    return f"embedder-{root.name}-{h.hexdigest()[:12]}"


def verifier_export_name(path: Path, base: Path | None) -> str:
    """``verifier-<digest>``: the digest covers the contents of the verifier directory's files
    (``delta.safetensors`` and ``meta.json``, or a full model's files), the file names and sizes
    of the ``base`` model a delta applies to, and the export format.

    NOTE: contents, not sizes, for the verifier: a retrained delta has the same tensors, so the
    same size (hashing its ~7 MB costs ~20 ms at load; a full MiniLM-size model directory,
    ~90 MB, a few tenths of a second). Like :func:`export_name`, no paths or mtimes.
    """
    h = hashlib.sha256(f"{EXPORT_FORMAT}\nverifier\n".encode())
    _digest_files(h, path, contents=True)
    if base is not None:
        h.update(b"base\n")
        _digest_files(h, base, contents=False)
    return f"verifier-{h.hexdigest()[:12]}"


def _digest_files(h: Any, root: Path, *, contents: bool) -> None:
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(f"{file.relative_to(root)}\t{file.stat().st_size}\n".encode())
        if contents:
            h.update(hashlib.sha256(file.read_bytes()).digest())


def graph_file(quantised: str | None) -> str:
    """The file name of the float32 graph (``None``) or of a :data:`QUANTISED` kind."""
    if quantised is not None and quantised not in QUANTISED:
        raise ValueError(f"no quantised graph {quantised!r}: {', '.join(QUANTISED)}")
    return "model.onnx" if quantised is None else QUANTISED[quantised]


def _export(model: Any, directory: Path, quantised: str | None) -> None:
    """Write ``model.onnx`` (and the ``quantised`` graph) into ``directory``, atomically."""
    modules = list(model)
    names = [type(m).__name__ for m in modules]
    if names[:2] != ["Transformer", "Pooling"] or any(n != "Normalize" for n in names[2:]):
        raise ValueError(f"the onnx backend needs a Transformer + mean Pooling model: {names}")
    if getattr(modules[1], "pooling_mode", None) != "mean":
        raise ValueError("the onnx backend needs mean pooling")
    encoder = getattr(modules[0], "auto_model", None)
    if encoder is None:
        raise ValueError("the onnx backend needs a Hugging Face encoder inside the model")
    fp32 = directory / "model.onnx"
    if not fp32.exists() or not _loads(fp32):
        probe = model.preprocess(["an export probe", "a longer probe text for the export"])
        args = tuple(probe[name] for name in _INPUTS)
        _export_graph(_MeanPooled(encoder), args, _INPUTS, fp32, ("embedding", "texts"))
        log.info("embedder: exported %s", fp32)
    if quantised is not None:
        _quantize(fp32, "embedder", quantised)


def _quantize(fp32: Path, what: str, kind: str) -> None:
    """Write the ``kind`` graph (:data:`QUANTISED`) beside ``fp32``, atomically.

    ``int8``: MatMul weights int8 per output channel, activations quantised per call
    (``quantize_dynamic``). ``int8-block``: MatMul weights int8 in blocks of :data:`BLOCK`
    input features, symmetric, as ``MatMulNBits`` nodes computing on int8 activations
    quantised per row and block (``accuracy_level`` 4).
    """
    name = graph_file(kind)
    with _export_dir(fp32.parent) as tmp:
        out = Path(tmp) / name
        # (the quantisers log a pre-processing hint on the root logger and every node they
        # skip on their own: silence both)
        quiet = [logging.getLogger(), logging.getLogger(_NBITS)]
        was = [lg.disabled for lg in quiet]
        for lg in quiet:
            lg.disabled = True
        try:
            _quantized_graph(fp32, out, kind)
        finally:
            for lg, w in zip(quiet, was, strict=True):
                lg.disabled = w
        os.replace(out, fp32.parent / name)
    log.info("%s: quantised %s", what, fp32.parent / name)


def _quantized_graph(fp32: Path, out: Path, kind: str) -> None:
    if kind == "int8":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(fp32, out, weight_type=QuantType.QInt8, per_channel=True)
        return
    import importlib

    import onnx

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:  # NOTE: the module calls logging.basicConfig(level=INFO) when imported: undo that
        nbits = importlib.import_module(_NBITS)
    finally:
        root.handlers[:], root.level = handlers, level
    quantizer = nbits.MatMulNBitsQuantizer(
        onnx.load(str(fp32)), bits=8, block_size=BLOCK, is_symmetric=True, accuracy_level=4
    )
    quantizer.process()
    quantizer.model.save_model_to_file(str(out), use_external_data_format=False)


def _export_classifier(model: Any, tokenizer: Any, path: Path) -> None:
    """Write the classifier's first logit as ``path``, atomically."""
    probe = tokenizer(
        ["an export probe", "a second, longer probe text for the export"],
        ["a probe", "another probe"],
        padding=True,
        return_tensors="pt",
    )
    names = tuple(name for name in _INPUTS if name in probe)
    args = tuple(probe[name] for name in names)
    _export_graph(_FirstLogit(model), args, names, path, ("logit", "pairs"))
    log.info("verifier: exported %s", path)


def _export_graph(
    module: torch.nn.Module,
    args: tuple[Any, ...],
    inputs: Sequence[str],
    path: Path,
    output: tuple[str, str],
) -> None:
    """``torch.onnx.export`` ``module`` into ``path`` (atomically: a temporary file in the same
    directory, then renamed), with dynamic batch and token axes on ``inputs`` and the batch
    axis on its one ``output`` (``(output name, batch axis name)``)."""
    name, batch = output
    path.parent.mkdir(parents=True, exist_ok=True)
    with _export_dir(path.parent) as tmp:
        out = Path(tmp) / path.name
        with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
            warnings.simplefilter("ignore")  # tracer notes on shapes the axes make dynamic
            torch.onnx.export(
                module.eval(),
                args,
                str(out),
                input_names=list(inputs),
                output_names=[name],
                dynamic_axes={**{n: {0: batch, 1: "tokens"} for n in inputs}, name: {0: batch}},
                opset_version=17,
                dynamo=False,
            )
        os.replace(out, path)


#: The temp dirs exports are written in, beside the files they become.
_TMP_PREFIX = ".export-tmp-"


@contextlib.contextmanager
def _export_dir(parent: Path) -> Iterator[Path]:
    """A temp dir in ``parent`` to write an export in, locked while this process lives.

    NOTE: an export left running by a shutdown that did not wait for it (``cachegate serve``
    exits while the embedder loads) left its temp dir, a graph's size, for good; one whose
    lock no live process holds is removed by the next export.
    """
    tmp, lock = claim_dir(parent, _TMP_PREFIX, parent, _remove_dead_exports)
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.unlink(lock_path(tmp))
        os.close(lock)


def _remove_dead_exports(parent: Path) -> None:
    for lock in parent.glob(f"{_TMP_PREFIX}*.lock"):
        if unused(lock):
            shutil.rmtree(lock.with_name(lock.name.removesuffix(".lock")), ignore_errors=True)
            with contextlib.suppress(OSError):
                os.unlink(lock)


def _loads(path: Path) -> bool:
    try:
        OnnxGraph(path)
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


class _FirstLogit(torch.nn.Module):
    """A sequence classifier's first logit, ``[n]`` float32 (what the verifier exports)."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, *inputs: Any) -> Any:
        names = ("input_ids", "attention_mask", "token_type_ids")[: len(inputs)]
        return self.model(**dict(zip(names, inputs, strict=True))).logits[:, 0].float()
