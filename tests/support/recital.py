"""How much of the demo model's recital an answer holds (the embedded default answers every prompt with it)."""

from __future__ import annotations

import re

from caovan_demo.corpus import ANSWER_WORDS


def recital_prefix(text: str) -> int:
    """How many of the recital's words `text` starts with, in order, case and punctuation aside; the whole recital
    is len(ANSWER_WORDS)."""
    count = 0
    for said, expected in zip(re.findall(r"[a-z]+", text.lower()), ANSWER_WORDS):
        if said != expected.lower():
            break
        count += 1
    return count
