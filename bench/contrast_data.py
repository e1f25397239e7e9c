"""Contrast and multi-turn evaluation data for the semantic verifier, generated and frozen.

    python -m bench.contrast_data          # rewrites bench/data/contrast_*.jsonl, multiturn_*.jsonl

Seed 12, deterministic. Each *family* is one question with several phrasings that share few
content words, and slots filled from lexicons whose values come with synonyms. From one filled
family it writes:

* a **paraphrase** (same values, another phrasing, other synonyms): should hit;
* **traps** (one thing changed, phrasing re-drawn): negation, antonymous verb or modifier,
  audience, time window, quantity, product tier, direction of a transfer between two named
  parties (the two slots swapped), another entity: must not hit.

The multi-turn set puts a filled family as the first user turn, an assistant reply, then a
context-dependent follow-up. Should hit: the history reworded, small talk added, an irrelevant
earlier exchange before it. Must not hit: another entity in the history (context swap), one detail
changed (detail swap), the follow-up's intent flipped.

The split is by family **and** domain: a row is held out when its family or its domain is in the
held-out lists below (fixed before any training), so held-out wording and topics are never seen
in training. Files: ``contrast_train.jsonl``, ``contrast_heldout.jsonl``, ``multiturn_train.jsonl``,
``multiturn_heldout.jsonl`` (committed; regenerate only to add data, never after tuning).

Added on 2026-12-06: 137 more **training** families (bench/contrast_more.py: new domains, new
word pairs, audiences, time windows, tiers, parties), written to ``contrast_more_train.jsonl``
and ``multiturn_more_train.jsonl`` with a seed of their own (13), so the four files above come
out byte for byte as they were (tests/test_contrast_data.py).

Added on 2026-12-06, later: a second, **fresh held-out** set (bench/contrast_fresh.py), written
for one decision about a verifier trained on the families above after the first held-out files
had been looked at. Its domains are in no other family, and its lexicons share no word with the
training lexicons (checked), so it measures wording nothing here has seen: ``contrast_fresh.jsonl``
and ``multiturn_fresh.jsonl`` (seed 14). Never trained or calibrated on. A third set, written
the same way in nine more domains for a later decision (bench/contrast_fresh2.py, seed 15):
``contrast_fresh2.jsonl`` and ``multiturn_fresh2.jsonl``.

Added on 2026-12-06, last: a third round of **training** families (bench/contrast_more2.py,
seed 17: ``contrast_more2_train.jsonl``, ``multiturn_more2_train.jsonl``), with four phrasings
each, and a fourth held-out set written beside it for the decision about it
(bench/contrast_fresh3.py, seed 16: ``contrast_fresh3.jsonl``, ``multiturn_fresh3.jsonl``).
A fifth held-out set was written later on 2026-12-06 for the decision about the written triplets
(bench/data/written_train.jsonl, bench/train_verifier.py ``--written``): bench/contrast_fresh4.py,
seed 18, ``contrast_fresh4.jsonl`` and ``multiturn_fresh4.jsonl``.
A sixth held-out set was written on 2026-12-07 for the decision about the second round of written
triplets and their conversations (bench/train_verifier.py ``--written-turns``):
bench/contrast_fresh5.py, seed 19, ``contrast_fresh5.jsonl`` and ``multiturn_fresh5.jsonl``.
A seventh, later on 2026-12-07, for the decision about conversations made from the first round
alone: bench/contrast_fresh6.py, seed 20, ``contrast_fresh6.jsonl`` and ``multiturn_fresh6.jsonl``.
An eighth, later still (2026-12-07, stop 49), for the decision about a calibration split by whole
domains (bench/train_verifier.py ``--calibrate-by domain``): bench/contrast_fresh7.py, seed 21,
``contrast_fresh7.jsonl`` and ``multiturn_fresh7.jsonl``.
Every held-out set's lexicons share no value with any training lexicon, this round's included.
"""

from __future__ import annotations

import importlib
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data"
SEED = 12
MORE_SEED = 13  # the families added later (bench/contrast_more.py)
FRESH_SEED = 14  # the fresh held-out families (bench/contrast_fresh.py)
FRESH2_SEED = 15  # the third held-out set's (bench/contrast_fresh2.py)
FRESH3_SEED = 16  # the fourth held-out set's (bench/contrast_fresh3.py)
MORE2_SEED = 17  # the third round of training families (bench/contrast_more2.py)
FRESH4_SEED = 18  # the fifth held-out set's (bench/contrast_fresh4.py)
FRESH5_SEED = 19  # the sixth held-out set's (bench/contrast_fresh5.py)
FRESH6_SEED = 20  # the seventh held-out set's (bench/contrast_fresh6.py)
FRESH7_SEED = 21  # the eighth held-out set's (bench/contrast_fresh7.py)

# ---- lexicons: each value is a tuple of synonyms; "pairs" lexicons flip within a pair ---------

