"""bench.engine's arithmetic shared by the engine and llama.cpp, and its llama.cpp paragraph
(no llama-cpp-python needed: the figures are made up)."""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest

from bench.engine import (
    _itl_markdown,
    _kv_markdown,
    _lean_markdown,
    _llama_markdown,
    _on_a_thread,
    _threads_markdown,
    decode_tokens_per_s,
    versus_llama_cpp,
)


def test_one_stream_is_tokens_after_the_first_over_the_time_after_the_first() -> None:
    assert decode_tokens_per_s([(33, 0.5, 1.5)]) == pytest.approx(32.0)


def test_streams_at_once_count_the_time_any_of_them_was_decoding_once() -> None:
    # two streams decoding over [1, 3] and [2, 4]: 3 s of decoding, 10 + 20 tokens after the first
    assert decode_tokens_per_s([(11, 1.0, 3.0), (21, 2.0, 4.0)]) == pytest.approx(30 / 3)


def test_streams_one_after_another_leave_out_their_prefills() -> None:
    # llama.cpp's way: prefill [0, 1], decode [1, 2]; prefill [2, 3], decode [3, 5]
    assert decode_tokens_per_s([(11, 1.0, 2.0), (21, 3.0, 5.0)]) == pytest.approx(30 / 3)


def _side(engine_8: float, llama_1: float) -> dict[str, object]:
    def figures(decode: float) -> dict[str, object]:
        return {"decode_tokens_per_s": decode, "decode_per_round": [decode], "ttft_p50_s": 0.5,
                "prefill_tokens_per_s": 128.0}  # fmt: skip

    return {
        "version": "0.3.36",
        "gguf": "model.gguf",
        "n_ctx": 256,
        "rounds": 1,
        "threads": 1,
        "loadavg_1min": [1.0, 1.1],
        "engine_8": figures(engine_8),
        "engine_1": figures(14.0),
        "llama_cpp": {1: figures(llama_1), 2: figures(2 * llama_1)},
    }


def test_the_target_compares_8_streams_with_llama_cpp_at_the_engines_thread_count() -> None:
    # llama.cpp at 2 threads is faster than the engine, but the engine runs on 1: met
    text = "\n".join(_llama_markdown({"n_tokens": 32, "llama_cpp": _side(66.0, 60.0)}))
    assert "66.0 vs 60.0 tokens/s, **1.10×**: **met**" in text
    assert "| llama.cpp 0.3.36, one stream at a time | 2 | 120.0 |" in text

    text = "\n".join(_llama_markdown({"n_tokens": 32, "llama_cpp": _side(50.0, 62.5)}))
    assert "50.0 vs 62.5 tokens/s, **0.80×**: **not met**" in text


def test_without_llama_cpp_the_section_says_it_was_skipped_and_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # as if not installed
    engine: Any = None  # never reached
    side = versus_llama_cpp(engine, n_tokens=32, rounds=1)
    assert side["skipped"].startswith("ModuleNotFoundError")

    text = "\n".join(_llama_markdown({"llama_cpp": side}))
    assert "Not measured: llama.cpp was skipped (ModuleNotFoundError" in text
    assert "`make llamacpp`" in text


def test_a_run_without_repacking_says_so() -> None:
    side = _side(66.0, 60.0)
    assert "without weight repacking" not in "\n".join(
        _llama_markdown({"n_tokens": 32, "llama_cpp": side})
    )
    side["repacking"] = False
    text = "\n".join(_llama_markdown({"n_tokens": 32, "llama_cpp": side}))
    assert "**llama.cpp ran without weight repacking** (`use_extra_bufts` off)" in text


def test_repacking_is_turned_off_only_while_the_model_loads() -> None:
    from types import SimpleNamespace

    from bench.llamacpp import _without_extra_buffer_types

    def defaults() -> SimpleNamespace:
        return SimpleNamespace(use_extra_bufts=True, n_gpu_layers=0)

    fake = SimpleNamespace(llama_cpp=SimpleNamespace(llama_model_default_params=defaults))
    with _without_extra_buffer_types(fake):
        params = fake.llama_cpp.llama_model_default_params()
        assert params.use_extra_bufts is False and params.n_gpu_layers == 0
    assert fake.llama_cpp.llama_model_default_params is defaults


