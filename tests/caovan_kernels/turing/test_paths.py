"""The `--paths` choice the GPU scripts share (caovan_kernels/turing/paths.py)."""

import pytest

from caovan_kernels.turing import paths


def test_paths_are_chosen_by_name_and_an_unknown_one_is_refused():
    assert paths.chosen("native,fma,mma") == ["native", "fma", "mma"]
    assert paths.chosen("mma") == ["mma"]
    assert paths.chosen("") == []  # none now: the scripts use the results already in their folder
    with pytest.raises(ValueError, match="unknown code path\\(s\\) turing; choose from native, fma, mma"):
        paths.chosen("native,turing")
