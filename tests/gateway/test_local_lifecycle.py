"""The local backend's life: a gateway that shuts down while the model still loads does not
wait for the load, and leaves nothing running once it ends. The bundled model, loaded by a
hook that lets the test time the load."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from gateway.config import LocalModelConfig
from gateway.local import LocalBackend
from localmodel import Engine, EngineConfig
from localmodel.disk import BreakEven
from localmodel.loader import load

MODEL = "smollm2"


async def test_close_during_the_load_closes_the_engine_it_makes(
    bundled_model_dir: Path, tmp_path: Path
) -> None:
    entered, release, made = threading.Event(), threading.Event(), threading.Event()
    engines: list[Engine] = []

    def slow_load(config: EngineConfig) -> Engine:
        entered.set()
        assert release.wait(30)
        loaded = load(config)  # with a disk tier: a writer thread and a run directory
        engine = Engine(loaded.model, loaded.tokenizer, config, break_even=BreakEven.fixed(None))
        engines.append(engine)
        made.set()
        return engine

    config = EngineConfig(source=str(bundled_model_dir), data_dir=tmp_path, device="cpu",
                          prefix_disk_dir=tmp_path / "kv")  # fmt: skip
    before = set(threading.enumerate())
    backend = LocalBackend(MODEL, LocalModelConfig(), config, load=slow_load)
    await backend.start()
    assert await asyncio.to_thread(entered.wait, 30)
    await asyncio.wait_for(backend.close(), 5)  # the gateway shuts down mid-load, not held
    assert backend.loading
    release.set()
    assert await asyncio.to_thread(made.wait, 30)
    deadline = time.monotonic() + 30
    while backend.loading:  # the load's thread closes the engine it made after close
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)

    [engine] = engines
    assert engine.disk is not None
    assert not engine.disk.tier.directory.exists()  # closed: its run directory is removed
    left = [t.name for t in threading.enumerate() if t not in before and t.is_alive()]
    assert "kv-disk-writer" not in left and f"localmodel-{MODEL}" not in left
    assert not await backend.ready()
    assert backend.stats() == {"loaded": False, "error": None}
