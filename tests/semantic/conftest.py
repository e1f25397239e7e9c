"""The bundled embedding model, loaded once per test run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from semantic.embedder import Embedder


@pytest.fixture(scope="session")
def embedder() -> Iterator[Embedder]:
    emb = Embedder()
    yield emb
    emb.close()
