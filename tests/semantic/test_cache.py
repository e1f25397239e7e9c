"""ResponseCache in-process: the index never compares vectors of different embedding models."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from semantic.cache import CacheSettings, ResponseCache, SemanticSettings
from semantic.embedder import Embedder
from semantic.keys import chat_key, entry_id
from semantic.store import DiskStore, Entry


def ask(question: str) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": question}]}


async def test_vectors_of_another_embedding_model_are_never_compared(tmp_path: Path) -> None:
    store = DiskStore(tmp_path, max_entries=100)
    cache = ResponseCache(store, CacheSettings(), SemanticSettings(guard=False))
    await cache.start()
    assert await cache.lookup(chat_key("t", "", "m", ask("warm up"))) is not None
    assert cache.embedder is not None
    stored = chat_key("t", "", "m", ask("How do I reset my password?"))
    vector = cache.embedder.encode([stored.question])[0]
    # an entry written while another (same-dimension) model was configured
    foreign = Entry(id=entry_id(stored.exact), exact=stored.exact, scope=stored.scope, question=stored.question,
                    model="m", tenant="t", namespace="", response={"choices": []}, created=time.time(),
                    expires=None, vector=vector.astype(np.float32).tobytes(), vector_model="another-model")  # fmt: skip
    await store.put(foreign)
    await cache.on_reset()
    paraphrase = chat_key("t", "", "m", ask("How can I reset my password?"))
    assert (await cache.lookup(paraphrase)).kind == "miss"
    assert (await cache.lookup(stored)).kind == "exact"  # exact hits do not depend on vectors
    # the same entry made by the configured model is a semantic hit
    await cache.store(stored, {"choices": []}, model="m", tenant="t", namespace="")
    assert (await cache.lookup(paraphrase)).kind == "semantic"
    await cache.close()


async def test_an_answer_stored_while_the_model_loads_is_found_by_meaning(
    tmp_path: Path, embedder: Embedder
) -> None:
    cache = ResponseCache(
        DiskStore(tmp_path, max_entries=100), CacheSettings(), SemanticSettings(guard=False)
    )
    await cache.start()  # the embedder loads in the background...
    stored = chat_key("t", "", "m", ask("How do I reset my password?"))
    vector = embedder.encode([stored.question])[0]  # ...while a vector made elsewhere is stored
    await cache.store(stored, {"choices": []}, model="m", tenant="t", namespace="", vector=vector)
    paraphrase = chat_key("t", "", "m", ask("How can I reset my password?"))
    assert (await cache.lookup(paraphrase)).kind == "semantic"
    await cache.close()
