"""The `--paths` choice the GPU scripts share (lab/turing_paths.py)."""

import pytest

from lab import turing_paths


def test_paths_are_chosen_by_name_and_an_unknown_one_is_refused():
    assert turing_paths.chosen("native,fma,mma") == ["native", "fma", "mma"]
    assert turing_paths.chosen("mma") == ["mma"]
    assert turing_paths.chosen("") == []  # none now: the scripts use the results already in their folder
    with pytest.raises(ValueError, match="unknown code path\\(s\\) turing; choose from native, fma, mma"):
        turing_paths.chosen("native,turing")
