"""The audit's estimator and judge (semantic side): a replayed labelled workload, the Wilson
interval, and how two answers are compared. The gateway side is tests/gateway/test_audit.py."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import numpy as np
import pytest

from semantic import audit as audit_module
from semantic.audit import (
    Audit,
    AuditScope,
    Tightened,
    Tightening,
    answer_difference,
    estimate_rate,
    wilson,
    window_size,
)

#: Answer pairs as an audit sees them: (served, fresh, the served answer was wrong). A wrong
#: hit's fresh answer differs in a number, unit or date, which the hard checks see.
SAME = [
    ("The office opens at 9 am.", "The office opens at 9 am."),
    ("Click 'Forgot password' on the login page.", "Click 'Forgot password' on the login page."),
    ("Shipping to Canada takes 5 days.", "Shipping to Canada takes 5 days."),
]
#: The scope the replayed workloads are counted in.
SCOPE = AuditScope("acme", "m", "ns")
DIFFERENT = [
    ("The office opens at 9 am.", "The office opens at 10 am."),
    ("Shipping to Canada takes 5 days.", "Shipping to Canada takes 12 days."),
    ("The race is 10 km long.", "The race is 10 miles long."),
    ("The sale ends on Monday.", "The sale ends on Friday."),
]


def replay(labels: list[bool], audit: Audit, rng: random.Random) -> None:
    """Serve each labelled hit; judge the sampled ones from their answers, as the gateway does."""
    for wrong in labels:
        if audit.sample():
            served, fresh = rng.choice(DIFFERENT if wrong else SAME)
            audit.record(SCOPE, asyncio.run(audit.judge(served, fresh)))


def test_the_estimate_covers_the_true_rate_of_a_replayed_labelled_workload() -> None:
    """4,000 labelled hits, 4% wrong, audited at 25% and judged from their answers: the true
    wrong-hit rate lies inside the estimate's own 95% interval."""
    assert all(answer_difference(*pair) for pair in DIFFERENT)
    assert not any(answer_difference(*pair) for pair in SAME)
    rng = random.Random(3)
    labels = [rng.random() < 0.04 for _ in range(4_000)]
    audit = Audit(rate=0.25, seed=7)
    replay(labels, audit, rng)
    est = audit.estimate(SCOPE)
    truth = sum(labels) / len(labels)
    assert 850 <= est.audits <= 1150
    assert est.low <= truth <= est.high and est.high - est.low < 0.04
    row = audit.stats()[0]
    assert row["interval95"] == [round(est.low, 4), round(est.high, 4)]
    assert row["audits"] == est.audits and row["wrong"] == est.wrong


def test_the_interval_holds_the_truth_about_95_percent_of_the_time() -> None:
    """Over 400 replayed workloads (rates 1% to 20%, 1,000 hits audited at 20%), the Wilson
    interval covers the workload's true rate in at least 90% of them (nominally 95%)."""
    covered = 0
    for run in range(400):
        rng = random.Random(run)
        true_rate = rng.choice((0.01, 0.03, 0.08, 0.2))
        labels = [rng.random() < true_rate for _ in range(1_000)]
        audit = Audit(rate=0.2, seed=run)
        for wrong in labels:
            if audit.sample():
                audit.record(SCOPE, "wrong" if wrong else "ok")
        est = audit.estimate(SCOPE)
        covered += est.low <= sum(labels) / len(labels) <= est.high
    assert covered >= 360


def test_controls_take_the_judges_false_alarms_out_of_the_estimate() -> None:
    """A judge that calls 6% of right hits wrong: the plain share over-counts a 4% rate, and
    its interval misses it in most workloads; net of controls (the same request asked twice,
    judged by the same judge), the interval holds it about as often as nominal."""
    plain = net = 0
    for run in range(300):
        rng = random.Random(run)
        audit = Audit(rate=1.0)
        for _ in range(800):
            wrong_hit = rng.random() < 0.04
            alarm = rng.random() < 0.06  # the judge's false alarm on a right answer
            audit.record(SCOPE, "wrong" if wrong_hit or alarm else "ok")
            audit.record_control(SCOPE, "wrong" if rng.random() < 0.06 else "ok")
        est = audit.estimate(SCOPE)
        low, high = wilson(est.wrong, est.audits)
        plain += low <= 0.04 <= high
        net += est.low <= 0.04 <= est.high
        assert est.low <= est.rate <= est.high
    assert plain < 150 and net >= 270


