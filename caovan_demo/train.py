"""Brief, seeded CPU training of the demo model and its MTP head on the synthetic chat corpus."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from rich.progress import (
    BarColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from transformers import PreTrainedTokenizerFast, Qwen3NextForCausalLM

from .architecture import MTP_STEPS, MtpHead
from .corpus import chat_samples

IGNORE = -100


@dataclass(frozen=True)
class TrainSettings:
    seed: int = 1234
    steps: int = 80
    batch_size: int = 8
    lr: float = 3e-3
    warmup: int = 10
    mtp_weight: float = 1.0


def encode_samples(tokenizer: PreTrainedTokenizerFast, seed: int, count: int) -> list[tuple[list[int], int]]:
    """Token ids of each chat and the index of its first assistant token (loss is taken from there on)."""
    samples = []
    for head, answer in chat_samples(seed, count):
        head_ids = tokenizer(head, add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
        samples.append((head_ids + answer_ids, len(head_ids)))
    return samples


def _batch(samples: list[tuple[list[int], int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """input ids [B, L] and targets [B, L] where targets[b, t] is the token that follows position t, or IGNORE."""
    length = max(len(ids) for ids, _ in samples)
    ids = torch.full((len(samples), length), pad_id, dtype=torch.long)
    targets = torch.full((len(samples), length), IGNORE, dtype=torch.long)
    for row, (seq, answer_start) in enumerate(samples):
        ids[row, : len(seq)] = torch.tensor(seq)
        # Predicting answer token i happens at position i-1; the prompt itself is noise and not learned.
        targets[row, answer_start - 1 : len(seq) - 1] = torch.tensor(seq[answer_start:])
    return ids, targets


def _shift_left(x: torch.Tensor, by: int, fill: int) -> torch.Tensor:
    out = torch.full_like(x, fill)
    out[:, : x.shape[1] - by] = x[:, by:]
    return out


def losses(
    model: Qwen3NextForCausalLM, mtp: MtpHead, ids: torch.Tensor, targets: torch.Tensor
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Main next-token loss, and one loss per MTP draft step k (predict token t+k+1 at position t).

    Step 1 gets the main model's final hidden states, later steps get the previous step's MTP output, as vLLM's
    drafter chains them; the token embedding at each step is that of the token the previous step should produce."""
    body = model.model(input_ids=ids)
    hidden = body.last_hidden_state
    vocab = model.config.vocab_size
    main = F.cross_entropy(model.lm_head(hidden).reshape(-1, vocab), targets.reshape(-1), ignore_index=IGNORE)
    positions = torch.arange(ids.shape[1]).unsqueeze(0)
    rope = model.model.rotary_emb(hidden, positions)
    step_losses = []
    h = hidden
    for k in range(1, MTP_STEPS + 1):
        # At position t the drafter sees token t+k (the previous target) and must predict token t+k+1.
        fed_ids = _shift_left(ids, k, 0)
        want = _shift_left(targets, k, IGNORE)
        h = mtp(model.model.embed_tokens(fed_ids), h, rope, None)
        logits = model.lm_head(h)
        step_losses.append(F.cross_entropy(logits.reshape(-1, vocab), want.reshape(-1), ignore_index=IGNORE))
    return main, step_losses


def train(
    model: Qwen3NextForCausalLM,
    mtp: MtpHead,
    samples: list[tuple[list[int], int]],
    pad_id: int,
    settings: TrainSettings,
) -> dict[str, float]:
    torch.manual_seed(settings.seed)
    params = list(model.parameters()) + list(mtp.parameters())
    opt = torch.optim.AdamW(params, lr=settings.lr, weight_decay=0.0, betas=(0.9, 0.95))

    def lr_at(step: int) -> float:
        if step < settings.warmup:
            return (step + 1) / settings.warmup
        done = (step - settings.warmup) / max(1, settings.steps - settings.warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * done))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    gen = torch.Generator().manual_seed(settings.seed)
    model.train()
    mtp.train()
    last: dict[str, float] = {}
    columns = (TextColumn("demo model"), BarColumn(), TextColumn("{task.completed}/{task.total} {task.fields[info]}"),
               TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns) as progress:
        task = progress.add_task("train", total=settings.steps, info="")
        for step in range(settings.steps):
            pick = torch.randint(len(samples), (settings.batch_size,), generator=gen).tolist()
            ids, targets = _batch([samples[i] for i in pick], pad_id)
            main, steps = losses(model, mtp, ids, targets)
            loss = main + settings.mtp_weight * sum(steps)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            last = {"main": main.item(), **{f"mtp{k + 1}": s.item() for k, s in enumerate(steps)}}
            progress.update(task, advance=1, info=" ".join(f"{k}={v:.3f}" for k, v in last.items()))
    model.eval()
    mtp.eval()
    return last