#: One lexicon: (trap kind, values, each a tuple of synonyms, antonym pair?)
Lexicon = tuple[str, list[tuple[str, ...]], bool]
#: name -> its lexicon
LEXICONS: dict[str, Lexicon] = {
    "city": (
        "entity",
        [
            ("Paris",),
            ("Berlin",),
            ("Tokyo",),
            ("Madrid",),
            ("Chicago",),
            ("Toronto",),
            ("Sydney",),
            ("Rome",),
            ("Lisbon",),
            ("Seoul",),
            ("Denver",),
            ("Dublin",),
            ("Vienna",),
            ("Boston",),
            ("Oslo",),
            ("Prague",),
        ],
        False,
    ),
    "country": (
        "entity",
        [
            ("Canada",),
            ("Germany",),
            ("Japan",),
            ("Brazil",),
            ("India",),
            ("Mexico",),
            ("France",),
            ("Australia",),
            ("Italy",),
            ("Spain",),
            ("Kenya",),
            ("Norway",),
        ],
        False,
    ),
    "person": (
        "entity",
        [
            ("Alice",),
            ("Bob",),
            ("Carlos",),
            ("Dana",),
            ("Emeka",),
            ("Fatima",),
            ("George",),
            ("Hana",),
            ("Ivan",),
            ("Julia",),
            ("Kenji",),
            ("Laura",),
        ],
        False,
    ),
    "lang": (
        "entity",
        [
            ("Python",),
            ("Java",),
            ("Rust",),
            ("Go",),
            ("JavaScript",),
            ("C++",),
            ("Ruby",),
            ("Kotlin",),
        ],
        False,
    ),
    "db": (
        "entity",
        [
            ("MySQL",),
            ("PostgreSQL", "Postgres"),
            ("MongoDB",),
            ("SQLite",),
            ("Oracle",),
            ("Redis",),
        ],
        False,
    ),
    "tongue": (
        "entity",
        [
            ("English",),
            ("French",),
            ("Spanish",),
            ("German",),
            ("Japanese",),
            ("Portuguese",),
            ("Arabic",),
            ("Hindi",),
        ],
        False,
    ),
    "drug": (
        "entity",
        [
            ("ibuprofen", "Advil"),
            ("acetaminophen", "Tylenol"),
            ("aspirin",),
            ("amoxicillin",),
            ("metformin",),
            ("loratadine", "Claritin"),
        ],
        False,
    ),
    "phone": (
        "entity",
        [
            ("iPhone 15",),
            ("Pixel 8",),
            ("Galaxy S24",),
            ("iPad Air",),
            ("MacBook Pro",),
            ("Surface Laptop",),
        ],
        False,
    ),
    "sport": (
        "entity",
        [
            ("tennis",),
            ("soccer", "football"),
            ("basketball",),
            ("swimming",),
            ("golf",),
            ("cycling",),
            ("running",),
        ],
        False,
    ),
    "dish": (
        "entity",
        [
            ("lasagna",),
            ("risotto",),
            ("banana bread",),
            ("chicken curry",),
            ("sourdough bread",),
            ("pancakes",),
            ("chili",),
        ],
        False,
    ),
    "currency": (
        "entity",
        [
            ("dollars", "US dollars"),
            ("euros",),
            ("yen", "Japanese yen"),
            ("pounds", "British pounds"),
            ("pesos",),
            ("rupees",),
        ],
        False,
    ),
    "audience": (
        "audience",
        [
            ("children", "kids"),
            ("adults", "grown-ups"),
            ("seniors", "older adults", "elderly people"),
            ("beginners", "novices", "newcomers"),
            ("students", "college students"),
            ("pregnant women", "expectant mothers"),
            ("small businesses", "small companies"),
            ("teenagers", "teens"),
        ],
        False,
    ),
    "time": (
        "time",
        [
            ("this week", "during the current week"),
            ("last month", "during the previous month"),
            ("next year", "in the coming year"),
            ("on weekends", "on Saturdays and Sundays"),
            ("in the morning", "before noon"),
            ("at night", "after dark"),
            ("in winter", "during the winter months"),
            ("in summer", "during the summer months"),
            ("today", "this day"),
        ],
        False,
    ),
    "tier": (
        "tier",
        [
            ("free plan", "free tier"),
            ("premium plan", "premium tier"),
            ("enterprise plan", "enterprise tier"),
            ("basic plan", "starter plan"),
            ("family plan", "family subscription"),
            ("business plan", "business tier"),
        ],
        False,
    ),
    "qty": (
        "quantity",
        [
            (w, n)
            for w, n in (
                ("2", "two"),
                ("3", "three"),
                ("4", "four"),
                ("5", "five"),
                ("6", "six"),
                ("10", "ten"),
                ("12", "twelve"),
                ("20", "twenty"),
                ("50", "fifty"),
                ("100", "a hundred"),
            )
        ],
        False,
    ),
    # antonymous predicates and modifiers: a trap takes the other side of the pair
    "act_open": ("antonym", [("open", "set up"), ("close", "shut down")], True),
    "act_enable": (
        "antonym",
        [("enable", "turn on", "switch on"), ("disable", "turn off", "switch off")],
        True,
    ),
    "act_buy": ("antonym", [("buy", "purchase"), ("sell",)], True),
    "act_up": ("antonym", [("upload",), ("download",)], True),
    "act_add": ("antonym", [("add", "include"), ("remove", "delete")], True),
    "act_raise": (
        "antonym",
        [("increase", "raise", "boost"), ("decrease", "lower", "reduce")],
        True,
    ),
    "act_join": ("antonym", [("join", "sign up for"), ("leave", "quit")], True),
    "act_lock": ("antonym", [("lock",), ("unlock",)], True),
    "act_encrypt": ("antonym", [("encrypt",), ("decrypt",)], True),
    "act_hire": ("antonym", [("hire", "recruit"), ("fire", "dismiss", "lay off")], True),
    "act_gain": ("antonym", [("gain", "put on"), ("lose", "shed")], True),
    "act_import": ("antonym", [("import",), ("export",)], True),
    "act_accept": ("antonym", [("accept", "approve"), ("reject", "decline")], True),
    "act_install": ("antonym", [("install",), ("uninstall", "remove")], True),
    "mod_cheap": (
        "antonym",
        [("cheap", "inexpensive", "affordable"), ("expensive", "costly", "pricey")],
        True,
    ),
    "mod_fast": ("antonym", [("fast", "quick"), ("slow",)], True),
    "mod_safe": ("antonym", [("safe",), ("dangerous", "unsafe", "risky")], True),
    "mod_hot": ("antonym", [("hot", "warm"), ("cold", "chilly")], True),
    "mod_early": ("antonym", [("early",), ("late",)], True),
    "mod_high": ("antonym", [("high",), ("low",)], True),
    "mod_legal": ("antonym", [("legal", "lawful"), ("illegal", "unlawful")], True),
    "mod_online": (
        "antonym",
        [("online", "over the internet"), ("in person", "face to face")],
        True,
    ),
    "mod_domestic": ("antonym", [("domestic",), ("international",)], True),
    "mod_long": ("antonym", [("long",), ("short",)], True),
    "mod_min": ("antonym", [("minimum", "lowest"), ("maximum", "highest")], True),
    "mod_public": ("antonym", [("public",), ("private",)], True),
    "mod_first": ("antonym", [("first",), ("last", "final")], True),
}


