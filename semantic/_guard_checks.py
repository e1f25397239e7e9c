"""Hand-written checks of the precision guard: what a sentence embedding cannot tell apart.

Mean-pooled embeddings are dominated by the topic words, so "Is the museum open on Monday?" and
"Is the museum closed on Monday?" score ~0.95, and so do "flights from Paris to Berlin" and
"flights from Berlin to Paris", or "a 2 bedroom flat" and "a 3 bedroom flat". Each check here
looks at the *surface* of both questions for one kind of difference that changes the answer:

====================  =====================================================================
``number_mismatch``   both mention numbers (or model codes like "s7", ordinals, number words)
                      and the sets differ, or both compare (<, >, =, >=, !=, ≤ ...) and the
                      operators differ (the same durations in units that convert, "five
                      weeks" and "35 days", are one quantity: neither this nor the next)
``unit_mismatch``     both mention units/currencies and they differ (km vs miles, $ vs €)
``date_mismatch``     both mention months/weekdays/relative days and they differ
``negation``          one side negates and the other does not (odd/even count of not, n't, never…)
``antonym``           one side has a word whose antonym the other has (open/closed, buy/sell…:
                      the list below, and WordNet's adjective/verb/adverb antonyms in
                      antonyms_wordnet.txt, made by bench/wordnet_antonyms.py)
``entity_mismatch``   each side names something (capitalised word, acronym) the other lacks
                      (accents folded: "Cancún" and "Cancun" are one name)
``question_type``     they ask for different kinds of answer: who / when / where / how many …
``order_swap``        same words, different order, not around a symmetric "and / or / vs"
====================  =====================================================================

:func:`analyze` parses one text (cached: stored questions come back often) and :func:`compare`
returns the failed checks plus soft signals that the learned verifier weighs.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

__all__ = ["HARD_CHECKS", "PairSignals", "TextInfo", "analyze", "compare"]


def _words(text: str) -> list[str]:
    return text.split()


HARD_CHECKS = (
    "number_mismatch",
    "unit_mismatch",
    "date_mismatch",
    "negation",
    "antonym",
    "entity_mismatch",
    "question_type",
    "order_swap",
)

#: The separator semantic.keys.compared_text puts between a question and its earlier turns.
_TURNS = " || "
#: What ends a sentence or a turn label (found between two words).
_SENTENCE_END = re.compile(r"[.?!:|]")
_TOKEN = re.compile(r"[$€£¥%°]|\d+(?:[.,]\d+)*(?:[a-z]+)?|[a-z]+(?:'[a-z]+)?|\w+", re.IGNORECASE)
#: Accented Latin letters and their base letter ("ú" -> "u", "Ç" -> "C"): _TOKEN's ``[a-z]``
#: split an accented word in two ("Cancún" -> "Canc", "ún"), so a name spelt with and without
#: its accents read as two names (an entity mismatch). Only letters that decompose into an ASCII
#: letter and combining marks; other scripts' marks are left alone.
_FOLD = {
    c: d[0]
    for c in map(chr, range(0xC0, 0x250))
    for d in [unicodedata.normalize("NFD", c)]
    if len(d) > 1 and d[0].isascii() and all(unicodedata.combining(m) for m in d[1:])
}
_FOLD_TABLE = str.maketrans(_FOLD)

STOPWORDS = frozenset(
    _words(
        """a an the is are was were be been being am do does did doing i you he she it we they me him
    her us them my your his its our their mine yours what which who whom whose when where why how
    to of in on at for by with from about as into onto than then that this these those and or but
    if so can could should would will shall may might must there here have has had having some
    any all more most very just between also get got s 's t d ll re ve m o y one ones thing things way
    ways someone something anyone anything good best better really actually possible ever"""
    )
)

_NEGATIONS = frozenset(
    _words(
        "not no never none nobody nothing neither nor nowhere without cannot cant dont doesnt didnt "
        "isnt arent wasnt werent wont wouldnt shouldnt couldnt hasnt havent hadnt aint"
    )
)

_NUMBER_WORDS = {
    w: i
    for i, w in enumerate(
        _words("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
        "fifteen sixteen seventeen eighteen nineteen twenty")
    )
} | {"thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
     "ninety": 90, "hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9,
     "dozen": 12, "half": 0.5, "twice": 2, "once": 1}  # fmt: skip
# "one" is too often a pronoun ("which one", "one of the best") to count as a number.
_NUMBER_WORDS.pop("one")
_ORDINALS = {
    w: i + 1
    for i, w in enumerate(
        _words("first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth")
    )
}
#: Number words a spelled-out number is built from ("twenty-five", "a hundred and twenty"):
#: below twenty, the tens, and the multipliers; "half", "twice", "once", "dozen" stand alone.
_SMALL = {w: int(v) for w, v in _NUMBER_WORDS.items() if isinstance(v, int) and v < 20}
_TENS = {w: int(v) for w, v in _NUMBER_WORDS.items() if v in (20, 30, 40, 50, 60, 70, 80, 90)}
_SCALES = {w: int(_NUMBER_WORDS[w]) for w in ("thousand", "million", "billion")}
#: The digits a spelled decimal is read in ("sixteen point two").
_DIGITS = {w: str(v) for w, v in _SMALL.items() if v < 10} | {"one": "1"}

_UNITS = {
    **dict.fromkeys(_words("km kms kilometer kilometers kilometre kilometres"), "km"),
    **dict.fromkeys(_words("mi mile miles"), "mile"),
    **dict.fromkeys(_words("m meter meters metre metres"), "m"),
    **dict.fromkeys(_words("cm centimeter centimeters centimetre centimetres"), "cm"),
    **dict.fromkeys(_words("mm millimeter millimeters"), "mm"),
    **dict.fromkeys(_words("ft foot feet"), "ft"),
    **dict.fromkeys(_words("in inch inches"), "inch"),
    **dict.fromkeys(_words("kg kgs kilo kilos kilogram kilograms"), "kg"),
    **dict.fromkeys(_words("g gram grams"), "g"),
    **dict.fromkeys(_words("lb lbs pound pounds £ gbp"), "pound"),
    **dict.fromkeys(_words("oz ounce ounces"), "oz"),
    **dict.fromkeys(_words("l liter liters litre litres"), "l"),
    **dict.fromkeys(_words("ml milliliter milliliters"), "ml"),
    **dict.fromkeys(_words("gallon gallons"), "gallon"),
    **dict.fromkeys(_words("celsius centigrade"), "celsius"),
    **dict.fromkeys(_words("fahrenheit"), "fahrenheit"),
    **dict.fromkeys(_words("$ dollar dollars usd"), "usd"),
    **dict.fromkeys(_words("€ euro euros eur"), "eur"),
    **dict.fromkeys(_words("¥ yen jpy"), "jpy"),
    **dict.fromkeys(_words("rs rupee rupees inr"), "inr"),
    **dict.fromkeys(_words("% percent percentage"), "percent"),
    **dict.fromkeys(_words("gb gigabyte gigabytes"), "gb"),
    **dict.fromkeys(_words("mb megabyte megabytes"), "mb"),
    **dict.fromkeys(_words("tb terabyte terabytes"), "tb"),
    **dict.fromkeys(_words("mph kph kmh"), "speed"),
    **dict.fromkeys(_words("second seconds sec secs"), "second"),
    **dict.fromkeys(_words("minute minutes min mins"), "minute"),
    **dict.fromkeys(_words("hour hours hr hrs"), "hour"),
    **dict.fromkeys(_words("day days"), "day"),
    **dict.fromkeys(_words("week weeks"), "week"),
    **dict.fromkeys(_words("month months"), "month"),
    **dict.fromkeys(_words("year years yr yrs"), "year"),
}
#: Time units that convert exactly, in seconds (or, for the calendar's, in months): "five
#: weeks" and "35 days" ask the same thing.
_DURATION = {"second": (1, "s"), "minute": (60, "s"), "hour": (3600, "s"), "day": (86400, "s"),
             "week": (604800, "s"), "month": (1, "mo"), "year": (12, "mo")}  # fmt: skip
_TIME_UNITS = frozenset(_DURATION)
#: A number with its unit written on ("5km", "90min"): the unit.
_NUMBER_UNIT = re.compile(r"[\d.,]+([a-z]+)")
# Units that are also common words only count right after a number ("5 m", not "I m").
_AMBIGUOUS_UNITS = frozenset(_words("m g l in min second minute hour day week month year pound"))

_MONTHS = _words(
    "january february march april may june july august september october november december"
)
_DATES = (
    {m: m for m in _MONTHS}
    | {m[:3]: m for m in _MONTHS if m != "may"}
    | {"sept": "september", "fall": "autumn"}
    | {d: d for d in _words("monday tuesday wednesday thursday friday saturday sunday")}
    | {d: d for d in _words("today tomorrow yesterday tonight weekend weekday morning evening")}
    | {s: s for s in _words("spring summer autumn winter")}
)
_AMBIGUOUS_DATES = frozenset(_words("may march fall spring"))

_ANTONYMS = [
    ("open", "closed"), ("open", "close"), ("opened", "closed"), ("opens", "closes"),
    ("buy", "sell"), ("buying", "selling"), ("bought", "sold"), ("increase", "decrease"),
    ("increasing", "decreasing"), ("raise", "lower"), ("rise", "fall"), ("up", "down"),
    ("before", "after"), ("early", "late"), ("earlier", "later"), ("best", "worst"),
    ("better", "worse"), ("cheap", "expensive"), ("cheapest", "expensive"),
    ("cheapest", "priciest"), ("hot", "cold"), ("warm", "cold"), ("high", "low"),
    ("higher", "lower"), ("highest", "lowest"), ("big", "small"), ("bigger", "smaller"),
    ("biggest", "smallest"), ("large", "small"), ("larger", "smaller"), ("largest", "smallest"),
    ("long", "short"), ("longer", "shorter"), ("longest", "shortest"), ("fast", "slow"),
    ("faster", "slower"), ("fastest", "slowest"), ("heavy", "light"), ("heavier", "lighter"),
    ("old", "new"), ("older", "newer"), ("oldest", "newest"), ("young", "old"),
    ("younger", "older"), ("youngest", "oldest"), ("rich", "poor"), ("richest", "poorest"),
    ("win", "lose"), ("won", "lost"), ("winning", "losing"), ("pass", "fail"), ("gain", "lose"),
    ("add", "remove"), ("enable", "disable"), ("enabled", "disabled"), ("on", "off"),
    ("start", "stop"), ("import", "export"), ("imports", "exports"), ("inside", "outside"),
    ("internal", "external"), ("input", "output"), ("positive", "negative"),
    ("pros", "cons"),
    ("safe", "dangerous"), ("love", "hate"), ("happy", "sad"), ("true", "false"),
    ("north", "south"), ("east", "west"), ("left", "right"),
    ("male", "female"), ("men", "women"), ("man", "woman"), ("boy", "girl"), ("boys", "girls"),
    ("husband", "wife"), ("father", "mother"), ("dad", "mom"), ("son", "daughter"),
    ("brother", "sister"), ("min", "max"), ("minimum", "maximum"), ("first", "last"),
    ("beginning", "end"), ("morning", "evening"), ("day", "night"), ("summer", "winter"),
    ("upload", "download"), ("login", "logout"), ("encrypt", "decrypt"), ("import", "export"),
    ("accept", "reject"), ("allow", "deny"), ("arrive", "depart"), ("arrival", "departure"),
    ("entrance", "exit"), ("push", "pull"), ("send", "receive"), ("sender", "receiver"),
    ("borrow", "lend"), ("lend", "borrow"), ("more", "less"), ("most", "least"),
    ("many", "few"), ("always", "never"), ("everyone", "nobody"), ("include", "exclude"),
    ("convert", "revert"), ("ascending", "descending"), ("asc", "desc"), ("plus", "minus"),
    ("white", "black"), ("wet", "dry"), ("full", "empty"), ("thick", "thin"), ("hard", "soft"),
    ("strong", "weak"), ("stronger", "weaker"), ("easy", "difficult"), ("easiest", "hardest"),
    ("easier", "harder"), ("public", "private"), ("online", "offline"), ("remote", "local"),
    ("client", "server"), ("synchronous", "asynchronous"), ("sync", "async"),
    ("vegetarian", "vegan"), ("wireless", "wired"), ("above", "below"), ("over", "under"),
    ("in", "out"), ("inbound", "outbound"), ("incoming", "outgoing"),
]  # fmt: skip
# Prefix antonyms (safe/unsafe, like/dislike) are left out: they count as negations instead,
# so that "not safe" and "unsafe" agree (see _prefix_negations).


def _wordnet_antonyms() -> list[tuple[str, str]]:
    """WordNet 3.0's antonym pairs (adjectives with their satellites, verbs, adverbs; no
    prefix pairs, no stopwords), shipped as antonyms_wordnet.txt: what the hand-written list
    above, fitted beside the evaluation sets, does not know (cheap/pricey,
    domestic/international, deposit/withdraw: 21k pairs)."""
    text = (Path(__file__).with_name("antonyms_wordnet.txt")).read_text(encoding="utf-8")
    pairs = (line.split() for line in text.splitlines() if line and not line.startswith("#"))
    return [(a, b) for a, b in pairs]


_ANTONYM_SETS: dict[str, set[str]] = {}
for _x, _y in [*_ANTONYMS, *_wordnet_antonyms()]:
    _ANTONYM_SETS.setdefault(_x, set()).add(_y)
    _ANTONYM_SETS.setdefault(_y, set()).add(_x)
_ANTONYM_OF: dict[str, frozenset[str]] = {w: frozenset(o) for w, o in _ANTONYM_SETS.items()}
del _ANTONYM_SETS

#: The longest span of content words _names_exchanged searches for two swapped names.
_MAX_SWAP_SPAN = 24

# Comparison operators, longest first; the spellings of one operator map to one name.
_OPERATOR = re.compile(r"<=|>=|=<|=>|!=|<>|==|[<>=≤≥≠]")
_OPERATOR_OF = {"=<": "<=", "≤": "<=", "=>": ">=", "≥": ">=", "<>": "!=", "≠": "!=", "==": "="}

# Answer types: a mismatch between two *different* entries here changes what is asked for.
_QTYPES = {
    "who": "person", "whom": "person", "whose": "person", "when": "time", "where": "place",
    "how many": "count", "how much": "amount", "how old": "age", "how long": "duration",
    "how far": "distance", "how much time": "duration", "what time": "time", "which year": "time", "what year": "time",
    "what date": "time", "why": "reason",
}  # fmt: skip
# Words that make "X w Y" differ from "Y w X" (the checks treat and/or/vs/between as symmetric).
_ASYMMETRIC = frozenset(
    _words("to from than into against over under before after beat beats instead")
)  # ("X instead of Y": the argument after "instead of")


@dataclass(frozen=True, slots=True)
class TextInfo:
    """What the checks need from one question (build it with :func:`analyze`)."""

    tokens: tuple[str, ...]  # lower-case surface tokens
    stems: tuple[str, ...]  # light stems of tokens
    content: frozenset[str]  # stems minus stop words
    numbers: frozenset[str]  # normalised numbers (ordinals too: "2nd" -> "2") and codes ("s7")
    units: frozenset[str]
    dates: frozenset[str]
    negations: int
    entities: frozenset[str]  # lower-cased capitalised words / acronyms (not sentence-initial)
    qtype: str | None
    content_seq: tuple[str, ...]  # content stems in order (order_swap)
    operators: tuple[str, ...] = ()  # comparison operators, normalised and sorted
    #: durations in a common unit ("5 weeks" and "35 days" are both "3024000s"; months "mo")
    durations: frozenset[str] = frozenset()
    timed: frozenset[str] = frozenset()  # the numbers that count those durations
    #: the numbers / entities it mentions most, when it names two or more (see ``_dwelt_on``)
    number_focus: frozenset[str] = frozenset()
    entity_focus: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class PairSignals:
    """Result of :func:`compare`: the failed hard checks and soft features for the verifier."""

    failed: tuple[str, ...]  # names from HARD_CHECKS, in that order
    soft: tuple[float, ...]  # see SOFT_FEATURES


SOFT_FEATURES = (
    "token_jaccard",
    "content_jaccard",
    "content_only_min",
    "content_only_max",
    "trigram_jaccard",
    "length_ratio",
    "numbers_one_side",
    "entities_one_side",
    "qword_differs",
    "first_token_equal",
    "same_content_multiset",
    *(f"hard_{name}" for name in HARD_CHECKS),
)


@lru_cache(maxsize=8192)
def analyze(text: str) -> TextInfo:
    """Parse one question. Cached by text (an LRU of 8k texts: a few MB for questions; the
    cache only parses texts its embedder reads whole, at most a few kB each)."""
    text = text.replace("\u2019", "'").replace("°C", " celsius").replace("°F", " fahrenheit")
    text = text.replace("->", " to ").replace("\u2192", " to ")  # "skip -> vice-skip"
    text = text if text.isascii() else text.translate(_FOLD_TABLE)
    found = list(_TOKEN.finditer(text))
    raw = [m.group() for m in found]
    # A compared conversation (semantic.keys.compared_text: "question || role: turn | ...")
    # strings many sentences together, each starting with a capital: a capital there says
    # nothing about a name. (Single questions keep the rules below unchanged: they were
    # fitted on them.)
    starts = {0}
    conversation = _TURNS in text
    if conversation:  # a sentence end or turn label between a word and the one before it
        ends = [0] + [m.end() for m in found[:-1]]
        starts |= {
            i for i, (m, end) in enumerate(zip(found, ends, strict=True))
            if _SENTENCE_END.search(text, end, m.start())
        }  # fmt: skip
    # Title Case Questions capitalise every word: then capitals say nothing about names.
    # Tell them by capitalised small words ("Is The", "Of", "To") after the first word.
    title_case = (
        sum(
            w[:1].isupper() and w.lower() in STOPWORDS and w != "I" and i not in starts
            for i, w in enumerate(raw)
        )
        >= 2
    )
    tokens = tuple(t.lower() for t in raw)
    flat = tuple(t.replace("'", "") for t in tokens)
    stems = tuple(_stem(t) for t in flat)
    numbers: Counter[str] = Counter()
    units: set[str] = set()
    dates: set[str] = set()
    entities: Counter[str] = Counter()
    spelled = _spelled_numbers(flat)
    counted: dict[int, str] = {}  # token index -> the number read there (not codes, ordinals)
    for i, (orig, tok) in enumerate(zip(raw, flat, strict=True)):
        prev_is_number = i > 0 and (flat[i - 1][:1].isdigit() or flat[i - 1] in _NUMBER_WORDS)
        if tok[:1].isdigit():
            numbers[counted.setdefault(i, _number(tok))] += 1
            m = _NUMBER_UNIT.fullmatch(tok)  # "5km", "10gb"
            if m and m.group(1) in _UNITS:
                units.add(_UNITS[m.group(1)])
        elif i in spelled:
            if spelled[i] is not None:  # (None: a later word of a number already counted)
                numbers[counted.setdefault(i, str(spelled[i]))] += 1
        elif tok in _NUMBER_WORDS:
            numbers[counted.setdefault(i, _number(str(_NUMBER_WORDS[tok])))] += 1
        elif tok in _ORDINALS:
            numbers[str(_ORDINALS[tok])] += 1  # "Second World War" == "World War 2"
        elif re.fullmatch(r"[a-z]+\d+[a-z\d]*", tok):  # model codes: s7, i5, x11, a320
            numbers[tok] += 1
        if tok in _UNITS and (tok not in _AMBIGUOUS_UNITS or prev_is_number):
            units.add(_UNITS[tok])
        if tok in _DATES and (tok not in _AMBIGUOUS_DATES or orig[:1].isupper()):
            dates.add(_DATES[tok])
        if title_case:
            pass
        elif i not in starts and orig[:1].isupper() and tok not in STOPWORDS and tok not in _DATES:
            entities[_name(tokens[i], stems[i])] += 1
        elif orig.isupper() and len(orig) > 1 and tok not in STOPWORDS:
            entities[_name(tokens[i], stems[i])] += 1  # acronyms, also sentence-initial
    negations = sum(t in _NEGATIONS or (t.endswith("nt") and t[:-2] in _NT_BASES) for t in flat)
    durations = _durations(flat, counted, spelled)
    return TextInfo(
        tokens=tokens,
        stems=stems,
        content=frozenset(s for s in stems if s not in STOPWORDS),
        numbers=frozenset(numbers),
        units=frozenset(units),
        dates=frozenset(dates),
        negations=negations,
        entities=frozenset(entities),
        qtype=_qtype(tokens),
        content_seq=tuple(s for s in stems if s not in STOPWORDS),
        operators=tuple(sorted(_OPERATOR_OF.get(m, m) for m in _OPERATOR.findall(text))),
        durations=frozenset(durations.values()),
        timed=frozenset(counted[i] for i in durations),
        # (a single question's: in a conversation's text its turns repeat values as they go,
        # and a reworded history repeats them otherwise)
        number_focus=frozenset() if conversation else _dwelt_on(numbers),
        entity_focus=frozenset() if conversation else _dwelt_on(entities),
    )


def _dwelt_on(counts: Counter[str]) -> frozenset[str]:
    """The values a question names most often, when it names two or more: the one it asks
    about ("We offer plan 2 and plan 4. What does plan 2 cost?": 2). Empty otherwise."""
    if len(counts) < 2:
        return frozenset()
    most = max(counts.values())
    return frozenset(value for value, n in counts.items() if n == most)


def compare(a: TextInfo, b: TextInfo) -> PairSignals:
    """Run every check on a pair (symmetric: ``compare(a, b) == compare(b, a)``)."""
    failed: list[str] = []
    # NOTE: the tokens drop symbols, so "Is 17 > 12?" and "Is 17 < 12?" differ only here.
    compares = a.operators and b.operators and a.operators != b.operators
    numbers = bool(a.numbers and b.numbers and a.numbers != b.numbers)
    units = bool(a.units and b.units and a.units != b.units)
    if (numbers or units) and _same_durations(a, b):  # "five weeks" / "35 days"
        numbers = units = False
    # NOTE: the same numbers named, another of them asked about ("plan 2 and plan 4 ... plan 2"
    # / "... plan 4"): the sets are equal, and a near duplicate was served (found by a review)
    numbers = numbers or (a.numbers == b.numbers and a.number_focus != b.number_focus)
    if numbers or compares:
        failed.append("number_mismatch")
    if units:
        failed.append("unit_mismatch")
    if a.dates and b.dates and a.dates != b.dates:
        failed.append("date_mismatch")
    negated = (a.negations + _prefix_negations(a, b)) % 2 != (
        b.negations + _prefix_negations(b, a)
    ) % 2
    antonym = _has_antonym(a, b)
    if negated != antonym:  # both at once cancel out: "not closed" == "open"
        failed.append("negation" if negated else "antonym")
    a_stems, b_stems = set(a.stems), set(b.stems)
    a_only_ent, b_only_ent = a.entities - b_stems, b.entities - a_stems
    if (a_only_ent and b_only_ent) or (
        a.entities == b.entities and a.entity_focus != b.entity_focus  # (as numbers: above)
    ):
        failed.append("entity_mismatch")
    if a.qtype and b.qtype and a.qtype != b.qtype:
        failed.append("question_type")
    if _is_swap(a, b):
        failed.append("order_swap")

    ta, tb = set(a.tokens), set(b.tokens)
    ga, gb = _trigrams(" ".join(a.tokens)), _trigrams(" ".join(b.tokens))
    a_only, b_only = len(a.content - b.content), len(b.content - a.content)
    hard = set(failed)
    soft = (
        _jaccard(ta, tb),
        _jaccard(a.content, b.content),
        float(min(a_only, b_only)),
        float(max(a_only, b_only)),
        _jaccard(ga, gb),
        min(len(a.tokens), len(b.tokens)) / max(len(a.tokens), len(b.tokens), 1),
        float(bool(a.numbers) != bool(b.numbers)),
        float(len(a_only_ent) + len(b_only_ent)),
        float(_first_qword(a.tokens) != _first_qword(b.tokens)),
        float(a.tokens[:1] == b.tokens[:1]),
        float(sorted(a.content_seq) == sorted(b.content_seq)),
        *(float(name in hard) for name in HARD_CHECKS),
    )
    return PairSignals(tuple(failed), soft)


# ---- helpers ----------------------------------------------------------------------------------

_NT_BASES = frozenset(_words("do does did is are was were wo would should could has have had ca"))


def _stem(tok: str) -> str:
    """A light stemmer: enough to match "design/designing", "phones/phone", "studies/study"."""
    if len(tok) <= 3 or not tok.isalpha():
        return tok
    for suffix, repl in (("ies", "y"), ("sses", "ss"), ("ing", ""), ("ed", ""), ("es", ""),
                         ("s", ""), ("ly", "")):  # fmt: skip
        if tok.endswith(suffix) and len(tok) - len(suffix) >= 3:
            if suffix == "s" and tok.endswith("ss"):
                return tok
            return tok[: len(tok) - len(suffix)] + repl
    return tok


def _name(token: str, stem: str) -> str:
    """A name's entity stem, its possessive's the same: "Harris's" is Harris (its stem without
    the apostrophe, "harriss", kept its double s where "Harris" loses its s)."""
    if token.endswith("'s"):
        return _stem(token[:-2].replace("'", ""))
    return stem


def _spelled_numbers(flat: tuple[str, ...]) -> dict[int, str | None]:
    """Spelled-out numbers of more than one word, read whole: token index of the first word ->
    its value (as :func:`_number` writes it), of each later word -> None. "twenty-five" is 25
    (as "25" is), not 20 and 5; "a hundred and twenty" 120; "twenty-first" 21; "sixteen point
    two" 16.2; "eight and a half" 8.5. Words that do not build one number stay apart ("five
    six": 5 and 6)."""
    out: dict[int, str | None] = {}
    i = 0
    while i < len(flat):
        total, current, last, j = 0, None, "", i
        if flat[i] == "one" and _fraction(flat, i + 1) is not None:  # "one and a half"
            current, last, j = 1, "small", i + 1
        while j < len(flat):
            w = flat[j]
            if w in _SMALL and (current is None or last in ("tens", "hundred")):
                if last == "tens" and _SMALL[w] >= 10:
                    break
                current, last = (current or 0) + _SMALL[w], "small"
            elif w in _TENS and (current is None or last == "hundred"):
                current, last = (current or 0) + _TENS[w], "tens"
            elif w in _ORDINALS and last == "tens" and _ORDINALS[w] < 10:  # "twenty-first"
                current, last, j = (current or 0) + _ORDINALS[w], "ordinal", j + 1
                break
            elif w == "hundred" and last in ("", "small"):
                current, last = (current or 1) * 100, "hundred"
            elif w in _SCALES and last in ("", "small", "tens", "hundred"):
                total, current, last = total + (current or 1) * _SCALES[w], None, "hundred"
            elif (
                w == "and"
                and last == "hundred"
                and j + 1 < len(flat)
                and (flat[j + 1] in _SMALL or flat[j + 1] in _TENS)
            ):
                pass
            else:
                break
            j += 1
        value = str(total + (current or 0))
        fraction = _fraction(flat, j) if last in ("small", "tens", "hundred") else None
        if fraction is not None:
            value, j = _number(f"{value}.{fraction[0]}"), fraction[1]
        if j - i > 1:  # (a run never ends on "and": it is taken only before a number word)
            out[i] = value
            out.update(dict.fromkeys(range(i + 1, j)))
            i = j
        else:
            i += 1
    return out


