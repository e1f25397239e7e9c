"""The native float32 linear kernel (``localmodel.kernel``, ``weights: native`` / ``auto``):
built by this machine's C compiler, it computes what ``nn.Linear`` does at every row count,
a row's result does not depend on its batch, and without a compiler the load says why."""

from __future__ import annotations

import contextlib
import copy
import logging
import shlex
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from localmodel import EngineConfig, kernel
from localmodel.loader import ModelLoadError, load
from localmodel.weights import INT8_KERNEL_ROWS, Int8Linear, NativeLinear, in_use
from tests.conftest import CACHE_DIR


@pytest.fixture(scope="module")
def lib() -> object:
    built = kernel.library()
    assert built is not None, "the C compiler (cc) did not build localmodel/linear.c"
    return built


@pytest.mark.parametrize(("out", "inner"), [(40, 96), (37, 45), (16, 576), (1, 7)])
@pytest.mark.parametrize("bias", [True, False])
def test_a_native_layer_computes_what_nn_linear_does(
    lib: object, out: int, inner: int, bias: bool
) -> None:
    torch.manual_seed(out + inner)
    linear = nn.Linear(inner, out, bias=bias)
    layer = NativeLinear(linear)
    assert torch.equal(layer.weight, linear.weight.detach())  # unpacks to the same weight
    # rows: one (decode), a few, past each chunk of the transposed inputs (16 or 6), prefill
    for rows in (1, 2, 5, 6, 7, 15, 16, 17, 33, 64):
        x = torch.randn(2, rows, inner)
        with torch.inference_mode():
            got = layer(x)
            assert got.shape == (2, rows, out)
            assert torch.allclose(got, linear(x), rtol=1e-5, atol=1e-5), rows


def test_a_rows_result_is_bitwise_the_same_alone_and_in_any_batch(lib: object) -> None:
    torch.manual_seed(0)
    layer = NativeLinear(nn.Linear(576, 200))
    batch = torch.randn(40, 576)
    with torch.inference_mode():
        together = layer(batch)
        for row in (0, 5, 16, 39):
            assert torch.equal(layer(batch[row : row + 1]), together[row : row + 1])
        assert torch.equal(layer(batch[3:12]), together[3:12])


def test_inputs_it_does_not_take_go_through_f_linear(lib: object) -> None:
    torch.manual_seed(0)
    linear = nn.Linear(32, 24)
    layer = NativeLinear(linear)
    x = torch.randn(3, 64)[:, ::2]  # not contiguous: copied, then the kernel
    with torch.inference_mode():
        assert torch.allclose(layer(x), linear(x), atol=1e-5)
        half = layer(x.double())  # another dtype: F.linear on the unpacked weight
        assert half.dtype == torch.float64
        assert torch.allclose(half, linear.double()(x.double()), atol=1e-5)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        layer(torch.randn(3, 31))  # never read past the input: F.linear refuses it
    wants_grad = torch.randn(2, 32, requires_grad=True)
    layer(wants_grad).sum().backward()  # (gradients flow through F.linear)
    assert wants_grad.grad is not None


def _script(path: Path, body: str) -> str:
    """``path``, made a shell script running ``body`` (a stand-in compiler)."""
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize(
    ("script", "logged"),
    [
        (None, "no C compiler"),  # no such file
        ("echo 'cc: error: unsupported option' >&2\nexit 1", "unsupported option"),
        # a "compiler" whose output cannot be loaded (as from a directory mounted noexec)
        ('while [ "$1" != -o ]; do shift; done\necho junk > "$2"', "loading the native"),
    ],
)
def test_without_a_working_compiler_nothing_is_built_and_the_log_says_why(
    caplog: pytest.LogCaptureFixture, tmp_path: Path, script: str | None, logged: str
) -> None:
    compiler = str(tmp_path / "cc") if script is None else _script(tmp_path / "cc", script)
    with caplog.at_level(logging.INFO, logger="cachegate.localmodel"):
        assert kernel.build(compiler) is None
    assert logged in caplog.text


