"""caovan_draft_vocab's values, the hot-vocabulary file and the control tokens every hot set keeps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from caovan_kernels.draft_vocab.hot_set import (
    FILE_FORMAT,
    TOKENIZER_ORDER,
    DraftVocabSpec,
    build,
    control_token_ids,
    read_ranked_ids,
    write_ranked_ids,
)
from caovan_kernels.errors import DraftVocabError, PluginConfigError


@pytest.mark.parametrize("off", [None, False, 0, "", "off", "0", "false"])
def test_the_setting_is_off_unless_given(off: object) -> None:
    assert DraftVocabSpec.parse(off) is None


@pytest.mark.parametrize(("value", "size", "file"), [
    (32768, 32768, None), ("4096", 4096, None), ("/tmp/hot.json", None, "/tmp/hot.json"),
    ({"size": 8}, 8, None), ({"file": "hot.json"}, None, "hot.json"), ({"size": 8, "file": "a"}, 8, "a"),
])
def test_a_size_a_file_or_both(value: object, size: int | None, file: str | None) -> None:
    spec = DraftVocabSpec.parse(value)
    assert spec == DraftVocabSpec(size, None if file is None else Path(file))


@pytest.mark.parametrize(("value", "says"), [
    (True, "give the number of token ids"), (-3, "at least one token id"), ({"sise": 3}, "unknown keys"),
    ("0000", "at least one token id"),
    ({}, "neither"), ({"size": "many"}, "whole number"), ({"file": 3}, "must be a path"), (2.5, "give a number"),
])
def test_bad_values_say_what_to_give(value: object, says: str) -> None:
    with pytest.raises(DraftVocabError, match=says) as err:
        DraftVocabSpec.parse(value)
    assert isinstance(err.value, PluginConfigError) and "caovan_draft_vocab" in str(err.value)


def test_tokenizer_order_takes_the_lowest_ids_and_keeps_the_control_tokens() -> None:
    hot = build(DraftVocabSpec(100, None), 1000, always={998, 999, 5, 4000})
    assert hot.ids == tuple(range(100)) + (998, 999)
    assert (hot.ranked, hot.source, hot.vocab_size) == (100, TOKENIZER_ORDER, 1000)


def test_a_size_not_below_the_vocabulary_is_refused() -> None:
    with pytest.raises(DraftVocabError, match="whole lm_head"):
        build(DraftVocabSpec(1000, None), 1000, always=())


def test_a_file_whose_ids_cover_the_vocabulary_needs_a_size(tmp_path: Path) -> None:
    path = tmp_path / "all.json"
    path.write_text(json.dumps(list(range(8))))
    with pytest.raises(DraftVocabError, match="holds every id"):
        build(DraftVocabSpec(None, path), 10, always={8, 9})
    assert build(DraftVocabSpec(4, path), 10, always={8, 9}).ids == (0, 1, 2, 3, 8, 9)


@pytest.mark.parametrize(("value", "canonical"), [
    (32768, 32768), ("32768", 32768), ({"size": 32768}, 32768), ("/a/hot.json", {"file": "/a/hot.json"}),
    ({"file": "/a/hot.json", "size": 5}, {"file": "/a/hot.json", "size": 5}),
])
def test_every_spelling_of_a_setting_has_one_canonical_value(value: object, canonical: object) -> None:
    assert DraftVocabSpec.parse(value).setting() == canonical


def test_digits_of_other_scripts_are_a_path_not_a_size() -> None:
    assert DraftVocabSpec.parse("²") == DraftVocabSpec(None, Path("²"))


def test_a_file_round_trips_ranked_and_a_size_takes_its_head(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "hot.json"
    write_ranked_ids(path, [7, 3, 9, 1], {"counted_tokens": 40})
    body = json.loads(path.read_text())
    assert body["format"] == FILE_FORMAT and body["counted_tokens"] == 40
    assert read_ranked_ids(path, 10) == [7, 3, 9, 1]
    hot = build(DraftVocabSpec(2, path), 10, always={9})
    assert hot.ids == (3, 7, 9) and hot.ranked == 2 and str(path) in hot.source
    assert [p.name for p in path.parent.iterdir()] == ["hot.json"], "a temporary file was left behind"


def test_a_bare_list_is_a_file_too_and_duplicates_are_dropped(tmp_path: Path) -> None:
    path = tmp_path / "hot.json"
    path.write_text("[4, 2, 4, 0]")
    assert read_ranked_ids(path, 5) == [4, 2, 0]


@pytest.mark.parametrize(("text", "says"), [
    (None, "does not exist"), ("not json", "cannot be read as JSON"), ("[]", "holds no ids"),
    ('{"ids": 3}', "holds no ids"), ("[1, 10]", "entry 1 is 10"), ('[1, "2"]', "entry 1 is a str"),
    ("[true]", "entry 0 is True"),
])
def test_a_bad_file_says_where_and_what(tmp_path: Path, text: str | None, says: str) -> None:
    path = tmp_path / "hot.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(DraftVocabError, match=says) as err:
        read_ranked_ids(path, 10)
    assert str(path) in str(err.value)


def test_control_tokens_come_from_the_configs_and_the_tokenizers_added_tokens(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"eos_token_id": 90}}))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [91, 92]}))
    (tmp_path / "tokenizer.json").write_text(json.dumps({"added_tokens": [
        {"id": 93, "content": "<|im_end|>", "special": True},
        {"id": 94, "content": "<think>", "special": False},
        {"id": 95, "content": "fill95", "special": False},
    ]}))
    assert control_token_ids(tmp_path) == {90, 91, 92, 93, 94}
    assert control_token_ids(tmp_path / "missing") == set()