def _durations(
    flat: tuple[str, ...], counted: dict[int, str], spelled: dict[int, str | None]
) -> dict[int, str]:
    """The numbers that count a time unit right after them ("5 weeks", "three-week-old", "35
    days", "5min", "half an hour"): token index -> the duration in seconds ("3024000s") or, for
    months and years, in months ("24mo")."""
    out: dict[int, str] = {}
    for i, value in counted.items():
        end = i + 1
        while end in spelled and spelled[end] is None:  # past a spelled number's later words
            end += 1
        if value == "0.5" and flat[end : end + 1] in (("a",), ("an",)):  # "half an hour"
            end += 1
        unit = _NUMBER_UNIT.fullmatch(flat[i])
        word = unit.group(1) if unit else flat[end] if end < len(flat) else ""
        if _UNITS.get(word) in _DURATION:
            factor, dim = _DURATION[_UNITS[word]]
            out[i] = _number(str(float(value) * factor)) + dim
    return out


def _same_durations(a: TextInfo, b: TextInfo) -> bool:
    """Both ask for the same durations in units that convert ("five weeks" and "35 days"), and
    their other numbers and units are the same."""
    return (
        bool(a.durations)
        and a.durations == b.durations
        and a.numbers - a.timed == b.numbers - b.timed
        and a.units - _TIME_UNITS == b.units - _TIME_UNITS
    )


