"""TensorCore75's census once compiling settles: the count line again with the real totals (the milestones alone
stop at the last power of ten) and the names of the kernels that run on tensor cores; read back by the contract."""

from __future__ import annotations

import threading

from caovan_kernels import contract
from caovan_kernels.tensorcore75.census import Census
from caovan_kernels.tensorcore75.pipeline import METADATA_KEY

SETTLE_S = 0.05


class Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.grew = threading.Condition()

    def log(self, line: str) -> None:
        with self.grew:
            self.lines.append(line)
            self.grew.notify_all()

    def wait_for(self, count: int) -> list[str]:
        with self.grew:
            assert self.grew.wait_for(lambda: len(self.lines) >= count, timeout=5), self.lines
        return list(self.lines)


def _compile(census: Census, name: str, decision: str) -> None:
    census.record({METADATA_KEY: decision, "name": name})


def test_a_settled_burst_logs_its_totals_and_the_retargeted_kernels() -> None:
    out = Lines()
    census = Census(out.log, settle_s=SETTLE_S)
    for i in range(12):  # milestones at 1 and 10; the 12 are only in the settled summary
        _compile(census, f"inductor_{i}", "kept:no_dot")
    _compile(census, "kernel_unified_attention_2d", "mma:fp16")
    _compile(census, "chunk_fwd_kernel_o", "mma:fp16")
    _compile(census, "fused_recurrent_fwd", "kept:fp32_dot")
    lines = out.wait_for(4)
    assert lines == [
        "[Caovan TensorCore75] kernels=1 retargeted=0 kept=1 (no_dot=1)",
        "[Caovan TensorCore75] kernels=10 retargeted=0 kept=10 (no_dot=10)",
        "[Caovan TensorCore75] kernels=15 retargeted=2 kept=13 (fp32_dot=1 no_dot=12)",
        "[Caovan TensorCore75] retargeted kernels (2): chunk_fwd_kernel_o, kernel_unified_attention_2d",
    ]
    marker, values = contract.read_marker(lines[2])
    assert marker is contract.TENSORCORE75_KERNELS and values["total"] == 15 and values["retargeted"] == 2
    assert contract.read_marker(lines[3]) is None  # for people; the daemon reads the count line


def test_a_later_burst_is_summarised_again_and_a_repeat_of_nothing_new_is_not() -> None:
    out = Lines()
    census = Census(out.log, settle_s=SETTLE_S)
    _compile(census, "a", "mma:fp16")
    out.wait_for(3)  # milestone at 1, then the summary
    _compile(census, "b", "kept:no_dot")  # a cache hit or a new shape after serving began
    lines = out.wait_for(5)
    assert lines[3:] == ["[Caovan TensorCore75] kernels=2 retargeted=1 kept=1 (no_dot=1)",
                         "[Caovan TensorCore75] retargeted kernels (1): a"]
    census._summarise()  # nothing compiled since: no line
    assert len(out.lines) == 5


def test_a_kernel_retargeted_once_stays_in_the_retargeted_list_when_a_later_compile_keeps_it() -> None:
    out = Lines()
    census = Census(out.log, settle_s=SETTLE_S)
    _compile(census, "attention", "mma:fp16")
    _compile(census, "attention", "kept:fp32_dot")  # the same kernel, another specialisation
    lines = out.wait_for(3)
    assert lines[-1] == "[Caovan TensorCore75] retargeted kernels (1): attention"
