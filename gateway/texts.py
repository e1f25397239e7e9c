"""How the admin views show users' texts (questions and answers): as they are with
``admin.show_text: true``, otherwise as a keyed digest and a length::

    >>> texts = Texts(show=False, salt=load_salt(Path("data")))
    >>> texts.describe("What is the capital of Peru?")     # 'hmac:1a2b3c4d5e6f (28 chars)'

NOTE: the digest was an unsalted SHA-256 prefix: anyone who read a listing (an operator with
the admin key, a screenshot of the dashboard) found a short question by hashing a list of
common ones. It is keyed with a secret of the data directory (``SALT_FILE``, 256 random bits,
made at the first start, readable by its owner only, never logged nor shown), so the same text
shows the same digest across the views and restarts of a gateway on that ``data_dir`` (two
entries, a new question and the stored one it matched, compare), and nothing outside it can
compute one. Replicas sharing a Redis cache each have their own unless given the same file.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import re
import secrets
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SALT_FILE", "Texts", "load_salt"]

log = logging.getLogger("cachegate")

#: The secret of a data directory's digests, in it: 64 hex digits.
SALT_FILE = "text-digest.key"
_SALT = re.compile(rb"[0-9a-f]{64}\n?")


@dataclass(frozen=True, slots=True)
class Texts:
    """Whether texts are shown (``admin.show_text``), and the secret of their digests
    (a process's own until ``load_salt`` reads the data directory's)."""

    show: bool
    salt: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)

    def describe(self, text: str) -> str:
        """``text`` when texts are shown, else its digest and length (``hmac:1a2b… (42 chars)``)."""
        if self.show:
            return text
        data = text.encode("utf-8", "surrogatepass")  # (a lone surrogate that JSON escaped)
        return f"hmac:{hmac.new(self.salt, data, 'sha256').hexdigest()[:12]} ({len(text)} chars)"


def load_salt(data_dir: Path) -> bytes:
    """The secret in ``data_dir`` (``SALT_FILE``), made there at the first start.

    NOTE: a data directory that cannot hold it (read-only, no hard links: see ``_make``) does
    not stop the gateway: this process's own secret is used, and its digests change with it.
    """
    path = data_dir / SALT_FILE
    try:
        return _read_or_make(path)
    except (OSError, ValueError) as exc:
        log.warning("cannot keep the secret of hidden texts' digests in %s (%s): their digests "
                    "change at each start", path, exc)  # fmt: skip
        return secrets.token_bytes(32)


def _read_or_make(path: Path) -> bytes:
    with contextlib.suppress(FileNotFoundError):
        data = path.read_bytes()
        if _SALT.fullmatch(data):
            return bytes.fromhex(data.decode())
        log.warning("%s is damaged: a new secret replaces it (hidden texts' digests change)", path)
        path.unlink()
    _make(path)
    return bytes.fromhex(path.read_bytes().decode())  # (ours, or another process's made first)


def _make(path: Path) -> None:
    """Write a new secret to ``path`` unless one is there. NOTE: written aside, then linked:
    two processes starting on one data directory at once keep one secret (the first linked),
    and neither reads a file half written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, aside = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # (mode 0600)
    try:
        with os.fdopen(fd, "w") as file:
            file.write(secrets.token_hex(32) + "\n")
            file.flush()
            os.fsync(file.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(aside, path)
    finally:
        os.unlink(aside)
