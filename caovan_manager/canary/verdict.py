"""What one canary run found: every generated token compared with the token a prefill picks at its place.

Decode (the recurrent GDN kernel, MTP's verify pass, CUDA graphs) and prefill (the chunked GDN kernel, attention over
the whole prompt) run different kernels over the same tokens; greedy decoding must pick, at every position, the token
a greedy prefill of everything before it picks. fp16/bf16 kernels differ in their last bits, so a token within
`tie_margin` (in log-probability) of the prefill's is a tie, not a disagreement.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

# passed: every token agreed (ties included); failed: at least one disagreed beyond the margin; not_run: the canary
# could not ask (busy engine, an HTTP error, a timeout): never counted as a pass.
Result = Literal["passed", "failed", "not_run"]
# Why it ran: after a start or restart, a wake-up, on a plugin activation's new version, on its timer, on request.
Purpose = Literal["start", "wake", "activation", "periodic", "on_demand"]
PURPOSES: tuple[Purpose, ...] = get_args(Purpose)


@dataclass(frozen=True)
class PrefillChoice:
    """What a prefill of everything before one place says comes next: its greedy token, and the log-probabilities of
    its first few candidates (that token among them)."""

    first: int
    logprobs: Mapping[int, float]


@dataclass(frozen=True)
class TokenCheck:
    """A generated token against the prefill's greedy token at its place; margin = their log-probability gap."""

    position: int  # index among the generated tokens
    got: int
    expected: int
    margin: float  # >= 0; 0 when the decode's token is the prefill's
    outside: bool = False  # the decode's token is not among the prefill's candidates: its margin is at least `margin`


def check_tokens(generated: Sequence[int], choices: Sequence[PrefillChoice]) -> list[TokenCheck]:
    """Compare each generated token with the prefill's choice at its place (choices[i] is the prefill of the prompt
    and generated[:i])."""
    if len(choices) != len(generated):
        raise ValueError(f"{len(generated)} generated tokens but {len(choices)} prefill choices")
    checks = []
    for position, (token, choice) in enumerate(zip(generated, choices, strict=True)):
        if choice.first not in choice.logprobs:
            raise ValueError(f"the prefill's choice at {position} does not rank its own token {choice.first}")
        top = choice.logprobs[choice.first]
        if token == choice.first:
            checks.append(TokenCheck(position, token, choice.first, 0.0))
        elif token in choice.logprobs:
            checks.append(TokenCheck(position, token, choice.first, max(top - choice.logprobs[token], 0.0)))
        else:
            checks.append(TokenCheck(position, token, choice.first, max(top - min(choice.logprobs.values()), 0.0),
                                     outside=True))
    return checks


@dataclass(frozen=True)
class Disagreement:
    """The evidence of a failed canary: which prompt, which generated position, what each path said."""

    prompt: str
    position: int
    expected: int
    expected_text: str
    got: int
    got_text: str
    margin: float
    at_least: bool  # the decode's token was not among the prefill's candidates: the gap is wider than `margin`
    tie_margin: float


@dataclass(frozen=True)
class PromptResult:
    """One prompt's checks; `prompt` as shown (cut to 80 characters)."""

    prompt: str
    checks: tuple[TokenCheck, ...]


@dataclass(frozen=True)
class CanaryVerdict:
    result: Result
    purpose: Purpose
    tie_margin: float
    tokens: int = 0  # generated tokens checked
    exact: int = 0  # equal to the prefill's first token
    ties: int = 0  # another token, within tie_margin of the first
    disagreements: int = 0
    evidence: Disagreement | None = None  # the first disagreement
    largest_tie: float = 0.0  # the widest margin still counted as a tie
    margins: tuple[float, ...] = ()  # every non-zero margin seen (ties and disagreements), for the distribution
    detail: str = ""  # why it did not run, or what it checked, in words
    duration_s: float = 0.0
    run_id: int | None = None
    at: float = field(default_factory=time.time)

    @property
    def agreement(self) -> float | None:
        """Share of the checked tokens that were the prefill's first (None when nothing was checked)."""
        return self.exact / self.tokens if self.tokens else None

    def as_dict(self) -> dict[str, Any]:
        """The verdict as /status, the events stream and the store show it."""
        shown = asdict(self)
        shown.pop("margins")
        shown["agreement"] = None if self.agreement is None else round(self.agreement, 4)
        shown["duration_s"] = round(self.duration_s, 3)
        return shown


def judge(results: Sequence[PromptResult], purpose: Purpose, tie_margin: float, duration_s: float) -> CanaryVerdict:
    """The verdict over every prompt's checks."""
    checks = [(result.prompt, check) for result in results for check in result.checks]
    exact = sum(1 for _, check in checks if check.got == check.expected)
    wrong = [(prompt, check) for prompt, check in checks
             if check.got != check.expected and (check.margin > tie_margin or check.outside)]
    ties = len(checks) - exact - len(wrong)
    evidence = None
    if wrong:
        prompt, check = wrong[0]
        evidence = Disagreement(prompt, check.position, check.expected, "", check.got, "", round(check.margin, 6),
                                check.outside, tie_margin)
    tie_margins = [check.margin for _, check in checks
                   if check.got != check.expected and check.margin <= tie_margin and not check.outside]
    if not checks:
        return CanaryVerdict("not_run", purpose, tie_margin, detail="the engine generated no token to check",
                             duration_s=duration_s)
    detail = (f"{len(checks)} tokens over {len(results)} prompts: {exact} as the prefill ranks first, {ties} ties "
              f"(within {tie_margin:g}), {len(wrong)} disagreeing")
    return CanaryVerdict(
        "failed" if wrong else "passed", purpose, tie_margin, tokens=len(checks), exact=exact, ties=ties,
        disagreements=len(wrong), evidence=evidence, largest_tie=round(max(tie_margins, default=0.0), 6),
        margins=tuple(check.margin for _, check in checks if check.got != check.expected), detail=detail,
        duration_s=duration_s)


def not_run(purpose: Purpose, tie_margin: float, detail: str, duration_s: float = 0.0) -> CanaryVerdict:
    return CanaryVerdict("not_run", purpose, tie_margin, detail=detail, duration_s=duration_s)
