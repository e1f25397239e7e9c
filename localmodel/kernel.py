"""cachegate's own kernels for the CPU (``linear.c``, ``ops.c``), compiled on this machine.

A decode step multiplies a few rows by every weight once, so on a CPU it is bound by how fast
the weights stream from memory. The libraries torch calls read them at about half of what a
plain read reaches on one row (measured over the bundled model's 211 weight shapes on this
project's 2-core CPU, one thread: MKL 45 ms a step, oneDNN packed 39–41 ms, OpenBLAS 39 ms,
against 19–20 ms for ``sum()`` over the same bytes). The kernel keeps each weight in tiles of
16 output features (``pack``), one sequential read per tile, each load multiplied into every
row's accumulator: 23–27 ms at one row, 31–32 ms at 8 rows (oneDNN 42–44 ms), and on par with
oneDNN at 16–256 rows (prefill). ``localmodel.weights.NativeLinear`` uses it. The same tiles in
int8 with one scale per output feature (``pack_q8``, :func:`linear_q8`) serve
``localmodel.weights.Int8Linear``'s decode steps: 10–11 ms at one row, 24 ms at 8 rows,
against 23 and 58 ms for torch's int8 kernel on bfloat16 activations, and with float32
activations.

``ops.c`` holds a batched decode step's attention (:func:`decode_attention`, used by
``localmodel.batch`` on float32, bfloat16 and float16 pages): each sequence's new token over
its own K/V, read in place in the pages by slot, where torch needed a gather of every
sequence's K/V and an SDPA call over them padded to the longest (measured for 8 sequences of
~100 tokens, the bundled model's heads: ~60 µs a layer against ~115 µs for SDPA alone; a step
~10% faster end to end).

``layer.c`` holds a decoder layer's small ops (RMSNorm with its residual add, RoPE in place;
``ops.c`` the gated MLP's SiLU × up) and a whole Llama-shaped layer's decode step in one call
(:func:`decoder_layer`: those ops and the kernels above, in the order ``localmodel.lean`` runs
them op by op), which ``localmodel.lean`` uses: per call they are one C call where torch
needed ~7 (a norm), ~14 (RoPE) and ~80 ops (a layer) of a few microseconds of dispatch each.

It is C, compiled once per process at first use by the system's C compiler (``$CC``, a
command with its arguments as make reads it, else ``cc``) with ``-O3 -march=native -fopenmp``
into a temporary directory (~0.6 s), then loaded with ctypes (which lets go of the GIL during
each call). Where there is no compiler, the build fails, or the result disagrees with
torch on a check at load, :func:`library` (``F.linear``) or :func:`attention` (SDPA) returns
None with the reason logged: ``weights: auto`` keeps oneDNN, batched decodes keep SDPA.

Every output is one chain of fused multiply-adds over the inputs in order, whatever the
number of rows, so a row's result is bitwise the same alone or in any batch.

**Threads.** Each call is split over ``torch.get_num_threads()`` threads (the engine's
``threads``), by whole outputs: a linear layer's tiles, the attention's (sequence, query head)
pairs, each computed by one thread as one thread computes it, so results are bitwise the same
at any thread count. The split is an OpenMP parallel region, and the library links the
OpenMP runtime torch has loaded (``libgomp.so.1``, the same name): one pool of threads serves
torch's ops and these kernels. (A pool of the kernels' own was tried first: its workers,
waiting between calls, and torch's, waiting between ops, took the cores from each other, and a
prefill at two threads took 4× as long as at one.) NOTE: libgomp's threads spin between
regions (so the next call of a step finds them awake) only while the process holds no more
OpenMP threads than CPUs: every thread that has run a region of more than one thread keeps
a team for as long as it lives. Where another long-lived thread does (llama.cpp on the main
thread, in a benchmark), they sleep between regions and each call pays a wake-up: measured,
a 2-thread engine's products 1.5× slower. cachegate's embedder and verifier run one thread
each, and the engine's worker is the thread that runs the model. Measured over the bundled model's 211
weight shapes on this project's 2-core CPU, 1 → 2 threads: 23 → 18 ms at one row, 31 → 22 ms
at 8 rows, 56 → 31 ms at 16, 672 → 356 ms at 256 (torch's MKL at 2 threads: 47, 61, 71 and
422 ms).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from importlib import resources

import torch

__all__ = [
    "PAGE_DTYPES",
    "STEP_PAGE_DTYPES",
    "TILE",
    "LayerParams",
    "Q8Pages",
    "attention",
    "decode_attention",
    "decode_attention_q8",
    "decoder_layer",
    "layer_params",
    "library",
    "linear",
    "linear_q8",
    "pack",
    "pack_q8",
    "q8_pages",
    "rms_norm",
    "rope",
    "silu_mul",
    "threads_per_call",
    "unpack",
]

logger = logging.getLogger("cachegate.localmodel")

#: The K/V page dtypes :func:`decode_attention` reads, and the kind ``ops.c`` takes for each.
PAGE_DTYPES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}

#: The page dtypes :func:`decoder_layer` writes (float16 pages: the layer's ops, one by one).
STEP_PAGE_DTYPES = (torch.float32, torch.bfloat16)

#: Output features per tile of a packed weight.
TILE = 16

_SOURCES = ("linear.c", "ops.c", "layer.c")
#: what the sources include, copied beside them
_HEADERS = ("vec.h",)
_FLAGS = ("-O3", "-march=native", "-shared", "-fPIC")


@functools.cache
def library() -> ctypes.CDLL | None:
    """The compiled kernels (built once per process, the linear ones checked), or None where
    they cannot be."""
    compiler = os.environ.get("CC") or "cc"
    lib = build(compiler)
    if lib is not None and not _agrees(lib):
        logger.warning("localmodel: the native linear kernel disagrees with torch; not used")
        return None
    return lib


@functools.cache
def attention() -> ctypes.CDLL | None:
    """:func:`library` where its attention kernel (:func:`decode_attention`) also agrees with
    SDPA (checked once per process), else None: the linear kernel is used either way."""
    lib = library()
    if lib is not None and not _attention_agrees(lib, torch.Generator().manual_seed(0)):
        logger.warning("localmodel: the native attention kernel disagrees with SDPA; not used")
        return None
    return lib


def threads_per_call(threads: int) -> int | None:
    """How many threads a kernel call runs on where torch runs ``threads``: ``threads`` where
    the library is built with OpenMP, 1 where it is built without; None where it is not
    built."""
    lib = library()
    if lib is None:
        return None
    return threads if lib.cachegate_openmp() else 1


def build(compiler: str, openmp: bool = True) -> ctypes.CDLL | None:
    """Compile ``linear.c``, ``ops.c``, ``layer.c`` with ``compiler`` (a command, arguments
    too, as make reads ``$CC``: ``ccache gcc``) and load them; None (reason logged) on failure.

    With ``openmp`` (the default) they are built with ``-fopenmp`` first, and kept so only if
    they bound to the OpenMP runtime torch already runs on (no other one was loaded with
    them); otherwise, where the compiler has no OpenMP, or where no runtime of torch's is
    seen (none mapped, or ``/proc/self/maps`` unreadable: not Linux), built without it: each
    call then runs on the calling thread alone."""
    command = _command(compiler)
    if not command or shutil.which(command[0]) is None:
        logger.info(
            "localmodel: no C compiler (%r): the native linear kernel is not built", compiler
        )
        return None
    if openmp:
        before = _openmp_runtimes()
        # (none seen: torch runs none, or they cannot be listed; either way not one to bind to)
        lib, failure = (
            _compile(command, ("-fopenmp",))
            if before
            else (None, "no OpenMP runtime of torch's seen")
        )
        if lib is not None and not _openmp_runtimes() - before:
            return _declared(lib)
        why = failure or "its OpenMP runtime is not the one torch runs on"
        logger.info("localmodel: the native kernels are built without OpenMP (one thread a "
                    "call): %s", why)  # fmt: skip
    lib, failure = _compile(command, ())
    if lib is None:
        logger.warning("localmodel: %s", failure)
        return None
    return _declared(lib)


def _compile(command: list[str], flags: tuple[str, ...]) -> tuple[ctypes.CDLL | None, str]:
    """The sources compiled by ``command`` with :data:`_FLAGS` and ``flags``, loaded; or None
    and why not."""
    with tempfile.TemporaryDirectory(prefix="cachegate-kernel-") as workdir:
        out = os.path.join(workdir, "kernels.so")
        for name in _SOURCES + _HEADERS:
            with open(os.path.join(workdir, name), "wb") as file:
                file.write(resources.files("localmodel").joinpath(name).read_bytes())
        sources = [os.path.join(workdir, name) for name in _SOURCES]
        try:
            done = subprocess.run([*command, *_FLAGS, *flags, *sources, "-o", out],
                                  capture_output=True, text=True, timeout=120)  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"compiling the native linear kernel failed: {exc}"
        if done.returncode != 0:
            return None, f"compiling the native linear kernel failed: {done.stderr.strip()[-500:]}"
        try:
            return ctypes.CDLL(out), ""  # (mapped: the file may go with its directory)
        except OSError as exc:  # e.g. a temporary directory mounted noexec
            return None, f"loading the native linear kernel failed: {exc}"


def _openmp_runtimes() -> set[str]:
    """The files of the OpenMP runtimes mapped into this process (GNU, LLVM, Intel); empty
    where ``/proc/self/maps`` cannot be read."""
    try:
        with open("/proc/self/maps") as maps:
            return {line.split()[-1] for line in maps if _OPENMP_RUNTIME.search(line)}
    except OSError:
        return set()


_OPENMP_RUNTIME = re.compile(r"/lib(gomp|omp|iomp5)[^/]*\.so[^/]*$")


def _declared(lib: ctypes.CDLL) -> ctypes.CDLL:
    """``lib`` with its functions' argument and result types declared."""
    lib.cachegate_linear_f32.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_long] * 3 + [ctypes.c_int]
    lib.cachegate_linear_f32.restype = ctypes.c_int
    lib.cachegate_linear_q8.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_long] * 3 + [ctypes.c_int]
    lib.cachegate_linear_q8.restype = ctypes.c_int
    lib.cachegate_decode_attention.argtypes = (
        [ctypes.c_void_p] * 3 + [ctypes.c_int, ctypes.c_long] + [ctypes.c_void_p] * 2
        + [ctypes.c_long] * 5 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
    )  # fmt: skip
    lib.cachegate_decode_attention.restype = ctypes.c_int
    lib.cachegate_rms_norm.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_long] * 2 + [ctypes.c_float]
    lib.cachegate_rms_norm.restype = None
    pointer, size = ctypes.c_void_p, ctypes.c_long
    lib.cachegate_rope.argtypes = [pointer, size, pointer, pointer, size, size, size]
    lib.cachegate_rope.restype = None
    lib.cachegate_decoder_layer.argtypes = (
        [pointer] * 7 + [ctypes.c_int, size] + [pointer] * 3 + [size, size, ctypes.c_int, pointer]
    )
    lib.cachegate_decoder_layer.restype = ctypes.c_int
    lib.cachegate_decode_attention_q8.argtypes = (
        [pointer] * 5 + [size, size] + [pointer] * 4 + [size] * 6
        + [ctypes.c_float, pointer, ctypes.c_int]
    )  # fmt: skip
    lib.cachegate_decode_attention_q8.restype = ctypes.c_int
    lib.cachegate_silu_mul.argtypes = [pointer, pointer, size, size]
    lib.cachegate_silu_mul.restype = None
    lib.cachegate_openmp.argtypes = []
    lib.cachegate_openmp.restype = ctypes.c_int
    return lib


