"""Embedder backends: ONNX Runtime exports (float32, int8, int8 blocks) agree with torch; broken
exports.

Each test that exports writes into its own directory (an fp32 export takes a few seconds; the
int8 one is made once per module).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from semantic._onnx import export_name
from semantic.embedder import AGREEMENT, Embedder, default_model_path

_TEXTS = [
    "How do I reset my password?",
    "What is the capital of France?",
    "Why do cats purr when they are happy, and do they also purr when they are in pain?",
    "tax",
    "Quelle est la capitale de l'Australie ?",
    "How many litres of water should an adult drink every day in hot weather, in summer?",
]


@pytest.fixture(scope="module")
def int8_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Embedder]]:
    where = tmp_path_factory.mktemp("exports")
    emb = Embedder(backend="onnx-int8", export_dir=where, cache_size=0)
    yield where, emb
    emb.close()


def _reference(embedder: Embedder) -> np.ndarray:
    embedder._cache.clear()
    return embedder.encode(_TEXTS)


def test_onnx_export_gives_torchs_vectors(embedder: Embedder, tmp_path: Path) -> None:
    emb = Embedder(backend="onnx", export_dir=tmp_path, cache_size=0)
    try:
        assert emb.backend == "onnx" and emb.fallback == ""
        files = list(tmp_path.glob("embedder-*/model.onnx"))
        assert len(files) == 1 and files[0].parent.name == export_name(default_model_path())
        ref = _reference(embedder)
        batch = emb.encode(_TEXTS)  # [6, 384], in length buckets
        np.testing.assert_allclose(batch, ref, atol=1e-4)
        alone = np.concatenate([emb.encode([t]) for t in _TEXTS])
        np.testing.assert_allclose(alone, ref, atol=1e-4)
        np.testing.assert_allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)
        assert emb.stats().texts_encoded == 2 * len(_TEXTS)  # the load-time probes not counted
    finally:
        emb.close()


def test_int8_export_is_used_and_stays_close(
    embedder: Embedder, int8_dir: tuple[Path, Embedder]
) -> None:
    where, emb = int8_dir
    assert emb.backend == "onnx-int8"
    assert len(list(where.glob("embedder-*/model.int8.onnx"))) == 1
    ref = _reference(embedder)
    vecs = emb.encode(_TEXTS)
    cosine = np.sum(vecs * ref, axis=1)  # [6]
    # stated tolerance: every text within AGREEMENT["onnx-int8"] (0.97) of torch's vector ...
    assert float(cosine.min()) >= AGREEMENT["onnx-int8"]
    # ... and it is really the int8 graph, not float32 (which agrees to 1e-6)
    assert float(cosine.min()) < 0.99999
    # a paraphrase is still nearer than an unrelated question
    a, b, c = emb.encode(["How do I reset my password?", "How can I reset my password?", "tax"])
    assert float(a @ b) > 0.8 > float(a @ c)


def test_int8_block_export_is_nearer_float32_and_keeps_rows_apart(
    embedder: Embedder, int8_dir: tuple[Path, Embedder], tmp_path: Path
) -> None:
    """`onnx-int8-block`: its own file of MatMulNBits nodes beside the float32 export, vectors
    within AGREEMENT of torch's and nearer them than per-channel int8's, and a text's vector
    (almost) independent of its batch-mates."""
    import onnx

    emb = Embedder(backend="onnx-int8-block", export_dir=tmp_path, cache_size=0)
    try:
        assert emb.backend == "onnx-int8-block" and emb.fallback == ""
        graph = next(tmp_path.glob("embedder-*/model.int8-block.onnx"))
        assert (graph.parent / "model.onnx").exists()
        model = onnx.load(str(graph)).graph
        weights = {init.name for init in model.initializer}
        assert sum(node.op_type == "MatMulNBits" for node in model.node) == 36  # 6 layers x 6
        # every weight product is quantised: what is left of MatMul is attention's (QK^T, PV)
        assert not [n.name for n in model.node if n.op_type == "MatMul" and weights & {*n.input}]
        ref = _reference(embedder)
        vecs = emb.encode(_TEXTS)  # [6, 384]
        cosine = np.sum(vecs * ref, axis=1)  # [6]
        assert float(cosine.min()) >= AGREEMENT["onnx-int8-block"]
        assert float(cosine.min()) < 0.99999  # really the quantised graph
        per_channel = np.sum(int8_dir[1].encode(_TEXTS) * ref, axis=1)
        assert float(np.mean(1 - cosine)) < float(np.mean(1 - per_channel)) / 3
        alone = np.concatenate([emb.encode([t]) for t in _TEXTS])
        assert float(np.min(np.sum(alone * vecs, axis=1))) >= 0.999
    finally:
        emb.close()


def test_a_corrupt_export_is_exported_again(tmp_path: Path) -> None:
    first = Embedder(backend="onnx", export_dir=tmp_path, cache_size=0)
    first.close()
    path = next(tmp_path.glob("embedder-*/model.onnx"))
    path.write_bytes(b"not an onnx file")
    again = Embedder(backend="onnx", export_dir=tmp_path, cache_size=0)
    try:
        assert again.backend == "onnx" and again.fallback == ""
        assert path.stat().st_size > 1_000_000  # a real graph again
    finally:
        again.close()


def test_an_export_that_disagrees_is_redone(
    embedder: Embedder, int8_dir: tuple[Path, Embedder], tmp_path: Path
) -> None:
    """A loadable graph with other weights (here: the int8 one) fails the check at load."""
    where, _ = int8_dir
    int8 = next(where.glob("embedder-*/model.int8.onnx"))
    target = tmp_path / int8.parent.name / "model.onnx"
    target.parent.mkdir()
    target.write_bytes(int8.read_bytes())
    emb = Embedder(backend="onnx", export_dir=tmp_path, cache_size=0)
    try:
        assert emb.backend == "onnx"
        np.testing.assert_allclose(emb.encode(_TEXTS), _reference(embedder), atol=1e-4)
        assert target.stat().st_size > 2 * int8.stat().st_size  # float32 again
    finally:
        emb.close()


def test_a_failed_export_falls_back_to_torch_and_says_why(
    embedder: Embedder, tmp_path: Path
) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("an export directory cannot be made under a file")
    emb = Embedder(backend="onnx", export_dir=blocked, cache_size=0)
    try:
        assert emb.backend == "torch"
        assert "onnx could not be loaded" in emb.fallback
        np.testing.assert_allclose(emb.encode(_TEXTS), _reference(embedder), atol=1e-5)
    finally:
        emb.close()


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="embedder backend must be one of"):
        Embedder(backend="tensorrt")
