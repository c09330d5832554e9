"""Draft acceptance of a demo model's MTP head, measured with transformers on the CPU, the way vLLM drafts.

For architectures vLLM's CPU build cannot serve here (Qwen3.5), this is how we know the MTP head is worth serving
before a GPU sees it. The main model decodes greedily; at each verify round the MTP layer drafts `steps` tokens from
the last verified position, exactly as vLLM's MTP proposer chains them: step 1 takes the main model's hidden state
and the verified token, step k the previous step's output and draft, all through one decoder layer whose attention
sees the step-1 entries of earlier positions (what vLLM's draft KV cache holds). A draft is accepted while it equals
the main model's greedy token; the round then advances by the accepted drafts plus the verified token."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from .architecture import MTP_STEPS, MtpHead


@dataclass(frozen=True)
class Acceptance:
    prompts: int
    rounds: int  # verify steps
    drafted: int
    accepted: int
    accepted_per_position: tuple[int, ...]  # how many rounds accepted draft k (1-based k = index + 1)

    @property
    def rate(self) -> float:
        """vLLM's "Avg Draft acceptance rate": accepted / drafted tokens."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_length(self) -> float:
        """vLLM's "Mean acceptance length": tokens emitted per verify step (1 + accepted drafts)."""
        return 1 + self.accepted / self.rounds if self.rounds else 0.0

    def describe(self) -> str:
        per_pos = ", ".join(f"{n / self.rounds:.2f}" for n in self.accepted_per_position) if self.rounds else ""
        return (f"{self.prompts} prompts, {self.rounds} verify rounds: draft acceptance {self.rate:.1%}, mean "
                f"acceptance length {self.mean_length:.2f}, per position [{per_pos}]")


@contextmanager
def _one_thread() -> Iterator[None]:
    # Decoding a tiny model is thousands of small ops: one thread each, since with more every op waits at a barrier
    # for the others (dozens of times slower on a busy machine).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@torch.no_grad()
def greedy(model: PreTrainedModel, prompt_ids: list[int], new_tokens: int) -> list[int]:
    """The prompt and exactly `new_tokens` greedily decoded tokens after it."""
    ids = torch.tensor([prompt_ids])
    with _one_thread():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=False, pad_token_id=model.config.pad_token_id)
    return out[0].tolist()


def _drafts(model: PreTrainedModel, mtp: MtpHead, hidden: torch.Tensor, seq: torch.Tensor,
            steps: int) -> torch.Tensor:
    """drafts[k, t]: draft k+1 of the round whose last verified position is t (seq[t + 1] its verified token).

    All rounds at once: step k's rows (one per t, at position t + k) run through the draft layer beside the rows of
    steps 1..k-1, under a mask that lets row t of step k see the step-1 rows 0..t and its own chain's rows only."""
    embed, lm_head, rope = model.model.embed_tokens, model.lm_head, model.model.rotary_emb
    n = seq.shape[0] - 1  # positions that have a next token
    t = torch.arange(n)
    step_embeds = [embed(seq[1:])]  # step 1 at position t: the verified token seq[t + 1] ...
    step_hidden = [hidden[0, :n]]  # ... and the main model's hidden state at t
    drafts = []
    for k in range(steps):
        rows = (k + 1) * n
        positions = torch.cat([t + j for j in range(k + 1)])
        step_of_row = torch.arange(rows) // n
        chain_of_row = torch.arange(rows) % n
        # Row (j, t) sees step-1 rows 0..t, and the rows of later steps of chain t up to step j.
        step1_ok = (step_of_row[None, :] == 0) & (chain_of_row[None, :] <= chain_of_row[:, None])
        chain_ok = (chain_of_row[None, :] == chain_of_row[:, None]) & (step_of_row[None, :] <= step_of_row[:, None])
        allowed = step1_ok | chain_ok
        mask = torch.zeros(rows, rows).masked_fill(~allowed, torch.finfo(torch.float32).min)[None, None]
        x_hidden = torch.cat(step_hidden).unsqueeze(0)
        out = mtp(torch.cat(step_embeds).unsqueeze(0), x_hidden, rope(x_hidden, positions.unsqueeze(0)), mask)
        last = out[0, k * n :]  # this step's rows
        tokens = lm_head(last).argmax(-1)
        drafts.append(tokens)
        step_embeds.append(embed(tokens))
        step_hidden.append(last)
    return torch.stack(drafts)


@torch.no_grad()
def measure(model: PreTrainedModel, mtp: MtpHead, tokenizer: PreTrainedTokenizerFast, prompts: Sequence[str],
            new_tokens: int = 128, steps: int = MTP_STEPS) -> Acceptance:
    """Greedy `new_tokens`-token chat completions of `prompts`; MTP drafts of `steps` tokens at each verify round."""
    model.eval()
    mtp.eval()
    with _one_thread():
        return _measure(model, mtp, tokenizer, prompts, new_tokens, steps)


def _measure(model: PreTrainedModel, mtp: MtpHead, tokenizer: PreTrainedTokenizerFast, prompts: Sequence[str],
             new_tokens: int, steps: int) -> Acceptance:
    rounds = drafted = accepted = 0
    per_position = [0] * steps
    for prompt in prompts:
        head = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                             add_generation_prompt=True)
        prompt_ids = tokenizer(head, add_special_tokens=False)["input_ids"]
        seq_list = greedy(model, prompt_ids, new_tokens)
        seq = torch.tensor(seq_list)
        hidden = model.model(input_ids=seq.unsqueeze(0)).last_hidden_state
        drafts = _drafts(model, mtp, hidden, seq, steps).t().tolist()
        t = len(prompt_ids) - 1  # prefill verified (sampled) seq[t + 1]
        while t + 1 + steps < len(seq_list):
            target = seq_list[t + 2 : t + 2 + steps]
            n = 0
            while n < steps and drafts[t][n] == target[n]:
                per_position[n] += 1
                n += 1
            rounds += 1
            drafted += steps
            accepted += n
            t += n + 1
    return Acceptance(len(prompts), rounds, drafted, accepted, tuple(per_position))
