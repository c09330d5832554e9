"""The canary's comparison: each generated token against the prefill's ranking at its place, over random rankings
(the run's seed is printed in the report header; `--seed` replays it)."""

from __future__ import annotations

import random

import pytest

from caovan_manager.canary.verdict import PrefillChoice, PromptResult, check_tokens, judge


def random_choice(rng: random.Random, vocab: int) -> PrefillChoice:
    """A prefill's answer as vLLM gives it with logprobs=5: its greedy token first, then four more candidates, some
    of them close behind."""
    tokens = rng.sample(range(vocab), 5)
    top = -rng.uniform(0, 3)
    gaps = [0.0] + sorted(rng.choice([0.0, rng.uniform(0, 0.3), rng.uniform(0.3, 8)]) for _ in range(4))
    return PrefillChoice(tokens[0], {token: top - gap for token, gap in zip(tokens, gaps)})


def test_random_choices_are_judged_as_the_definition_says(random_seed):
    rng = random.Random(random_seed)
    tie_margin = 0.25
    for _ in range(200):
        choices = [random_choice(rng, 50) for _ in range(rng.randrange(1, 30))]
        # the decode's token: mostly the prefill's, else another candidate, sometimes one outside the candidates
        generated = [rng.choice([c.first, c.first, rng.choice(list(c.logprobs)), rng.choice(
            [t for t in range(50) if t not in c.logprobs])]) for c in choices]
        checks = check_tokens(generated, choices)
        # The definition, written out independently.
        expected_margin = []
        for token, c in zip(generated, choices):
            floor = min(c.logprobs.values())
            expected_margin.append(c.logprobs[c.first] - c.logprobs.get(token, floor))
        assert [check.expected for check in checks] == [c.first for c in choices]
        assert [check.margin for check in checks] == pytest.approx(expected_margin)
        assert [check.outside for check in checks] == [token not in c.logprobs for token, c in zip(generated, choices)]
        verdict = judge([PromptResult("p", tuple(checks))], "periodic", tie_margin, 0.1)
        wrong = [i for i, (token, c, margin) in enumerate(zip(generated, choices, expected_margin))
                 if token != c.first and (margin > tie_margin or token not in c.logprobs)]
        assert verdict.result == ("failed" if wrong else "passed")
        assert verdict.disagreements == len(wrong)
        assert verdict.exact == sum(token == c.first for token, c in zip(generated, choices))
        assert verdict.exact + verdict.ties + verdict.disagreements == verdict.tokens == len(choices)
        if wrong:
            first = wrong[0]
            assert (verdict.evidence.position, verdict.evidence.got) == (first, generated[first])
            assert verdict.evidence.at_least == (generated[first] not in choices[first].logprobs)
        assert verdict.largest_tie <= tie_margin


def test_a_disagreement_names_its_prompt_position_and_both_tokens():
    choices = [PrefillChoice(5, {5: -0.1, 6: -4.0}), PrefillChoice(7, {7: -0.2, 9: -3.2, 4: -5.0})]
    verdict = judge([PromptResult("The capital of France is", tuple(check_tokens([5, 9], choices)))], "start", 0.25,
                    0.5)
    assert verdict.result == "failed" and verdict.agreement == 0.5
    e = verdict.evidence
    assert (e.prompt, e.position, e.expected, e.got, e.at_least) == ("The capital of France is", 1, 7, 9, False)
    assert e.margin == pytest.approx(3.0)
    shown = verdict.as_dict()
    assert shown["evidence"]["got"] == 9 and "margins" not in shown


def test_a_token_outside_the_candidates_is_a_disagreement_whatever_the_margin():
    choices = [PrefillChoice(3, {3: -2.30, 4: -2.35})]  # nearly flat: the last candidate is close behind the first
    verdict = judge([PromptResult("p", tuple(check_tokens([8], choices)))], "start", 0.25, 0.0)
    assert verdict.result == "failed" and verdict.evidence.at_least
    assert verdict.evidence.margin == pytest.approx(0.05)


def test_a_tie_within_the_margin_passes_and_is_counted_as_such():
    choices = [PrefillChoice(3, {3: -0.70, 4: -0.75})]
    verdict = judge([PromptResult("p", tuple(check_tokens([4], choices)))], "start", 0.1, 0.0)
    assert (verdict.result, verdict.exact, verdict.ties, verdict.largest_tie) == ("passed", 0, 1, pytest.approx(0.05))


def test_nothing_generated_is_not_a_pass():
    verdict = judge([PromptResult("p", ())], "periodic", 0.25, 0.0)
    assert verdict.result == "not_run" and verdict.agreement is None


@pytest.mark.parametrize("generated, choices, why", [
    ([1, 2], [PrefillChoice(1, {1: -0.1})], "2 generated tokens but 1 prefill choices"),
    ([1], [PrefillChoice(2, {1: -0.1})], "does not rank its own token 2"),
])
def test_choices_that_do_not_fit_the_tokens_are_refused(generated, choices, why):
    with pytest.raises(ValueError, match=why):
        check_tokens(generated, choices)