def test_a_compiler_command_with_arguments_builds_it_as_make_reads_cc(tmp_path: Path) -> None:
    (tmp_path / "a dir").mkdir()
    launcher = _script(tmp_path / "a dir" / "launcher", 'exec "$@"')  # as ccache: "ccache gcc"
    built = kernel.build(f"{shlex.quote(launcher)} cc -O2")  # (the kernel's flags come after)
    assert built is not None  # (was: "no C compiler" for the whole command)
    assert kernel._agrees(built)
    wrapper = _script(tmp_path / "a dir" / "cc", 'exec cc "$@"')
    assert kernel.build(wrapper) is not None  # one path with a space in it, unquoted, still is


def test_weights_native_without_the_kernel_fails_the_load_and_auto_falls_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kernel, "library", lambda: None)
    with pytest.raises(ModelLoadError, match=r"weights: native needs .* C compiler"):
        load(EngineConfig(data_dir=CACHE_DIR, device="cpu", dtype="float32", weights="native"))
    fallback = load(EngineConfig(data_dir=CACHE_DIR, device="cpu", dtype="float32"))
    assert in_use(fallback.model) == "onednn-packed"


def test_int8_decode_rows_take_the_native_int8_tiles_with_float32_activations(lib: object) -> None:
    torch.manual_seed(0)
    linear = nn.Linear(96, 40)
    layer = Int8Linear(linear)
    assert layer.tiles8 is not None
    dequantised = layer.weight8.float() * layer.scale[:, None]  # what the int8 weight means
    with torch.inference_mode():
        for rows in (1, 5, INT8_KERNEL_ROWS):
            x = torch.randn(1, rows, 96)
            want = nn.functional.linear(x, dequantised, linear.bias)
            # float32 activations: ~1e-6 of the exact product (bfloat16 ones are ~1e-2 off)
            assert torch.allclose(layer(x), want, rtol=1e-5, atol=1e-5), rows
        prefill = torch.randn(1, INT8_KERNEL_ROWS + 1, 96)  # more rows: the bfloat16 product
        got = layer(prefill)
        want = nn.functional.linear(prefill, dequantised, linear.bias)
        assert torch.allclose(got, want, atol=0.1) and not torch.allclose(got, want, atol=1e-4)


def _on_a_new_thread(work: Callable[[], torch.Tensor]) -> torch.Tensor | BaseException:
    """``work()`` on a thread of its own (the kernel's scratch buffer is per thread, and a new
    thread has none yet): its result, or what it raised."""
    done: list[torch.Tensor | BaseException] = []

    def run() -> None:
        try:
            with torch.inference_mode():
                done.append(work())
        except BaseException as exc:  # (handed back to the test's thread)
            done.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return done[0]


@pytest.fixture(params=[NativeLinear, Int8Linear])
def make_layer(request: pytest.FixtureRequest, lib: object) -> Callable[[], nn.Module]:
    """Makes a layer on the native kernel (float32 or int8 tiles): 45 → 37, random, a bias."""
    torch.manual_seed(0)
    return lambda: request.param(nn.Linear(45, 37))


def test_an_empty_batch_gives_an_empty_result_as_nn_linear_does(
    make_layer: Callable[[], nn.Module],
) -> None:
    layer = make_layer()
    got = _on_a_new_thread(lambda: layer(torch.empty(0, 45)))  # no rows to multiply
    assert isinstance(got, torch.Tensor), got  # (was a MemoryError: no scratch buffer yet)
    assert got.shape == (0, 37)
    got = _on_a_new_thread(lambda: layer(torch.empty(2, 0, 45)))
    assert isinstance(got, torch.Tensor) and got.shape == (2, 0, 37), got


def test_a_loaded_state_dict_is_what_the_kernel_computes_with(
    make_layer: Callable[[], nn.Module],
) -> None:
    source, layer = make_layer(), make_layer()
    copied = copy.deepcopy(layer)  # (a copy's bias is its own tensor, not the layer's)
    x = torch.randn(3, 45)  # decode rows: the native kernel, float32 or int8
    with torch.inference_mode():
        want = source(x)
        assert not torch.allclose(layer(x), want, atol=1e-2)  # different weights and bias
        for target in (layer, copied):
            target.load_state_dict(source.state_dict())
            assert torch.equal(target(x), want)  # (int8: was the tiles of its old weight)