def test_the_estimate_net_of_controls() -> None:
    # no controls: the judged share and its Wilson interval, as before controls existed
    assert estimate_rate(43, 371) == (43 / 371, *wilson(43, 371))
    rate, low, high = estimate_rate(43, 371, 12, 371)
    c = 12 / 371
    assert rate == pytest.approx((43 / 371 - c) / (1 - c))
    assert low < rate < high and high - low > wilson(43, 371)[1] - wilson(43, 371)[0]
    assert estimate_rate(43, 371, 20, 371)[0] < rate  # more false alarms: a lower estimate
    assert estimate_rate(3, 100, 9, 100)[:2] == (0.0, 0.0)  # fewer wrong than alarms: 0
    assert estimate_rate(5, 10, 4, 4) == (0.5, 0.0, 1.0)  # every control wrong: no telling
    assert estimate_rate(0, 0, 3, 9) == (0.0, 0.0, 1.0)  # nothing audited: nothing known
    audit = Audit(rate=1.0)
    for verdict in ("wrong", "ok", "ok", "ok"):
        audit.record(SCOPE, verdict)  # type: ignore[arg-type]
    for verdict in ("ok", "ok", "wrong", "error"):
        audit.record_control(SCOPE, verdict)  # type: ignore[arg-type]
    est = audit.estimate(SCOPE)
    assert (est.audits, est.wrong, est.controls, est.control_wrong) == (4, 1, 3, 1)
    assert est.rate == estimate_rate(1, 4, 1, 3)[0] and est.judged_rate == 0.25
    row = audit.stats()[0]
    assert (row["controls"], row["control_wrong"], row["control_errors"]) == (3, 1, 1)
    assert row["judged_wrong_rate"] == 0.25 and row["false_hit_rate"] == round(est.rate, 6)


def test_only_judged_audits_enter_the_estimate() -> None:
    audit = Audit(rate=1.0)
    for verdict in ("ok", "wrong", "error", "dropped", "dropped"):
        audit.record(AuditScope("t", "m", ""), verdict)  # type: ignore[arg-type]
    est = audit.estimate(AuditScope("t", "m", ""))
    assert (est.audits, est.wrong, est.rate) == (2, 1, 0.5)
    row = audit.stats()[0]
    assert (row["errors"], row["dropped"], row["false_hit_rate"]) == (1, 2, 0.5)
    nothing = audit.estimate(AuditScope("t", "other", ""))
    assert nothing == audit.estimate(AuditScope("t", "m", "x"))  # nothing audited: [0, 1]
    assert nothing.high == 1.0 and audit.estimate(AuditScope("u", "m", "")).audits == 0


def test_wilson_bounds_and_the_rate_setting() -> None:
    assert wilson(0, 0) == (0.0, 1.0)
    low, high = wilson(0, 100)
    assert low == 0.0 and 0.03 < high < 0.04
    low, high = wilson(50, 100)
    assert 0.40 < low < 0.41 and 0.59 < high < 0.60
    assert not Audit(rate=0.0).sample()
    assert all(Audit(rate=1.0).sample() for _ in range(100))
    with pytest.raises(ValueError, match="audit_rate"):
        Audit(rate=1.5)


class _Verifier:
    """Scores every pair ``score``; ``pairs``: those of the background path, ``live``: those
    of the live lookups' path (an audit must never take it)."""

    def __init__(self, score: float) -> None:
        self.score, self.pairs, self.live = score, [], []  # type: ignore[var-annotated]

    async def verify_background(self, stored: str, new: str) -> float:
        self.pairs.append((stored, new))
        return self.score

    async def verify(self, stored: str, new: str) -> float:
        self.live.append((stored, new))
        return self.score


