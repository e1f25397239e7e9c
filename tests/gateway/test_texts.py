"""The secret that hidden texts' digests are keyed with (gateway.texts): made once per data
directory, kept across starts, and a data directory that cannot keep it stops nothing."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import pytest

from gateway.texts import SALT_FILE, Texts, load_salt


def test_a_data_dir_keeps_its_secret_and_another_has_its_own(tmp_path: Path) -> None:
    salt = load_salt(tmp_path / "a")
    assert len(salt) == 32 and load_salt(tmp_path / "a") == salt
    assert load_salt(tmp_path / "b") != salt
    assert [p.name for p in (tmp_path / "a").iterdir()] == [SALT_FILE]  # (nothing left aside)
    text = "hi"
    hidden, other = Texts(False, salt).describe(text), Texts(False, load_salt(tmp_path / "b"))
    assert hidden == Texts(False, load_salt(tmp_path / "a")).describe(text)
    assert hidden != other.describe(text) and hidden.endswith(" (2 chars)")
    assert hashlib.sha256(b"hi").hexdigest()[:12] not in hidden
    assert Texts(True, salt).describe(text) == text


def test_a_damaged_secret_is_replaced_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / SALT_FILE).write_text("not hex\n")
    salt = load_salt(tmp_path)
    assert len(salt) == 32 and load_salt(tmp_path) == salt
    assert (tmp_path / SALT_FILE).read_text() == salt.hex() + "\n"
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "damaged" in warned[0] and "not hex" not in warned[0]


def test_a_data_dir_that_cannot_keep_it_gets_a_secret_of_the_process(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "file").write_text("")  # (a data_dir that is no directory: no file goes in)
    first, second = load_salt(tmp_path / "file"), load_salt(tmp_path / "file")
    assert len(first) == 32 and first != second  # (never unkeyed, never a fixed key)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 2 and "change at each start" in warned[0]
    assert first.hex() not in caplog.text