def test_a_layer_cast_to_another_dtype_is_not_read_as_float32_tiles(lib: object) -> None:
    torch.manual_seed(0)
    layer = NativeLinear(nn.Linear(45, 37))
    x = torch.randn(3, 45)
    for cast in (nn.Module.half, nn.Module.double):
        cast(layer)  # (as model.half() does: the tiles are a parameter)
        assert layer.weight.dtype != torch.float32
        want = nn.functional.linear(x, layer.weight.float(), layer.bias.float())
        with torch.inference_mode():
            # float16 tiles read as float32 ran past their end; float64 ones were misread
            assert torch.allclose(layer(x), want, atol=1e-5), cast
        layer.float()


@pytest.mark.parametrize(("heads", "kv_heads", "dim"), [(9, 3, 64), (4, 4, 20), (6, 1, 128)])
@pytest.mark.parametrize("pages", [torch.float32, torch.bfloat16, torch.float16])
def test_decode_attention_reads_each_sequences_own_slots_as_sdpa_computes(
    lib: object, heads: int, kv_heads: int, dim: int, pages: torch.dtype
) -> None:
    """The batched decode step's attention (``localmodel.batch`` on float32 or half pages):
    each sequence's query heads over its own scattered slots (grouped-query or not, a head
    size not a multiple of 16), equal to SDPA over its K/V gathered (half pages widened to
    float32, as the gather does); what lies past a sequence's length, or in slots it does not
    list, is never read (NaN there changes nothing)."""
    torch.manual_seed(heads + dim)
    keys, values = torch.randn(kv_heads, 300, dim), torch.randn(kv_heads, 300, dim)
    lengths = torch.tensor([1, 37, 200, 16])
    order = torch.randperm(299)  # 254 distinct slots, scattered
    slots = torch.full((4, 200), 299, dtype=torch.int64)  # padding: slot 299
    for g, (start, n) in enumerate(zip([0, 1, 38, 238], lengths.tolist(), strict=True)):
        slots[g, :n] = order[start : start + n]
    used = slots[torch.arange(200)[None] < lengths[:, None]].unique()
    keys[:, 299], values[:, 299] = float("nan"), float("nan")
    unused = torch.ones(300, dtype=torch.bool)
    unused[used] = False
    keys[:, unused], values[:, unused] = float("nan"), float("nan")
    q = torch.randn(4, heads, dim)
    keys, values = keys.to(pages), values.to(pages)
    got = kernel.decode_attention(lib, q, keys, values, slots, lengths, dim**-0.5)
    assert got.shape == (4, heads, dim) and not got.isnan().any()
    for g, n in enumerate(lengths.tolist()):
        k, v = keys[:, slots[g, :n]].float(), values[:, slots[g, :n]].float()
        want = torch.nn.functional.scaled_dot_product_attention(
            q[g][:, None], k, v, enable_gqa=heads != kv_heads
        )[:, 0]
        assert torch.allclose(got[g], want, rtol=1e-5, atol=1e-5), g
    # a sequence's result is the same alone as next to the others
    alone = kernel.decode_attention(lib, q[2:3], keys, values, slots[2:3], lengths[2:3], dim**-0.5)
    assert torch.equal(alone[0], got[2])


def test_the_portable_paths_for_older_compilers_compute_the_same() -> None:
    """``ops.c``'s fallbacks (no ``_Float16``: float16 pages widened bit by bit; GCC before
    12: ``__builtin_shuffle`` for the lane sums), forced on this compiler, pass the check at
    load as the default build does."""
    lib = kernel.build("cc -DCACHEGATE_NO_FLOAT16 -DCACHEGATE_OLD_SHUFFLE")
    assert lib is not None
    assert kernel._agrees(lib)
    assert kernel._attention_agrees(lib, torch.Generator().manual_seed(3))


