"""Build (or reuse) a demo model: tokenizer, training, checkpoint, cached by a hash of everything that shapes it.

Variants: `qwen3_next` (the embedded default: tiny Qwen3-Next), `qwen3_5` (Qwen3.6-27B's architecture, scaled
down) and `qwen3_5-awq` (that one converted to AWQ int4, built from the cached `qwen3_5`)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType

import torch
import transformers
from filelock import FileLock

from caovan_demo.errors import UnknownVariantError
from caovan_kernels import contract

from . import (
    architecture,
    architecture_qwen3_5,
    awq,
    checkpoint,
    checkpoint_qwen3_5,
    corpus,
    qwen3_5_recipe,
    tokenizer,
    train,
)

MARKER = "caovan-demo.json"
TOKENIZER_SAMPLES = 4000
TRAIN_SAMPLES = 4000
SETTINGS = train.TrainSettings()
# Half the default's steps: the Qwen3.5 model costs about twice as much per step, and 40 steps already make its
# MTP head draft the whole answer right (its drafts are measured by tests/caovan_demo/test_demo_qwen3_5.py).
QWEN3_5_SETTINGS = train.TrainSettings(steps=40, warmup=5)
DEFAULT = "qwen3_next"

Log = Callable[[str], None]


@dataclass(frozen=True)
class Variant:
    name: str
    shaped_by: tuple[ModuleType, ...]  # their source is hashed: change one and the model is rebuilt
    settings: train.TrainSettings | None  # how it is trained (None: not trained, made from its base)
    recipe: tuple  # the recipe's other numbers, hashed too
    make: Callable[[Path, Log, Path | None], dict]  # writes the checkpoint into a directory; returns its facts
    base: str | None = None  # a variant this one is made from (built first, passed to make)
    takes: str = "one to two minutes on 2 CPU cores"


def _make_qwen3_next(out_dir: Path, log: Log, base: Path | None) -> dict:
    tok = tokenizer.demo_tokenizer(SETTINGS.seed, TOKENIZER_SAMPLES, architecture.DEMO_CONFIG["vocab_size"])
    special = tokenizer.special_ids(tok)
    model, mtp = architecture.build_models(architecture.demo_config(special), SETTINGS.seed)
    samples = train.encode_samples(tok, SETTINGS.seed + 1, TRAIN_SAMPLES)
    final_losses = train.train(model, mtp, samples, special["pad_token_id"], SETTINGS)
    checkpoint.write_checkpoint(model, mtp, out_dir)
    tokenizer.save_tokenizer(tok, out_dir)
    return {"final_losses": final_losses}


_TRAINING = (corpus, tokenizer, train)
_SAMPLES = (TOKENIZER_SAMPLES, TRAIN_SAMPLES)
VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant(DEFAULT, (architecture, checkpoint, *_TRAINING), SETTINGS, _SAMPLES, _make_qwen3_next),
    Variant("qwen3_5", (architecture, architecture_qwen3_5, checkpoint, checkpoint_qwen3_5, qwen3_5_recipe,
                        *_TRAINING), QWEN3_5_SETTINGS, _SAMPLES,
            lambda out, log, base: qwen3_5_recipe.train_into(out, QWEN3_5_SETTINGS, *_SAMPLES)),
    Variant("qwen3_5-awq", (awq.format, awq.pack, awq.checkpoint, qwen3_5_recipe), None, (qwen3_5_recipe.GROUP_SIZE,),
            lambda out, log, base: qwen3_5_recipe.quantize_into(base, out, log), base="qwen3_5",
            takes="seconds, from the cached bf16 model"),
)}


def variant(name: str) -> Variant:
    try:
        return VARIANTS[name]
    except KeyError:
        raise UnknownVariantError(f"no demo model named {name!r}; there are {', '.join(VARIANTS)}") from None


def cache_root() -> Path:
    return contract.cache_dir()


def content_hash(name: str = DEFAULT) -> str:
    """Changes whenever the corpus, the architecture, the recipe, the training stack or the base model changes."""
    v = variant(name)
    h = hashlib.sha256()
    for module in v.shaped_by:
        h.update(Path(module.__file__).read_bytes())
    # The default's hash input keeps its historical form: [settings, tokenizer samples, train samples].
    h.update(json.dumps(([asdict(v.settings)] if v.settings else []) + list(v.recipe)).encode())
    h.update(f"torch={torch.__version__.split('+')[0]} transformers={transformers.__version__}".encode())
    if v.base is not None:
        h.update(content_hash(v.base).encode())
    return h.hexdigest()[:16]


def default_dir(name: str = DEFAULT) -> Path:
    # The default keeps its historical place: demo-model/<hash>; the others are demo-model/<variant>-<hash>.
    prefix = "" if name == DEFAULT else f"{name}-"
    return cache_root() / "demo-model" / f"{prefix}{content_hash(name)}"


def is_built(out_dir: Path, name: str = DEFAULT) -> bool:
    marker = out_dir / MARKER
    if not marker.is_file():
        return False
    info = json.loads(marker.read_text())
    return info.get("content_hash") == content_hash(name) and info.get("variant", DEFAULT) == name


def build(out_dir: Path | None = None, log: Log = print, name: str = DEFAULT) -> Path:
    """Return a directory holding the demo checkpoint, making it only when no up-to-date copy exists there."""
    v = variant(name)
    out_dir = Path(out_dir) if out_dir is not None else default_dir(name)
    if is_built(out_dir, name):
        return out_dir
    base = build(log=log, name=v.base) if v.base is not None else None
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # Tests, the daemon and users may ask at the same moment: one builds, the others wait and reuse its result.
    with FileLock(str(out_dir.parent / f".{out_dir.name}.lock")):
        if is_built(out_dir, name):
            return out_dir
        return _build_into(out_dir, log, v, base)


def _build_into(out_dir: Path, log: Log, v: Variant, base: Path | None) -> Path:
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(
            f"{out_dir} exists and holds something other than this version of the demo model; "
            "pick an empty or new directory, or delete it and run again"
        )
    started = time.monotonic()
    torch.set_num_threads(os.cpu_count() or 1)
    log(f"Building the {v.name} demo model into {out_dir} ({v.takes}, once)")
    # Write next to the target and rename, so an interrupted build never leaves a half-written model behind.
    staging = Path(tempfile.mkdtemp(prefix=".demo-", dir=out_dir.parent))
    try:
        facts = v.make(staging, log, base)
        info = {"content_hash": content_hash(v.name), "variant": v.name, **facts,
                "build_seconds": round(time.monotonic() - started, 1)}
        if v.settings is not None:
            info["settings"] = asdict(v.settings)
        (staging / MARKER).write_text(json.dumps(info, indent=2) + "\n")
        staging.chmod(0o755)
        if out_dir.exists():
            out_dir.rmdir()
        staging.rename(out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log(f"Demo model {v.name} ready in {out_dir} ({info['build_seconds']} s)")
    return out_dir
