"""AcceptanceLock: run the same greedy prompts on two engines and hold GDNCore to the stock path's tokens and
draft acceptance. Used by the CPU integration test and by the CUDA verification script."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
import openai

from caovan_manager.engine.probe import metric_sums
from tests.support.engine import Engine

SPEC_COUNTERS = ("vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_draft_tokens_total")
# Where greedy picks differ, the stock engine's top two candidates must be this close (nats) for the difference
# to count as rounding (low-precision activations, fp32 state in both paths); anything wider is a real divergence.
TIE_MARGIN = 0.05


@dataclass
class GreedyRun:
    tokens: list[list[tuple[str, list[tuple[str, float]]]]]  # per prompt: (token, top-2 alternatives)
    acceptance: float


def greedy_run(engine: Engine, model: str, prompts: list[str], max_tokens: int) -> GreedyRun:
    return greedy_via(f"{engine.base_url}/v1", f"{engine.base_url}/metrics", model, prompts, max_tokens)


def greedy_via(api_url: str, metrics_url: str, model: str, prompts: list[str], max_tokens: int) -> GreedyRun:
    """The prompts sent to the OpenAI API at api_url (the engine's own, or a daemon's /v1 in front of it), the
    draft counters read from the engine's metrics page at metrics_url (its own, or a daemon's /metrics/engine)."""
    def counters() -> list[float]:
        sums = metric_sums(httpx.get(metrics_url, timeout=10).text)
        return [sums.get(name, 0.0) for name in SPEC_COUNTERS]

    client = openai.OpenAI(base_url=api_url, api_key="unused", timeout=600)
    before = counters()
    runs = []
    for prompt in prompts:
        reply = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0,
            logprobs=True, top_logprobs=2,
        )
        runs.append([(t.token, [(alt.token, alt.logprob) for alt in t.top_logprobs])
                     for t in reply.choices[0].logprobs.content])
    accepted, drafted = (after - b for after, b in zip(counters(), before))
    if drafted <= 0:
        raise AssertionError("the engine drafted no tokens: is MTP speculative decoding on?")
    return GreedyRun(runs, accepted / drafted)


def divergences(prompts: list[str], stock: GreedyRun, ours: GreedyRun, ours_label: str = "GDNCore",
                acceptance_points: float | None = 0.02) -> list[str]:
    """Problems found; a tie (stock margin below TIE_MARGIN) at the first differing token is allowed and noted.
    acceptance_points=None leaves the draft acceptance free (DraftVocab may move it; only tokens are held)."""
    problems = []
    for prompt, theirs, mine in zip(prompts, stock.tokens, ours.tokens):
        if len(mine) != len(theirs):
            problems.append(f"prompt {prompt!r}: {len(mine)} tokens with {ours_label}, {len(theirs)} stock")
        for pos, ((want, alts), (got, _)) in enumerate(zip(theirs, mine)):
            if want == got:
                continue
            margin = abs(alts[0][1] - alts[1][1]) if len(alts) > 1 else float("inf")
            if margin >= TIE_MARGIN:
                problems.append(f"prompt {prompt!r}: token {pos} is {got!r} with {ours_label}, {want!r} stock, at a "
                                f"stock logit margin of {margin:.3f} nats (rounding allows < {TIE_MARGIN})")
            break
    if acceptance_points is not None and abs(ours.acceptance - stock.acceptance) > acceptance_points:
        problems.append(f"draft acceptance {ours.acceptance:.1%} with {ours_label} vs {stock.acceptance:.1%} stock "
                        f"differs by more than {acceptance_points * 100:g} points")
    return problems
