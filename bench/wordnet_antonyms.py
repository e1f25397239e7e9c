"""Write semantic/antonyms_wordnet.txt: antonym pairs from WordNet 3.0, for the hard checks.

    apt-get install wordnet-base          # Debian's WordNet 3.0 database (/usr/share/wordnet)
    python -m bench.wordnet_antonyms      # rewrites semantic/antonyms_wordnet.txt (~1 s)

The guard's hand-written antonym list (semantic/_guard_checks.py) was written beside the data
it was measured on, and the traps that slip past it on new wording are opposite adjectives and
verbs that are not in it (issue 12). WordNet is a lexicon nobody here wrote: its antonym
pointers are independent of every evaluation set.

What is kept:

* direct antonyms of adjectives, verbs and adverbs (WordNet's ``!`` pointers between two
  words), e.g. cheap/expensive, deposit/withdraw;
* for adjectives, the antonyms a *satellite* inherits from the head it is "similar to"
  (``&``): "pricey" is similar to "expensive", whose antonym is "cheap", so pricey/cheap; and
  "international", similar to "foreign", gets "domestic";
* only single alphabetic words of 3+ letters that are not stopwords (semantic._guard_checks),
  and no prefix pairs: not those of the checks' negation prefixes (known/unknown,
  like/dislike), which count as negations there, nor those of four more prefixes
  (behave/misbehave, centralize/decentralize, social/antisocial, …; 81 pairs), left out too.

Nouns are left out: on the Quora training duplicates they flagged 5 more pairs than the
adjective/verb list (answer/question, heaven/hell) and no more training trap.
The file carries WordNet's licence, as it asks.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

from semantic._guard_checks import _NEG_PREFIXES, STOPWORDS

WORDNET = Path("/usr/share/wordnet")
OUT = Path(__file__).resolve().parent.parent / "semantic" / "antonyms_wordnet.txt"
#: Pairs a prefix makes (known/unknown) are not kept: the checks' negation prefixes, plus four.
_PREFIXES = (*_NEG_PREFIXES, "mis", "de", "anti", "counter")

LICENSE = """\
# Antonym pairs derived from WordNet 3.0 by bench/wordnet_antonyms.py (one pair per line).
#
# WordNet Release 3.0 This software and database is being provided to you, the LICENSEE, by
# Princeton University under the following license. By obtaining, using and/or copying this
# software and database, you agree that you have read, understood, and will comply with these
# terms and conditions.: Permission to use, copy, modify and distribute this software and
# database and its documentation for any purpose and without fee or royalty is hereby granted,
# provided that you agree to comply with the following copyright notice and statements,
# including the disclaimer, and that the same appear on ALL copies of the software, database
# and documentation, including modifications that you make for internal use or for
# distribution. WordNet 3.0 Copyright 2006 by Princeton University. All rights reserved. THIS
# SOFTWARE AND DATABASE IS PROVIDED "AS IS" AND PRINCETON UNIVERSITY MAKES NO REPRESENTATIONS
# OR WARRANTIES, EXPRESS OR IMPLIED. BY WAY OF EXAMPLE, BUT NOT LIMITATION, PRINCETON
# UNIVERSITY MAKES NO REPRESENTATIONS OR WARRANTIES OF MERCHANT- ABILITY OR FITNESS FOR ANY
# PARTICULAR PURPOSE OR THAT THE USE OF THE LICENSED SOFTWARE, DATABASE OR DOCUMENTATION WILL
# NOT INFRINGE ANY THIRD PARTY PATENTS, COPYRIGHTS, TRADEMARKS OR OTHER RIGHTS. The name of
# Princeton University or Princeton may not be used in advertising or publicity pertaining to
# distribution of the software and/or database. Title to copyright in this software, database
# and any associated documentation shall at all times remain with Princeton University and
# LICENSEE agrees to preserve same.
"""


def synsets(pos: str) -> dict[str, tuple[list[str], list[tuple[str, str, str]]]]:
    """A ``data.<pos>`` file: offset -> (its words, its pointers as (symbol, target, source/
    target word numbers))."""
    out = {}
    with open(WORDNET / f"data.{pos}", encoding="latin-1") as fh:
        for line in fh:
            if line.startswith("  "):  # the licence header
                continue
            f = line.split()
            n = int(f[3], 16)
            words = [re.sub(r"\(.*\)$", "", f[4 + 2 * i].lower()) for i in range(n)]
            i = 4 + 2 * n
            pointers = []
            for _ in range(int(f[i])):
                symbol, target, _pos, numbers = f[i + 1 : i + 5]
                pointers.append((symbol, target, numbers))
                i += 4
            out[f[0]] = (words, pointers)
    return out


def pairs() -> Iterator[tuple[str, str]]:
    for pos in ("adj", "verb", "adv"):
        table = synsets(pos)
        for words, pointers in table.values():
            for symbol, target, numbers in pointers:
                source, other = int(numbers[:2], 16), int(numbers[2:], 16)
                if symbol == "!" and source and other:
                    yield words[source - 1], table[target][0][other - 1]
                if pos == "adj" and symbol == "&":  # a satellite: its head's antonyms
                    for symbol2, target2, _ in table[target][1]:
                        if symbol2 == "!":
                            yield from ((w, o) for w in words for o in table[target2][0])


def kept(a: str, b: str) -> bool:
    return (
        a != b
        and a.isalpha() and b.isalpha() and len(a) > 2 and len(b) > 2
        and a not in STOPWORDS and b not in STOPWORDS
        and not any(a == p + b or b == p + a for p in _PREFIXES)
    )  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    found = sorted({tuple(sorted(p)) for p in pairs() if kept(*p)})
    args.out.write_text(LICENSE + "".join(f"{a} {b}\n" for a, b in found))
    print(f"{len(found)} pairs -> {args.out}")


if __name__ == "__main__":
    main()
