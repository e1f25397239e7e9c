"""One vector index for the whole process, searched one scope at a time.

A cached answer may only be served inside its *scope* (tenant, model, output-changing parameters,
system prompt, earlier turns: see DESIGN.md). Scope is an exact-match key, never a similarity, so
the index is partitioned by scope: every scope owns a partition, and a lookup only ever touches
the partition of the request's scope. That makes isolation structural (an id of another scope
cannot come back, however close its vector) and keeps lookups cheap whatever the other scopes
hold. A single FAISS graph over all scopes filtered with an ``IDSelector`` would have to walk
past other scopes' nodes: slow, and with a selective filter HNSW returns fewer than ``k`` hits.

Each partition picks its own search method by size:

- **flat** (``n < hnsw_threshold``, default 8,192): the vectors sit in one float32 matrix and a
  lookup is an exact matrix-vector product — the inner product FAISS ``IndexFlatIP`` computes,
  ~0.05 ms for 4k vectors, ~0.2 ms for 8k (measured on 2 cores; 7 ms for 100k, hence HNSW).
  Removal swaps the last row into the hole: O(1).
- **HNSW** (``n >= hnsw_threshold``): a FAISS ``IndexHNSWFlat`` with ``METRIC_INNER_PRODUCT``,
  M=32, efSearch=32 by default: 0.14 ms p50 at 100k vectors, recall@1 0.988 vs exact search
  over held-out Quora questions, and 1.0 over those whose true nearest is close enough to hit
  (cos >= 0.8); efSearch=64 gives 0.996 for 0.24 ms (docs/benchmarks.md). HNSW cannot delete,
  so a removal leaves a *tombstone* that searches skip through an ``IDSelectorBitmap``; once
  tombstones exceed ``compact_ratio`` of the partition it is rebuilt from its live vectors.
  Switching to HNSW and compacting both build the new graph on a background thread while the
  old structure keeps answering; changes made meanwhile are replayed onto the new graph before
  it is swapped in.

Vectors must be L2-normalised (as :class:`semantic.embedder.Embedder` returns them), so the inner
product is the cosine similarity. Ids are the entry store's int64 ids, unique across scopes.

Example::

    index = VectorIndex(dim=384)
    index.add(7, b"tenant-a|gpt-4o|...", vec)
    index.search(b"tenant-a|gpt-4o|...", query_vec, k=1)   # [Hit(id=7, similarity=0.93)]
    index.search(b"tenant-b|gpt-4o|...", query_vec, k=1)   # [] — other scope, never returned
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faiss
import numpy as np

__all__ = ["Hit", "IndexFileError", "IndexStats", "Scope", "VectorIndex"]

Scope = str | bytes
"""An opaque scope key; ``str`` is UTF-8 encoded, so ``"a"`` and ``b"a"`` are the same scope."""

_FORMAT = "cachegate-vector-index/1"
_BLOCK = (
    4096  # rows per matrix-vector product: OpenBLAS threads larger ones, which stalls on 2 cores
)


@dataclass(frozen=True, slots=True)
class Hit:
    """A search result: the entry id and its cosine similarity to the query."""

    id: int
    similarity: float


@dataclass(frozen=True, slots=True)
class IndexStats:
    entries: int
    scopes: int
    hnsw_scopes: int
    tombstones: int
    builds_running: int


class IndexFileError(ValueError):
    """The saved index is missing, corrupt or incompatible: rebuild it from the entry store."""


class VectorIndex:
    """Inner-product nearest neighbours over normalised vectors, restricted to one scope.

    ``hnsw_threshold``: partition size at which a scope switches from exact search to HNSW.
    ``hnsw_m``, ``ef_construction``, ``ef_search``: the usual HNSW knobs (graph degree, build
    and search beam widths). ``compact_ratio``: tombstone share that triggers a rebuild.
    ``background``: build HNSW graphs on a thread (``False`` builds inline, for tests/tools).

    Thread-safe: one lock guards all partitions; searches take well under a millisecond.
    """

    def __init__(
        self,
        dim: int,
        *,
        hnsw_threshold: int = 8192,
        hnsw_m: int = 32,
        ef_construction: int = 64,
        ef_search: int = 32,
        compact_ratio: float = 0.25,
        background: bool = True,
    ) -> None:
        if dim < 1 or hnsw_threshold < 2 or not 0 < compact_ratio < 1:
            raise ValueError("need dim >= 1, hnsw_threshold >= 2 and 0 < compact_ratio < 1")
        self.dim = dim
        self.hnsw_threshold = hnsw_threshold
        self.hnsw_m = hnsw_m
        self.ef_construction = ef_construction
        self.ef_search = ef_search
        self.compact_ratio = compact_ratio
        self.background = background
        self._lock = threading.RLock()
        self._parts: dict[bytes, _Partition] = {}
        self._scope_of: dict[int, bytes] = {}  # id -> scope key
        self._builds: list[threading.Thread] = []
        _single_threaded_blas()

    # ---- public -------------------------------------------------------------------------------

    def add(self, id: int, scope: Scope, vec: np.ndarray) -> None:
        """Insert (or replace) entry ``id`` in ``scope``. ``vec`` is ``[dim]``, L2-normalised."""
        v = self._as_vec(vec)
        key = _key(scope)
        with self._lock:
            current = self._scope_of.get(id)
            if current == key and self._parts[key].holds(int(id), v):
                # the same vector again (a Redis replica sees its own writes come back): a
                # replace would only leave a tombstone in an HNSW partition
                return
            if current is not None:
                self._remove_locked(id)
            part = self._parts.get(key)
            if part is None:
                part = self._parts[key] = _Partition(self.dim)
            part.add(int(id), v)
            self._scope_of[int(id)] = key
            self._maybe_rebuild(key, part)

    def remove(self, id: int) -> bool:
        """Delete entry ``id``; returns whether it was present."""
        with self._lock:
            return self._remove_locked(int(id))

    def search(self, scope: Scope, vec: np.ndarray, k: int = 1) -> list[Hit]:
        """The ``k`` entries of ``scope`` most similar to ``vec``, best first (maybe fewer)."""
        q = self._as_vec(vec)
        with self._lock:
            part = self._parts.get(_key(scope))
            if part is None or k < 1:
                return []
            return part.search(q, k, self.ef_search)

    def scopes(self) -> list[bytes]:
        """The keys of the scopes that hold entries."""
        with self._lock:
            return list(self._parts)

    def remove_scope(self, scope: Scope) -> list[int]:
        """Drop a whole scope; returns the ids it held."""
        with self._lock:
            part = self._parts.pop(_key(scope), None)
            ids = part.live_ids() if part else []
            for id in ids:
                del self._scope_of[id]
            return ids

    def rebuild(self, items: Iterable[tuple[int, Scope, np.ndarray]]) -> None:
        """Replace the contents with ``(id, scope, vec)`` items, e.g. read from the entry store.

        HNSW graphs are built inline, so the index is complete when this returns.
        """
        grouped: dict[bytes, tuple[list[int], list[np.ndarray]]] = {}
        for id, scope, vec in items:
            ids, vecs = grouped.setdefault(_key(scope), ([], []))
            ids.append(int(id))
            vecs.append(self._as_vec(vec))
        parts: dict[bytes, _Partition] = {}
        scope_of: dict[int, bytes] = {}
        for key, (ids, vecs) in grouped.items():
            part = parts[key] = _Partition(self.dim)
            for id, v in zip(ids, vecs, strict=True):
                if id in scope_of:  # a repeated id: the last one wins, as with add()
                    parts[scope_of[id]].remove(id)
                part.add(id, v)
                scope_of[id] = key
        for part in parts.values():
            if part.live >= self.hnsw_threshold:
                part.swap_in(*self._build(*part.snapshot()))
        with self._lock:
            self._parts, self._scope_of = parts, scope_of

    def save(self, path: str | Path) -> None:
        """Write the index to ``path`` atomically (HNSW graphs included, so loading is fast)."""
        arrays: dict[str, np.ndarray] = {}
        with self._lock:
            meta = {"format": _FORMAT, "dim": self.dim, "parts": len(self._parts)}
            for i, (key, part) in enumerate(self._parts.items()):
                arrays[f"scope{i}"] = np.frombuffer(key, dtype=np.uint8)
                arrays.update({f"{name}{i}": a for name, a in part.dump().items()})
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        try:
            with open(tmp, "wb") as f:
                np.savez(f, **arrays)  # type: ignore[arg-type]
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:  # (a full disk: the part written was left beside the index)
            tmp.unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | Path, **kwargs: Any) -> VectorIndex:
        """Read an index written by :meth:`save`. ``kwargs`` are the constructor's options.

        Raises :class:`IndexFileError` when the file is missing, corrupt or of another
        dimension/format; the caller then rebuilds from the entry store.
        """
        try:
            with np.load(path) as z:
                meta = json.loads(z["meta"].tobytes())
                if meta.get("format") != _FORMAT:
                    raise IndexFileError(f"{path}: not a {_FORMAT} file")
                index = cls(int(meta["dim"]), **kwargs)
                for i in range(int(meta["parts"])):
                    part = _Partition.restore(
                        index.dim, {k: z[f"{k}{i}"] for k in _dump_keys(z, i)}
                    )
                    key = z[f"scope{i}"].tobytes()
                    index._parts[key] = part
                    for id in part.live_ids():
                        if id in index._scope_of:
                            raise IndexFileError(f"{path}: id {id} appears twice")
                        index._scope_of[id] = key
        except IndexFileError:
            raise
        except Exception as exc:  # zip/npz/json/faiss errors all mean "rebuild from the store"
            raise IndexFileError(f"cannot load vector index {path}: {exc!r}") from exc
        return index

    def wait(self) -> None:
        """Block until background HNSW builds have been swapped in."""
        while True:
            with self._lock:
                threads = [t for t in self._builds if t.is_alive()]
                self._builds = threads
            if not threads:
                return
            for t in threads:
                t.join()

    def stats(self) -> IndexStats:
        with self._lock:
            parts = self._parts.values()
            return IndexStats(
                entries=len(self._scope_of),
                scopes=len(self._parts),
                hnsw_scopes=sum(p.hnsw is not None for p in parts),
                tombstones=sum(p.dead for p in parts),
                builds_running=sum(p.building for p in parts),
            )

    def __len__(self) -> int:
        return len(self._scope_of)

    def __contains__(self, id: object) -> bool:
        return id in self._scope_of

    def ids(self) -> set[int]:
        """Every id in the index (to reconcile it with the entry store after a restart)."""
        with self._lock:
            return set(self._scope_of)

    # ---- helpers ------------------------------------------------------------------------------

    def _as_vec(self, vec: np.ndarray) -> np.ndarray:
        v = np.asarray(vec, dtype=np.float32).reshape(-1)
        if v.shape[0] != self.dim:
            raise ValueError(f"expected a vector of {self.dim} floats, got {v.shape[0]}")
        return v

    def _remove_locked(self, id: int) -> bool:
        key = self._scope_of.pop(id, None)
        if key is None:
            return False
        part = self._parts[key]
        part.remove(id)
        if part.live == 0 and not part.building:
            del self._parts[key]
        else:
            self._maybe_rebuild(key, part)
        return True

    def _maybe_rebuild(self, key: bytes, part: _Partition) -> None:
        """Start an HNSW (re)build when a flat partition grew or tombstones piled up."""
        if part.building:
            return
        if part.hnsw is None:
            if part.live < self.hnsw_threshold:
                return
        elif part.dead <= self.compact_ratio * (part.live + part.dead):
            return
        if part.live < self.hnsw_threshold // 2:  # shrunk a lot: back to exact search
            part.to_flat()
            return
        part.building = True
        ids, vecs = part.snapshot()
        if not self.background:
            part.swap_in(*self._build(ids, vecs))
            return
        t = threading.Thread(
            target=self._build_in_background, args=(key, part, ids, vecs), daemon=True
        )
        self._builds.append(t)
        t.start()

    def _build(self, ids: np.ndarray, vecs: np.ndarray) -> tuple[np.ndarray, Any]:
        hnsw = faiss.IndexHNSWFlat(self.dim, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        hnsw.hnsw.efConstruction = self.ef_construction
        hnsw.add(vecs)  # [n, dim]; graph label i <-> ids[i]
        return ids, hnsw

    def _build_in_background(
        self, key: bytes, part: _Partition, ids: np.ndarray, vecs: np.ndarray
    ) -> None:
        try:
            built = self._build(ids, vecs)
        except BaseException:
            with self._lock:
                part.building = False
                part.changed.clear()
            raise
        with self._lock:
            if self._parts.get(key) is not part:  # scope dropped or index rebuilt meanwhile
                part.building = False
                return
            part.swap_in(*built)
            if part.live == 0:
                del self._parts[key]
            else:  # the replayed changes may already call for another build
                self._maybe_rebuild(key, part)


def _key(scope: Scope) -> bytes:
    return scope.encode() if isinstance(scope, str) else bytes(scope)


def _dump_keys(z: Any, i: int) -> list[str]:
    return [k for k in ("ids", "vecs", "hnsw") if f"{k}{i}" in z.files]


class _Partition:
    """The entries of one scope: an exact matrix (flat) or an HNSW graph with tombstones.

    Flat: ``vecs[:n]`` [n, dim] and ``ids[:n]``, dense; removal swaps the last row in.
    HNSW: graph label ``i`` holds ``ids[i]``, ``-1`` marks a tombstone; ``vecs`` is unused.
    """

    def __init__(self, dim: int) -> None:
        self.dim = dim
        # NOTE: capacity starts at one row and doubles: most scopes (a conversation, a system
        # prompt) hold a few entries, and 16 rows up front cost 24 KB per entry of a new scope.
        self.vecs = np.empty((1, dim), dtype=np.float32)  # [capacity, dim]
        self.ids = np.empty(1, dtype=np.int64)  # [capacity]
        self.n = 0  # rows used (flat: live rows; HNSW: graph labels incl. tombstones)
        self.row: dict[int, int] = {}  # id -> row / graph label
        self.hnsw: Any = None
        self.dead = 0
        self._selector: Any = None  # IDSelectorBitmap over live labels, rebuilt when stale
        self._bitmap: np.ndarray | None = None  # keeps the selector's memory alive
        self.building = False
        self.changed: set[int] = set()  # ids added/removed while a build runs

    @property
    def live(self) -> int:
        return len(self.row)

    def add(self, id: int, v: np.ndarray) -> None:
        if self.n == len(self.ids):
            self.ids = np.resize(self.ids, 2 * self.n)
            if self.hnsw is None:
                self.vecs = np.resize(self.vecs, (2 * self.n, self.dim))
        if self.hnsw is None:
            self.vecs[self.n] = v
        else:
            self.hnsw.add(v[None, :])  # label == self.n
            self._selector = None
        self.ids[self.n] = id
        self.row[id] = self.n
        self.n += 1
        if self.building:
            self.changed.add(id)

    def holds(self, id: int, v: np.ndarray) -> bool:
        """Whether ``id`` is here with exactly the vector ``v``."""
        r = self.row.get(id)
        if r is None:
            return False
        stored = self.vecs[r] if self.hnsw is None else self.hnsw.reconstruct(r)
        return bool(np.array_equal(stored, v))

    def remove(self, id: int) -> None:
        r = self.row.pop(id)
        if self.hnsw is not None:
            self.ids[r] = -1
            self.dead += 1
            self._selector = None
        else:  # swap the last row into the hole
            last = self.n - 1
            if r != last:
                self.vecs[r] = self.vecs[last]
                self.ids[r] = self.ids[last]
                self.row[int(self.ids[r])] = r
            self.n = last
            if len(self.ids) >= 8 and self.n <= len(self.ids) // 4:  # give back what a scope
                half = len(self.ids) // 2  # that shrank (LRU, expiry) no longer needs
                self.ids, self.vecs = self.ids[:half].copy(), self.vecs[:half].copy()
        if self.building:
            self.changed.add(id)

    def search(self, q: np.ndarray, k: int, ef_search: int) -> list[Hit]:
        if self.live == 0:
            return []
        k = min(k, self.live)
        if self.hnsw is None:
            sims = np.concatenate(
                [self.vecs[i : min(i + _BLOCK, self.n)] @ q for i in range(0, self.n, _BLOCK)]
            )  # [n]
            top = np.argpartition(-sims, k - 1)[:k] if k < self.n else np.arange(self.n)
            top = top[np.argsort(-sims[top], kind="stable")]
            return [Hit(int(self.ids[r]), float(sims[r])) for r in top]
        params = faiss.SearchParametersHNSW(efSearch=max(ef_search, k))  # type: ignore[attr-defined]
        if self.dead:
            params.sel = self._live_selector()
        sims2, labels = self.hnsw.search(q[None, :], k, params=params)  # [1, k] each
        return [
            Hit(int(self.ids[lab]), float(s))
            for s, lab in zip(sims2[0], labels[0], strict=True)
            if lab >= 0
        ]

    def live_ids(self) -> list[int]:
        return list(self.row)

    def snapshot(self) -> tuple[np.ndarray, np.ndarray]:
        """Live ``ids`` [m] and their vectors [m, dim], copied, for a build off the lock."""
        ids = np.fromiter(self.row, dtype=np.int64, count=self.live)
        rows = np.fromiter(self.row.values(), dtype=np.int64, count=self.live)
        vecs = self.vecs[rows] if self.hnsw is None else _reconstruct(self.hnsw, rows, self.dim)
        self.changed.clear()
        return ids, vecs

    def swap_in(self, ids: np.ndarray, hnsw: Any) -> None:
        """Adopt a graph built from a snapshot, then replay the changes made since."""
        current = {id: self._vector(id) for id in self.changed if id in self.row}
        self.hnsw, self.n, self.dead = hnsw, len(ids), 0
        self.ids = np.resize(ids, max(1, 2 * len(ids)))
        self.row = {int(id): i for i, id in enumerate(ids)}
        self.vecs = np.empty((0, self.dim), dtype=np.float32)
        self._selector = None
        self.building = False
        for id in self.changed:  # drop the snapshot's copy, re-add the current one if live
            if id in self.row:
                self.remove(id)
            if id in current:
                self.add(id, current[id])
        self.changed.clear()

    def to_flat(self) -> None:
        ids, vecs = self.snapshot()
        self.hnsw, self.dead, self._selector = None, 0, None
        self.n = len(ids)
        self.ids = np.resize(ids, max(1, 2 * self.n))
        self.vecs = np.resize(vecs, (max(1, 2 * self.n), self.dim))
        self.row = {int(id): i for i, id in enumerate(ids)}

    def dump(self) -> dict[str, np.ndarray]:
        if self.hnsw is None:
            return {"ids": self.ids[: self.n].copy(), "vecs": self.vecs[: self.n].copy()}
        return {"ids": self.ids[: self.n].copy(), "hnsw": faiss.serialize_index(self.hnsw)}

    @classmethod
    def restore(cls, dim: int, arrays: dict[str, np.ndarray]) -> _Partition:
        part = cls(dim)
        ids = np.asarray(arrays["ids"], dtype=np.int64)
        if "hnsw" in arrays:
            hnsw = faiss.deserialize_index(np.asarray(arrays["hnsw"], dtype=np.uint8))
            if hnsw.d != dim or hnsw.ntotal != len(ids):
                raise IndexFileError("HNSW graph does not match its ids")
            part.hnsw, part.n, part.dead = hnsw, len(ids), int((ids < 0).sum())
            part.ids = np.resize(ids, max(1, 2 * len(ids)))
            part.vecs = np.empty((0, dim), dtype=np.float32)
            part.row = {int(id): i for i, id in enumerate(ids) if id >= 0}
        else:
            vecs = np.asarray(arrays["vecs"], dtype=np.float32)
            if vecs.shape != (len(ids), dim):
                raise IndexFileError("vectors do not match their ids")
            for id, v in zip(ids, vecs, strict=True):
                part.add(int(id), v)
        return part

    def _vector(self, id: int) -> np.ndarray:
        r = self.row[id]
        if self.hnsw is None:
            return self.vecs[r].copy()
        return _reconstruct(self.hnsw, np.array([r]), self.dim)[0]

    def _live_selector(self) -> Any:
        if self._selector is None:
            self._bitmap = np.packbits(self.ids[: self.n] >= 0, bitorder="little")
            # n is the bitmap's size in bytes; label i is selected iff bit i%8 of byte i//8 is set
            self._selector = faiss.IDSelectorBitmap(len(self._bitmap), faiss.swig_ptr(self._bitmap))
        return self._selector


def _reconstruct(hnsw: Any, rows: np.ndarray, dim: int) -> np.ndarray:
    """Vectors of graph labels ``rows`` [m] -> [m, dim], read from the HNSW's flat storage."""
    if len(rows) == 0:
        return np.empty((0, dim), dtype=np.float32)
    if len(rows) == 1:
        return np.asarray(hnsw.reconstruct(int(rows[0])), dtype=np.float32)[None, :]
    return np.asarray(hnsw.reconstruct_n(0, hnsw.ntotal), dtype=np.float32)[rows]