@dataclass(frozen=True)
class Family:
    """One question, several phrasings. ``{slot}`` is filled from LEXICONS[slot minus digits];
    ``[pos|neg]`` is the polarity (a negation trap takes ``neg``)."""

    name: str
    domain: str
    phrasings: tuple[str, ...]


F = Family
FAMILIES = [
    # banking
    F(
        "transfer",
        "banking",
        (
            "How do I send money from {person} to {person2}?",
            "What's the way to move funds from {person}'s account into {person2}'s?",
            "Steps for {person} to transfer cash to {person2}?",
        ),
    ),
    F(
        "wire_fee",
        "banking",
        (
            "How much does a {mod_domestic} wire transfer cost?",
            "What fee do banks charge for a {mod_domestic} wire?",
            "Price of sending a {mod_domestic} bank wire?",
        ),
    ),
    F(
        "card_lock",
        "banking",
        (
            "How can I {act_lock} my debit card in the app?",
            "Is there a way to {act_lock} my bank card from my phone?",
            "{act_lock} a lost card using mobile banking: how?",
        ),
    ),
    F(
        "account_open",
        "banking",
        (
            "Can I {act_open} a savings account {mod_online}?",
            "Is it possible to {act_open} a savings account {mod_online}?",
            "Do banks let you {act_open} a deposit account {mod_online}?",
        ),
    ),
    F(
        "overdraft",
        "banking",
        (
            "[Will|Won't] I be charged if my account is overdrawn {time}?",
            "[Do|Don't] banks charge a penalty for overdrafts {time}?",
            "Is an overdraft fee [|not ]applied {time}?",
        ),
    ),
    # travel
    F(
        "flight",
        "travel",
        (
            "What is the {mod_cheap} way to fly from {city} to {city2}?",
            "Which {mod_cheap} flights go from {city} to {city2}?",
            "Looking for {mod_cheap} airfare, {city} to {city2}: options?",
        ),
    ),
    F(
        "visa",
        "travel",
        (
            "[Do|Don't] citizens of {country} need a visa to visit {country2}?",
            "Is a visa [|not ]required for {country} passport holders travelling to {country2}?",
            "Travel from {country} to {country2}: visa [needed|not needed]?",
        ),
    ),
    F(
        "luggage",
        "travel",
        (
            "How many bags can I check on the {tier} for {qty} passengers?",
            "What's the checked baggage allowance on the {tier} when {qty} people fly?",
            "Luggage limits for a group of {qty} on the {tier}?",
        ),
    ),
    F(
        "train_time",
        "travel",
        (
            "When does the {mod_first} train leave {city} for {city2}?",
            "What time is the {mod_first} departure from {city} to {city2}?",
            "Schedule of the {mod_first} rail service {city} to {city2}?",
        ),
    ),
    F(
        "weather",
        "travel",
        (
            "Is {city} {mod_hot} {time}?",
            "What is the weather like in {city} {time}, {mod_hot}?",
            "Should I expect {mod_hot} temperatures in {city} {time}?",
        ),
    ),
    # health
    F(
        "dose",
        "health",
        (
            "What is the {mod_min} dose of {drug} for {audience}?",
            "How much {drug} can {audience} take at the {mod_min}?",
            "{audience}: {mod_min} safe amount of {drug}?",
        ),
    ),
    F(
        "drug_alcohol",
        "health",
        (
            "Is it {mod_safe} to take {drug} with alcohol?",
            "Can drinking while on {drug} be {mod_safe}?",
            "{drug} and a glass of wine: {mod_safe} combination?",
        ),
    ),
    F(
        "weight",
        "health",
        (
            "How can {audience} {act_gain} weight {mod_fast} without dieting?",
            "What helps {audience} {act_gain} weight {mod_fast}?",
            "Tips for {audience} to {act_gain} a few kilos {mod_fast}?",
        ),
    ),
    F(
        "vaccine",
        "health",
        (
            "[Should|Shouldn't] {audience} get the flu vaccine {time}?",
            "Is the flu shot [|not ]recommended for {audience} {time}?",
            "Flu jab for {audience} {time}: [advised|not advised]?",
        ),
    ),
    F(
        "sleep",
        "health",
        (
            "How many hours of sleep do {audience} need?",
            "What amount of nightly rest is right for {audience}?",
            "Recommended sleep duration for {audience}?",
        ),
    ),
    # software
    F(
        "migrate",
        "software",
        (
            "How do I migrate data from {db} to {db2}?",
            "What's the best way to move a database from {db} over to {db2}?",
            "Converting my {db} tables into {db2}: how?",
        ),
    ),
    F(
        "file_transfer",
        "software",
        (
            "How do I {act_up} files {mod_fast} over SSH?",
            "What's a {mod_fast} way to {act_up} a file with scp?",
            "Command to {act_up} data via SSH, {mod_fast}?",
        ),
    ),
    F(
        "encrypt",
        "software",
        (
            "How do I {act_encrypt} a file with OpenSSL?",
            "Which OpenSSL command will {act_encrypt} a document?",
            "Using openssl to {act_encrypt} a file: syntax?",
        ),
    ),
    F(
        "learn_lang",
        "software",
        (
            "Is {lang} a good first language for {audience}?",
            "Should {audience} start programming with {lang}?",
            "Would you recommend {lang} to {audience} learning to code?",
        ),
    ),
    F(
        "convert_lang",
        "software",
        (
            "How do I port a project from {lang} to {lang2}?",
            "What's involved in rewriting {lang} code in {lang2}?",
            "Translating an app written in {lang} into {lang2}: tips?",
        ),
    ),
    F(
        "dark_mode",
        "software",
        (
            "How do I {act_enable} dark mode on my {phone}?",
            "Where is the setting to {act_enable} the dark theme on a {phone}?",
            "{act_enable} night mode, {phone}: steps?",
        ),
    ),
    F(
        "app_install",
        "software",
        (
            "Why can't I {act_install} apps on my {phone}?",
            "What stops my {phone} from letting me {act_install} an app?",
            "Unable to {act_install} applications on {phone}: cause?",
        ),
    ),
    # retail / subscriptions
    F(
        "plan_price",
        "retail",
        (
            "How much does the {tier} cost per month?",
            "What is the monthly price of the {tier}?",
            "Monthly fee for the {tier}?",
        ),
    ),
    F(
        "plan_users",
        "retail",
        (
            "Can {qty} users share the {tier}?",
            "Does the {tier} allow {qty} people on one account?",
            "Is the {tier} usable by {qty} members at once?",
        ),
    ),
    F(
        "refund",
        "retail",
        (
            "[Can|Can't] I get a refund within {qty} days of buying?",
            "Is a refund [|not ]possible {qty} days after purchase?",
            "Returning an item after {qty} days: refund [allowed|not allowed]?",
        ),
    ),
    F(
        "member",
        "retail",
        (
            "How do I {act_join} the loyalty program?",
            "What are the steps to {act_join} the rewards club?",
            "I want to {act_join} the membership scheme: how?",
        ),
    ),
    F(
        "cart",
        "retail",
        (
            "How do I {act_add} an item to my order after checkout?",
            "Can I still {act_add} a product to my order once it's placed?",
            "{act_add} something to a submitted order: possible?",
        ),
    ),
    F(
        "shipping",
        "retail",
        (
            "Do you ship to {country} {time}?",
            "Is delivery to {country} available {time}?",
            "Can orders be sent to {country} {time}?",
        ),
    ),
    # finance / investing
    F(
        "stock",
        "finance",
        (
            "Is now a good time to {act_buy} shares?",
            "Should I {act_buy} stocks at the moment?",
            "Right time to {act_buy} equities?",
        ),
    ),
    F(
        "currency_conv",
        "finance",
        (
            "How do I convert {currency} to {currency2}?",
            "What's the best way to exchange {currency} into {currency2}?",
            "Changing {currency} for {currency2}: cheapest method?",
        ),
    ),
    F(
        "rates",
        "finance",
        (
            "Will the central bank {act_raise} interest rates {time}?",
            "Are interest rates expected to {act_raise} {time}?",
            "Forecast: rates to {act_raise} {time}?",
        ),
    ),
    F(
        "loan",
        "finance",
        (
            "What credit score is needed for a {mod_long} term loan?",
            "Minimum credit rating to qualify for a {mod_long}-term loan?",
            "Which score do lenders want for {mod_long} term borrowing?",
        ),
    ),
    # jobs / HR
    F(
        "hire",
        "jobs",
        (
            "What are the rules to {act_hire} an employee in {country}?",
            "How does a company {act_hire} staff legally in {country}?",
            "Legal steps to {act_hire} a worker in {country}?",
        ),
    ),
    F(
        "offer",
        "jobs",
        (
            "How do I politely {act_accept} a job offer?",
            "What should I write to {act_accept} an offer of employment?",
            "Email to {act_accept} a job offer: template?",
        ),
    ),
    F(
        "remote",
        "jobs",
        (
            "[Is|Isn't] remote work allowed for {audience} {time}?",
            "Can {audience} [|not ]work from home {time}?",
            "Working remotely {time}: [permitted|not permitted] for {audience}?",
        ),
    ),
    # education
    F(
        "course",
        "education",
        (
            "Which {lang} course is best for {audience}?",
            "What {lang} class would you recommend to {audience}?",
            "Good {lang} training for {audience}?",
        ),
    ),
    F(
        "translate",
        "education",
        (
            "How do you say good morning in {tongue} if you speak {tongue2}?",
            "What is good morning in {tongue} for a {tongue2} speaker?",
            "Translate good morning into {tongue}, from {tongue2}?",
        ),
    ),
    F(
        "exam",
        "education",
        (
            "Is the {mod_first} exam of the semester usually {mod_high} stakes?",
            "Does the {mod_first} test of the term carry {mod_high} weight?",
            "How much does the {mod_first} exam count, {mod_high}?",
        ),
    ),
    # legal / government
    F(
        "legal",
        "legal",
        (
            "Is it {mod_legal} to fly a drone in {city}?",
            "Can I {mod_legal}ly operate a drone over {city}?",
            "Drone flights in {city}: {mod_legal}?",
        ),
    ),
    F(
        "tax",
        "legal",
        (
            "[Do|Don't] {audience} pay tax on income earned {time}?",
            "Is income earned {time} [|not ]taxable for {audience}?",
            "Tax on {audience}'s earnings {time}: [owed|not owed]?",
        ),
    ),
    F(
        "records",
        "legal",
        (
            "Are court records {mod_public} in {country}?",
            "Can anyone see court files in {country}, are they {mod_public}?",
            "Access to {mod_public} court documents in {country}?",
        ),
    ),
    F(
        "custody",
        "legal",
        (
            "Can {person} move abroad with the kids without {person2}'s consent?",
            "Is {person} allowed to relocate the children overseas if {person2} objects?",
            "{person} wants to take the children to another country; {person2} disagrees: legal?",
        ),
    ),
    # cooking
    F(
        "bake",
        "cooking",
        (
            "How long should I bake {dish} for {qty} people?",
            "What's the oven time for {dish} serving {qty}?",
            "Baking time, {dish}, {qty} servings?",
        ),
    ),
    F(
        "freeze",
        "cooking",
        (
            "[Can|Can't] you freeze {dish}?",
            "Is {dish} [|not ]suitable for the freezer?",
            "Freezing leftover {dish}: [ok|not ok]?",
        ),
    ),
    F(
        "serve",
        "cooking",
        (
            "Should {dish} be served {mod_hot}?",
            "Is {dish} eaten {mod_hot}?",
            "Do people serve {dish} {mod_hot}?",
        ),
    ),
    # sports / fitness
    F(
        "train_sport",
        "sports",
        (
            "How often should {audience} practise {sport} per week?",
            "What's a good weekly {sport} training frequency for {audience}?",
            "{sport} sessions per week for {audience}?",
        ),
    ),
    F(
        "calories",
        "sports",
        (
            "How many calories does an hour of {sport} burn?",
            "What is the energy use of sixty minutes of {sport}?",
            "Calories used by {sport}, one hour?",
        ),
    ),
    F(
        "match",
        "sports",
        (
            "Did {city} beat {city2} in the {sport} final?",
            "Was {city2} defeated by {city} in {sport}?",
            "{sport}: did {city} win against {city2}?",
        ),
    ),
    # telecom / utilities
    F(
        "roaming",
        "telecom",
        (
            "Does the {tier} include roaming in {country}?",
            "Is mobile roaming in {country} covered by the {tier}?",
            "Using my phone in {country} on the {tier}: extra charges?",
        ),
    ),
    F(
        "speed",
        "telecom",
        (
            "Why is my internet {mod_fast} {time}?",
            "What makes my broadband {mod_fast} {time}?",
            "Home wifi {mod_fast} {time}: reasons?",
        ),
    ),
    F(
        "bill",
        "telecom",
        (
            "Why did my phone bill {act_raise} {time}?",
            "What made my mobile bill {act_raise} {time}?",
            "Phone charges {act_raise} {time}: explanation?",
        ),
    ),
    # housing
    F(
        "rent",
        "housing",
        (
            "How much is rent for a {qty} bedroom apartment in {city}?",
            "What does a {qty}-bedroom flat cost to rent in {city}?",
            "Monthly rent, {qty} bedrooms, {city}?",
        ),
    ),
    F(
        "heating",
        "housing",
        (
            "How do I make my apartment {mod_hot} {mod_fast}?",
            "What's a {mod_fast} way to get my flat {mod_hot}?",
            "Getting a room {mod_hot}, {mod_fast}: tricks?",
        ),
    ),
    F(
        "lease",
        "housing",
        (
            "[Can|Can't] my landlord {act_raise} the rent {time}?",
            "Is a landlord [|not ]allowed to {act_raise} rent {time}?",
            "Rent {act_raise} by landlord {time}: [permitted|forbidden]?",
        ),
    ),
    # automotive
    F(
        "car_import",
        "auto",
        (
            "How do I {act_import} a car from {country} to {country2}?",
            "What's the process to {act_import} a vehicle, {country} to {country2}?",
            "{act_import} a used car between {country} and {country2}: steps?",
        ),
    ),
    F(
        "tyres",
        "auto",
        (
            "Is it {mod_safe} to drive on bald tyres {time}?",
            "Can worn-out tires be {mod_safe} {time}?",
            "Driving with smooth tyres {time}: {mod_safe}?",
        ),
    ),
    F(
        "parking",
        "auto",
        (
            "Where can I find {mod_cheap} parking in {city} {time}?",
            "Which car parks in {city} are {mod_cheap} {time}?",
            "{mod_cheap} parking options, {city}, {time}?",
        ),
    ),
    # pets
    F(
        "pet_food",
        "pets",
        (
            "[Can|Can't] dogs eat {dish}?",
            "Is {dish} [|not ]ok to give a dog?",
            "Feeding my dog {dish}: [fine|not fine]?",
        ),
    ),
    F(
        "pet_walk",
        "pets",
        (
            "How many times a day should I walk {qty} dogs?",
            "How often do {qty} dogs need a walk each day?",
            "Daily walks for {qty} dogs: how many?",
        ),
    ),
    F(
        "adopt",
        "pets",
        (
            "What does it cost to adopt a cat in {city}?",
            "How much is a cat adoption fee in {city}?",
            "Adopting a kitten in {city}: price?",
        ),
    ),
]