class _Embedder:
    """Two fixed directions: texts that mention Paris point one way, the others another.
    ``live``: texts embedded on the live lookups' path (an audit must never take it)."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.live: list[str] = []

    async def embed_background(self, text: str) -> Any:
        self.texts.append(text)
        return np.array([1.0, 0.0]) if "Paris" in text else np.array([0.6, 0.8])

    async def embed(self, text: str, *, max_wait: float | None = None) -> Any:
        self.live.append(text)
        return np.array([1.0, 0.0]) if "Paris" in text else np.array([0.6, 0.8])


def test_judge_hard_checks_first_then_the_verifier_else_the_embedding() -> None:
    audit = Audit(rate=1.0)

    def judge(served: str, fresh: str, **kw: Any) -> str:
        return asyncio.run(audit.judge(served, fresh, **kw))

    assert answer_difference("It costs 20 dollars.", "It costs 35 dollars.") == "number_mismatch"
    assert answer_difference("It costs 20 dollars.", "The price is 20 dollars.") is None
    assert judge("It costs 20 dollars.", "It costs 35 dollars.") == "wrong"
    assert judge("It costs 20 dollars.", "It costs 20 dollars.") == "ok"
    # a changed number is wrong whatever the verifier says (it is not even asked)
    sure = _Verifier(0.99)
    assert judge("Open at 9.", "Open at 10.", verifier=sure) == "wrong" and not sure.pairs
    assert judge("Yes, on Sundays.", "It opens Sundays.", verifier=sure) == "ok"
    assert sure.pairs == [("Yes, on Sundays.", "It opens Sundays.")]
    assert judge("Yes, on Sundays.", "No, it is closed.", verifier=_Verifier(0.2)) == "wrong"
    # the verifier off: the answers' cosine (0.6 here) against same_similarity (0.8)
    embedder = _Embedder()
    assert judge("Paris is the capital.", "It is Paris.", embedder=embedder) == "ok"
    assert judge("Paris is the capital.", "Berlin is.", embedder=embedder) == "wrong"
    assert (
        asyncio.run(
            Audit(rate=1.0, same_similarity=0.5).judge("Paris.", "Berlin.", embedder=embedder)
        )
        == "ok"
    )


def test_the_judge_scores_answers_behind_live_lookups_never_among_them() -> None:
    """An audit's answers are long; in a live lookup's batch they would make it wait for them.
    The judge takes the models' background paths (queued apart, run when no lookup waits)."""
    audit, verifier, embedder = Audit(rate=1.0), _Verifier(0.9), _Embedder()
    served, fresh = "Yes, it opens on Sundays.", "It opens Sundays too."
    assert asyncio.run(audit.judge(served, fresh, verifier=verifier, embedder=embedder)) == "ok"
    assert verifier.pairs == [(served, fresh)] and verifier.live == []
    assert asyncio.run(audit.judge("Paris.", "It is Paris.", embedder=embedder)) == "ok"
    assert embedder.texts == ["Paris.", "It is Paris."] and embedder.live == []


# ---- auto-tighten ---------------------------------------------------------------------------


def test_the_window_is_the_fewest_audits_a_clean_record_needs_to_clear_the_bound() -> None:
    for bound in (0.5, 0.1, 0.05, 0.02, 0.01):
        n = window_size(bound)
        assert wilson(0, n)[1] <= bound < wilson(0, n - 1)[1], bound
    assert (window_size(0.05), window_size(0.02), window_size(0.01)) == (73, 189, 381)
    with pytest.raises(ValueError, match="bound"):
        window_size(0.0)