def test_without_openmp_it_is_built_single_threaded_and_computes_the_same(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """A compiler without OpenMP (``-fopenmp`` refused), or an OpenMP runtime other than
    torch's coming in with the library (two pools of threads would take the cores from each
    other): built again without it, the log says why, and it passes the checks at load."""
    refuses = _script(
        tmp_path / "cc", 'case "$*" in *-fopenmp*) echo "no -fopenmp here" >&2; exit 1;; esac\n'
        'exec cc "$@"',
    )  # fmt: skip
    with caplog.at_level(logging.INFO, logger="cachegate.localmodel"):
        lib = kernel.build(refuses)
    assert lib is not None
    assert "built without OpenMP" in caplog.text and "no -fopenmp here" in caplog.text
    assert lib.cachegate_openmp() == 0
    monkeypatch.setattr(kernel, "library", lambda: lib)
    assert kernel.threads_per_call(4) == 1  # (what /admin/stats reports as kernel_threads)
    monkeypatch.undo()
    with _torch_threads(2):
        assert kernel._agrees(lib)
        assert kernel._attention_agrees(lib, torch.Generator().manual_seed(4))
    caplog.clear()
    seen = iter([{"/usr/lib/libgomp.so.1"}, {"/usr/lib/libgomp.so.1", "/opt/libiomp5.so"}])
    monkeypatch.setattr(kernel, "_openmp_runtimes", lambda: next(seen))
    with caplog.at_level(logging.INFO, logger="cachegate.localmodel"):
        assert kernel.build("cc") is not None
    assert "not the one torch runs on" in caplog.text


def test_where_torchs_openmp_runtime_is_not_seen_it_is_built_without_openmp(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """Where the runtimes mapped in cannot be listed (no ``/proc/self/maps``: macOS, where
    Homebrew's gcc links libgomp and torch runs libomp), nothing shows which runtime a
    ``-fopenmp`` build would bind to: the library is built without OpenMP, the log says why."""
    calls = tmp_path / "calls"
    logged = _script(tmp_path / "cc", f'echo "$*" >> {shlex.quote(str(calls))}\nexec cc "$@"')
    monkeypatch.setattr(kernel, "_openmp_runtimes", set)
    with caplog.at_level(logging.INFO, logger="cachegate.localmodel"):
        assert kernel.build(logged) is not None
    assert "built without OpenMP" in caplog.text
    assert "-fopenmp" not in calls.read_text().splitlines()[-1]


def test_an_attention_kernel_that_disagrees_is_not_used_and_the_linear_one_still_is(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The two checks at load are apart: attention failing its check leaves batched decodes
    on SDPA (``kernel.attention()`` is None, the log says why) and the linear kernel in use."""
    monkeypatch.setattr(kernel, "_attention_agrees", lambda lib, generator: False)
    kernel.attention.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="cachegate.localmodel"):
            assert kernel.attention() is None
        assert "attention kernel disagrees with SDPA" in caplog.text
        assert kernel.library() is not None
        with torch.inference_mode():
            assert isinstance(NativeLinear(nn.Linear(8, 4)), NativeLinear)
    finally:
        kernel.attention.cache_clear()


def _attention_args(
    heads: int = 4, kv_heads: int = 2, dim: int = 16, n_slots: int = 12
) -> dict[str, torch.Tensor]:
    """Valid arguments of :func:`kernel.decode_attention`: 3 sequences of 5, 1 and 7 tokens
    over ``n_slots`` slots of float32 pages."""
    torch.manual_seed(0)
    slots = torch.stack([torch.randperm(n_slots)[:7] for _ in range(3)])
    return {
        "q": torch.randn(3, heads, dim),
        "keys": torch.randn(kv_heads, n_slots, dim),
        "values": torch.randn(kv_heads, n_slots, dim),
        "slots": slots,
        "lengths": torch.tensor([5, 1, 7]),
    }


@pytest.mark.parametrize(("heads", "kv_heads"), [(3, 2), (5, 2), (1, 2)])
def test_decode_attention_refuses_query_heads_not_a_multiple_of_the_kv_heads(
    lib: object, heads: int, kv_heads: int
) -> None:
    """As SDPA does (grouped-query attention needs whole groups): 5 query heads over 2 K/V
    heads read a third K/V head past the pages' end, 1 over 2 divided by zero (SIGFPE)."""
    args = _attention_args(heads, kv_heads)
    with pytest.raises(RuntimeError):
        torch.nn.functional.scaled_dot_product_attention(
            args["q"][0][:, None], args["keys"], args["values"], enable_gqa=True
        )
    with pytest.raises(ValueError, match="query heads"):
        kernel.decode_attention(lib, **args, scale=0.25)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"lengths": torch.tensor([5, 1, 8])}, "lengths"),  # past the 7 slots a sequence lists
        ({"lengths": torch.tensor([5, 0, 7])}, "lengths"),  # no key: not even its new token
        ({"lengths": torch.tensor([5, -3, 7])}, "lengths"),
        ({"lengths": torch.tensor([5, 1])}, "lengths"),  # fewer lengths than sequences
        ({"slots": torch.tensor([[12] * 7] * 3)}, "slot"),  # past the 12 slots of a head
        ({"slots": torch.tensor([[-1] * 7] * 3)}, "slot"),
        ({"slots": torch.zeros(2, 7, dtype=torch.int64)}, "slot"),  # fewer rows than sequences
        ({"slots": torch.zeros(3, 7, dtype=torch.int32)}, "int64"),  # read as 8-byte slots
        ({"lengths": torch.tensor([5, 1, 7], dtype=torch.int32)}, "int64"),
        ({"values": torch.randn(2, 12, 16).half()}, "dtype"),  # half the bytes keys have
        ({"keys": torch.randn(2, 12, 16).double()}, "dtype"),
        ({"q": torch.randn(3, 4, 16).half()}, "float32"),
        ({"values": torch.randn(2, 6, 16)}, "shape"),  # fewer slots than keys
        ({"keys": torch.randn(2, 12, 8), "values": torch.randn(2, 12, 8)}, "shape"),  # D 16
        ({"q": torch.randn(4, 3, 16).transpose(0, 1)}, "contiguous"),
    ],
)
def test_decode_attention_refuses_what_it_would_read_out_of_bounds(
    lib: object, change: dict[str, torch.Tensor], match: str
) -> None:
    """The kernel reads raw pointers: arguments that do not describe the pages, sequences and
    slots it walks (which ``localmodel.batch`` never passes) get a ValueError saying what,
    not a read past a buffer, a write past its scores buffer or a crash."""
    args = {**_attention_args(), **change}
    with pytest.raises(ValueError, match=match):
        kernel.decode_attention(lib, **args, scale=0.25)
    valid = _attention_args()
    got = kernel.decode_attention(lib, **valid, scale=0.25)
    assert got.shape == (3, 4, 16) and got.isfinite().all()