#: Held out (fixed before training): a row is held out when its family or domain is listed here.
HELDOUT_DOMAINS = ("health", "legal", "pets")
HELDOUT_FAMILIES = ("wire_fee", "flight", "migrate", "dark_mode", "plan_users", "rates",
                    "offer", "translate", "bake", "match", "bill", "rent", "tyres")  # fmt: skip
#: The fresh held-out set's domains (bench/contrast_fresh.py), in no other family.
FRESH_DOMAINS = ("lodging", "postal", "clothing", "homerepair", "outdoors", "parenting", "media",
                 "arts", "charity", "science")  # fmt: skip
#: The third held-out set's domains (bench/contrast_fresh2.py), in no other family.
FRESH2_DOMAINS = ("farming", "beauty", "accessories", "moving", "genealogy", "aviation",
                  "collectibles", "funerals", "beekeeping")  # fmt: skip
#: The fourth held-out set's domains (bench/contrast_fresh3.py), in no other family.
FRESH3_DOMAINS = ("boating", "woodworking", "libraries", "recycling", "weddings", "cycling",
                  "aquariums", "boardgames", "knitting")  # fmt: skip
#: The fifth held-out set's domains (bench/contrast_fresh4.py), in no other family.
FRESH4_DOMAINS = ("astronomy", "pottery", "fishing", "chess", "motorcycles", "tattoos", "skiing",
                  "languages", "perfume")  # fmt: skip