def _steps(
    t: Tightening, verdicts: list[str], scope: AuditScope = SCOPE, generation: int | None = None
) -> list[float | None]:
    """Feed ``verdicts`` to ``t`` (a stricter step adds 0.1), return what each one stepped to.
    ``generation``: the one their hits were served under (None: the scope's current one, read
    before each verdict, as if each hit were served and audited before the next)."""

    def served() -> int:
        return t.current(scope).generation if generation is None else generation

    return [
        t.observe(scope, v, served(), base=0.5, stricter=lambda x: round(x + 0.1, 4))  # type: ignore[arg-type]
        for v in verdicts
    ]


def _in(namespace: str, tenant: str = SCOPE.tenant) -> AuditScope:
    return AuditScope(tenant, SCOPE.model, namespace)


def test_a_scope_is_tightened_only_at_the_end_of_a_window_that_fails_its_bound() -> None:
    t = Tightening(bound=0.5)
    assert t.window == 4
    # a window of 3 wrong in 4: its upper bound is above 0.5 -> one step, from the base
    assert _steps(t, ["wrong", "ok", "wrong", "wrong"]) == [None, None, None, 0.6]
    assert t.threshold(SCOPE) == 0.6 and t.threshold(_in("other")) is None
    # the next window starts empty and is judged at the new threshold: a clean one passes
    assert _steps(t, ["ok"] * 4) == [None] * 4 and t.threshold(SCOPE) == 0.6
    # errors and drops are no evidence: they do not fill a window
    assert _steps(t, ["error", "dropped"] * 4) == [None] * 8
    # the next failing window steps again, from where the scope is
    assert _steps(t, ["wrong"] * 4)[-1] == 0.7
    assert t.state(SCOPE) == {"steps": 2, "score_threshold": 0.7, "window": [0, 4]}
    assert t.state(_in("fresh")) == {"steps": 0, "score_threshold": None, "window": [0, 4]}


