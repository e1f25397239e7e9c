"""Disk tier for evicted prefix KV: re-load what memory had to drop instead of recomputing it.

The memory tree (`RadixCache`) evicts under its byte budget; with
``RadixCache(..., on_evict=tier.offer)`` every node it evicts is handed to a `DiskTier`,
whose writer thread stores the KV in a file. A later request whose prompt shares that
prefix reads it back (microseconds per token from the page cache or an SSD) rather than
prefilling it again (milliseconds per token on a CPU); whether that pays is the engine's
call, by a measured break-even.

What is on disk is indexed by a second `RadixCache` whose spans are `FileRegion`s, data-less
handles ``(file, offset, length)``: longest-prefix match, splits (a region's `slice` is an
offset computation, no copy), LRU and the byte budget all come from the tree. Every path in
that index is a whole prefix from its namespace's root: when a node is evicted whose
ancestors are not on disk yet, the writer stores them too (the `Evicted` record carries
their spans), so a disk hit never needs memory to fill a hole.

Files live in a run directory of their own under ``directory`` (``kv-XXXX/``, locked with
``flock``, removed by `close`; those of crashed runs are removed at start), so several
engines and processes may share ``directory``. A file is deleted as soon as no region
references it any more: when the index evicts or flushes its last region, or the writer
stored none of it. The format inside is the engine's: a `KVCodec` turns spans into rows of
``bytes_per_token`` bytes, one per token, so any token range of a file is one contiguous read.

Example::

    tier = DiskTier("/var/cache/cachegate/kv", max_bytes=20 << 30, codec=codec)
    memory = RadixCache(2 << 30, on_evict=tier.offer)      # evictions go to disk, async
    ...
    got = tier.read(RadixKey(ns, prompt), start=n_mem, min_tokens=break_even)
    if got is not None:                                      # rows for tokens [start, stop)
        load(got.rows, at=got.start); n_cached = got.stop
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from prefix._kvfiles import HEADER_BYTES, FileSet, KVFile
from prefix.radix import Evicted, KVSpan, RadixCache, RadixKey

__all__ = ["DiskRead", "DiskStats", "DiskTier", "FileRegion", "KVCodec"]

logger = logging.getLogger(__name__)

_SENTINEL = -1  # a token id no prompt holds: lets `match` cover a key's last token
_CLOSE_TIMEOUT_S = 10.0
_CHUNK_TOKENS = 256  # the writer encodes and writes this many rows at a time (bounded memory)


class KVCodec(Protocol):
    """The engine's serializer: spans ↔ rows of ``bytes_per_token`` bytes, one per token."""

    @property
    def bytes_per_token(self) -> int: ...

    def encode(self, spans: Sequence[KVSpan], start: int, stop: int) -> np.ndarray:
        """Tokens ``[start, stop)`` of the concatenated ``spans``: uint8 ``[stop - start, bpt]``."""
        ...


class FileRegion:
    """Rows ``[offset, offset + length)`` of one KV file: the disk index's span (no data).

    ``slice`` returns a narrower region of the same file (no copy, no I/O); ``nbytes`` is
    what the rows take on disk, so the index's byte budget is the disk budget.
    """

    __slots__ = ("file", "length", "offset")

    def __init__(self, file: KVFile, offset: int, length: int) -> None:
        self.file = file  # NOTE: the reference keeps the file on disk (see FileSet)
        self.offset = offset
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"FileRegion({self.file.path.name}, offset={self.offset}, length={self.length})"

    @property
    def nbytes(self) -> int:
        return self.length * self.file.bytes_per_token

    def slice(self, start: int, stop: int) -> FileRegion:
        return FileRegion(self.file, self.offset + start, stop - start)


@dataclass(frozen=True, slots=True)
class DiskRead:
    """Rows (uint8 ``[stop - start, bytes_per_token]``) of tokens ``[start, stop)``."""

    start: int
    stop: int
    rows: np.ndarray


@dataclass(frozen=True, slots=True)
class DiskStats:
    """Counters (cumulative) and gauges (current) of a `DiskTier`."""

    queries: int  # read() calls
    hits: int  # reads that returned rows
    hit_tokens: int  # tokens returned
    read_errors: int  # missing or corrupt files, served as misses
    offered: int  # evictions queued for the writer
    dropped: int  # evictions not queued: queue full, too many bytes pending, or closed
    written_tokens: int
    files_written: int
    write_errors: int
    pending: int  # evictions queued, not written yet
    tokens: int  # tokens indexed
    bytes: int  # bytes indexed (rows of live regions)
    evicted_tokens: int  # dropped from the index by its byte budget
    files: int
    file_bytes: int  # sizes of the files on disk, headers and rows no region uses included
    max_bytes: int


