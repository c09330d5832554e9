"""POST /draft-vocab before the supervisor sees it: every spelling of a setting becomes one value ("off" is off), a
bad one is a 400 that says what to give, and a file is checked and kept where the daemon's counting cannot
rewrite it."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from caovan_kernels.errors import DraftVocabError
from caovan_manager.api.draft_vocab import kept_copy
from tests.support.served import served_daemon


@pytest.mark.parametrize("off", ["off", 0, False, "", None])
def test_off_in_any_spelling_is_off(tmp_path: Path, off: object) -> None:
    with served_daemon(tmp_path) as served:
        answer = httpx.post(f"{served.url}/draft-vocab", json={"setting": off}, timeout=10)
        assert answer.status_code == 409 and "already off" in answer.json()["message"], answer.text


@pytest.mark.parametrize(("setting", "says"), [
    (True, "give the number of token ids"), ("²", "does not exist"), ({"size": -1}, "at least one"),
    ({"file": "/nonexistent/hot.json"}, "does not exist"), ([1, 2], "give a number of token ids"),
])
def test_a_bad_setting_is_a_400_saying_what_to_give(tmp_path: Path, setting: object, says: str) -> None:
    with served_daemon(tmp_path) as served:
        answer = httpx.post(f"{served.url}/draft-vocab", json={"setting": setting}, timeout=10)
        assert answer.status_code == 400 and says in answer.json()["detail"], answer.text


def test_a_valid_setting_waits_for_a_ready_engine(tmp_path: Path) -> None:
    with served_daemon(tmp_path) as served:
        answer = httpx.post(f"{served.url}/draft-vocab", json={"setting": "32768"}, timeout=10)
        assert answer.status_code == 409 and "needs a ready engine" in answer.json()["message"], answer.text
        state = httpx.get(f"{served.url}/draft-vocab", timeout=10).json()
        assert state["setting"] is None and not state["switch_in_progress"] and state["history"] == []


def test_a_file_is_checked_and_kept_by_its_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "learnt.json").write_text(json.dumps({"ids": [5, 3, 9], "counts": [7, 2, 1]}))
    kept = kept_copy(tmp_path / "state", "my/model", Path("learnt.json"))
    assert kept.parent == tmp_path / "state" / "draft-vocab" / "kept" and kept.name.startswith("my_model-")
    body = json.loads(kept.read_text())
    assert body["ids"] == [5, 3, 9] and body["copied_from"] == str(tmp_path / "learnt.json")
    (tmp_path / "learnt.json").write_text(json.dumps([5, 3, 9, 4]))  # the counting goes on
    assert json.loads(kept.read_text())["ids"] == [5, 3, 9]
    assert kept_copy(tmp_path / "state", "my/model", Path("learnt.json")) != kept
    (tmp_path / "same.json").write_text("[5, 3, 9]")
    assert kept_copy(tmp_path / "state", "my/model", tmp_path / "same.json") == kept
    (tmp_path / "bad.json").write_text('{"ids": ["secret"]}')
    with pytest.raises(DraftVocabError, match="entry 0 is a str") as err:
        kept_copy(tmp_path / "state", "my/model", Path("bad.json"))
    assert "secret" not in str(err.value)


def test_learnt_before_anything_was_counted_is_a_409_saying_what_to_do(tmp_path: Path, demo_model_dir: Path) -> None:
    with served_daemon(tmp_path, model=str(demo_model_dir)) as served:
        answer = httpx.post(f"{served.url}/draft-vocab", json={"setting": "learnt"}, timeout=10)
        assert answer.status_code == 409, answer.text
        assert "0 tokens" in answer.json()["message"] and "serve more through the daemon" in answer.json()["message"]
