"""The verifier's onnx backends: float32 gives torch's scores, int8 its own calibration; one
export reused, broken exports, int8 that cannot be trusted runs float32.

The module exports the shipped verifier once (~10 s); tests that need another export (a corrupt
or foreign file) make it in their own directory.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from gateway.config import ConfigError, load_config_text
from gateway.runtime import semantic_settings
from semantic._onnx import verifier_export_name
from semantic.embedder import default_model_path
from semantic.keys import compared_text
from semantic.verifier import (
    DEFAULT_PATH,
    INT8,
    INT8_AGREEMENT,
    PROBES,
    PairVerifier,
    is_conversation,
)


def _turns(*texts: str) -> list[dict[str, str]]:
    roles = ("user", "assistant")
    return [{"role": roles[i % 2], "content": t} for i, t in enumerate(texts)]


PAIRS = [
    ("How do I reset my password?", "How can I reset my password?"),
    ("Is it safe to fly a drone over Paris?", "Is it illegal to fly a drone over Paris?"),
    ("tax", "What is the boiling point of water at 2000 metres, in degrees Celsius?"),
    (
        compared_text("And the price?", _turns("Flights to Rome", "For which dates?"), 4),
        compared_text("And the cost?", _turns("Plane tickets to Rome", "Which dates?"), 4),
    ),
    (
        compared_text("How long does it take?", _turns("Renew my passport in Canada"), 4),
        compared_text("How long does it take?", _turns("Renew my passport in Mexico"), 4),
    ),
    # longer than max_length (128 tokens): cut, longest first, the same way for both backends
    (
        "Why is the sky blue? " + "It is about light scattering in the atmosphere. " * 20,
        compared_text("And at sunset?", _turns("Why is the sky blue? " * 10), 4),
    ),
]


@pytest.fixture(scope="module")
def torch_verifier() -> PairVerifier:
    return PairVerifier(backend="torch")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, PairVerifier]]:
    where = tmp_path_factory.mktemp("exports")
    yield where, PairVerifier(backend="onnx", export_dir=where)


def _graph(where: Path) -> Path:
    return where / verifier_export_name(DEFAULT_PATH, Path(default_model_path())) / "model.onnx"


def test_onnx_scores_match_torch(
    torch_verifier: PairVerifier, exported: tuple[Path, PairVerifier]
) -> None:
    where, onnx = exported
    assert onnx.backend == "onnx" and onnx.fallback == "" and torch_verifier.backend == "torch"
    assert [p.relative_to(where) for p in where.rglob("*.onnx")] == [
        _graph(where).relative_to(where)
    ]
    assert any(is_conversation(a, b) for a, b in PAIRS) and onnx.conversation_shift != 0.0
    expected = torch_verifier.score(PAIRS)  # one batch of mixed lengths, padded
    batch = onnx.score(PAIRS)
    assert batch.dtype == np.float32 and batch.shape == (len(PAIRS),)
    np.testing.assert_allclose(batch, expected, atol=1e-4)
    alone = np.concatenate([onnx.score([pair]) for pair in PAIRS])  # unpadded, one at a time
    np.testing.assert_allclose(alone, expected, atol=1e-4)
    np.testing.assert_allclose(onnx.score(PAIRS[3:5]), expected[3:5], atol=1e-4)
    assert onnx.score([]).shape == (0,)
    trap, para = onnx.score([PAIRS[1], PAIRS[0]])
    assert trap < 0.5 < para


async def test_verify_batches_concurrent_calls_through_onnx(
    torch_verifier: PairVerifier, exported: tuple[Path, PairVerifier]
) -> None:
    import asyncio

    _, onnx = exported
    scores = await asyncio.gather(*(onnx.verify(a, b) for a, b in PAIRS))
    np.testing.assert_allclose(scores, torch_verifier.score(PAIRS), atol=1e-4)


def test_a_second_load_reuses_the_export(exported: tuple[Path, PairVerifier]) -> None:
    where, _ = exported
    graph = _graph(where)
    before = (graph.stat().st_mtime_ns, graph.stat().st_ino, sorted(where.rglob("*")))
    again = PairVerifier(backend="onnx", export_dir=where)
    assert again.backend == "onnx" and again.fallback == ""
    assert (graph.stat().st_mtime_ns, graph.stat().st_ino, sorted(where.rglob("*"))) == before


def test_a_corrupt_export_is_exported_again(
    torch_verifier: PairVerifier, exported: tuple[Path, PairVerifier], tmp_path: Path
) -> None:
    where, _ = exported
    shutil.copytree(where, tmp_path, dirs_exist_ok=True)
    graph = _graph(tmp_path)
    graph.write_bytes(b"not an onnx file")
    again = PairVerifier(backend="onnx", export_dir=tmp_path)
    assert again.backend == "onnx" and again.fallback == ""
    assert graph.stat().st_size > 10_000_000  # a real graph again (MiniLM-L6: ~90 MB)
    np.testing.assert_allclose(again.score(PAIRS), torch_verifier.score(PAIRS), atol=1e-4)


def test_a_foreign_graph_that_loads_is_exported_again(
    torch_verifier: PairVerifier, tmp_path: Path
) -> None:
    """A loadable graph with the right inputs and other outputs fails the probe check."""
    import onnx
    from onnx import TensorProto, helper

    names = ("input_ids", "attention_mask", "token_type_ids")
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["n", "t"]) for n in names]
    nodes = [
        helper.make_node("Cast", ["input_ids"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMean", ["f"], ["logit"], axes=[1], keepdims=0),
    ]
    output = helper.make_tensor_value_info("logit", TensorProto.FLOAT, ["n"])
    model = helper.make_model(
        helper.make_graph(nodes, "foreign", inputs, [output]),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    graph = _graph(tmp_path)
    graph.parent.mkdir(parents=True)
    onnx.save(model, str(graph))
    small = graph.stat().st_size
    verifier = PairVerifier(backend="onnx", export_dir=tmp_path)
    assert verifier.backend == "onnx" and verifier.fallback == ""
    assert graph.stat().st_size > 1000 * small
    np.testing.assert_allclose(verifier.score(PAIRS), torch_verifier.score(PAIRS), atol=1e-4)


def test_a_failed_export_falls_back_to_torch_and_says_why(
    torch_verifier: PairVerifier, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("an export directory cannot be made under a file")
    verifier = PairVerifier(backend="onnx", export_dir=blocked)
    assert verifier.backend == "torch"
    assert verifier.fallback.startswith("onnx could not be loaded")
    assert "verifier: onnx could not be loaded" in caplog.text
    np.testing.assert_array_equal(verifier.score(PAIRS), torch_verifier.score(PAIRS))


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="verifier backend must be one of"):
        PairVerifier(backend="onnx-int4")


def test_int8_runs_on_its_own_calibration(exported: tuple[Path, PairVerifier]) -> None:
    where, fp32 = exported
    int8 = PairVerifier(backend=INT8, export_dir=where)
    assert int8.backend == INT8 and int8.fallback == ""
    assert sorted(p.name for p in _graph(where).parent.iterdir()) == [
        "model.int8.onnx",
        "model.onnx",
    ]
    own = json.loads((DEFAULT_PATH / "meta.json").read_text())["backends"][INT8]
    # the graph reproduces the probe logits recorded when its calibration was measured
    np.testing.assert_allclose(int8.raw_logits(PROBES), own["probe_logits"], atol=1e-5)
    # ... and that calibration replaces float32's: combiner, shift, veto threshold, table
    assert int8.combiner is not None and fp32.combiner is not None
    assert int8.combiner.intercept == own["combiner"]["intercept"] != fp32.combiner.intercept
    assert int8.conversation_shift == own["conversation_shift"] != fp32.conversation_shift
    assert int8.veto_threshold == own["veto"]["threshold"] != fp32.veto_threshold
    assert int8.calibration is not None and fp32.calibration is not None
    assert int8.calibration.wrong_rate != fp32.calibration.wrong_rate
    assert int8.default_threshold == own["default_threshold"]
    # int8 moves the logits a little (they spread over about +-6), never the clear verdicts
    assert float(np.max(np.abs(int8.raw_logits(PAIRS) - fp32.raw_logits(PAIRS)))) < 1.5
    shift = np.array([is_conversation(a, b) for a, b in PAIRS]) * int8.conversation_shift
    np.testing.assert_allclose(int8.logits(PAIRS), int8.raw_logits(PAIRS) + shift, atol=1e-6)
    trap, para = int8.score([PAIRS[1], PAIRS[0]])
    assert trap < 0.5 < para


async def test_int8_scores_a_pair_the_same_whatever_its_batch_mates(
    exported: tuple[Path, PairVerifier],
) -> None:
    """int8 activations are scaled per call, so each pair is its own call: batched, alone or
    through concurrent ``verify`` calls, a pair's score is bit-identical."""
    import asyncio

    where, _ = exported
    int8 = PairVerifier(backend=INT8, export_dir=where)
    alone = np.concatenate([int8.score([pair]) for pair in PAIRS])
    np.testing.assert_array_equal(int8.score(PAIRS), alone)
    np.testing.assert_array_equal(int8.score(PAIRS[::-1]), alone[::-1])
    together = await asyncio.gather(*(int8.verify(a, b) for a, b in PAIRS))
    np.testing.assert_allclose(together, alone, rtol=0, atol=1e-7)