@dataclass(frozen=True, slots=True)
class _Queued:
    """An evicted node waiting for the writer, with the flush count it was offered under."""

    record: Evicted
    stamp: tuple[int, int]
    nbytes: int  # what it keeps in memory until written: its span and its prefix spans


class OnDisk:
    """A prefix span of an offered record that the files held when it was offered: its
    length only, no KV (so the caller need not keep or copy it). Should the files lose that
    prefix before the record is written, the record is dropped."""

    __slots__ = ("length",)

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    @property
    def nbytes(self) -> int:
        return 0

    def slice(self, start: int, stop: int) -> OnDisk:
        return OnDisk(stop - start)


class DiskTier:
    """Evicted prefix KV in files under a byte budget; see the module docstring.

    ``offer`` never blocks: records go to a writer thread through a queue of at most
    ``queue_size`` records and ``max_pending_bytes`` bytes of evicted spans (what the
    queue keeps alive beyond the memory budget); past either, records are dropped and
    counted. ``read`` runs on the caller's thread. Thread-safe; `close` when done.

    With ``ttl_s``, prefixes not read or written for that long are dropped, files
    included, as in the memory tree (checked lazily, on `read` and on writes).
    """

    def __init__(
        self,
        directory: Path | str,
        max_bytes: int,
        codec: KVCodec,
        *,
        ttl_s: float | None = None,
        queue_size: int = 64,
        max_pending_bytes: int = 256 * 2**20,
    ) -> None:
        if max_bytes < 0 or queue_size < 1 or max_pending_bytes < 0:
            raise ValueError("DiskTier: max_bytes, max_pending_bytes >= 0 and queue_size >= 1")
        self.codec = codec
        self._bpt = codec.bytes_per_token
        self._max_bytes = max_bytes
        self._max_pending_bytes = max_pending_bytes
        self._index = RadixCache(max_bytes, ttl_s=ttl_s)
        self._files = FileSet(Path(directory), self._bpt)
        self._queue: queue.Queue[_Queued | None] = queue.Queue(maxsize=queue_size)
        self._lock = threading.Lock()  # counters and the closed flag; never held around I/O
        # Held while one record is written and indexed, so that a flush waits for it.
        self._write_lock = threading.Lock()
        # Flushes so far, in all and per namespace: a queued record older than a flush of
        # its namespace is not written (the flush dropped it, as it drops what is on disk).
        self._flushes = 0
        self._ns_flushes: dict[str, int] = {}
        self._closed = False
        self._pending_bytes = 0
        self._queries = self._hits = self._hit_tokens = self._read_errors = 0
        self._offered = self._dropped = self._written_tokens = self._files_written = 0
        self._write_errors = 0
        self._failing = False  # the last write failed (writer thread only)
        self._writer = threading.Thread(target=self._write_loop, name="kv-disk-writer", daemon=True)
        self._writer.start()

    # -- public -------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        """This tier's run directory (its files and nothing else)."""
        return self._files.run_dir

    def offer(self, record: Evicted) -> bool:
        """Queue an evicted node for the writer (the memory tree's ``on_evict``); never blocks.

        Returns False when the record was dropped (queue full, too many bytes pending,
        tier closed): the KV is then simply lost, as it was without a disk tier. A record
        larger than ``max_pending_bytes`` is taken when nothing else is pending: a long
        prompt's prefix is one node, and the one most worth reloading.
        """
        nbytes = record.span.nbytes + sum(span.nbytes for span in record.prefix_spans)
        with self._lock:
            over = self._pending_bytes and self._pending_bytes + nbytes > self._max_pending_bytes
            if self._closed or over:
                self._dropped += 1
                return False
            try:
                self._queue.put_nowait(_Queued(record, self._stamp(record.namespace), nbytes))
            except queue.Full:
                self._dropped += 1
                return False
            self._pending_bytes += nbytes
            self._offered += 1
        return True

    def held(self, namespace: str, tokens: Sequence[int]) -> int:
        """How many leading ``tokens`` the files hold now (a look: it may change after)."""
        return self._index.cached_len(RadixKey(namespace, (*tokens, _SENTINEL)))

    def read(self, key: RadixKey, start: int, *, min_tokens: int = 1) -> DiskRead | None:
        """Read the KV of the longest on-disk prefix of ``key.tokens``, from token ``start`` on.

        Like `RadixCache.match`, at most ``len(key.tokens) - 1`` tokens are served. Returns
        None when the disk holds fewer than ``min_tokens`` tokens past ``start`` (the
        break-even), or when a file is missing or corrupt: then the namespace's index is
        flushed (its files go with it) and the caller recomputes, as on any miss.
        """
        match = self._index.match(key)
        stop = match.n_cached
        with self._lock:
            self._queries += 1
        if stop - start < max(min_tokens, 1):
            return None
        with self._index.hold(match):  # NOTE: the regions' files stay on disk meanwhile
            rows = self._read_rows(match.spans, start, stop)
        if rows is None:
            # NOTE: a corrupt file would fail every read of these prefixes; dropping the
            # namespace (rare) also frees the writer to store them again on their next eviction.
            self._index.flush(key.namespace)
            with self._lock:
                self._read_errors += 1
            return None
        with self._lock:
            self._hits += 1
            self._hit_tokens += stop - start
        return DiskRead(start, stop, rows)

    def drain(self) -> None:
        """Wait until every queued record is written (or dropped by `close`)."""
        self._queue.join()

    def flush(self, namespace: str | None = None) -> int:
        """Drop every indexed prefix (of one namespace, if given) and its files; return bytes.

        Records still queued for the writer are dropped too, and one being written is
        waited for, so nothing flushed comes back afterwards.
        """
        with self._lock:
            if namespace is None:
                self._flushes += 1
            else:
                self._ns_flushes[namespace] = self._ns_flushes.get(namespace, 0) + 1
        with self._write_lock:
            return self._index.flush(namespace)

    def close(self) -> None:
        """Stop the writer (queued records are dropped) and remove the run directory."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        while True:  # drop what is queued, so that the stop sentinel always fits
            try:
                queued = self._queue.get_nowait()
            except queue.Empty:
                break
            if queued is not None:
                with self._lock:
                    self._pending_bytes -= queued.nbytes
            self._queue.task_done()
        self._queue.put_nowait(None)  # NOTE: only offer() puts, and it refuses once closed
        # A writer stuck in I/O (a hung disk) must not hang shutdown: it is a daemon thread.
        self._writer.join(timeout=_CLOSE_TIMEOUT_S)
        self._index.flush()
        self._files.close()

    @property
    def stats(self) -> DiskStats:
        index = self._index.stats
        with self._lock:
            return DiskStats(
                queries=self._queries,
                hits=self._hits,
                hit_tokens=self._hit_tokens,
                read_errors=self._read_errors,
                offered=self._offered,
                dropped=self._dropped,
                written_tokens=self._written_tokens,
                files_written=self._files_written,
                write_errors=self._write_errors,
                pending=self._queue.qsize(),
                tokens=index.tokens,
                bytes=index.bytes,
                evicted_tokens=index.evicted_tokens,
                files=self._files.count,
                file_bytes=self._files.bytes,
                max_bytes=self._max_bytes,
            )

    @contextlib.contextmanager
    def scratch(self, rows: np.ndarray) -> Iterator[Callable[[int], np.ndarray | None]]:
        """Write ``rows`` to a scratch file; yield ``read(n)``, its first n rows by the read path.

        For measuring what a read costs on this directory's disk (the engine's break-even);
        the file is not indexed and is deleted on exit.
        """
        file = self._files.write(len(rows), [rows])
        region = FileRegion(file, 0, len(rows))
        try:
            yield lambda n: self._read_rows((region,), 0, n)
        finally:
            self._files.delete(file.path)

    # -- writer -------------------------------------------------------------------------

    def _write_loop(self) -> None:
        while True:
            queued = self._queue.get()
            try:
                if queued is None:
                    return
                with self._write_lock:
                    with self._lock:
                        current = queued.stamp == self._stamp(queued.record.namespace)
                    if current and not self._closed:
                        self._write(queued.record)
                        if self._failing:
                            logger.info("prefix.offload: %s takes writes again", self.directory)
                            self._failing = False
            except Exception:
                # NOTE: once per run of failures (a full disk, a directory removed under it
                # fail every eviction's write): the rest are counted in write_errors
                if not self._failing:
                    logger.exception("prefix.offload: writing to %s failed (the next failures "
                                     "are only counted, in write_errors)", self.directory)  # fmt: skip
                self._failing = True
                with self._lock:
                    self._write_errors += 1
            finally:
                if queued is not None:
                    with self._lock:
                        self._pending_bytes -= queued.nbytes
                self._queue.task_done()

    def _stamp(self, namespace: str) -> tuple[int, int]:
        """The flushes that concern ``namespace`` so far (under ``_lock``)."""
        return self._flushes, self._ns_flushes.get(namespace, 0)

    def _write(self, record: Evicted) -> None:
        """Store the part of ``record.tokens`` the index lacks (ancestors included)."""
        ns, tokens = record.namespace, record.tokens
        have = self._index.match(RadixKey(ns, (*tokens, _SENTINEL)))
        # NOTE: only this thread inserts into the index, and the held path can be neither
        # evicted nor flushed: the insert below finds exactly `start` tokens in place.
        with self._index.hold(have):
            start = have.n_cached
            stop = min(len(tokens), start + (self._max_bytes - HEADER_BYTES) // self._bpt)
            if stop <= start:
                return  # already on disk (or larger than the whole budget)
            spans = (*record.prefix_spans, record.span)
            if _needs_absent(spans, start):  # (the files lost that prefix since the offer)
                with self._lock:
                    self._dropped += 1
                return
            chunks = (
                self.codec.encode(spans, a, min(a + _CHUNK_TOKENS, stop))
                for a in range(start, stop, _CHUNK_TOKENS)
            )
            file = self._files.write(stop - start, chunks)
            region = FileRegion(file, 0, stop - start)
            stored = self._index.insert(RadixKey(ns, tokens[:stop]), _Tail(start, region))
        if 0 < stored < stop - start:  # the budget took only a prefix: free the rest
            self._files.truncate(file, stored)
        with self._lock:
            self._written_tokens += stored
            self._files_written += 1
        del file, region  # NOTE: when nothing was stored, this deletes the file
        excess = self._files.bytes - self._max_bytes
        while excess > 0 and self._index.evict(excess) > 0:  # headers, rows no region uses
            excess = self._files.bytes - self._max_bytes

    # -- reader -------------------------------------------------------------------------

    def _read_rows(self, spans: Sequence[KVSpan], start: int, stop: int) -> np.ndarray | None:
        """Rows ``[start, stop)`` of the regions ``spans`` cover; None if a file is bad."""
        rows = np.empty((stop - start, self._bpt), dtype=np.uint8)  # [tokens, bytes per token]
        runs: list[tuple[KVFile, int, int]] = []  # (file, first row, rows): one read each
        pos = 0
        for region in spans:
            assert isinstance(region, FileRegion)
            a, b = max(start - pos, 0), min(stop - pos, len(region))
            pos += len(region)
            if a >= b:
                continue
            first = region.offset + a
            if runs and runs[-1][0] is region.file and runs[-1][1] + runs[-1][2] == first:
                runs[-1] = (region.file, runs[-1][1], runs[-1][2] + b - a)  # split halves
            else:
                runs.append((region.file, first, b - a))
        filled = 0
        for file, first, n in runs:
            if not self._files.read(file, first, rows[filled : filled + n]):
                return None
            filled += n
        return rows if filled == stop - start else None


# ── helpers ───────────────────────────────────────────────────────────────────────


class _Tail:
    """What the writer inserts: a key's tokens, of which those from ``base`` on are ``region``.

    The index already holds ``[0, base)`` and the writer holds it locked, so `insert` only
    slices from ``base`` on (and `_make_room` estimates bytes from ``nbytes``, which is
    proportional to tokens like a region's).
    """

    __slots__ = ("base", "region")

    def __init__(self, base: int, region: FileRegion) -> None:
        self.base = base
        self.region = region

    def __len__(self) -> int:
        return self.base + len(self.region)

    @property
    def nbytes(self) -> int:
        return len(self) * self.region.file.bytes_per_token

    def slice(self, start: int, stop: int) -> FileRegion:
        if start < self.base:
            raise AssertionError(f"the index lacks tokens {start}…{self.base} it held")
        return self.region.slice(start - self.base, stop - self.base)


def _needs_absent(spans: Sequence[KVSpan], start: int) -> bool:
    """Whether rows from ``start`` on would have to come from an :class:`OnDisk` span."""
    pos = 0
    for span in spans:
        if isinstance(span, OnDisk) and pos + len(span) > start:
            return True
        pos += len(span)
    return False
