"""Fixtures for the local model: the bundled SmolLM2 (loaded once) and a tiny random Llama.

The bundled model is converted from its GGUF once into a cache directory outside the
repository, ``${XDG_CACHE_HOME:-~/.cache}/cachegate``, so a CI run (and every later local
run) pays the ~20 s de-quantisation only once.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from localmodel import Engine, EngineConfig
from localmodel.disk import BreakEven
from localmodel.loader import LoadedModel, load
from tests.conftest import CACHE_DIR


@contextlib.contextmanager
def _test_torch_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(int(os.environ.get("CACHEGATE_TEST_TORCH_THREADS", "1")))
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="package", autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Run these tests on one torch thread, then restore the setting.

    On a shared 2-core runner, two OpenMP threads that keep waiting for each other made a
    forward pass ~6x slower than one thread (measured); one thread is also deterministic.
    """
    with _test_torch_threads():
        yield


@pytest.fixture(scope="session")
def bundled() -> LoadedModel:
    """SmolLM2-135M-Instruct on CPU in float32 (converted on first use, then < 1 s), loaded
    on the tests' torch threads: ``weights: auto`` picks the native kernel on one thread.

    NOTE: pytest sets this session fixture up before the package's ``one_torch_thread``, so
    it sets the threads itself: loaded on torch's default (2 here) it got oneDNN instead,
    and every test of the bundled model ran without the default kernel when its file ran first.
    """
    with _test_torch_threads():
        return load(EngineConfig(data_dir=CACHE_DIR, device="cpu", dtype="float32"))


@pytest.fixture(scope="session")
def tokenizer(bundled: LoadedModel) -> Any:
    return bundled.tokenizer


@pytest.fixture(scope="session")
def tiny_model(tokenizer: Any) -> Any:
    """A 2-layer random Llama with the bundled vocabulary: plumbing tests in milliseconds."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


MakeEngine = Callable[..., Engine]


@pytest.fixture
def make_engine(bundled: LoadedModel) -> Iterator[MakeEngine]:
    """``make_engine(max_bytes=…, tiny=…, break_even=…, **config)``: a fresh engine and cache.

    ``max_bytes`` is the memory tree's budget; engines with a disk tier are closed (their
    writer stopped, their files removed) after the test.
    """
    engines: list[Engine] = []

    def make(
        *,
        max_bytes: int = 256 * 2**20,
        tiny: Any = None,
        break_even: BreakEven | None = None,
        **config: Any,
    ) -> Engine:
        model = bundled.model if tiny is None else tiny
        cfg = EngineConfig(data_dir=CACHE_DIR, device="cpu", prefix_cache_bytes=max_bytes, **config)
        engine = Engine(model, bundled.tokenizer, cfg, break_even=break_even)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()


@pytest.fixture
def engine(make_engine: MakeEngine) -> Engine:
    """The bundled model with an empty 256 MiB prefix cache."""
    return make_engine()


@pytest.fixture
def tiny_engine(make_engine: MakeEngine, tiny_model: Any) -> Engine:
    return make_engine(tiny=tiny_model)