def _fraction(flat: tuple[str, ...], j: int) -> tuple[str, int] | None:
    """The spelled fraction at ``flat[j:]`` after a number's words: its decimal digits and the
    index past it ("point two five" -> "25", "and a half" -> "5"), or None."""
    if flat[j : j + 3] == ("and", "a", "half"):
        return "5", j + 3
    if flat[j : j + 1] != ("point",):
        return None
    k = j + 1
    while k < len(flat) and flat[k] in _DIGITS:
        k += 1
    return ("".join(_DIGITS[w] for w in flat[j + 1 : k]), k) if k > j + 1 else None


def _number(tok: str) -> str:
    digits = re.match(r"[\d.,]+", tok)
    if digits is None:
        return tok
    core = digits.group(0).replace(",", "").rstrip(".")
    try:
        value = float(core)
    except ValueError:
        return core
    text = str(int(value)) if value.is_integer() and value < 1e15 else repr(value)
    suffix = tok[digits.end() :]
    if suffix in _UNITS or suffix in ("st", "nd", "rd", "th", "s"):  # 5km, 2nd, 1980s
        return text
    return text + suffix


def _qtype(tokens: tuple[str, ...]) -> str | None:
    for i, tok in enumerate(tokens):
        for n in (3, 2):
            words = " ".join(tokens[i : i + n])
            if words in _QTYPES:
                return _QTYPES[words]
        if tok in _QTYPES:
            return _QTYPES[tok]
    return None


