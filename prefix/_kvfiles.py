"""The files of a disk tier: format, run directory, exact accounting, lifetime by reference.

A file holds rows of ``bytes_per_token`` bytes, one per token, after a 64-byte header
(magic, file id, bytes per token, rows written); any row range is one contiguous read. Files live
in a run directory ``<directory>/kv-XXXX/`` locked with ``flock`` on ``kv-XXXX.lock``, so
several tiers (engines, processes) can share ``<directory>``; a run directory whose lock
nobody holds belongs to a process that died and is removed when the next tier starts.

A `KVFile` is deleted from disk as soon as it is garbage (see `FileSet`), so the caller
needs no reference counts: whatever holds a region of the file keeps it.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shutil
import struct
import threading
import weakref
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from .dirlock import claim_dir, lock_path, unused

__all__ = ["HEADER_BYTES", "FileSet", "KVFile"]

logger = logging.getLogger("prefix.offload")

_HEADER = struct.Struct("<8sQQQ")  # magic, file id, bytes per token, rows
_MAGIC = b"CGKV\x00\x00\x00\x01"
HEADER_BYTES = 64  # the header, zero-padded; rows follow


class KVFile:
    """One written file of ``n_tokens`` rows (``bad`` once a read found it damaged)."""

    __slots__ = ("__weakref__", "bad", "bytes_per_token", "id", "n_tokens", "path")

    def __init__(self, file_id: int, run_dir: Path, n_tokens: int, bytes_per_token: int) -> None:
        self.id = file_id
        self.path = run_dir / f"{file_id:016x}.kv"
        self.n_tokens = n_tokens
        self.bytes_per_token = bytes_per_token
        self.bad = False


class FileSet:
    """The files of one run directory, with their sizes (headers included) summed exactly.

    NOTE: a `KVFile` is held only by the regions that point into it (in the index, in a
    reader's match, in the writer's hands) and refers to nothing back, so CPython frees it,
    and its finalizer unlinks the file, the moment its last region goes: evicted, flushed
    or never stored. Finalizers may run under the index's lock; they take only ``_lock``.
    """

    def __init__(self, directory: Path, bytes_per_token: int) -> None:
        self.bytes_per_token = bytes_per_token
        self.run_dir, self._run_lock = _claim_run_dir(directory)
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._sizes: dict[Path, int] = {}
        self.bytes = 0

    @property
    def count(self) -> int:
        return len(self._sizes)

    def write(self, n: int, chunks: Iterable[np.ndarray]) -> KVFile:
        """A new file of ``n`` rows, given as consecutive uint8 ``[rows, bytes_per_token]`` chunks."""
        bpt = self.bytes_per_token
        file = KVFile(next(self._ids), self.run_dir, n, bpt)
        try:
            with open(file.path, "xb") as f:
                f.write(_HEADER.pack(_MAGIC, file.id, bpt, n).ljust(HEADER_BYTES, b"\0"))
                written = 0
                for rows in chunks:
                    if rows.dtype != np.uint8 or rows.ndim != 2 or rows.shape[1] != bpt:
                        raise ValueError(f"codec gave {rows.dtype} {rows.shape}, not uint8 rows")
                    f.write(np.ascontiguousarray(rows).data)
                    written += len(rows)
                if written != n:
                    raise ValueError(f"codec gave {written} rows for {n} tokens")
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(file.path)
            raise
        with self._lock:
            self._sizes[file.path] = size = HEADER_BYTES + n * bpt
            self.bytes += size
        weakref.finalize(file, self.delete, file.path)
        return file

    def truncate(self, file: KVFile, n: int) -> None:
        """Keep only the first ``n`` rows of ``file`` (readers of those may run meanwhile)."""
        size = HEADER_BYTES + n * self.bytes_per_token
        os.truncate(file.path, size)  # NOTE: the header still says how many were written
        file.n_tokens = n
        with self._lock:
            self.bytes += size - self._sizes[file.path]
            self._sizes[file.path] = size

    def read(self, file: KVFile, first: int, out: np.ndarray) -> bool:
        """Fill ``out`` (uint8 rows, C-contiguous) with rows ``first…`` of ``file``.

        Returns False, marks the file bad and logs, if it is missing, its header is not
        the one written or it ends before those rows. The rows themselves carry no
        checksum: they are trusted like any page the kernel returns.
        """
        if file.bad:
            return False
        bpt, stop = self.bytes_per_token, first + len(out)
        try:
            with open(file.path, "rb", buffering=0) as f:
                magic, file_id, file_bpt, _ = _HEADER.unpack(f.read(_HEADER.size))
                if (magic, file_id, file_bpt) != (_MAGIC, file.id, bpt):
                    raise ValueError("header does not match the index")
                size = os.fstat(f.fileno()).st_size
                if stop > file.n_tokens or size < HEADER_BYTES + stop * bpt:
                    raise ValueError(f"{size} bytes, rows {first}…{stop} of {file.n_tokens}")
                f.seek(HEADER_BYTES + first * bpt)
                view, got = out.data.cast("B"), 0
                while got < len(view):
                    k = f.readinto(view[got:])
                    if not k:
                        raise EOFError("file ends early")
                    got += k
            return True
        except (OSError, ValueError, EOFError, struct.error) as exc:
            file.bad = True
            # NOTE: log the text only: a record holding `exc` would hold its traceback, this
            # frame and so `file`, which would keep the file on disk.
            reason = f"{type(exc).__name__}: {exc}"
            logger.warning("prefix.offload: %s is unreadable (%s): a miss", file.path, reason)
            return False

    def delete(self, path: Path) -> None:
        """Unlink ``path`` and stop counting it (idempotent: finalizers call it too)."""
        with contextlib.suppress(OSError):
            os.unlink(path)
        with self._lock:
            self.bytes -= self._sizes.pop(path, 0)

    def close(self) -> None:
        """Remove the run directory and release its lock."""
        shutil.rmtree(self.run_dir, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.unlink(lock_path(self.run_dir))
        os.close(self._run_lock)


def _claim_run_dir(directory: Path) -> tuple[Path, int]:
    """Make ``directory/kv-XXXX/`` with a held ``flock`` on ``kv-XXXX.lock``; remove dead runs.

    ``.claim`` serialises start-ups, so no one removes a run that is still taking its lock.
    Only runs are removed: a ``kv-*`` directory with a lock file beside it, and in it only
    ``*.kv`` files; anything else (a user's own ``kv-backups/``) stays.
    """
    directory.mkdir(parents=True, exist_ok=True)
    return claim_dir(directory, "kv-", directory / ".claim", _remove_dead_runs)


def _remove_dead_runs(directory: Path) -> None:
    for old in directory.glob("kv-*"):
        if old.is_dir() and unused(lock_path(old)):
            _remove_dead_run(old)


def _remove_dead_run(run_dir: Path) -> None:
    """Remove a dead run's ``*.kv`` files, then the directory and its lock if that emptied it."""
    for path in run_dir.glob("*.kv"):
        with contextlib.suppress(OSError):
            os.unlink(path)
    try:
        run_dir.rmdir()
    except OSError:
        return  # not empty: files that are not ours
    with contextlib.suppress(OSError):
        os.unlink(lock_path(run_dir))