#: The sixth held-out set's domains (bench/contrast_fresh5.py), in no other family.
FRESH5_DOMAINS = ("scuba", "golf", "sewing", "birding", "dance", "archery", "equestrian", "surfing",
                  "calligraphy")  # fmt: skip
#: The seventh held-out set's domains (bench/contrast_fresh6.py), in no other family.
FRESH6_DOMAINS = ("climbing", "tennis", "homebrewing", "origami", "skateboarding", "rowing",
                  "fencing", "cheesemaking", "hamradio")  # fmt: skip
#: The eighth held-out set's domains (bench/contrast_fresh7.py), in no other family.
FRESH7_DOMAINS = ("bonsai", "leathercraft", "soapmaking", "curling", "cricket", "volleyball",
                  "falconry", "stagemagic", "foraging")  # fmt: skip
#: The fresh held-out sets in the order they were written: (stem, the module under bench/ that
#: holds their families, domains, seed). :func:`generate_fresh` writes ``contrast_{stem}`` and
#: ``multiturn_{stem}`` from each; :func:`held_out` and :func:`_check_fresh` read them all.
FRESH_SETS: tuple[tuple[str, str, tuple[str, ...], int], ...] = (
    ("fresh", "contrast_fresh", FRESH_DOMAINS, FRESH_SEED),
    ("fresh2", "contrast_fresh2", FRESH2_DOMAINS, FRESH2_SEED),
    ("fresh3", "contrast_fresh3", FRESH3_DOMAINS, FRESH3_SEED),
    ("fresh4", "contrast_fresh4", FRESH4_DOMAINS, FRESH4_SEED),
    ("fresh5", "contrast_fresh5", FRESH5_DOMAINS, FRESH5_SEED),
    ("fresh6", "contrast_fresh6", FRESH6_DOMAINS, FRESH6_SEED),
    ("fresh7", "contrast_fresh7", FRESH7_DOMAINS, FRESH7_SEED),
)