@contextlib.contextmanager
def _torch_threads(threads: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _with(args: tuple[int, ...], out: int) -> tuple[int, ...]:
    """A linear kernel's arguments after the weight: ``args`` with the output pointer in
    second place, then torch's thread count."""
    return (args[0], out, *args[2:], torch.get_num_threads())


def _into_nan(call: Callable[[int], object], shape: tuple[int, ...], threads: int) -> torch.Tensor:
    """A kernel's output written over NaN at ``threads`` threads (``call(out_ptr)`` runs it):
    an output no thread computes stays NaN."""
    out = torch.full(shape, float("nan"))
    with _torch_threads(threads):
        assert call(out.data_ptr()) == 0
    return out


@pytest.mark.parametrize("threads", [2, 3, 4])
def test_the_kernels_split_over_threads_compute_bitwise_what_one_thread_does(
    lib: Any, threads: int
) -> None:
    """At more than one torch thread a call splits its outputs among that many threads
    (OpenMP, torch's own pool): whole tiles of a linear layer (39 of them: not a multiple of
    2, 3 or 4), whole (sequence, query head) pairs of the attention (8 sequences of different
    lengths, 9 heads). Every output is computed, each by one thread in the order one thread
    computes it, so the results are bitwise those of one thread, for float32 and int8 tiles,
    rows past a chunk of the transposed inputs, and float32 and bfloat16 pages."""
    torch.manual_seed(threads)
    out, inner = 39 * 16 - 3, 96
    packed = kernel.pack(torch.randn(out, inner))
    packed8, scales = kernel.pack_q8(
        torch.randint(-127, 128, (out, inner), dtype=torch.int8), torch.rand(out) / 100
    )
    bias = torch.randn(out)
    for rows in (1, 7, 23):
        x = torch.randn(rows, inner)
        sizes = (x.data_ptr(), 0, bias.data_ptr(), rows, inner, out)
        for call in (
            lambda y, s=sizes: lib.cachegate_linear_f32(packed.data_ptr(), *_with(s, y)),
            lambda y, s=sizes: lib.cachegate_linear_q8(
                packed8.data_ptr(), scales.data_ptr(), *_with(s, y)
            ),
        ):
            one = _into_nan(call, (rows, out), 1)
            assert one.isfinite().all()
            assert torch.equal(_into_nan(call, (rows, out), threads), one), rows
    lengths = torch.tensor([1, 40, 7, 200, 16, 3, 99, 120])
    slots = torch.stack([torch.randperm(300)[:200] for _ in lengths])
    q = torch.randn(8, 9, 64)
    for pages in (torch.float32, torch.bfloat16):
        keys, values = torch.randn(3, 300, 64).to(pages), torch.randn(3, 300, 64).to(pages)
        attend = lambda y, k=keys, v=values: lib.cachegate_decode_attention(  # noqa: E731
            q.data_ptr(), k.data_ptr(), v.data_ptr(), kernel.PAGE_DTYPES[k.dtype], 300,
            slots.data_ptr(), lengths.data_ptr(), 8, 200, 9, 3, 64, 0.125, y,
            torch.get_num_threads(),
        )  # fmt: skip
        one = _into_nan(attend, (8, 9, 64), 1)
        assert one.isfinite().all()
        assert torch.equal(_into_nan(attend, (8, 9, 64), threads), one)
        with _torch_threads(threads):  # the Python entry point passes torch's thread count
            got = kernel.decode_attention(lib, q, keys, values, slots, lengths, 0.125)
        assert torch.equal(got, one)


def test_the_kernels_run_on_the_openmp_runtime_torch_runs_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One pool of threads for torch's ops and the kernels: built with OpenMP here, the
    library brought no OpenMP runtime of its own into the process (it binds to the
    ``libgomp.so.1`` torch loaded: its wheel ships one)."""
    before = kernel._openmp_runtimes()
    assert any(Path(p).name == "libgomp.so.1" for p in before), before
    with caplog.at_level(logging.INFO, logger="cachegate.localmodel"):
        assert kernel.build("cc") is not None
    assert "without OpenMP" not in caplog.text
    assert kernel._openmp_runtimes() == before
    assert kernel.threads_per_call(4) == 4


def test_kernel_calls_from_several_threads_at_once_each_get_their_own_result(lib: Any) -> None:
    """Two engines' workers (each its own thread, each splitting its calls over 2 threads)
    call the kernels at the same time: every result is what the call computes alone."""
    torch.manual_seed(0)
    layer = NativeLinear(nn.Linear(96, 613))
    inputs = [torch.randn(5, 96) for _ in range(4)]
    with torch.inference_mode():
        want = [layer(x) for x in inputs]
    failures: list[str] = []

    def work(i: int) -> None:
        torch.set_num_threads(2)
        with torch.inference_mode():
            for _ in range(200):
                if not torch.equal(layer(inputs[i]), want[i]):
                    failures.append(f"caller {i}")
                    return

    callers = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert failures == []


def _native_threads() -> set[int]:
    """The ids of this process's threads (Linux)."""
    return {int(tid.name) for tid in Path("/proc/self/task").iterdir()}


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="lists threads on Linux only")
def test_small_calls_keep_the_pool_of_threads_torch_runs_on(lib: Any) -> None:
    """A call too small for every thread (a layer of 10 tiles, 3 sequences' attention) still
    runs on the whole pool: libgomp ends the threads a smaller team leaves out and starts new
    ones at the next larger region (torch's ops, a large layer), so every such call would end
    and start threads, and each ended thread's scores buffer would leak."""
    torch.manual_seed(0)
    big, small = NativeLinear(nn.Linear(64, 64 * 16)), NativeLinear(nn.Linear(64, 10 * 16))
    x, args = torch.randn(2, 64), _attention_args(heads=8, kv_heads=2)
    with _torch_threads(4), torch.inference_mode():

        def step() -> None:
            big(x)
            small(x)
            big(x)
            kernel.decode_attention(lib, **args, scale=0.25)

        step()
        before = _native_threads()
        for _ in range(20):
            step()
        assert _native_threads() - before == set()  # no thread started again


