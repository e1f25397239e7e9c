"""VectorIndex: flat and HNSW agree, scopes are isolated, removal, persistence."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from semantic.index import Hit, IndexFileError, VectorIndex

DIM = 32


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.standard_normal((n, DIM)).astype(np.float32)  # [n, dim]
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def near(v: np.ndarray, rng: np.random.Generator, noise: float = 0.05) -> np.ndarray:
    q = v + noise * rng.standard_normal(v.shape).astype(np.float32)
    return q / np.linalg.norm(q)


def test_flat_and_hnsw_agree() -> None:
    rng = np.random.default_rng(0)
    vecs = unit(rng, 3000)
    flat = VectorIndex(DIM, hnsw_threshold=10**6)
    hnsw = VectorIndex(DIM, hnsw_threshold=100, background=False)
    for i, v in enumerate(vecs):
        flat.add(i, "s", v)
        hnsw.add(i, "s", v)
    assert flat.stats().hnsw_scopes == 0 and hnsw.stats().hnsw_scopes == 1
    queries = [near(vecs[i], rng) for i in rng.choice(3000, 200, replace=False)]
    agree = sum(flat.search("s", q, 1)[0].id == hnsw.search("s", q, 1)[0].id for q in queries)
    assert agree >= 196
    top = flat.search("s", queries[0], 5)
    assert len(top) == 5 and [h.similarity for h in top] == sorted(
        (h.similarity for h in top), reverse=True
    )
    hit = flat.search("s", vecs[7], 1)[0]
    assert hit.id == 7 and hit.similarity == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("threshold", [10**6, 2])
def test_scope_restriction(threshold: int) -> None:
    rng = np.random.default_rng(1)
    index = VectorIndex(DIM, hnsw_threshold=threshold, background=False)
    a, b = unit(rng, 2)
    for i, v in enumerate(unit(rng, 20)):
        index.add(100 + i, b"scope-a", v)
    index.add(1, b"scope-a", a)
    index.add(2, b"scope-b", b)
    index.add(3, "scope-b", a)  # closest to `a`, but in another scope (str == utf-8 bytes)
    hits = index.search(b"scope-a", a, 30)
    assert {h.id for h in hits} == {1, *range(100, 120)}
    (hit,) = index.search("scope-b", a, 1)
    assert isinstance(hit, Hit) and hit.id == 3 and hit.similarity == pytest.approx(1.0, abs=1e-5)
    assert index.search("no-such-scope", a, 1) == []
    assert sorted(index.scopes()) == [b"scope-a", b"scope-b"]
    assert sorted(index.remove_scope("scope-b")) == [2, 3] and index.scopes() == [b"scope-a"]
    assert 3 not in index and index.search("scope-b", a, 1) == []


@pytest.mark.parametrize("threshold", [10**6, 50])
def test_remove(threshold: int) -> None:
    rng = np.random.default_rng(2)
    index = VectorIndex(DIM, hnsw_threshold=threshold, compact_ratio=0.3, background=False)
    vecs = unit(rng, 200)
    for i, v in enumerate(vecs):
        index.add(i, "s", v)
    for i in range(0, 200, 2):
        assert index.remove(i)
    assert not index.remove(0) and len(index) == 100 and 0 not in index and 1 in index
    for i in range(0, 200, 2):
        assert all(h.id % 2 == 1 for h in index.search("s", vecs[i], 3))
    for i in range(1, 200, 2):
        assert index.search("s", vecs[i], 1)[0].id == i
    for i in range(1, 200, 2):
        index.remove(i)
    assert len(index) == 0 and index.search("s", vecs[1], 1) == []
    assert index.stats().scopes == 0


def test_hnsw_tombstones_then_compaction() -> None:
    rng = np.random.default_rng(3)
    index = VectorIndex(DIM, hnsw_threshold=100, compact_ratio=0.25, background=False)
    vecs = unit(rng, 400)
    for i, v in enumerate(vecs):
        index.add(i, "s", v)
    for i in range(50):
        index.remove(i)
    assert index.stats().tombstones == 50  # below the ratio: still tombstones
    assert all(h.id >= 50 for h in index.search("s", vecs[3], 10))
    for i in range(50, 120):
        index.remove(i)
    assert index.stats().tombstones < 50  # compacted
    assert index.search("s", vecs[300], 1)[0].id == 300


def test_replace_existing_id_moves_it() -> None:
    rng = np.random.default_rng(4)
    a, b = unit(rng, 2)
    index = VectorIndex(DIM)
    index.add(5, "x", a)
    index.add(5, "y", b)
    assert len(index) == 1 and index.search("x", a, 1) == []
    assert index.search("y", b, 1)[0].id == 5


@pytest.mark.parametrize("threshold", [1000, 16])
def test_adding_the_same_vector_again_changes_nothing(threshold: int) -> None:
    rng = np.random.default_rng(8)
    vecs = unit(rng, 40)
    index = VectorIndex(DIM, hnsw_threshold=threshold, background=False)
    for i, v in enumerate(vecs):
        index.add(i, "s", v)
    for i, v in enumerate(vecs):  # e.g. a Redis replica's own writes echoed back
        index.add(i, "s", v)
    assert index.stats().tombstones == 0  # HNSW used to tombstone every one of them
    assert len(index) == 40 and index.search("s", vecs[7], 1)[0].id == 7
    index.add(7, "s", vecs[8])  # another vector under the same id is still a replace
    assert index.search("s", vecs[8], 2)[0].similarity == pytest.approx(1.0, abs=1e-5)
    assert {h.id for h in index.search("s", vecs[8], 2)} == {7, 8}


def test_background_switch_to_hnsw_replays_changes() -> None:
    rng = np.random.default_rng(5)
    vecs = unit(rng, 3000)
    index = VectorIndex(DIM, hnsw_threshold=2000)
    for i in range(2100):
        index.add(i, "s", vecs[i])  # the build starts at 2000, on a thread
    for i in range(2100, 3000):
        index.add(i, "s", vecs[i])
    for i in range(0, 300):
        index.remove(i)
    index.wait()
    assert index.stats().hnsw_scopes == 1 and len(index) == 2700
    for i in (1500, 2050, 2999):  # added before, during and after the build
        assert index.search("s", vecs[i], 1)[0].id == i
    for i in (0, 5, 299):  # removed during the build: never returned
        assert index.search("s", vecs[i], 1)[0].id >= 300


@pytest.mark.parametrize("threshold", [10**6, 50])
def test_save_load_roundtrip(tmp_path: Path, threshold: int) -> None:
    rng = np.random.default_rng(6)
    vecs = unit(rng, 300)
    index = VectorIndex(DIM, hnsw_threshold=threshold, background=False)
    for i, v in enumerate(vecs):
        index.add(i, f"scope-{i % 3}", v)
    index.remove(3)
    path = tmp_path / "index.npz"
    index.save(path)
    loaded = VectorIndex.load(path, hnsw_threshold=threshold, background=False)
    assert len(loaded) == len(index) == 299
    assert loaded.stats().hnsw_scopes == index.stats().hnsw_scopes
    for i in (0, 1, 2, 3, 150, 299):
        assert loaded.search(f"scope-{i % 3}", vecs[i], 2) == index.search(
            f"scope-{i % 3}", vecs[i], 2
        )
    loaded.add(1000, "scope-0", vecs[3])
    assert loaded.search("scope-0", vecs[3], 1)[0].id == 1000


def test_a_save_that_fails_leaves_no_part_file_and_the_index_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk: the half-written ``.tmp`` stayed beside the index (a review's tmpfs)."""
    index = VectorIndex(DIM, background=False)
    index.add(1, "s", unit(np.random.default_rng(7), 1)[0])
    path = tmp_path / "index.npz"
    index.save(path)
    before = path.read_bytes()

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", full)
    with pytest.raises(OSError, match="No space left"):
        index.save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.npz"]
    assert path.read_bytes() == before