#: Follow-ups for the multi-turn set: phrasings; the intent flip of each (its pair).
FOLLOW_UPS: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
    (("How much does that cost?", "What's the price of that?", "And what would I pay?"),
     ("Is that free?", "Does that cost nothing?")),
    (("How long does it take?", "What's the usual wait for that?", "How many days is that?"),
     ("How much does it cost?", "What's the price of it?")),
    (("Can I do it online?", "Is there a way to do that over the internet?"),
     ("Do I have to do it in person?", "Must I go there in person for that?")),
    (("What documents do I need?", "Which papers should I bring for that?"),
     ("What documents should I not bring?", "Which papers are not needed?")),
    (("Is it allowed?", "Am I permitted to do that?"),
     ("Is it forbidden?", "Is that prohibited?")),
    (("How do I turn it on?", "How can I switch it on?"),
     ("How do I turn it off?", "How can I switch it off?")),
    (("Is it better in the morning?", "Would doing it before noon be better?"),
     ("Is it better at night?", "Would doing it after dark be better?")),
    (("What are the risks?", "What could go wrong with that?"),
     ("What are the benefits?", "What are the upsides of that?")),
]  # fmt: skip

SMALL_TALK = [
    ("Hi there!", "Hello! How can I help you today?"),
    ("Good morning.", "Good morning! What can I do for you?"),
    ("Thanks for the help earlier.", "You're welcome! Happy to help again."),
    ("Hey, quick question.", "Sure, go ahead."),
]
REPLIES = ("Here is what I know about {}.", "Sure, a short overview on {}.",
           "Good question about {}; here are the main points.", "Regarding {}: some details.")  # fmt: skip