_blas_limited = False


def _single_threaded_blas() -> None:
    """Run numpy's BLAS on one thread, once per process.

    NOTE: exact search is a stream of small matrix-vector products. OpenBLAS splits each one
    over its threads, and when the other core is busy (the model, the embedder, other
    requests) every product waits for a thread to be scheduled: measured under load, a
    20k-entry search took p50 38 ms with 2 threads and 2.8 ms with one. Only numpy's own
    OpenBLAS is limited; torch's thread pool (the models) is left as configured.
    """
    global _blas_limited
    if _blas_limited:
        return
    from threadpoolctl import ThreadpoolController

    for lib in ThreadpoolController().lib_controllers:
        if _is_numpy_blas(lib.user_api, lib.filepath):
            lib.set_num_threads(1)
    _blas_limited = True


def _is_numpy_blas(user_api: str, filepath: str) -> bool:
    """Whether a loaded native library is the BLAS that numpy's wheel ships (``numpy.libs/``).

    (A numpy linked against a system BLAS matches nothing, and its BLAS keeps its settings.)

    Other packages (scipy, faiss) bring their own OpenBLAS copies, loaded later or not at all;
    matching on the path keeps the limit on the one that numpy's matrix products use.
    """
    if user_api != "blas":
        return False
    folder = Path(filepath).resolve().parent
    numpy_dir = Path(np.__file__).resolve().parent  # macOS wheels: numpy/.dylibs/
    return folder.name == "numpy.libs" or folder == numpy_dir or numpy_dir in folder.parents