def _resident_bytes() -> int:
    """This process's resident memory (Linux)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096


@pytest.mark.skipif(not Path("/proc/self/statm").is_file(), reason="reads memory on Linux only")
def test_a_thread_that_ends_gives_back_its_kernel_buffers(lib: Any) -> None:
    """Each thread keeps its buffers (the transposed inputs, the attention's scores) for its
    next call; when it ends (an engine's worker, one of the OpenMP threads) they are freed:
    64 threads, each with a 4 MB scratch buffer, leave the memory as it was (leaked: +256 MB;
    the bound leaves room for what the test process's other threads allocate meanwhile: 22 MB
    was seen once in a run beside other work)."""
    torch.manual_seed(0)
    layer, x = NativeLinear(nn.Linear(4096, 64)), torch.randn(256, 4096)
    _on_a_new_thread(lambda: layer(x))  # (the allocator's first use of such a buffer)
    before = _resident_bytes()
    for _ in range(64):
        assert isinstance(_on_a_new_thread(lambda: layer(x)), torch.Tensor)
    assert _resident_bytes() - before < 64 * 2**20


def test_int8_attention_reads_a_tail_of_at_most_a_page_ending_at_the_new_token() -> None:
    lib = kernel.attention()
    assert lib is not None
    q = torch.randn(1, 2, 16)
    keys = torch.randint(-127, 128, (1, 8, 16), dtype=torch.int8)
    values = torch.randint(-127, 128, (1, 8, 16), dtype=torch.int8)
    scales = torch.full((1, 2, 16), 0.01, dtype=torch.float16), torch.full((1, 8), 0.02).half()
    step = torch.arange(8)[None], torch.tensor([8])  # pages of 4 slots
    tail = torch.randn(1, 1, 4, 16)  # [L, H, P, D]: positions 5…7 in its first 3 rows
    address = torch.tensor([tail.data_ptr()])
    got = kernel.decode_attention_q8(
        lib, q, (keys, values), scales, step, (address, torch.tensor([5]), 0), 0.25
    )
    k = keys[0].float() * scales[0][0, 0].float()  # (float16 0.01)
    k[5:] = tail[0, 0, :3]
    v = values[0].float() * scales[1][0, :, None].float()
    want = torch.nn.functional.scaled_dot_product_attention(q[0][:, None], k[None], v[None],
                                                            scale=0.25)[:, 0]  # fmt: skip
    assert torch.allclose(got[0], want, atol=1e-5)
    with pytest.raises(ValueError, match="tail at most a page"):  # 6 positions from the tail
        kernel.decode_attention_q8(
            lib, q, (keys, values), scales, step, (address, torch.tensor([2]), 0), 0.25
        )


def test_int8_attention_refuses_pages_whose_head_size_is_not_the_querys() -> None:
    """q's head size 16, the pages' rows 32 (with K scales of 16 channels): the kernel steps
    through the pages by q's 16 (reading each key from the wrong bytes; pages of rows shorter
    than q's heads: past their end), so it is refused before any read."""
    lib = kernel.attention()
    assert lib is not None
    q = torch.randn(1, 2, 16)
    keys = values = torch.ones(1, 8, 32, dtype=torch.int8)
    scales = torch.full((1, 2, 16), 0.01, dtype=torch.float16), torch.full((1, 8), 0.02).half()
    step = torch.arange(8)[None], torch.tensor([8])
    none = torch.zeros(1, dtype=torch.int64), torch.tensor([8]), 0
    with pytest.raises(ValueError, match="laid out"):
        kernel.decode_attention_q8(lib, q, (keys, values), scales, step, none, 0.25)


@pytest.mark.parametrize("dim", [64, 24])  # (24: the head size not a whole number of vectors)
def test_int8_attention_gives_each_query_head_of_a_group_its_own_scores(dim: int) -> None:
    """Three query heads per K/V head (each block of keys de-quantised once for the group):
    every head against SDPA over the de-quantised K/V (the load check's comparison), sequences
    of different lengths, two of them reading their last positions from a tail."""
    lib = kernel.attention()
    assert lib is not None
    gen = torch.Generator().manual_seed(dim)
    q = torch.randn(3, 6, dim, generator=gen)  # [G, Hq, D] over 2 K/V heads
    slots = torch.stack([torch.randperm(40, generator=gen) for _ in range(3)])
    assert kernel._int8_attention_agrees(lib, gen, q, slots, torch.tensor([40, 17, 1]))