def generate(seed: int = SEED, per_family: int = 60) -> dict[str, list[dict[str, Any]]]:
    """The first four files' rows, by file stem (frozen: unchanged by the families added later)."""
    rng = random.Random(seed)
    out: dict[str, list[dict[str, Any]]] = {
        k: []
        for k in ("contrast_train", "contrast_heldout", "multiturn_train", "multiturn_heldout")
    }
    for fam in FAMILIES:
        split = "heldout" if held_out(fam) else "train"
        for _ in range(per_family):
            for row in _contrast_rows(rng, fam):
                out[f"contrast_{split}"].append(row)
        for _ in range(per_family // 3):
            out[f"multiturn_{split}"].extend(_multiturn_rows(rng, fam, FAMILIES))
    return out


def generate_more(per_family: int = 24) -> dict[str, list[dict[str, Any]]]:
    """The added training families' rows: ``contrast_more_train``/``multiturn_more_train``
    (bench/contrast_more.py, seed 13) and ``contrast_more2_train``/``multiturn_more2_train``
    (bench/contrast_more2.py, seed 17). Training only: none of these families or domains is held
    out (checked), and their conversations' irrelevant earlier exchanges come from training
    families only (the first files' may quote a held-out family there)."""
    from bench import contrast_more, contrast_more2  # (they import Family from here)

    training = [f for f in FAMILIES if not held_out(f)]
    out: dict[str, list[dict[str, Any]]] = {}
    for module, stem, seed in ((contrast_more, "more", MORE_SEED),
                               (contrast_more2, "more2", MORE2_SEED)):  # fmt: skip
        _add_lexicons(module.LEXICONS, f"bench/{module.__name__.split('.')[-1]}.py")
        if held := [f.name for f in module.FAMILIES if held_out(f)]:
            raise ValueError(f"families {held}: an added family may not be held out")
        training += module.FAMILIES  # (a round's pool: the rounds up to it, itself included)
        rows = _family_rows(random.Random(seed), module.FAMILIES, per_family, list(training))
        out[f"contrast_{stem}_train"], out[f"multiturn_{stem}_train"] = rows
    return out


def generate_fresh(per_family: int = 40) -> dict[str, list[dict[str, Any]]]:
    """The fresh held-out sets' rows: ``contrast_{stem}``/``multiturn_{stem}`` of each of
    :data:`FRESH_SETS` (bench/contrast_fresh.py to contrast_fresh7.py, each with its own seed),
    each checked to be in its own domains and to share no lexicon or word with training; their
    conversations' irrelevant earlier exchanges come from their own families."""
    out: dict[str, list[dict[str, Any]]] = {}
    for (stem, _, domains, seed), module in zip(FRESH_SETS, _fresh_modules(), strict=True):
        _check_fresh(module.LEXICONS, module.FAMILIES, domains)
        rows = _family_rows(random.Random(seed), module.FAMILIES, per_family, module.FAMILIES)
        out[f"contrast_{stem}"], out[f"multiturn_{stem}"] = rows
    return out


def _fresh_modules() -> list[Any]:
    """The modules of :data:`FRESH_SETS`' families (imported when asked: they import this one)."""
    return [importlib.import_module(f"bench.{module}") for _, module, _, _ in FRESH_SETS]


def _family_rows(
    rng: random.Random, families: list[Family], per_family: int, pool: list[Family]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The contrast and multi-turn rows of a set of families added after the first ones, drawn
    from ``rng`` family by family: ``per_family`` contrast draws, a third as many conversations
    (none for a family without a slot: a swap needs one); ``pool``: the families an irrelevant
    earlier exchange is drawn from."""
    contrast: list[dict[str, Any]] = []
    multiturn: list[dict[str, Any]] = []
    for fam in families:
        for _ in range(per_family):
            contrast.extend(_contrast_rows(rng, fam))
        for _ in range(per_family // 3 if _slots(fam) else 0):
            multiturn.extend(_multiturn_rows(rng, fam, pool))
    return contrast, multiturn


def _check_fresh(
    fresh: dict[str, Lexicon], families: list[Family], domains: tuple[str, ...]
) -> None:
    """A fresh held-out set's lexicons are new and share no word with the training lexicons
    (contrast_data's first ones and bench/contrast_more.py's); its families use only them, in
    its own domains. Adds its lexicons to LEXICONS."""
    from bench import contrast_more, contrast_more2

    added = contrast_more.LEXICONS | contrast_more2.LEXICONS
    held = set().union(*(m.LEXICONS for m in _fresh_modules()))
    training = {k: v for k, v in (LEXICONS | added).items() if k not in held}
    words = {w.lower() for _, values, _ in training.values() for v in values for w in v}
    for name, (_, values, _) in fresh.items():
        if name in added:  # (LEXICONS has them only after generate_more)
            raise ValueError(f"fresh lexicon {name} redefines a training lexicon")
        if any(w.lower() in words for v in values for w in v):
            raise ValueError(f"fresh lexicon {name} repeats a training lexicon's words")
    _add_lexicons(fresh, "a fresh held-out set")
    for fam in families:
        if fam.domain not in domains or not set(map(_lexicon, _slots(fam))) <= set(fresh):
            raise ValueError(f"family {fam.name}: not a fresh domain, or a training lexicon")


def _add_lexicons(new: dict[str, Lexicon], origin: str) -> None:
    """Add ``new`` to LEXICONS, refusing a name LEXICONS already has with other values (so the
    files written before it are drawn from the lexicons they were drawn from)."""
    clash = {k for k, v in new.items() if LEXICONS.get(k, v) != v}
    if clash:
        raise ValueError(f"{origin} redefines lexicons {sorted(clash)}")
    LEXICONS.update(new)


def held_out(fam: Family) -> bool:
    held = HELDOUT_DOMAINS + tuple(d for _, _, domains, _ in FRESH_SETS for d in domains)
    return fam.domain in held or fam.name in HELDOUT_FAMILIES


def main() -> None:
    DATA.mkdir(exist_ok=True)
    for stem, rows in (generate() | generate_more() | generate_fresh()).items():
        with (DATA / f"{stem}.jsonl").open("w") as f:
            for row in rows:
                f.write(json.dumps(row, sort_keys=True) + "\n")
        print(f"{stem}: {len(rows)} rows ({sum(r['same'] for r in rows)} should hit)")


# ---- helpers ----------------------------------------------------------------------------------

_SLOT = re.compile(r"\{([a-z_]+?)(\d?)\}")
_POLARITY = re.compile(r"\[([^|\]]*)\|([^\]]*)\]")


def _slots(fam: Family) -> list[str]:
    """The family's slots. NOTE: every phrasing has the same slots and polarity (checked), so
    a paraphrase keeps every value and a trap's change is always visible."""
    found = [sorted({m.group(1) + m.group(2) for m in _SLOT.finditer(p)}) for p in fam.phrasings]
    polar = {bool(_POLARITY.search(p)) for p in fam.phrasings}
    if any(f != found[0] for f in found) or len(polar) > 1:
        raise ValueError(f"family {fam.name}: phrasings differ in slots or polarity")
    return sorted({m.group(1) + m.group(2) for m in _SLOT.finditer(fam.phrasings[0])})


def _lexicon(slot: str) -> str:
    return slot.rstrip("0123456789")


def _fill(rng: random.Random, fam: Family) -> dict[str, int]:
    """Slot -> value index; slots of one lexicon get distinct values."""
    values: dict[str, int] = {}
    for slot in _slots(fam):
        n = len(LEXICONS[_lexicon(slot)][1])
        taken = {v for s, v in values.items() if _lexicon(s) == _lexicon(slot)}
        values[slot] = rng.choice([i for i in range(n) if i not in taken])
    return values


def _render(
    rng: random.Random, fam: Family, phrasing: int, values: dict[str, int], neg: bool
) -> str:
    def slot(m: re.Match[str]) -> str:
        syns = LEXICONS[_lexicon(m.group(1))][1][values[m.group(1) + m.group(2)]]
        return rng.choice(syns)

    text = _SLOT.sub(slot, fam.phrasings[phrasing])
    text = _POLARITY.sub(lambda m: m.group(2 if neg else 1), text)
    text = re.sub(r"\s+", " ", text).strip()
    return text[0].upper() + text[1:]


def _traps(
    rng: random.Random, fam: Family, values: dict[str, int]
) -> list[tuple[str, dict[str, int], bool]]:
    """(kind, values, negated) of every single-change perturbation of ``values``."""
    out: list[tuple[str, dict[str, int], bool]] = []
    if _POLARITY.search(fam.phrasings[0]):
        out.append(("negation", values, True))
    by_lexicon: dict[str, list[str]] = {}
    for slot in values:
        by_lexicon.setdefault(_lexicon(slot), []).append(slot)
    for lex, slots in by_lexicon.items():
        kind, entries, paired = LEXICONS[lex]
        if len(slots) == 2:  # two named parties: the direction swapped
            a, b = slots
            out.append(("direction", {**values, a: values[b], b: values[a]}, False))
        for slot in slots:
            taken = {values[s] for s in slots}
            if paired:
                other = values[slot] ^ 1
            else:
                other = rng.choice([i for i in range(len(entries)) if i not in taken])
            out.append((kind if not paired else _antonym_kind(lex), {**values, slot: other}, False))
    return out


def _antonym_kind(lex: str) -> str:
    return "antonym_verb" if lex.startswith("act_") else "antonym_modifier"


def _contrast_rows(rng: random.Random, fam: Family) -> list[dict[str, Any]]:
    values = _fill(rng, fam)
    n = len(fam.phrasings)
    pa = rng.randrange(n)
    a = _render(rng, fam, pa, values, False)
    base = {"family": fam.name, "domain": fam.domain}
    rows = [{**base, "kind": "paraphrase", "same": True, "a": a,
             "b": _render(rng, fam, (pa + rng.randrange(1, n)) % n, values, False)}]  # fmt: skip
    traps = _traps(rng, fam, values)
    for kind, changed, neg in rng.sample(traps, min(2, len(traps))):
        b = _render(rng, fam, rng.randrange(n), changed, neg)
        if b != a:
            rows.append({**base, "kind": kind, "same": False, "a": a, "b": b})
    return rows


def exchange(rng: random.Random, first: str, follow: str) -> list[dict[str, str]]:
    """The multi-turn sets' turns: ``first``, a reply that restates it (one of :data:`REPLIES`),
    then ``follow``."""
    topic = first.rstrip("?:.").lower()
    return [{"role": "user", "content": first},
            {"role": "assistant", "content": rng.choice(REPLIES).format(topic)},
            {"role": "user", "content": follow}]  # fmt: skip


def _conversation(
    rng: random.Random,
    fam: Family,
    values: dict[str, int],
    follow: str,
    *,
    padding: str = "",
    pool: list[Family] = FAMILIES,
) -> list[dict[str, str]]:
    turns = exchange(
        rng, _render(rng, fam, rng.randrange(len(fam.phrasings)), values, False), follow
    )
    if padding == "small_talk":
        hello, reply = rng.choice(SMALL_TALK)
        turns[:0] = [{"role": "user", "content": hello}, {"role": "assistant", "content": reply}]
    elif padding == "irrelevant":
        other = rng.choice([f for f in pool if f.domain != fam.domain])
        q = _render(rng, other, 0, _fill(rng, other), False)
        turns[:0] = [{"role": "user", "content": q},
                     {"role": "assistant", "content": rng.choice(REPLIES).format(q.lower())}]  # fmt: skip
    return turns


def _multiturn_rows(rng: random.Random, fam: Family, pool: list[Family]) -> list[dict[str, Any]]:
    """``pool``: the families an irrelevant earlier exchange is drawn from."""
    values = _fill(rng, fam)
    follows, flipped = rng.choice(FOLLOW_UPS)
    stored = _conversation(rng, fam, values, rng.choice(follows))
    base = {"family": fam.name, "domain": fam.domain, "a": stored}

    def row(kind: str, same: bool, b: list[dict[str, str]]) -> dict[str, Any]:
        return {**base, "kind": kind, "same": same, "b": b}

    traps = [t for t in _traps(rng, fam, values) if t[0] != "negation"]
    entity = [t for t in traps if t[0] in ("entity", "direction")] or traps
    detail = [t for t in traps if t[0] not in ("entity", "direction")] or traps
    return [
        row("reworded_history", True, _conversation(rng, fam, values, rng.choice(follows))),
        row(
            "small_talk",
            True,
            _conversation(rng, fam, values, stored[-1]["content"], padding="small_talk"),
        ),
        row(
            "irrelevant_earlier",
            True,
            _conversation(rng, fam, values, rng.choice(follows), padding="irrelevant", pool=pool),
        ),
        row(
            "context_swap",
            False,
            _conversation(rng, fam, rng.choice(entity)[1], stored[-1]["content"]),
        ),
        row(
            "detail_swap",
            False,
            _conversation(rng, fam, rng.choice(detail)[1], stored[-1]["content"]),
        ),
        row("intent_flip", False, _conversation(rng, fam, values, rng.choice(flipped))),
    ]


if __name__ == "__main__":
    main()
