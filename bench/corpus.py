"""The benches' synthetic corpus: passages from seeded templates (names, places, activities, dates), so every
run sees the same data, and questions about them."""

from __future__ import annotations

import random

NAMES = [
    "Ada",
    "Bruno",
    "Chen",
    "Dalia",
    "Emeka",
    "Farah",
    "Goran",
    "Hana",
    "Ivan",
    "Jun",
    "Kofi",
    "Lena",
    "Mateo",
    "Nadia",
    "Omar",
    "Priya",
    "Quinn",
    "Rosa",
    "Sven",
    "Tariq",
    "Uma",
    "Viktor",
    "Wen",
    "Ximena",
    "Yusuf",
    "Zoe",
]
PLACES = [
    "Lisbon",
    "the office",
    "Kyoto",
    "the lake house",
    "Nairobi",
    "the gym",
    "Montreal",
    "the library",
    "Oslo",
    "the farmers market",
    "Lima",
    "the hospital",
    "Seoul",
    "the climbing wall",
    "Cairo",
    "the studio",
]
ACTS = [
    "started learning the cello",
    "adopted a rescue dog",
    "signed the lease",
    "ran a half marathon",
    "presented the quarterly budget",
    "fixed the leaking sink",
    "planted tomatoes",
    "booked flights",
    "finished the novel draft",
    "met the new manager",
    "tried rock climbing",
    "baked sourdough bread",
    "switched to a standing desk",
    "renewed the passport",
    "hosted a board game night",
    "repaired the bicycle",
]
FEELINGS = [
    "and felt proud",
    "but found it exhausting",
    "with a friend",
    "after weeks of planning",
    "on a rainy evening",
    "to everyone's surprise",
    "despite a cold",
    "for the first time",
]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]


def passage(rng: random.Random, i: int) -> tuple[str, list[str]]:
    who, where, act, how = rng.choice(NAMES), rng.choice(PLACES), rng.choice(ACTS), rng.choice(FEELINGS)
    when = f"{rng.randint(1, 28)} {rng.choice(MONTHS)} {rng.randint(2019, 2026)}"
    text = f"On {when}, {who} {act} at {where} {how}. Note {i}."
    return text, [who.lower(), "event"]


def query_for(rng: random.Random, text: str) -> str:
    """A paraphrase-ish question about one passage (drops the date and note number)."""
    words = text.split(", ", 1)[1].rsplit(". Note", 1)[0]
    who, rest = words.split(" ", 1)
    return f"When did {who} {rest.split(' at ')[0].replace('started', 'start').replace('adopted', 'adopt')}?"


def questions(n: int) -> list[str]:
    """``n`` distinct questions about the bench's passages (at most ~380 exist), in a fixed order."""
    rng = random.Random(99)
    items = [passage(random.Random(i), i) for i in range(1000)]
    seen: dict[str, None] = {}
    for _ in range(20 * n):
        seen[query_for(rng, items[rng.randrange(1000)][0])] = None
        if len(seen) == n:
            break
    return list(seen)
