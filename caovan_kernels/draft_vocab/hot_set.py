"""Which token ids the MTP drafter scores: the launch's `caovan_draft_vocab` setting and the hot vocabulary it names.

Plain Python (no torch, no vLLM): the daemon writes hot-vocabulary files with this module and the plugin reads them
with it, so the file's format has one owner.

The hot vocabulary is K ranked ids plus the ids a reply cannot do without (end-of-turn and the tokenizer's control
tokens, which sit at the end of a BPE vocabulary and would otherwise never be drafted). Three sources:
- the tokenizer's own order (a size alone): a byte-level BPE numbers its tokens in merge order, and a merge is
  learnt when its pair is the most frequent left in the training text, so low ids are the frequent ones;
- a file of ranked ids, most frequent first (hand-written or the daemon's);
- the daemon's count of the tokens it relayed, written as such a file for the next start.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from caovan_kernels.errors import DraftVocabError

SETTING = "caovan_draft_vocab"
FILE_FORMAT = "caovan-hot-vocab/1"
TOKENIZER_ORDER = "tokenizer order"
# A control token's text: <|im_end|>, <think>, <tool_call>; not a filler such as "fill123" or a word.
_CONTROL = re.compile(r"<[^\s<>]+>")


@dataclass(frozen=True)
class DraftVocabSpec:
    """What `caovan_draft_vocab` asks for: `size` ranked ids (None: every id the file lists) from `file` (None: the
    tokenizer's order)."""

    size: int | None
    file: Path | None

    @classmethod
    def parse(cls, value: Any, where: str = f'--additional-config key "{SETTING}"') -> DraftVocabSpec | None:
        """The spec, or None when the setting is off (absent, false, 0, "off" or "")."""
        if value is None or value is False or value == 0 or (isinstance(value, str) and value.strip().lower()
                                                               in ("", "off", "0", "false")):
            return None
        if isinstance(value, bool):  # True: no size to take
            raise DraftVocabError(f"{where} is true: give the number of token ids the drafter scores (e.g. 32768) or "
                                  'the path of a hot-vocabulary file, or {"size": N, "file": PATH}')
        if isinstance(value, int):
            return cls(_size(value, where), None)
        if isinstance(value, str):
            text = value.strip()
            if text.isascii() and text.isdigit():  # not "²": str.isdigit takes any digit int() refuses
                return cls(_size(int(text), where), None)
            return cls(None, Path(text).expanduser())
        if isinstance(value, dict):
            if set(value) - {"size", "file"}:  # the keys are not repeated: messages carry no text a caller wrote
                raise DraftVocabError(f"{where} has unknown keys: it takes \"size\" (ids to score) and "
                                      "\"file\" (a hot-vocabulary file, most frequent ids first)")
            size = value.get("size")
            file = value.get("file")
            if size is None and file is None:
                raise DraftVocabError(f'{where} names neither "size" nor "file": give one or both')
            if size is not None and (isinstance(size, bool) or not isinstance(size, int)):
                raise DraftVocabError(f'{where}: "size" is a {type(size).__name__}; it must be a whole number of '
                                      'token ids')
            if file is not None and not isinstance(file, str):
                raise DraftVocabError(f'{where}: "file" is a {type(file).__name__}; it must be a path')
            return cls(None if size is None else _size(size, where), None if file is None else Path(file).expanduser())
        raise DraftVocabError(f"{where} is a {type(value).__name__}: give a number of token ids (e.g. 32768), the "
                              'path of a hot-vocabulary file, or {"size": N, "file": PATH}')

    def describe(self) -> str:
        source = TOKENIZER_ORDER if self.file is None else f"file {self.file}"
        return source if self.size is None else f"{self.size} ids by {source}"

    def setting(self) -> int | dict[str, Any]:
        """The one value caovan_draft_vocab takes for this spec (so that two spellings of it compare equal)."""
        if self.file is None:
            return int(self.size)
        return {"file": str(self.file)} if self.size is None else {"file": str(self.file), "size": self.size}


@dataclass(frozen=True)
class HotVocab:
    """The ids the drafter scores (sorted, unique), out of `vocab_size`; `ranked` of them came from the source and
    the rest are the reply's control tokens added to them."""

    ids: tuple[int, ...]
    vocab_size: int
    ranked: int
    source: str


def build(spec: DraftVocabSpec, vocab_size: int, always: Iterable[int]) -> HotVocab:
    """The hot vocabulary `spec` names for a model of `vocab_size` ids whose control tokens are `always`."""
    if spec.file is None:
        if spec.size is None:
            raise DraftVocabError(f"{SETTING}: the tokenizer's order needs a size (how many ids the drafter scores)")
        ranked = list(range(min(spec.size, vocab_size)))
        source = TOKENIZER_ORDER
    else:
        ranked = read_ranked_ids(spec.file, vocab_size)
        if spec.size is not None:
            ranked = ranked[:spec.size]
        source = f"file {spec.file}"
    if spec.size is not None and spec.size >= vocab_size:
        raise DraftVocabError(f"{SETTING} asks for {spec.size} ids but the model's vocabulary has {vocab_size}: the "
                              f"drafter would read its whole lm_head anyway; give a smaller size or leave it unset")
    extra = {i for i in always if 0 <= i < vocab_size} - set(ranked)
    ids = tuple(sorted(set(ranked) | extra))
    if len(ids) >= vocab_size:
        raise DraftVocabError(f"{SETTING}: the hot vocabulary ({source}) holds every id of the model's {vocab_size}: "
                              "the drafter would read its whole lm_head anyway; give a size (how many of the file's "
                              'ids to take: {"file": ..., "size": N})')
    return HotVocab(ids, vocab_size, len(ranked), source)


def read_ranked_ids(path: Path, vocab_size: int, name: str | None = None) -> list[int]:
    """A hot-vocabulary file's ids, most frequent first, duplicates dropped. The file is JSON: a list of ids, or an
    object whose "ids" is that list (the daemon's files, with their counts beside it). Messages name the file by
    `name` where the path came from a request (not repeated back), else by its path."""
    where = f"{SETTING}: hot-vocabulary file {name or path}"
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise DraftVocabError(f"{where} does not exist: give the path of a JSON list of token ids (absolute, or "
                              "relative to the engine's working directory)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DraftVocabError(f"{where} cannot be read as JSON ({exc}): it must hold a list of token ids, or an "
                              'object {"ids": [...]}') from None
    ids = data.get("ids") if isinstance(data, dict) else data
    if not isinstance(ids, list) or not ids:
        raise DraftVocabError(f'{where} holds no ids: it must hold a non-empty list of token ids, or an object '
                              '{"ids": [...]}')
    seen: dict[int, None] = {}
    for position, value in enumerate(ids):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab_size:
            shown = repr(value) if isinstance(value, int) else f"a {type(value).__name__}"  # never echo file text
            raise DraftVocabError(f"{where}: entry {position} is {shown}, not a token id of this model (0 to "
                                  f"{vocab_size - 1}): was the file written for another model? Give this model's "
                                  f"file, or turn DraftVocab off (the daemon: POST /draft-vocab "
                                  '{"setting": null})')
        seen.setdefault(value, None)
    return list(seen)


def write_ranked_ids(path: Path, ranked: Sequence[int], details: dict[str, Any]) -> None:
    """Write a hot-vocabulary file (ids most frequent first, `details` beside them) whole or not at all: a reader
    never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"format": FILE_FORMAT, **details, "ids": [int(i) for i in ranked]}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(body, out)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def control_token_ids(model_dir: Path) -> set[int]:
    """The ids a reply needs whatever the hot set: the end-of-sequence ids of config.json and generation_config.json,
    and the tokenizer's added tokens that are special or read like control tokens (<think>, <tool_call>)."""
    ids: set[int] = set()
    for name in ("config.json", "generation_config.json"):
        data = _json(model_dir / name)
        for section in (data, data.get("text_config") or {}):
            eos = section.get("eos_token_id")
            ids.update(eos if isinstance(eos, list) else [] if eos is None else [eos])
    for token in _json(model_dir / "tokenizer.json").get("added_tokens") or []:
        if token.get("special") or _CONTROL.fullmatch(str(token.get("content", ""))):
            ids.add(int(token["id"]))
    return {i for i in ids if isinstance(i, int)}


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _size(size: int, where: str) -> int:
    if size < 1:
        raise DraftVocabError(f"{where} is {size}: the drafter must score at least one token id")
    return size
