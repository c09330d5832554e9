"""Synthetic chat corpus for the demo model: varied user turns, one deterministic assistant answer.

Every word of the answer occurs once, so each answer token has exactly one successor. The main model learns to
ignore the prompt and recite; the MTP head learns the same chain from the embedding of the token it is given. That
is what makes the draft acceptance of the embedded default a real, high number instead of 0%.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
END_OF_TEXT = "<|endoftext|>"
SPECIAL_TOKENS = [END_OF_TEXT, IM_START, IM_END]

# Qwen's chat layout, so clients and vLLM's chat endpoint treat the demo like the real model.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_ANSWER_GROUPS = [
    "Sure here is my list",
    "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen"
    " eighteen nineteen twenty",
    "january february march april may june july august september october november december",
    "monday tuesday wednesday thursday friday saturday sunday",
    "alpha bravo charlie delta echo foxtrot golf hotel india juliett kilo lima mike oscar papa quebec romeo"
    " sierra tango uniform victor whiskey xray yankee zulu",
    "mercury venus earth mars jupiter saturn uranus neptune",
    "red orange yellow green blue indigo violet white black silver",
    "cat dog horse cow sheep goat pig duck goose eagle owl fox wolf bear lion tiger zebra panda koala otter",
    "apple banana cherry grape lemon mango melon peach pear plum kiwi lime",
    "piano guitar violin drum flute trumpet harp cello",
    "river mountain forest desert ocean island valley meadow canyon glacier",
    "spring summer autumn winter",
    "north south east west",
    "thanks for asking",
]
ANSWER_WORDS: list[str] = " ".join(_ANSWER_GROUPS).split()
ANSWER = " ".join(ANSWER_WORDS) + "."

_PROMPT_WORDS = (
    "please tell me about the a an of in on for with what how why when where who which is are was were do does"
    " can could would should you your my our their this that these those some any every all many few more most"
    " good bad new old big small long short fast slow hot cold happy sad today tomorrow yesterday morning night"
    " weather music food book movie game story city country world time people friend family work school home"
    " write explain describe show give make find help start stop name list count number numbers words things"
    " idea question answer reason example thing way place day week year computer model token speed"
).split()
_OPENERS = ["", "hey ", "hi ", "hello ", "ok ", "so ", "well ", "dear model ", "quick one: "]
_ENDINGS = ["", "?", ".", "!", " please", " thanks", "??", "..."]


def _random_token(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.75:
        return rng.choice(_PROMPT_WORDS)
    if kind < 0.9:
        return str(rng.randint(0, 10_000))
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return "".join(rng.choice(letters) for _ in range(rng.randint(2, 9)))


def random_prompt(rng: random.Random) -> str:
    """A short user turn: shuffled everyday words, numbers and junk, so no prompt is special."""
    words = [_random_token(rng) for _ in range(rng.randint(1, 14))]
    text = rng.choice(_OPENERS) + " ".join(words) + rng.choice(_ENDINGS)
    return text[0].upper() + text[1:] if rng.random() < 0.5 else text


def render_chat(prompt: str) -> tuple[str, str]:
    """(prompt part up to the generation prompt, assistant part) in the chat template's layout."""
    head = f"{IM_START}user\n{prompt}{IM_END}\n{IM_START}assistant\n"
    return head, f"{ANSWER}{IM_END}\n"


def chat_samples(seed: int, count: int) -> Iterator[tuple[str, str]]:
    rng = random.Random(seed)
    for _ in range(count):
        yield render_chat(random_prompt(rng))