def _first_qword(tokens: tuple[str, ...]) -> str:
    for tok in tokens:
        if tok in ("what", "which", "who", "whom", "whose", "when", "where", "why", "how"):
            return tok
    return ""


_NEG_PREFIXES = ("un", "in", "im", "il", "ir", "dis", "non")


def _prefix_negations(x: TextInfo, other: TextInfo) -> int:
    """Words of x that negate a word of the other side by prefix: "unsafe" vs "safe" (not one
    whose word x has too: "in the mold ... unmold it" against "its mold" is an action, not a
    negation)."""
    words, own = set(other.tokens), set(x.tokens)
    bare = words - own  # the other side's words that x lacks
    return sum(
        1
        for t in own - words
        for p in _NEG_PREFIXES
        if t.startswith(p) and len(t) - len(p) >= 4 and t[len(p) :] in bare
    )


def _is_swap(a: TextInfo, b: TextInfo) -> bool:
    """Whether the argument of an asymmetric word changed places with another one.

    For each asymmetric word both sides use ("to", "from", "than", "against", …) take the
    first content word after it. If those differ but each also occurs on the other side, the
    direction flipped: "convert a PDF to Word" / "convert a Word document to PDF", "is Rust
    faster than Go" / "is Go faster than Rust". Symmetric joins ("X and Y", "between X and Y",
    "X or Y", "X vs Y") never trigger it.
    """
    for word in set(a.tokens) & set(b.tokens) & _ASYMMETRIC:
        x, y = _arguments(a, word), _arguments(b, word)
        if x - y and y - x and x - y <= b.content and y - x <= a.content:
            return True
    return _names_exchanged(a, b)


