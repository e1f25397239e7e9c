"""localmodel — tier 3: KV-cached inference of the bundled (or any HF causal) model.

The gateway drives it through a handful of names::

    from localmodel import AsyncEngine, Engine, EngineConfig, SamplingParams

    engine = Engine.load(EngineConfig(data_dir=data_dir))      # once, at start-up
    async with AsyncEngine(engine) as local:
        tokens = engine.encode_chat(messages)                  # or engine.encode_text(prompt)
        request = engine.prepare(tokens, SamplingParams(...), namespace=f"{model}|{tenant}")
        async for event in local.stream(request): ...          # TextDelta / ChoiceFinished / Finished

Errors a client caused (→ HTTP 400) derive from ``ValueError``: ``InvalidRequestError``,
``ContextWindowExceeded``, ``InvalidPromptError`` and ``SamplingParams`` validation.
"""

from localmodel.config import BUNDLED, EngineConfig
from localmodel.engine import (
    Choice,
    ChoiceFinished,
    Completion,
    ContextWindowExceeded,
    Engine,
    EngineStats,
    Event,
    Finished,
    FinishReason,
    GenerationRequest,
    InvalidRequestError,
    TextDelta,
    Usage,
)
from localmodel.kv import KVLayout, RequestCache, TensorKV, UnsupportedModelError
from localmodel.loader import ModelLoadError
from localmodel.prompts import InvalidPromptError
from localmodel.sampling import SamplingError, SamplingParams
from localmodel.worker import AsyncEngine, EngineClosedError

__all__ = [
    "BUNDLED",
    "AsyncEngine",
    "Choice",
    "ChoiceFinished",
    "Completion",
    "ContextWindowExceeded",
    "Engine",
    "EngineClosedError",
    "EngineConfig",
    "EngineStats",
    "Event",
    "FinishReason",
    "Finished",
    "GenerationRequest",
    "InvalidPromptError",
    "InvalidRequestError",
    "KVLayout",
    "ModelLoadError",
    "RequestCache",
    "SamplingError",
    "SamplingParams",
    "TensorKV",
    "TextDelta",
    "UnsupportedModelError",
    "Usage",
]
