"""Embedder: the bundled all-MiniLM-L6-v2, normalised output, micro-batching."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import numpy as np
import pytest

from semantic.embedder import Embedder


def test_encode_shape_dtype_and_unit_norm(embedder: Embedder) -> None:
    vecs = embedder.encode(["How do I reset my password?", "What is the capital of France?"])
    assert vecs.shape == (2, 384) and embedder.dim == 384
    assert vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert embedder.encode([]).shape == (0, 384)


def test_fits_tells_texts_the_model_reads_whole(embedder: Embedder) -> None:
    assert embedder.max_tokens == 256
    assert embedder.fits("How do I reset my password?")
    assert embedder.fits("word " * 250) and not embedder.fits("word " * 260)
    assert not embedder.fits("x" * 30_000)  # too long to be worth tokenising
    # Hangul is split into jamo before WordPiece: 124 syllables are ~250 tokens
    korean = "서울의 인구는 얼마나 됩니까 " * 15
    assert len(korean) < 254 and not embedder.fits(korean)
    cut = "Tell me about the weather in Paris today please. " * 30
    a, b = embedder.encode([cut + "Answer in French.", cut + "Answer in Spanish."])
    assert float(a @ b) > 0.9999  # what fits() prevents: the difference is never read


def test_deterministic(embedder: Embedder) -> None:
    text = "Deterministic embeddings please, no cache involved: 8c1f"
    first = embedder.encode([text])
    embedder._cache.clear()
    np.testing.assert_allclose(embedder.encode([text]), first, atol=1e-6)


def test_paraphrase_closer_than_unrelated(embedder: Embedder) -> None:
    q, para, other = embedder.encode(
        [
            "How do I reset my password?",
            "How can I change my forgotten password?",
            "What is the best pizza topping?",
        ]
    )
    assert float(q @ para) > 0.6 > float(q @ other)


async def test_micro_batching_gathers_concurrent_callers(embedder: Embedder) -> None:
    texts = [f"Concurrent question number {i} about topic {i * 7 % 11}?" for i in range(32)]
    before = embedder.stats()
    vecs = await asyncio.gather(*(embedder.embed(t) for t in texts))
    after = embedder.stats()
    # All 32 callers queue in the same loop iteration: one micro-batch, split across the workers.
    assert after.encode_calls - before.encode_calls <= embedder.workers
    assert after.max_batch_seen >= 32 // embedder.workers
    assert after.texts_encoded - before.texts_encoded == 32
    # Each caller gets the vector of its own text.
    embedder._cache.clear()
    for text, vec in zip(texts, vecs, strict=True):
        np.testing.assert_allclose(vec, embedder.encode([text])[0], atol=1e-4)


async def test_embed_uses_lru_and_returns_read_only(embedder: Embedder) -> None:
    text = "Is this text cached after the first call?"
    first = await embedder.embed(text)
    calls = embedder.stats().encode_calls
    second = await embedder.embed(text)
    assert embedder.stats().encode_calls == calls
    np.testing.assert_array_equal(second, first)
    assert not first.flags.writeable and not second.flags.writeable
    many = await embedder.embed_many([text, "another one"])
    assert many.shape == (2, 384)


async def test_duplicate_texts_in_one_batch(embedder: Embedder) -> None:
    vecs = await asyncio.gather(*(embedder.embed("same text, many callers 42") for _ in range(8)))
    for v in vecs[1:]:
        np.testing.assert_array_equal(v, vecs[0])


def test_length_buckets_cover_in_order_and_bound_padding() -> None:
    from semantic._packed import length_runs
    from semantic.embedder import _MIN_BUCKET, _PAD_SLACK

    def _length_buckets(lengths: list[int]) -> list[tuple[int, int]]:
        return length_runs(lengths, _PAD_SLACK, _MIN_BUCKET)

    lengths = sorted([5, 6, 6, 7, 9, 12, 13, 14, 30, 31, 60, 61, 62])
    runs = _length_buckets(lengths)
    assert runs[0][0] == 0 and runs[-1][1] == len(lengths)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(runs))
    assert len(runs) > 1
    for start, stop in runs:
        part = lengths[start:stop]
        # a run is within slack, or it is no bigger than the minimum a run may hold
        assert len(part) <= _MIN_BUCKET or part[-1] * len(part) <= _PAD_SLACK * sum(part)
    assert _length_buckets([]) == [] and _length_buckets([4]) == [(0, 1)]


def test_bucketed_batch_equals_one_text_at_a_time(embedder: Embedder) -> None:
    texts = [
        "Why?",
        "How do I learn Python quickly and well enough to get a job as a developer this year?",
        "What is love?",
        "Which is the best laptop under 500 dollars for students who study engineering at a "
        "university and need to run simulation software every day?",
        "Is tea healthy?",
        "How can I improve my English writing skills for exams?",
        "Who won?",
        "What are the main differences between the economies of India and China since 1990?",
    ]
    embedder._cache.clear()
    forward = embedder._model.forward
    calls: list[int] = []

    def counting(features: dict[str, object]) -> dict[str, object]:
        calls.append(len(features["input_ids"]))  # type: ignore[arg-type]
        return forward(features)

    embedder._model.forward = counting  # type: ignore[method-assign]
    packed, embedder._packed = embedder._packed, None  # the padded path, as for other models
    try:
        batched = embedder.encode(texts)
    finally:
        del embedder._model.forward
        embedder._packed = packed
    assert len(calls) > 1 and sum(calls) == len(texts)  # split by length, every text once
    embedder._cache.clear()
    single = np.concatenate([embedder.encode([t]) for t in texts])
    np.testing.assert_allclose(batched, single, atol=1e-5)


_VARIED = [
    "",
    "Why?",
    "How do I learn Python quickly and well enough to get a job as a developer this year?",
    "Émigré café naïve résumé: ünïcode and emoji 🎉 in one question?",
    "What is love?",
    "What is love?",  # the same text twice in one batch
    " ".join(f"word{i}" for i in range(400)),  # past max_seq_length: truncated, as upstream
    "Which is the best laptop under 500 dollars for students who study engineering?",
]


def test_packed_forward_equals_sentence_transformers(embedder: Embedder) -> None:
    assert embedder._packed is not None  # the bundled all-MiniLM-L6-v2 is a BERT encoder
    embedder._cache.clear()

    def padded(features: dict[str, object]) -> dict[str, object]:
        raise AssertionError("the padded forward ran")

    embedder._model.forward = padded  # type: ignore[method-assign]
    try:
        ours = embedder.encode(_VARIED)
    finally:
        del embedder._model.forward
    embedder._cache.clear()
    reference = embedder._model.encode(_VARIED, normalize_embeddings=True, batch_size=3)
    np.testing.assert_allclose(ours, reference, atol=1e-5)
    np.testing.assert_allclose(ours[4], ours[5], atol=1e-6)


def test_unsupported_models_and_batches_are_not_packed(embedder: Embedder) -> None:
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Pooling

    from semantic._packed import PackedEncoder

    transformer = embedder._model[0]
    cls_pooled = SentenceTransformer(modules=[transformer, Pooling(384, pooling_mode="cls")])
    assert PackedEncoder.from_model(cls_pooled) is None
    mean_pooled = SentenceTransformer(modules=[transformer, Pooling(384, pooling_mode="mean")])
    assert PackedEncoder.from_model(mean_pooled) is not None
    # a left-padded batch is declined (the caller forwards it padded)
    assert embedder._packed is not None
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    ids = torch.tensor([[0, 101, 102], [101, 7592, 102]])
    with torch.inference_mode():
        assert embedder._packed({"input_ids": ids, "attention_mask": mask}) is None
        odd_types = {"input_ids": ids, "attention_mask": mask.flip(1), "token_type_ids": ids[:1]}
        assert embedder._packed(odd_types) is None  # a per-token tensor of another shape
        right = embedder._packed(
            {"input_ids": ids.roll(-1, dims=1) * mask.flip(1), "attention_mask": mask.flip(1)}
        )
    assert right is not None and right.shape == (2, 384)


async def test_a_free_worker_takes_what_waits_while_the_other_runs() -> None:
    import threading

    emb = Embedder(workers=2, cache_size=0)
    gate = threading.Event()
    try:
        held = asyncio.ensure_future(
            emb.embed_then("A first question, held in its worker", lambda v: gate.wait(30))
        )
        while emb.stats().encode_calls < 1:  # its forward is done; its ``then`` waits
            await asyncio.sleep(0.01)
        before = emb.stats()
        texts = [f"Question {i} asked while the first one is held?" for i in range(10)]
        vecs = await asyncio.wait_for(asyncio.gather(*(emb.embed(t) for t in texts)), 30)
        after = emb.stats()
        assert not held.done()
        # the free worker took all ten at once, without waiting for the held one
        assert after.encode_calls - before.encode_calls == 1 and after.max_batch_seen == 10
        np.testing.assert_allclose(np.stack(vecs), emb.encode(texts), atol=1e-6)
        gate.set()
        _, released = await asyncio.wait_for(held, 30)
        assert released is True
        emb.close()  # then a caller gets an error, not a wait forever
        with pytest.raises(RuntimeError):
            await asyncio.wait_for(emb.embed("asked after close"), 30)
    finally:
        gate.set()
        emb.close()


def test_left_padded_or_odd_batches_are_not_split(embedder: Embedder) -> None:
    import torch

    right = torch.tensor([[1, 1, 1, 1, 1, 1]] * 3 + [[1, 1, 0, 0, 0, 0]] * 3)  # [6, 6]
    left = right.flip(dims=[1])
    ids = torch.arange(36).reshape(6, 6)

    def buckets(features: dict[str, object]) -> list[list[int]]:
        return [rows for rows, _ in embedder._buckets(features, 6)]

    assert len(buckets({"input_ids": ids, "attention_mask": right, "modality": "text"})) == 2
    assert buckets({"input_ids": ids, "attention_mask": left}) == [list(range(6))]
    assert buckets({"input_ids": ids[:, :3], "attention_mask": right}) == [list(range(6))]
    assert buckets({"input_ids": ids, "attention_mask": right, "ids": list(range(6))}) == [
        list(range(6))
    ]


async def test_embed_then_runs_in_the_worker_with_each_callers_vector(embedder: Embedder) -> None:
    import threading

    texts = [f"Which river flows through city number {i}, and how long is it?" for i in range(12)]
    texts[5] = "x"  # one short text among long ones: dealt out and bucketed like the rest
    embedder._cache.clear()

    def probe(vec: np.ndarray) -> tuple[str, np.ndarray, bool]:
        return threading.current_thread().name, vec.copy(), vec.flags.writeable

    results = await asyncio.gather(*(embedder.embed_then(t, probe) for t in texts))
    singles = embedder.encode(texts)  # now from the LRU: the same vectors
    for (vec, (thread, seen, writeable)), single in zip(results, singles, strict=True):
        assert thread.startswith("embedder")  # not the event loop's thread
        np.testing.assert_array_equal(seen, vec)  # ``then`` got this caller's own vector
        np.testing.assert_allclose(vec, single, atol=1e-6)
        assert not writeable
    # an LRU hit runs ``then`` inline, on the caller's thread
    _, (thread, _, _) = await embedder.embed_then(texts[0], probe)
    assert thread == threading.current_thread().name


async def test_a_failing_then_fails_only_its_caller(embedder: Embedder) -> None:
    embedder._cache.clear()

    def boom(vec: np.ndarray) -> None:
        raise ValueError("search failed")

    texts = [f"Independent question {i} about gardening tools?" for i in range(8)]
    outcomes = await asyncio.gather(
        embedder.embed_then(texts[0], boom),
        *(embedder.embed_then(t, lambda v: float(v @ v)) for t in texts[1:]),
        return_exceptions=True,
    )
    assert isinstance(outcomes[0], ValueError)
    for outcome in outcomes[1:]:
        assert not isinstance(outcome, BaseException)
        vec, norm = outcome
        assert abs(norm - 1.0) < 1e-5 and vec.shape == (embedder.dim,)


async def test_a_caller_past_its_max_wait_is_refused_and_costs_no_encoding(
    embedder: Embedder,
) -> None:
    import uuid

    from semantic.embedder import EmbedderBusy

    tag = uuid.uuid4().hex  # texts the LRU has never seen
    texts = [f"Question {i} about the weather in town {tag}" for i in range(160)]
    before = embedder.stats()
    backlog = [asyncio.ensure_future(embedder.embed(t)) for t in texts]
    await asyncio.sleep(0)  # queued: two batches running, the rest waiting behind them
    with pytest.raises(EmbedderBusy):  # cannot start within 1 ms behind ~30 queued texts
        await embedder.embed(f"A late question {tag}", max_wait=0.001)
    with pytest.raises(EmbedderBusy):  # refused at once: the queue's oldest text waited longer
        await embedder.embed_then(f"Another late one {tag}", lambda v: v, max_wait=0.001)
    with pytest.raises(EmbedderBusy):  # a text refused: the other leaves the queue too
        await embedder.embed_many([f"A late pair {tag}", f"Its other half {tag}"], max_wait=0.001)
    vecs = await asyncio.gather(*backlog)
    np.testing.assert_allclose(np.stack(vecs), embedder.encode(texts), atol=1e-5)
    after = embedder.stats()
    assert after.refused - before.refused >= 3
    assert after.texts_encoded - before.texts_encoded == len(texts)  # the late ones never ran
    assert after.waits - before.waits == len(texts) and after.wait_seconds > before.wait_seconds
    assert after.queued == 0


async def test_a_caller_with_max_wait_that_is_cancelled_leaves_the_queue(
    embedder: Embedder,
) -> None:
    """A lookup whose client went away (its task cancelled while it waits for a worker) is
    neither encoded nor left in the queue, where it would age it and get others refused."""
    import uuid

    tag = uuid.uuid4().hex  # texts the LRU has never seen
    texts = [f"Question {i} about the harbour of town {tag}" for i in range(160)]
    before = embedder.stats()
    backlog = [asyncio.ensure_future(embedder.embed(t)) for t in texts]
    await asyncio.sleep(0)  # queued: two batches running, the rest waiting behind them
    gone = asyncio.ensure_future(embedder.embed(f"A lookup whose client left {tag}", max_wait=30))
    await asyncio.sleep(0)
    assert embedder.stats().queued > 0
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    await asyncio.gather(*backlog)
    after = embedder.stats()
    assert after.queued == 0
    assert after.texts_encoded - before.texts_encoded == len(texts)  # the cancelled one never ran


async def test_an_audits_texts_never_join_a_requests_batch_and_wait_behind_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The audit's answers (embed_background) queue apart: a request's text queued after two
    of them is encoded first, in a batch of its own; they then run one at a time, each alone,
    and a request's text that comes while the first runs goes before the second."""
    import threading

    emb = Embedder(workers=1, cache_size=0)
    loop = asyncio.get_running_loop()
    answers = [f"Answer {i}: open Settings, then Security, then Reset password." for i in (1, 2)]
    question, late = "How do I reset my password?", "Where is the reset link?"
    batches: list[list[str]] = []
    arrived = threading.Event()
    encode_then = emb._encode_then
    tasks: list[asyncio.Task[np.ndarray]] = []

    def ask_late() -> None:  # on the loop: its text is queued before ``arrived`` is set
        tasks.append(loop.create_task(emb.embed(late)))
        loop.call_soon(arrived.set)

    def recorded(texts: list[str], calls: list[Any]) -> Any:
        batches.append(list(texts))
        if texts == answers[:1]:  # a request comes while the first answer is encoded
            loop.call_soon_threadsafe(ask_late)
            assert arrived.wait(30)
        return encode_then(texts, calls)

    monkeypatch.setattr(emb, "_encode_then", recorded)
    try:
        audits = [asyncio.ensure_future(emb.embed_background(a)) for a in answers]
        await asyncio.sleep(0)  # both answers are queued before the request's question
        before = emb.stats()
        vec = await emb.embed(question)  # (awaited here: it joins the queue at once)
        vecs = await asyncio.wait_for(asyncio.gather(*audits), 30)
        vecs += await asyncio.gather(*tasks)  # (the late request's: made during the first)
        after = emb.stats()
    finally:
        emb.close()
    assert batches == [[question], answers[:1], [late], answers[1:]]
    np.testing.assert_allclose(np.stack([vec, *vecs]), emb.encode([question, *answers, late]),
                               atol=1e-5)  # fmt: skip
    assert after.waits - before.waits == 2  # the requests' texts; the answers wait by design