def test_a_flood_of_namespaces_is_bounded_and_never_loosens_a_tightened_scope(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Namespaces are the client's to choose: past MAX_SCOPES the least recently updated
    estimate and untightened window go, never another tenant's tightened threshold."""
    monkeypatch.setattr(audit_module, "MAX_SCOPES", 50)
    t, audit = Tightening(bound=0.5), Audit(rate=1.0)
    victim = _in("ns", tenant="globex")
    assert _steps(t, ["wrong"] * 4, scope=victim)[-1] == 0.6  # tightened
    audit.record(victim, "wrong")
    for n in range(500):  # another tenant's flood, one audited hit per namespace
        flood = _in(f"flood-{n}")
        _steps(t, ["ok"], scope=flood)
        audit.record(flood, "ok")
    assert len(t._scopes) == 50 and len(audit.stats()) == 50  # was: 501 of each
    assert t.threshold(victim) == 0.6  # kept, though the least recently updated
    assert t.state(_in("flood-499"))["window"] == [1, 4]  # the recent ones are kept
    assert t.state(_in("flood-0"))["window"] == [0, 4]  # the oldest untightened went
    assert audit.estimate(victim).audits == 0 and audit.estimate(_in("flood-499")).audits == 1


def test_one_tenants_audits_never_tighten_or_reset_another_tenants_scope() -> None:
    """Two tenants with the same model and namespace are two scopes (as in the response
    cache): the wrong hits of one tighten only its own, and a reset names the tenant."""
    t = Tightening(bound=0.5)
    other = _in(SCOPE.namespace, tenant="globex")
    assert _steps(t, ["wrong"] * 3, scope=other) == [None] * 3  # a window not yet full ...
    assert _steps(t, ["wrong"] * 4)[-1] == 0.6  # ... is not filled by acme's audits
    assert t.threshold(SCOPE) == 0.6 and t.threshold(other) is None
    assert t.state(other)["window"] == [3, 4]
    assert _steps(t, ["wrong"], scope=other) == [0.6]  # its own window, its own step
    assert t.reset(tenant="initech") == 0 and t.threshold(SCOPE) == 0.6
    assert t.reset(tenant="globex", model="m", namespace="ns") == 1
    assert t.threshold(other) is None and t.threshold(SCOPE) == 0.6


def test_a_small_sample_cannot_ratchet_a_sound_scope() -> None:
    """A bound of 5% is judged on 73 audits: 20 clean audits alone would have an upper bound
    of 16%, and the upper-bound rule would tighten a scope with no wrong hit at all."""
    t = Tightening(bound=0.05)
    assert _steps(t, ["ok"] * 3 * t.window) == [None] * 3 * t.window
    assert t.threshold(SCOPE) is None
    # one wrong in a window is already too many for 5% at 95%: 1 of 73 -> upper bound 7.4%
    assert _steps(t, ["wrong"] + ["ok"] * (t.window - 1))[-1] == 0.6


def test_at_one_a_scope_stays_closed_until_reset() -> None:
    t = Tightening(bound=0.5)
    stricter = {0.5: 0.9, 0.9: 1.0}.__getitem__
    for expected in (0.9, 1.0):
        served = t.current(SCOPE).generation
        for _ in range(3):
            t.observe(SCOPE, "wrong", served, base=0.5, stricter=stricter)
        assert t.observe(SCOPE, "wrong", served, base=0.5, stricter=stricter) == expected
    served = t.current(SCOPE).generation
    for _ in range(4):  # (no semantic hit is served at 1.0; nothing steps past it)
        assert t.observe(SCOPE, "wrong", served, base=0.5, stricter=stricter) is None
    assert t.state(SCOPE)["steps"] == 2
    _steps(t, ["wrong"] * 4, scope=_in("b"))
    assert t.reset(model="m", namespace="ns") == 1 and t.threshold(SCOPE) is None
    assert t.threshold(_in("b")) == 0.6 and t.reset() == 1 and t.threshold(_in("b")) is None


def test_a_window_takes_only_the_audits_of_hits_served_under_its_threshold() -> None:
    """An audit runs for seconds after its hit was served: one of a hit served before a step
    (or a reset) that ends after it judged the old threshold. With a bound of 5% one wrong
    verdict fails a window of 73, so such a stale verdict would step a scope whose every hit
    under the new threshold was right; it counts nowhere in the tightening."""
    t = Tightening(bound=0.05)
    before = t.current(SCOPE)
    assert before == Tightened(None, 0)
    # two hits served at the configured threshold, audited concurrently: the first wrong
    # verdict ends the window (72 ok before it) and steps the scope up
    assert _steps(t, ["ok"] * (t.window - 1) + ["wrong"])[-1] == 0.6
    assert t.current(SCOPE) == Tightened(0.6, 1)
    # the second, served under the old threshold too, ends after the step: left out
    assert _steps(t, ["wrong"], generation=before.generation) == [None]
    assert t.state(SCOPE)["window"] == [0, t.window]
    # every hit served under the new threshold is right: its window passes, no second step
    assert _steps(t, ["ok"] * t.window) == [None] * t.window
    assert t.state(SCOPE) == {"steps": 1, "score_threshold": 0.6, "window": [0, t.window]}


def test_a_reset_leaves_the_audits_of_hits_served_before_it_out_of_the_next_window() -> None:
    t = Tightening(bound=0.5)
    assert _steps(t, ["wrong"] * 4)[-1] == 0.6
    tightened = t.current(SCOPE)
    assert t.reset(namespace=SCOPE.namespace) == 1
    assert t.current(SCOPE) == Tightened(None, tightened.generation + 1)
    # audits of hits served at 0.6 (before the reset) end now: none enters the window
    assert _steps(t, ["wrong"] * 4, generation=tightened.generation) == [None] * 4
    assert t.state(SCOPE) == {"steps": 0, "score_threshold": None, "window": [0, 4]}
    # nothing left to forget: a second reset resets nothing; a window of its own still steps
    assert t.reset() == 0 and t.threshold(SCOPE) is None
    assert _steps(t, ["wrong"] * 4)[-1] == 0.6
