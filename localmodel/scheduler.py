"""Continuous batching: many requests' steps, one forward pass per step.

Every request is an :meth:`Engine.steps <localmodel.engine.Engine.steps>` coroutine that
yields a :class:`~localmodel.batch.Piece` whenever it needs logits (its prompt suffix once,
then one token per decode step). A scheduler step, as vLLM and SGLang run it::

    admit   waiting requests, oldest first, while fewer than max_batch run (tier-2 match here;
            one whose prompt shares MIN_SHARED_PREFILL tokens the tree lacks with a prompt
            being prefilled waits for that prefill, then maps them: a burst on one new
            system prompt prefills it once)
    batch   one token of every decoding request, then prefill chunks, oldest request first,
            until step_tokens are used (a long prompt is prefilled over several steps; a
            prompt's last chunk may go past them by up to MIN_PREFILL_CHUNK tokens)
    forward all pieces at once (Engine.forward_batch): the weights are read once
    reply   each finished piece's logits to its coroutine, which samples, streams text and
            asks for its next piece — or finishes (its KV goes to the prefix tree)

Fairness: admission is FIFO and every running request advances by one token a step, so no
request waits for another's whole generation and none starves. Cancellation (``request.cancel``)
is seen by the scheduler before the request's next piece is fed: it answers the piece with
None instead of logits, and the coroutine finishes ``"cancelled"`` with what it has (a prompt
cut part-way keeps the KV computed so far in the prefix tree; a preempted request is not fed
again). Its KV pages are freed at that step. A request still waiting for a slot leaves the
queue at the next step, wherever it waits (so ``pending`` counts it no more), and finishes
``"cancelled"`` too (one never admitted with nothing run). A request's sampling parameters,
stop strings, ``n`` and seed are its own (each coroutine holds its own RNG), so a request's
tokens do not depend on what it is batched with.

KV pages (``localmodel.pages``, when the engine has a pool): before the forward pass every
piece reserves the pages its tokens go into; the pool reclaims cached prefixes first, and
then any page only the tree still holds (``_reclaim_stranded``). When that is not enough (the
pool is full of running work), the youngest running request (last to arrive) is preempted:
its KV goes to the prefix tree, its pages back to the pool, and it waits at the head of the
queue. When
re-admitted it gets back what the tree still holds of its tokens (prompt and those generated
so far) and the rest is fed again, ending with the token it was about to feed, so it goes on
with the very logits it was waiting for: its continuation is the one it would have had.
A request running alone that is still short evicts the cached prefixes on its own pages too
(``Engine.reclaim_held``), and fails only if that frees no page.
(Except past the window, ``context_overflow: sinks``: a slid cache is no token prefix, the
tree keeps none of it, and its kept tokens are computed afresh, without the dropped ones.)
Admission waits while the pool cannot hold a new request's tokens beside what the running
ones have yet to feed, and after a preemption until a running request finishes (unless
nothing runs).

Example (what ``AsyncEngine``'s worker thread does)::

    scheduler = Scheduler(engine, max_batch=16, step_tokens=256)
    scheduler.add(request, send)          # send(event) -> False when the consumer is gone
    while scheduler.busy:
        scheduler.step()
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from localmodel.batch import Piece
from localmodel.engine import Engine, Event, GenerationRequest, Steps, Usage, cancelled_events
from localmodel.pages import PagedCache, PoolExhausted
from prefix import RadixKey

__all__ = ["Scheduler", "Send"]

logger = logging.getLogger(__name__)

#: Delivers an event (or the exception that ended the request); False: nobody is listening.
Send = Callable[[Event | BaseException], bool]

#: Prefill tokens a step always gets, however many sequences decode (no prefill starves).
MIN_PREFILL_CHUNK = 16
#: A new request whose prompt shares this many tokens (not in the prefix tree) with a prompt
#: being prefilled waits for that prefill and maps them (``Scheduler._prefilled_alongside``).
MIN_SHARED_PREFILL = 64


@dataclass
class _Sequence:
    request: GenerationRequest
    send: Send
    arrival: int  # the order of `add`: the highest running one is preempted first
    steps: Steps | None = None  # None until admitted
    piece: Piece | None = None  # what the coroutine waits for
    fed: int = 0  # tokens of `piece` already in the cache (chunked prefill)


class Scheduler:
    """Runs the requests given to :meth:`add` in batched steps (one thread; not thread-safe)."""

    def __init__(self, engine: Engine, *, max_batch: int, step_tokens: int) -> None:
        if max_batch < 1 or step_tokens < 1:
            raise ValueError("Scheduler: max_batch and step_tokens must be >= 1")
        self.engine = engine
        self.max_batch = max_batch
        self.step_tokens = step_tokens
        self.waiting: deque[_Sequence] = deque()
        self.running: list[_Sequence] = []
        self._arrivals = itertools.count()
        #: a preemption happened and no request has finished since: admit nothing meanwhile
        #: (the running ones need the pages; a request admitted now would be preempted again)
        self._full = False

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, request: GenerationRequest, send: Send) -> None:
        self.waiting.append(_Sequence(request, send, next(self._arrivals)))

    def fail_waiting(self, error: BaseException) -> None:
        """Answer every request not running (not yet, or preempted) with ``error`` (shutdown)."""
        while self.waiting:
            seq = self.waiting.popleft()
            _close(seq)  # (a preempted one's coroutine)
            seq.send(error)

    def fail_all(self, error: BaseException) -> None:
        """Answer every request, running or not, with ``error`` (the scheduler itself failed:
        none of them can go on from the state it was in)."""
        for seq in list(self.running):
            self._fail(seq, error)
        self.fail_waiting(error)

    def step(self) -> None:
        """Admit, run one batched forward pass, hand out its logits."""
        self._admit()
        for seq in list(self.running):  # a cancelled request's piece is not fed (see _advance)
            if seq.piece is not None and seq.request.cancel.is_set():
                self._advance(seq, None)
        batch = self._batch()
        if not batch:
            return
        pieces = [piece for _, piece in batch]
        try:
            logits = self.engine.forward_batch(pieces)  # [len(batch), vocab]
        except Exception as exc:  # e.g. out of memory: fail this step's requests, keep serving
            logger.exception("localmodel: a batched step failed")
            for seq, _ in batch:
                self._fail(seq, exc)
            return
        for i, (seq, piece) in enumerate(batch):
            assert seq.piece is not None
            seq.fed += len(piece.tokens)
            if seq.fed == len(seq.piece.tokens):
                self._advance(seq, logits[i])

    # ── helpers ───────────────────────────────────────────────────────────────────────

    def _admit(self) -> None:
        self._drop_cancelled()
        # (they keep their place at the head of the queue, and their batch slot: one behind
        # them that took it would hold it for a whole generation, not one prefill)
        deferred: list[_Sequence] = []
        while self.waiting and len(self.running) + len(deferred) < self.max_batch:
            seq = self.waiting[0]
            if self.running and (self._full or not self._fits(seq)):
                break  # the pool is busy with running requests: wait for them to finish
            self.waiting.popleft()
            if seq.steps is None and self._prefilled_alongside(seq):
                deferred.append(seq)
            elif seq.steps is None:
                seq.steps = self.engine.steps(seq.request)
                self.running.append(seq)
                self._advance(seq, None)  # tier-2 match and load, up to its first Piece
            else:  # preempted: what the tree kept comes back, the rest is fed again
                assert seq.piece is not None and isinstance(seq.piece.cache, PagedCache)
                self.running.append(seq)
                try:
                    seq.fed = self.engine.restore(seq.piece.cache, seq.piece.tokens)
                except Exception as exc:  # e.g. no page to copy a foreign span into
                    logger.exception("localmodel: a preempted request could not resume")
                    self._fail(seq, exc)
        self.waiting.extendleft(reversed(deferred))

    def _prefilled_alongside(self, seq: _Sequence) -> bool:
        """Whether a running request is prefilling a prompt that shares at least
        MIN_SHARED_PREFILL tokens with ``seq``'s beyond what the prefix tree holds of it: then
        ``seq`` waits for that prefill (a step or a few; the prompt goes to the tree as soon as
        it is prefilled) and maps those tokens, instead of computing them alongside (a burst
        of requests sharing a system prompt the tree does not hold yet)."""
        prompt, namespace = seq.request.prompt_tokens, seq.request.namespace
        shared = max(
            (_common(prompt, s.request.prompt_tokens) for s in self.running
             if s.request.namespace == namespace and _prefilling(s)),
            default=0,
        )  # fmt: skip
        tree = getattr(self.engine, "prefix_cache", None)
        if shared < MIN_SHARED_PREFILL or tree is None or not self.engine.config.prefix_cache_bytes:
            return False  # (a tree of budget 0 keeps nothing to map)
        return shared - tree.match(RadixKey(namespace, prompt), count=False).n_cached >= (
            MIN_SHARED_PREFILL
        )

    def _drop_cancelled(self) -> None:
        """Take every waiting request whose client left out of the queue, wherever it waits
        (not only once a slot frees: until then it would count as pending). One never
        admitted finishes "cancelled" with nothing run; a preempted one finishes "cancelled",
        fed nothing. A request cancelled after this is admitted and ends at the next step.

        NOTE: each one is answered: a caller may still read the stream of a request it
        cancelled (dropped unanswered, that caller waited for ever)."""
        if not any(seq.request.cancel.is_set() for seq in self.waiting):
            return
        waiting: deque[_Sequence] = deque()
        for seq in self.waiting:
            if not seq.request.cancel.is_set():
                waiting.append(seq)
            elif seq.steps is None:  # never ran
                for event in cancelled_events(Usage(0, 0, 0)):
                    seq.send(event)
            else:  # preempted
                full = self._full  # (it holds no page: its end frees none)
                self.running.append(seq)
                self._advance(seq, None)
                self._full = full
        self.waiting = waiting

    def _fits(self, seq: _Sequence) -> bool:
        """Whether the pool (if any) has room for ``seq``'s tokens, counting cached pages,
        beside the tokens the running requests have yet to feed (those admitted in this
        very loop included: each one's free pages were counted before it was admitted).

        NOTE: a request never holds more than the context window (``context_overflow:
        sinks`` shifts a longer prompt through it), so a prompt past it needs only that much.
        """
        pool = getattr(self.engine, "pool", None)
        if pool is None:
            return True
        window = getattr(self.engine, "context_window", None)

        def need(tokens: int) -> int:
            return tokens if window is None else min(tokens, window)

        n = len(seq.piece.tokens) if seq.piece is not None else len(seq.request.prompt_tokens)
        owed = sum(need(len(s.piece.tokens) - s.fed) for s in self.running if s.piece is not None)
        return bool(pool.available_pages * pool.page_size > need(n) + owed)

    def _batch(self) -> list[tuple[_Sequence, Piece]]:
        """This step's pieces, their pages reserved, preempting while the pool is short."""
        while True:
            batch = self._plan()
            try:
                for _, piece in batch:
                    if isinstance(piece.cache, PagedCache):
                        piece.cache.reserve(len(piece.tokens))
                return batch
            except PoolExhausted as exc:
                if self._reclaim_stranded():
                    continue
                youngest = max(self.running, key=lambda s: s.arrival)
                if len(self.running) > 1:
                    self._preempt(youngest)
                elif not self.engine.reclaim_held(self._caches()):  # NOTE: prepare() refuses
                    self._fail(youngest, exc)  # what cannot fit alone: the tree holds its pages

    def _reclaim_stranded(self) -> bool:
        """Free a page that only the prefix tree holds but the pool's reclaim kept (a node
        whose partly filled page a request replaced with a copy, kept by a later node on that
        request's pages: ``Engine.reclaim_held``); return whether one was freed.

        NOTE: admission counts such pages as available (``_fits``): preempting a running
        request while one is left would be needless (the pool is not full of running work).
        """
        pool = self.engine.pool
        return pool.available_pages > pool.free_pages and self.engine.reclaim_held(self._caches())

    def _caches(self) -> list[PagedCache]:
        """The page tables of the running requests."""
        pieces = [s.piece for s in self.running if s.piece is not None]
        return [p.cache for p in pieces if isinstance(p.cache, PagedCache)]

    def _preempt(self, seq: _Sequence) -> None:
        """Free ``seq``'s pages; requeue it first, to feed its tokens again from the start."""
        piece = seq.piece
        assert piece is not None and isinstance(piece.cache, PagedCache)
        history = tuple(piece.cache.tokens)
        self.engine.preempt(piece.cache)
        # NOTE: ends with the tokens the coroutine fed (or was about to): the logits of
        # re-feeding them are exactly the ones it waits for
        seq.piece = Piece(piece.cache, history + piece.tokens[seq.fed :])
        seq.fed = 0
        self.running.remove(seq)
        self.waiting.appendleft(seq)
        self._full = True
        logger.info("localmodel: KV pool full; a request was preempted (%d tokens)", len(history))

    def _plan(self) -> list[tuple[_Sequence, Piece]]:
        """This step's pieces: every decode token, then prefill chunks oldest first."""
        decodes = [s for s in self.running if s.piece is not None and len(s.piece.tokens) == 1]
        batch = [(s, s.piece) for s in decodes if s.piece is not None]
        budget = max(self.step_tokens - len(batch), MIN_PREFILL_CHUNK)
        for seq in self.running:
            piece = seq.piece
            if budget <= 0 or piece is None or len(piece.tokens) == 1:
                continue
            left = len(piece.tokens) - seq.fed
            # NOTE: a remainder at most MIN_PREFILL_CHUNK past the budget is taken whole: left
            # for the next step, those few tokens would cost the request a step of TTFT
            take = left if left <= budget + MIN_PREFILL_CHUNK else budget
            batch.append((seq, Piece(piece.cache, piece.tokens[seq.fed : seq.fed + take])))
            budget -= take
        return batch

    def _advance(self, seq: _Sequence, reply: torch.Tensor | None) -> None:
        """Resume ``seq`` with ``reply`` until it asks for a piece or finishes. ``reply``: the
        logits of its piece, or None (at admission, or after an event; for a piece it was
        waiting for: not fed, the request is cancelled)."""
        steps = seq.steps
        assert steps is not None
        try:
            item = steps.send(reply)
            while True:
                if isinstance(item, Piece):
                    seq.piece, seq.fed = item, 0
                    return
                if not seq.send(item):
                    seq.request.cancel.set()  # nobody listens: stop at the next token
                item = steps.send(None)
        except StopIteration:
            self.running.remove(seq)
            self._full = False  # its pages are back
        except Exception as exc:
            logger.exception("localmodel: request failed")
            self._fail(seq, exc)

    def _fail(self, seq: _Sequence, exc: BaseException) -> None:
        _close(seq)
        if seq in self.running:  # (first: once answered, it is no longer pending)
            self.running.remove(seq)
            self._full = False
        seq.send(exc)


def _close(seq: _Sequence) -> None:
    """Close the coroutine of a request about to be answered with an error (its cache goes).

    NOTE: its cleanup failing must not leave this request and the others unanswered (out of
    ``fail_waiting`` on the engine's thread, it killed the thread: every caller waited)."""
    if seq.steps is None:
        return
    try:
        seq.steps.close()
    except Exception:
        logger.exception("localmodel: a failed request's cleanup failed too")


def _prefilling(seq: _Sequence) -> bool:
    """Whether ``seq``'s piece is (the rest of) its prompt: its KV goes to the tree once fed."""
    piece = seq.piece
    if piece is None or len(piece.tokens) < 2:
        return False
    return piece.cache.length - seq.fed + len(piece.tokens) == len(seq.request.prompt_tokens)


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    """The length of the longest common prefix of ``a`` and ``b``."""
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