def _names_exchanged(a: TextInfo, b: TextInfo) -> bool:
    """Same content words, but two spans holding names/numbers traded places.

    "Did Rome defeat Carthage?" / "Did Carthage defeat Rome?" — the verb is unknown to us,
    but names exchanged around it almost always change the question. Spans without a name
    or number ("car remote lock" / "car lock remote") are left alone: paraphrases reorder.
    """
    x, y = a.content_seq, b.content_seq
    if x == y or sorted(x) != sorted(y):
        return False
    marked = a.entities | b.entities | a.numbers | b.numbers
    i = next(k for k in range(len(x)) if x[k] != y[k])
    j = next(k for k in range(len(x) - 1, -1, -1) if x[k] != y[k])
    left, right, n = x[i : j + 1], y[i : j + 1], j + 1 - i
    if n > _MAX_SWAP_SPAN:  # NOTE: the search below is cubic in n; names are a few words
        return False
    for lx in range(1, n):
        for ly in range(1, n - lx + 1):
            first, last = left[:lx], left[n - ly :]
            if (
                first == right[n - lx :]
                and last == right[:ly]
                and left[lx : n - ly] == right[ly : n - lx]
                and set(first) & marked
                and set(last) & marked
            ):
                return True
    return False


def _arguments(info: TextInfo, word: str) -> set[str]:
    """The first content stem after each occurrence of ``word`` (one pass, from the end)."""
    out = set()
    following: str | None = None  # the first content stem after position i
    for tok, stem in zip(reversed(info.tokens), reversed(info.stems), strict=True):
        if tok == word and following is not None:
            out.add(following)
        if stem not in STOPWORDS:
            following = stem
    return out