def _command(compiler: str) -> list[str]:
    if shutil.which(compiler):  # (a path with spaces in it, unquoted)
        return [compiler]
    try:
        return shlex.split(compiler)
    except ValueError:  # (an unclosed quote: no command)
        return []


def pack(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` [out, in] (float32 or int8) as the kernel reads it: [ceil(out/16), in, 16],
    the last tile's missing output features zero."""
    out, inner = weight.shape
    tiles = -(-out // TILE)
    padded = torch.zeros(tiles * TILE, inner, dtype=weight.dtype)
    padded[:out] = weight.detach()
    return padded.view(tiles, TILE, inner).transpose(1, 2).contiguous()


def pack_q8(q: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An int8 weight ``q`` [out, in] with its per-output-feature ``scale`` [out] as
    :func:`linear_q8` reads them: the tiles, and the scales padded to whole tiles."""
    tiles = -(-q.shape[0] // TILE)
    padded = torch.zeros(tiles * TILE, dtype=torch.float32)
    padded[: q.shape[0]] = scale
    return pack(q.to(torch.int8)), padded


def unpack(packed: torch.Tensor, out: int) -> torch.Tensor:
    """The [out, in] weight ``packed`` holds (a copy)."""
    tiles, inner, _ = packed.shape
    return packed.transpose(1, 2).reshape(tiles * TILE, inner)[:out].contiguous()


def linear(
    lib: ctypes.CDLL, packed: torch.Tensor, x: torch.Tensor, out: int, bias: torch.Tensor | None
) -> torch.Tensor:
    """``x`` [..., in] (float32, contiguous, on the CPU) times the weight ``packed`` holds, plus
    ``bias`` (float32, contiguous): [..., out]."""
    # NOTE: lean on purpose: a decode step makes ~200 of these calls, and each line here costs
    # about a microsecond (the product itself, one row of a 576×576 layer, is ~10 µs)
    y = torch.empty((*x.shape[:-1], out), dtype=torch.float32)
    inner = packed.shape[1]
    failed = lib.cachegate_linear_f32(packed.data_ptr(), x.data_ptr(), y.data_ptr(),
                                      None if bias is None else bias.data_ptr(),
                                      x.numel() // inner, inner, out, torch.get_num_threads())  # fmt: skip
    return _checked(failed, y)


def linear_q8(
    lib: ctypes.CDLL,
    packed: torch.Tensor,
    scale: torch.Tensor,
    x: torch.Tensor,
    out: int,
    bias: torch.Tensor | None,
) -> torch.Tensor:
    """:func:`linear` for int8 tiles and their padded scales (:func:`pack_q8`)."""
    y = torch.empty((*x.shape[:-1], out), dtype=torch.float32)
    inner = packed.shape[1]
    failed = lib.cachegate_linear_q8(packed.data_ptr(), scale.data_ptr(), x.data_ptr(),
                                     y.data_ptr(), None if bias is None else bias.data_ptr(),
                                     x.numel() // inner, inner, out, torch.get_num_threads())  # fmt: skip
    return _checked(failed, y)


def rms_norm(
    lib: ctypes.CDLL,
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    delta: torch.Tensor | None = None,
    h: torch.Tensor | None = None,
) -> torch.Tensor:
    """RMSNorm of each row of ``x`` [rows, n] (float32, contiguous, on the CPU) scaled by
    ``weight`` [n]: a new [rows, n]. With ``delta`` (like ``x``), the rows of ``x + delta``,
    which are written into ``h`` (like ``x``; may be ``x`` itself) — the residual add of a
    decoder layer and the norm after it in one call."""
    y = torch.empty_like(x)
    rows, n = x.shape
    lib.cachegate_rms_norm(x.data_ptr(), None if delta is None else delta.data_ptr(),
                           None if h is None else h.data_ptr(), weight.data_ptr(), y.data_ptr(),
                           rows, n, eps)  # fmt: skip
    return y


def rope(
    lib: ctypes.CDLL, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads: int, d: int
) -> None:
    """Rotate, in place, the first ``heads`` heads of size ``d`` of each row of ``x`` [rows, …]
    (float32, rows contiguous, on the CPU) by ``cos``, ``sin`` (the model's rotary embedding for
    each row's position, ``rows · d`` float32, contiguous), rotate-half form."""
    rows = x.shape[0]
    if cos.numel() != rows * d or sin.numel() != rows * d or x.shape[1] < heads * d:
        raise ValueError("localmodel: rope: cos, sin or the rows do not match")
    cos, sin = cos.contiguous(), sin.contiguous()
    lib.cachegate_rope(x.data_ptr(), x.stride(0), cos.data_ptr(), sin.data_ptr(), rows, heads, d)


def decode_attention(
    lib: ctypes.CDLL,
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    slots: torch.Tensor,
    lengths: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """One new token per sequence attending to its cached K/V, read in place from the pages.

    ``q`` [G, Hq, D] (float32); ``keys``, ``values``: one layer of the pool, [Hkv, slots, D],
    in one of :data:`PAGE_DTYPES` (widened to float32 as they are read); ``slots`` [G, S]
    (int64), sequence ``g``'s K/V at ``slots[g, :lengths[g]]`` (int64); all contiguous, on the
    CPU. Returns [G, Hq, D]: softmax(scale · q·Kᵀ) · V per head, query head ``h`` reading K/V
    head ``h // (Hq // Hkv)``. Arguments the kernel would read out of bounds (heads not in
    whole groups, other dtypes or shapes, a length outside ``1…S``, a slot outside the pages)
    raise ValueError."""
    G, Hq, D = q.shape
    _check_attention(q, keys, values, slots, lengths)
    out = torch.empty_like(q)
    failed = lib.cachegate_decode_attention(
        q.data_ptr(), keys.data_ptr(), values.data_ptr(), PAGE_DTYPES[keys.dtype], keys.shape[1],
        slots.data_ptr(), lengths.data_ptr(), G, slots.shape[1], Hq, keys.shape[0], D, scale,
        out.data_ptr(), torch.get_num_threads(),
    )  # fmt: skip
    why = (
        f"lengths must be 1…{slots.shape[1]} (slots' columns) and each slot a sequence reads one "
        f"of the {keys.shape[1]} of the pages"
    )
    return _checked(failed, out, f"decode_attention: {why}")


class LayerParams(ctypes.Structure):
    """``layer.c``'s ``struct cachegate_layer``: a Llama-shaped decoder layer's weights (tiles)
    and sizes. Build with :func:`layer_params`, which keeps the tensors it points into."""

    _fields_ = [
        *[(name, ctypes.c_void_p) for name in (
            "norm1", "norm2", "qkv", "qkv_bias", "o", "o_bias", "gate_up", "gate_up_bias",
            "down", "down_bias", "qkv_scale", "o_scale", "gate_up_scale", "down_scale")],
        *[(name, ctypes.c_long) for name in (
            "hidden", "heads", "kv_heads", "head_dim", "intermediate")],
        ("eps", ctypes.c_float),
        ("scale", ctypes.c_float),
    ]  # fmt: skip
    tensors: tuple[torch.Tensor | None, ...]


def layer_params(
    norms: tuple[torch.Tensor, torch.Tensor],
    eps: float,
    tiles: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    biases: tuple[torch.Tensor | None, ...],
    sizes: tuple[int, int, int, int, int],
    scale: float,
    scales: tuple[torch.Tensor, ...] | None = None,
) -> LayerParams:
    """A layer for :func:`decoder_layer`: the two norms' weights; the tiles (:func:`pack`, or
    :func:`pack_q8` with their ``scales``) of q|k|v stacked, o, gate|up stacked, down, and
    their biases (None: none); sizes (hidden, heads, kv_heads, head_dim, intermediate). Every
    tensor contiguous on the CPU, float32 but int8 tiles (ValueError otherwise); the result
    holds them (the C side reads their memory)."""
    hidden, heads, kv_heads, d, inter = sizes
    qkv = (heads + 2 * kv_heads) * d
    outs = (qkv, hidden, 2 * inter, hidden)
    ins = (hidden, heads * d, hidden, inter)
    dtype = torch.float32 if scales is None else torch.int8
    want = [((hidden,), torch.float32)] * 2 + [
        (((n + TILE - 1) // TILE, k, TILE), dtype) for n, k in zip(outs, ins, strict=True)
    ]
    want += [(((n + TILE - 1) // TILE * TILE,), torch.float32) for n in outs if scales is not None]
    for t, (shape, kind) in zip((*norms, *tiles, *(scales or ())), want, strict=True):
        if tuple(t.shape) != shape or t.dtype != kind or not t.is_contiguous():
            raise ValueError(f"localmodel: layer_params: {tuple(t.shape)} {t.dtype}, not {shape}")
    for b, n in zip(biases, outs, strict=True):
        if b is not None and (tuple(b.shape) != (n,) or b.dtype != torch.float32
                              or not b.is_contiguous()):  # fmt: skip
            raise ValueError(f"localmodel: layer_params: a bias of {tuple(b.shape)}, not ({n},)")
    ptr = [None if t is None else t.data_ptr() for t in (
        norms[0], norms[1], tiles[0], biases[0], tiles[1], biases[1], tiles[2], biases[2],
        tiles[3], biases[3], *(scales or (None,) * 4))]  # fmt: skip
    params = LayerParams(*ptr, hidden, heads, kv_heads, d, inter, eps, scale)
    params.tensors = (*norms, *tiles, *biases, *(scales or ()))  # (kept alive with the struct)
    return params


class Q8Pages(ctypes.Structure):
    """``layer.c``'s ``struct cachegate_q8_pages``: what a decode step on int8 pages takes
    beyond the pages (:func:`decoder_layer`'s ``q8``). Build with :func:`q8_pages`."""

    _fields_ = [
        ("key_scales", ctypes.c_void_p),
        ("value_scales", ctypes.c_void_p),
        ("page_size", ctypes.c_long),
        ("bases", ctypes.c_void_p),
        ("tails", ctypes.c_void_p),
        ("tail_starts", ctypes.c_void_p),
        ("tail_offset", ctypes.c_long),
    ]
    tensors: tuple[torch.Tensor, ...]


def q8_pages(
    scales: tuple[torch.Tensor, torch.Tensor],
    bases: torch.Tensor,
    tails: tuple[torch.Tensor, torch.Tensor, int],
) -> Q8Pages:
    """:func:`decoder_layer`'s ``q8``: ``scales`` as :func:`decode_attention_q8` takes them;
    ``bases``: each sequence's full-precision tail's address (float32 [L, Hkv, P, D], never
    0: its new K goes into row ``write % P``, and a page it fills is quantised from there);
    ``tails`` as :func:`decode_attention_q8` takes them (0 for a sequence whose new token
    fills its page). ValueError unless laid out so; the result holds the tensors."""
    k_scales, v_scales = scales
    addresses, starts, offset = tails
    G = bases.shape[0] if bases.dim() == 1 else -1
    ok = (
        k_scales.dtype == v_scales.dtype == torch.float16 and k_scales.dim() == 3
        and v_scales.dim() == 2 and k_scales.shape[1] > 0
        and v_scales.shape[1] % k_scales.shape[1] == 0
        and all(t.is_contiguous() and t.is_cpu for t in (k_scales, v_scales, bases, *tails[:2]))
        and bases.dtype == addresses.dtype == starts.dtype == torch.int64
        and addresses.shape == starts.shape == (G,) and offset >= 0
    )  # fmt: skip
    if not ok:
        raise ValueError("localmodel: q8_pages: tensors not laid out as it takes them")
    q8 = Q8Pages(k_scales.data_ptr(), v_scales.data_ptr(), v_scales.shape[1] // k_scales.shape[1],
                 bases.data_ptr(), addresses.data_ptr(), starts.data_ptr(), offset)  # fmt: skip
    q8.tensors = (k_scales, v_scales, bases, addresses, starts)
    return q8


def decoder_layer(
    lib: ctypes.CDLL,
    params: LayerParams,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    pages: tuple[torch.Tensor, torch.Tensor],
    step: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    q8: Q8Pages | None = None,
) -> torch.Tensor:
    """A decode step of ``G`` sequences through one Llama-shaped layer in one call (``layer.c``).

    ``x`` [G, hidden] (float32, contiguous): the residual stream; ``cos``, ``sin``: each
    sequence's rotary embedding (``G · head_dim`` floats, contiguous); ``pages``: the layer's
    K and V pages, [kv_heads, slots, head_dim], in one of :data:`STEP_PAGE_DTYPES` (the new
    K/V rounded to bfloat16 as torch rounds); ``step``: ``writes`` [G], the slot
    each new token's K/V go into, and ``slots`` [G, S], ``lengths`` [G] as
    :func:`decode_attention` takes them, the new token's slot last (all int64); int8 pages
    with ``q8`` (:func:`q8_pages`: the new K/V quantised as ``PagedCache`` does it, bitwise,
    and read as :func:`decode_attention_q8` reads them). Returns the layer's output
    [G, hidden]. Arguments out of bounds or not laid out so (another dtype, not contiguous,
    not on the CPU) raise ValueError (nothing written)."""
    keys, values = pages
    writes, slots, lengths = step
    G, d = x.shape[0], params.head_dim
    ok = (
        x.dim() == 2 and x.shape[1] == params.hidden and x.dtype == torch.float32
        and x.is_contiguous() and cos.numel() == sin.numel() == G * d
        and cos.dtype == sin.dtype == torch.float32  # (else read as float32 past their end)
        and keys.dtype == values.dtype
        and (keys.dtype in STEP_PAGE_DTYPES if q8 is None else keys.dtype == torch.int8)
        and (q8 is None or (q8.tensors[1].shape == keys.shape[:2] and q8.tensors[2].shape == (G,)
                            and q8.tensors[0].shape[::2] == (keys.shape[0], d)))
        and keys.is_contiguous()
        and values.is_contiguous()  # (an expanded or strided view: written past its memory)
        and values.shape == keys.shape and keys.dim() == 3
        and all(t.is_cpu for t in (x, cos, sin, keys, values, *step))
        and keys.shape[0] == params.kv_heads and keys.shape[2] == d
        and writes.shape == (G,) and slots.dim() == 2 and slots.shape[0] == G
        and lengths.shape == (G,)
        and writes.dtype == slots.dtype == lengths.dtype == torch.int64
        and writes.is_contiguous() and slots.is_contiguous() and lengths.is_contiguous()
    )  # fmt: skip
    if not ok:
        raise ValueError("localmodel: decoder_layer: tensors not laid out as it takes them")
    cos, sin = cos.contiguous(), sin.contiguous()
    y = torch.empty_like(x)
    failed = lib.cachegate_decoder_layer(
        ctypes.byref(params), x.data_ptr(), y.data_ptr(), cos.data_ptr(), sin.data_ptr(),
        keys.data_ptr(), values.data_ptr(), PAGE_DTYPES.get(keys.dtype, -1), keys.shape[1],
        writes.data_ptr(), slots.data_ptr(), lengths.data_ptr(), G, slots.shape[1],
        torch.get_num_threads(), None if q8 is None else ctypes.byref(q8),
    )  # fmt: skip
    why = "lengths must be 1…S, each slot one of the pages', each write the sequence's last slot"
    why += "" if q8 is None else ", each tail its sequence's"
    return _checked(failed, y, f"decoder_layer: {why}")


def silu_mul(lib: ctypes.CDLL, gate_up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) · up`` of each row of ``gate_up`` [rows, 2n] (float32, contiguous, on the
    CPU; gate then up in each row): [rows, n]."""
    rows, n = gate_up.shape[0], gate_up.shape[1] // 2
    y = gate_up.new_empty((rows, n))
    lib.cachegate_silu_mul(gate_up.data_ptr(), y.data_ptr(), rows, n)
    return y


def decode_attention_q8(
    lib: ctypes.CDLL,
    q: torch.Tensor,
    pages: tuple[torch.Tensor, torch.Tensor],
    scales: tuple[torch.Tensor, torch.Tensor],
    step: tuple[torch.Tensor, torch.Tensor],
    tails: tuple[torch.Tensor, torch.Tensor, int],
    scale: float,
) -> torch.Tensor:
    """:func:`decode_attention` over int8 pages (``kv_dtype: int8``), de-quantised as they
    are read, each product as ``localmodel.kvquant.dequantize`` computes it.

    ``pages``: one layer's int8 K and V, [Hkv, slots, D]; ``scales``: K's per page and
    channel [Hkv, slots / P, D] and V's per token [Hkv, slots] (float16; P the page size);
    ``step``: ``slots`` [G, S] and ``lengths`` [G] as :func:`decode_attention` takes them;
    ``tails``: per sequence the address of its full-precision tail (float32 [L, Hkv, P, D],
    0: none) and the position its rows start at (int64 [G] each), and the byte offset of
    this layer's rows in a tail: positions from that start on are read from there. Arguments
    out of bounds raise ValueError."""
    keys, values = pages
    k_scales, v_scales = scales
    slots, lengths = step
    addresses, starts, offset = tails
    G, Hq, D = q.shape
    H, n_slots, _ = keys.shape
    ok = (
        keys.dtype == values.dtype == torch.int8 and values.shape == keys.shape
        and k_scales.dtype == v_scales.dtype == torch.float16 and k_scales.dim() == 3
        and k_scales.shape[0] == H and k_scales.shape[2] == D and k_scales.shape[1] > 0
        and n_slots % k_scales.shape[1] == 0 and tuple(v_scales.shape) == (H, n_slots)
        and keys.shape[2] == D  # (rows of another size: read past the pages' end)
        and addresses.shape == starts.shape == (G,)
        and addresses.dtype == starts.dtype == torch.int64
        and all(t.is_contiguous() for t in (keys, values, k_scales, v_scales, addresses, starts))
        and all(t.is_cpu for t in (q, keys, values, k_scales, v_scales, *step, *tails[:2]))
        and q.dtype == torch.float32 and q.is_contiguous() and Hq % H == 0
        and slots.dtype == lengths.dtype == torch.int64 and slots.dim() == 2
        and slots.shape[0] == G and lengths.shape == (G,)
        and slots.is_contiguous() and lengths.is_contiguous()
    )  # fmt: skip
    if not ok:
        raise ValueError("localmodel: decode_attention_q8: tensors not laid out as it takes them")
    out = torch.empty_like(q)
    failed = lib.cachegate_decode_attention_q8(
        q.data_ptr(), keys.data_ptr(), values.data_ptr(), k_scales.data_ptr(), v_scales.data_ptr(),
        n_slots // k_scales.shape[1], n_slots, slots.data_ptr(), lengths.data_ptr(),
        addresses.data_ptr(), starts.data_ptr(), offset, G, slots.shape[1], Hq, H, D, scale,
        out.data_ptr(), torch.get_num_threads(),
    )  # fmt: skip
    why = "lengths must be 1…S, each slot one of the pages', each tail at most a page"
    return _checked(failed, out, f"decode_attention_q8: {why}")


def _check_attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    slots: torch.Tensor,
    lengths: torch.Tensor,
) -> None:
    """ValueError unless the tensors are laid out as :func:`decode_attention` says (``ops.c``
    reads raw pointers; lengths and slot values it checks itself)."""
    G, Hq, D = q.shape
    problem = None
    if keys.dim() != 3 or keys.shape[0] < 1 or Hq % keys.shape[0]:
        problem = f"{Hq} query heads are not whole groups of the {keys.shape[0]} K/V heads"
    elif q.dtype != torch.float32 or keys.dtype not in PAGE_DTYPES or values.dtype != keys.dtype:
        problem = (
            f"dtypes: q {q.dtype} must be float32, keys {keys.dtype} and values "
            f"{values.dtype} one of PAGE_DTYPES"
        )
    elif slots.dtype != torch.int64 or lengths.dtype != torch.int64:
        problem = f"slots ({slots.dtype}) and lengths ({lengths.dtype}) must be int64"
    elif values.shape != keys.shape or keys.shape[2] != D:
        problem = f"the pages' shape {tuple(keys.shape)} / {tuple(values.shape)}: head size {D}"
    elif slots.dim() != 2 or slots.shape[0] != G or lengths.shape != (G,):
        problem = f"slots {tuple(slots.shape)}, lengths {tuple(lengths.shape)}: {G} sequences"
    elif not (q.is_contiguous() and keys.is_contiguous() and values.is_contiguous()):
        problem = "q, keys and values must be contiguous"
    elif not (slots.is_contiguous() and lengths.is_contiguous()):
        problem = "slots and lengths must be contiguous"
    elif not (q.is_cpu and keys.is_cpu and values.is_cpu and slots.is_cpu and lengths.is_cpu):
        problem = "every tensor must be on the CPU"
    if problem is not None:
        raise ValueError(f"localmodel: decode_attention: {problem}")


def _checked(failed: int, y: torch.Tensor, invalid: str = "") -> torch.Tensor:
    """``y``, or the error a kernel's return value says: -1 out of memory, -2 arguments
    out of bounds (``invalid`` says which; ops.c's own check: nothing was read or written)."""
    if failed == -2:
        raise ValueError(f"localmodel: {invalid}")
    if failed:
        raise MemoryError("localmodel: a native kernel could not allocate its buffer")
    return y


def _agrees(lib: ctypes.CDLL) -> bool:
    """Whether the linear kernels compute ``F.linear`` on awkward shapes: outputs not a
    multiple of a tile, rows past a chunk of the transposed inputs, a bias, one row; float32
    and int8."""
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(37, 45, generator=generator)
    q = torch.randint(-127, 128, (37, 45), generator=generator, dtype=torch.int8)
    scale = torch.rand(37, generator=generator) / 100
    bias = torch.randn(37, generator=generator)
    packed, (packed8, scales) = pack(weight), pack_q8(q, scale)
    for rows in (1, 3, 19):
        x = torch.randn(rows, 45, generator=generator)
        got = linear(lib, packed, x, 37, bias)
        got8 = linear_q8(lib, packed8, scales, x, 37, bias)
        want = torch.nn.functional.linear(x, weight, bias)
        want8 = torch.nn.functional.linear(x, q.float() * scale[:, None], bias)
        if not (_close(got, want) and _close(got8, want8)):
            return False
    return True


def _attention_agrees(lib: ctypes.CDLL, generator: torch.Generator) -> bool:
    """Whether the attention kernel computes SDPA over scattered slots of different lengths
    with grouped-query heads: every page dtype, a head size it specialises (64) and one it
    does not (20)."""
    lengths = torch.tensor([5, 1, 17])
    slots = torch.stack([torch.randperm(40, generator=generator)[:17] for _ in range(3)])
    for dim in (20, 64):
        keys, values = torch.randn(2, 2, 40, dim, generator=generator)
        q = torch.randn(3, 6, dim, generator=generator)
        for dtype in PAGE_DTYPES:
            k_pages, v_pages = keys.to(dtype), values.to(dtype)
            got = decode_attention(lib, q, k_pages, v_pages, slots, lengths, 0.3)
            for g, n in enumerate(lengths.tolist()):
                k, v = k_pages[:, slots[g, :n]].float(), v_pages[:, slots[g, :n]].float()
                want = torch.nn.functional.scaled_dot_product_attention(
                    q[g][:, None], k, v, scale=0.3, enable_gqa=True
                )[:, 0]  # [6, dim]
                if not _close(got[g], want):
                    return False
        if not _int8_attention_agrees(lib, generator, q, slots, lengths):
            return False
    return True


def _int8_attention_agrees(
    lib: ctypes.CDLL,
    generator: torch.Generator,
    q: torch.Tensor,
    slots: torch.Tensor,
    lengths: torch.Tensor,
) -> bool:
    """:func:`decode_attention_q8` against SDPA over the same K/V de-quantised: pages of 4
    slots, two sequences reading their last positions from a tail, one with none."""
    G, _, dim = q.shape
    keys, values = torch.randint(-127, 128, (2, 2, 40, dim), generator=generator, dtype=torch.int8)
    k_scales = (torch.rand(2, 10, dim, generator=generator) / 50).half()  # per page, channel
    v_scales = (torch.rand(2, 40, generator=generator) / 50).half()  # per token
    tails = torch.randn(G, 1, 2, 4, dim, generator=generator)  # one layer's, each sequence's
    starts = lengths - torch.tensor([1, 0, 1])  # (sequence 1 has no tail)
    addresses = torch.tensor([tails[0].data_ptr(), 0, tails[2].data_ptr()])
    got = decode_attention_q8(lib, q, (keys, values), (k_scales, v_scales), (slots, lengths),
                              (addresses, starts, 0), 0.3)  # fmt: skip
    for g, n in enumerate(lengths.tolist()):
        s = slots[g, :n]
        k = keys[:, s].float() * k_scales[:, s // 4].float()  # [2, n, dim]
        if addresses[g]:
            k[:, int(starts[g]) :] = tails[g, 0, :, : n - int(starts[g])]
        v = values[:, s].float() * v_scales[:, s, None].float()
        want = torch.nn.functional.scaled_dot_product_attention(
            q[g][:, None], k, v, scale=0.3, enable_gqa=True
        )[:, 0]
        if not _close(got[g], want):
            return False
    return True


def _close(got: torch.Tensor, want: torch.Tensor) -> bool:
    return torch.allclose(got, want, rtol=1e-5, atol=1e-4)
