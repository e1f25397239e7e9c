"""Working directories that live while their process does: ``<parent>/<prefix>XXXX/`` with a
``flock`` held on ``<prefix>XXXX.lock`` beside it; one whose lock nobody holds belongs to a
process that died (or was left running by a shutdown that did not wait for it) and is removed
by the next claim. Used by the disk tier's run directories, the bundled model's conversion and
the semantic cache's ONNX exports.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["claim_dir", "lock_path", "unused"]


def claim_dir(
    parent: Path, prefix: str, claim: Path, remove_dead: Callable[[Path], None]
) -> tuple[Path, int]:
    """A new directory ``parent/<prefix>XXXX/`` and the fd of its held lock (close it to let go).

    ``remove_dead(parent)`` runs first, while ``claim`` (a file, made if missing, or a
    directory) is locked: that serialises claims, so no one removes a directory whose lock is
    still being taken.
    """
    flags = os.O_RDONLY if claim.is_dir() else os.O_RDWR | os.O_CREAT
    held = os.open(claim, flags, 0o600)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        remove_dead(parent)
        directory = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        lock = os.open(lock_path(directory), os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return directory, lock
    finally:
        os.close(held)


def lock_path(directory: Path) -> Path:
    """The lock file beside ``directory``."""
    return directory.with_name(f"{directory.name}.lock")


def unused(lock: Path) -> bool:
    """Whether the lock file exists and no live process holds it (no lock file: not ours)."""
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # also releases the lock if we took it