def test_the_kv_dtype_table_compares_each_dtype_with_float32_pages() -> None:
    def figures(ms: float, decode: float) -> dict[str, float]:
        return {"ms_per_token": ms, "decode_tokens_per_s": decode, "ttft_p99_s": 1.5}

    kv = {"float32": figures(100.0, 40.0), "bfloat16": figures(100.0, 40.0),
          "int8": figures(125.0, 30.0)}  # fmt: skip
    text = "\n".join(_kv_markdown(kv))
    assert "| `float32` | 100.0 | 1.00× | 40.0 | **1.00×** | 1500 |" in text
    assert "| `int8` | 125.0 | 0.80× | 30.0 | **0.75×** | 1500 |" in text


def test_work_on_a_thread_of_its_own_gives_back_its_result_or_its_exception() -> None:
    """``bench.engine._on_a_thread`` (llama.cpp's calls, the bandwidth read): the result, or the
    work's own exception raised on the caller's thread, on a thread that has ended."""
    seen: list[threading.Thread] = []

    def work() -> int:
        seen.append(threading.current_thread())
        return 7

    assert _on_a_thread(work) == 7
    assert seen[0] is not threading.current_thread() and not seen[0].is_alive()

    def fails() -> int:
        raise KeyError("the work's own")

    with pytest.raises(KeyError, match="the work's own"):
        _on_a_thread(fails)


def test_the_threads_table_puts_each_count_beside_its_own_floor_and_baseline() -> None:
    def figures(ms: float, floor_ms: float, decode: float, alone: float) -> dict[str, Any]:
        return {"ms_per_token": ms, "ttft_s": 0.2, "decode_8": decode,
                "decode_8_one_at_a_time": alone, "ratio_8": decode / alone, "ttft_p99_8_s": 1.0,
                "floor": {"floor_ms": floor_ms, "bandwidth_gb_s": 30.0}}  # fmt: skip

    text = "\n".join(_threads_markdown({1: figures(40.0, 20.0, 100.0, 25.0),
                                        2: figures(32.0, 16.0, 150.0, 30.0)}))  # fmt: skip
    assert "| 1 | 40.0 | 20.0 (30.0 GB/s) | 50% | 200 | 100.0 | 25.0 | **4.00×** | 1000 |" in text
    assert "| 2 | 32.0 | 16.0 (30.0 GB/s) | 50% | 200 | 150.0 | 30.0 | **5.00×** | 1000 |" in text
    assert "single stream **1.25×**" in text and "8-stream decode **1.50×**" in text
    assert _threads_markdown({}) == []  # (a 1-CPU host: no section)


def test_the_layers_table_takes_each_share_of_the_floor_in_its_own_round() -> None:
    def figures(ms: float, shares: list[float], decode: float) -> dict[str, Any]:
        return {"ms_per_token": ms, "ttft_s": 0.2, "floor_ms": 20.0, "share": shares[1],
                "shares": shares, "decode_8": decode}  # fmt: skip

    text = "\n".join(_lean_markdown({"lean": figures(25.0, [0.9, 0.8, 0.7], 120.0),
                                     "transformers": figures(30.0, [0.7, 0.66, 0.6], 100.0)}))  # fmt: skip
    assert "| `lean` | 25.0 | 20.0 | **80%** | 90% / 80% / 70% | 200 | 120.0 |" in text
    assert "| `transformers` | 30.0 | 20.0 | **66%** | 70% / 66% / 60% | 200 | 100.0 |" in text
    assert "single stream **1.20×**" in text and "8-stream decode **1.20×**" in text
    assert _lean_markdown({}) == []


def test_the_itl_table_gives_streams_over_itl_against_one_stream_alone() -> None:
    def row(c: int, p50: float, p99: float) -> dict[str, Any]:
        return {"concurrency": c, "itl_p50_s": p50, "itl_p99_s": p99}

    results = {"batched": [row(1, 0.028, 0.031), row(8, 0.040, 0.610)],
               "one_at_a_time": [row(8, 0.029, 0.033)]}  # fmt: skip
    text = "\n".join(_itl_markdown(results))
    # 8 streams at 40 ms a step against one alone at 28 ms: 200 tokens/s, 8 * 28 / 40 = 5.6x
    assert "| 8 | 40.0 / 610.0 | 29.0 / 33.0 | 200.0 | **5.60×** |" in text
    assert "| 1 | 28.0 / 31.0 | — | 35.7 | **1.00×** |" in text
