"""Build (or reuse) the demo model: tokenizer, training, checkpoint, cached by a hash of everything that shapes it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch
import transformers
from filelock import FileLock

from . import architecture, checkpoint, corpus, tokenizer, train

MARKER = "caovan-demo.json"
TOKENIZER_SAMPLES = 4000
TRAIN_SAMPLES = 4000
SETTINGS = train.TrainSettings()


def cache_root() -> Path:
    return Path(os.environ.get("CAOVAN_CACHE_DIR") or Path.home() / ".cache" / "caovan")


def content_hash() -> str:
    """Changes whenever the corpus, the architecture, the training recipe or the training stack changes."""
    h = hashlib.sha256()
    for module in (architecture, checkpoint, corpus, tokenizer, train):
        h.update(Path(module.__file__).read_bytes())
    h.update(json.dumps([asdict(SETTINGS), TOKENIZER_SAMPLES, TRAIN_SAMPLES]).encode())
    h.update(f"torch={torch.__version__.split('+')[0]} transformers={transformers.__version__}".encode())
    return h.hexdigest()[:16]


def default_dir() -> Path:
    return cache_root() / "demo-model" / content_hash()


def is_built(out_dir: Path) -> bool:
    marker = out_dir / MARKER
    return marker.is_file() and json.loads(marker.read_text()).get("content_hash") == content_hash()


def build(out_dir: Path | None = None, log: Callable[[str], None] = print) -> Path:
    """Return a directory holding the demo checkpoint, training it only when no up-to-date copy exists there."""
    out_dir = Path(out_dir) if out_dir is not None else default_dir()
    if is_built(out_dir):
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # Tests, the daemon and users may ask at the same moment: one trains, the others wait and reuse its result.
    with FileLock(str(out_dir.parent / f".{out_dir.name}.lock")):
        if is_built(out_dir):
            return out_dir
        return _build_into(out_dir, log)


def _build_into(out_dir: Path, log: Callable[[str], None]) -> Path:
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(
            f"{out_dir} exists and holds something other than this version of the demo model; "
            "pick an empty or new directory, or delete it and run again"
        )
    started = time.monotonic()
    torch.set_num_threads(os.cpu_count() or 1)
    log(f"Building the demo model into {out_dir} (one to two minutes on 2 CPU cores, once)")
    tok = tokenizer.train_tokenizer(
        (head + answer for head, answer in corpus.chat_samples(SETTINGS.seed, TOKENIZER_SAMPLES)),
        architecture.DEMO_CONFIG["vocab_size"],
    )
    special = {
        "eos_token_id": tok.convert_tokens_to_ids(corpus.IM_END),
        "pad_token_id": tok.convert_tokens_to_ids(corpus.END_OF_TEXT),
        "bos_token_id": tok.convert_tokens_to_ids(corpus.END_OF_TEXT),
    }
    config = architecture.demo_config(special)
    model, mtp = architecture.build_models(config, SETTINGS.seed)
    samples = train.encode_samples(tok, SETTINGS.seed + 1, TRAIN_SAMPLES)
    final_losses = train.train(model, mtp, samples, special["pad_token_id"], SETTINGS)
    # Write next to the target and rename, so an interrupted build never leaves a half-written model behind.
    staging = Path(tempfile.mkdtemp(prefix=".demo-", dir=out_dir.parent))
    try:
        checkpoint.write_checkpoint(model, mtp, staging)
        tokenizer.save_tokenizer(tok, staging)
        info = {"content_hash": content_hash(), "final_losses": final_losses,
                "train_seconds": round(time.monotonic() - started, 1), "settings": asdict(SETTINGS)}
        (staging / MARKER).write_text(json.dumps(info, indent=2) + "\n")
        staging.chmod(0o755)
        if out_dir.exists():
            out_dir.rmdir()
        staging.rename(out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log(f"Demo model ready in {out_dir} ({info['train_seconds']} s; final losses {final_losses})")
    return out_dir