def _has_antonym(a: TextInfo, b: TextInfo) -> bool:
    """A word only in a and a word only in b that are antonyms, also inflected alike.

    "thicker"/"thinner" and "exporters"/"importers" count: an antonym pair plus the same
    suffix (a doubled final consonant is ignored).
    """
    ta, tb = set(a.tokens), set(b.tokens)
    forms_b = {form for w in tb - ta for form in _forms(w)}
    for w in ta - tb:
        for base, suffix in _forms(w):
            if any((other, suffix) in forms_b for other in _ANTONYM_OF.get(base, ())):
                return True
    return False


def _forms(tok: str) -> list[tuple[str, str]]:
    """(base, suffix) readings of a word: "thinner" -> (thinner, ""), (thinn, er), (thin, er)."""
    out = [(tok, "")]
    for suffix in ("s", "es", "er", "ers", "est", "ed", "ing", "ly"):
        if tok.endswith(suffix) and len(tok) > len(suffix) + 2:
            base = tok[: -len(suffix)]
            out.append((base, suffix))
            if len(base) > 3 and base[-1] == base[-2]:
                out.append((base[:-1], suffix))
    return out


def _trigrams(s: str) -> set[str]:
    return {s[i : i + 3] for i in range(len(s) - 2)}


def _jaccard(x: set[str] | frozenset[str], y: set[str] | frozenset[str]) -> float:
    return len(x & y) / len(x | y) if x or y else 1.0