def _copy_verifier(tmp_path: Path, edit: object) -> Path:
    """The shipped verifier's files in ``tmp_path/v``, meta.json passed through ``edit``."""
    out = tmp_path / "v"
    shutil.copytree(DEFAULT_PATH, out)
    meta = json.loads((out / "meta.json").read_text())
    edit(meta)  # type: ignore[operator]
    (out / "meta.json").write_text(json.dumps(meta))
    return out


def test_int8_without_its_calibration_runs_float32_onnx(
    exported: tuple[Path, PairVerifier], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, fp32 = exported
    path = _copy_verifier(tmp_path, lambda meta: meta.pop("backends"))
    verifier = PairVerifier(path, backend=INT8, export_dir=tmp_path / "exports")
    assert verifier.backend == "onnx"
    assert verifier.fallback.startswith("onnx-int8 has no int8 calibration")
    assert "using float32 onnx" in caplog.text
    assert verifier.combiner == fp32.combiner
    assert verifier.conversation_shift == fp32.conversation_shift
    np.testing.assert_allclose(verifier.score(PAIRS), fp32.score(PAIRS), atol=1e-6)


def test_int8_whose_probes_disagree_runs_float32_onnx(
    exported: tuple[Path, PairVerifier], tmp_path: Path
) -> None:
    """A CPU whose int8 kernels round otherwise would not match the calibration table."""
    _, fp32 = exported

    def off(meta: dict[str, object]) -> None:
        own = meta["backends"][INT8]  # type: ignore[index]
        own["probe_logits"] = [z + 2 * INT8_AGREEMENT for z in own["probe_logits"]]

    path = _copy_verifier(tmp_path, off)
    verifier = PairVerifier(path, backend=INT8, export_dir=tmp_path / "exports")
    assert verifier.backend == "onnx"
    assert (
        "onnx-int8 disagrees" in verifier.fallback and "logits differ by 0.1" in verifier.fallback
    )
    assert verifier.combiner == fp32.combiner and verifier.veto_threshold == fp32.veto_threshold
    np.testing.assert_allclose(verifier.score(PAIRS), fp32.score(PAIRS), atol=1e-6)


def test_int8_that_disagrees_in_a_read_only_export_dir_runs_float32_onnx(
    exported: tuple[Path, PairVerifier], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The container image bakes the exports into a directory its runtime user cannot write
    (/opt/cachegate/models): int8 that disagrees there (the image built on a CPU that rounds
    otherwise) cannot be exported again, and runs float32 instead of losing the verifier."""
    _, fp32 = exported

    def off(meta: dict[str, object]) -> None:
        own = meta["backends"][INT8]  # type: ignore[index]
        own["probe_logits"] = [z + 2 * INT8_AGREEMENT for z in own["probe_logits"]]

    path = _copy_verifier(tmp_path, off)
    exports = tmp_path / "exports"
    PairVerifier(path, backend=INT8, export_dir=exports)  # bakes model.onnx and model.int8.onnx
    baked = sorted(p.name for p in exports.rglob("*.onnx"))
    assert baked == ["model.int8.onnx", "model.onnx"]

    def unlink(self: Path, missing_ok: bool = False) -> None:
        if exports in self.parents:  # as uid 10001 on root's 0755 directory (root ignores modes)
            raise PermissionError(13, "Permission denied", str(self))
        real_unlink(self, missing_ok=missing_ok)

    real_unlink = Path.unlink
    monkeypatch.setattr(Path, "unlink", unlink)
    verifier = PairVerifier(path, backend=INT8, export_dir=exports)
    assert verifier.backend == "onnx"
    assert "onnx-int8 disagrees" in verifier.fallback and "Permission denied" in verifier.fallback
    assert sorted(p.name for p in exports.rglob("*.onnx")) == baked
    np.testing.assert_allclose(verifier.score(PAIRS), fp32.score(PAIRS), atol=1e-6)


def test_verifier_backend_from_yaml_reaches_the_settings(tmp_path: Path) -> None:
    def settings(semantic: str) -> tuple[str, Path | None]:
        config = load_config_text(
            f"cache: {{semantic: {{verifier: bundled{semantic}}}}}\n", base_dir=tmp_path
        )
        got = semantic_settings(config)
        assert got is not None and got.verifier == "bundled"
        return got.verifier_backend, got.export_dir

    assert settings("") == ("onnx-int8", None)  # the default
    assert settings(", verifier_backend: torch") == ("torch", None)
    assert settings(", verifier_backend: onnx") == ("onnx", None)
    exports = (tmp_path / "exports").resolve()
    assert settings(", embedder_export_dir: exports") == ("onnx-int8", exports)
    with pytest.raises(ConfigError, match="verifier_backend"):
        settings(", verifier_backend: tensorrt")