def test_load_missing_or_corrupt_raises(tmp_path: Path) -> None:
    with pytest.raises(IndexFileError):
        VectorIndex.load(tmp_path / "missing.npz")
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not an index")
    with pytest.raises(IndexFileError):
        VectorIndex.load(bad)


def test_rebuild_roundtrip() -> None:
    rng = np.random.default_rng(7)
    vecs = unit(rng, 500)
    items = [(i, f"t{i % 2}", v) for i, v in enumerate(vecs)]
    index = VectorIndex(DIM, hnsw_threshold=200)
    index.add(99999, "stale", vecs[0])
    index.rebuild(items)
    assert len(index) == 500 and 99999 not in index
    assert index.stats().hnsw_scopes == 2  # built inline: 250 >= 200 in each scope
    for i in (0, 1, 250, 499):
        assert index.search(f"t{i % 2}", vecs[i], 1)[0].id == i


def test_wrong_dimension_rejected() -> None:
    index = VectorIndex(DIM)
    with pytest.raises(ValueError):
        index.add(1, "s", np.ones(DIM + 1, dtype=np.float32))


def test_concurrent_add_search_remove() -> None:
    rng = np.random.default_rng(8)
    vecs = unit(rng, 1200)
    index = VectorIndex(DIM, hnsw_threshold=300)
    errors: list[BaseException] = []

    def writer(lo: int) -> None:
        try:
            for i in range(lo, lo + 400):
                index.add(i, "s", vecs[i])
                if i % 3 == 0:
                    index.remove(i)
        except BaseException as exc:
            errors.append(exc)

    def reader() -> None:
        try:
            for i in range(400):
                index.search("s", vecs[i], 3)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(lo,)) for lo in (0, 400, 800)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    index.wait()
    assert not errors
    assert len(index) == 800
    assert all(h.id % 3 != 0 for h in index.search("s", vecs[3], 5))


def test_numpy_blas_runs_on_one_thread() -> None:
    import scipy.linalg  # noqa: F401  (loads scipy's own OpenBLAS, which must not matter)
    from threadpoolctl import threadpool_info

    from semantic.index import _is_numpy_blas

    VectorIndex(dim=4)
    blas = [lib for lib in threadpool_info() if _is_numpy_blas(lib["user_api"], lib["filepath"])]
    assert len(blas) == 1 and blas[0]["num_threads"] == 1


def test_memory_follows_the_entries_of_each_scope() -> None:
    """One entry per scope is the common case (a conversation): it costs one row, not 16."""
    rng = np.random.default_rng(9)
    index = VectorIndex(DIM, hnsw_threshold=10**6)
    vecs = unit(rng, 1000)
    for i, v in enumerate(vecs):
        index.add(i, f"conversation {i}", v)
    parts = index._parts.values()
    assert sum(p.vecs.nbytes for p in parts) == 1000 * DIM * 4
    # a scope that grew and then shrank (LRU, expiry) gives its rows back
    for i, v in enumerate(vecs):
        index.add(10_000 + i, "busy", v)
    for i in range(999):
        index.remove(10_000 + i)
    busy = index._parts[next(k for k, p in index._parts.items() if 10_999 in p.row)]
    assert len(busy.ids) <= 8 and busy.vecs.shape[0] == len(busy.ids)
    assert index.search("busy", vecs[999], 1)[0].id == 10_999  # and still finds what is left
    assert all(index.search(f"conversation {i}", vecs[i], 1)[0].id == i for i in range(0, 1000, 97))
