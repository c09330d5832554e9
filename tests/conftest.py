from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch

# Without a GPU the kernel tests run Triton's interpreter. Triton fixes interpreted-or-compiled when each
# @triton.jit function (its own library's too) is decorated, so this must precede every import of triton; the
# imports below pull it in. Engines started by tests get the variable removed again (tests/support/engine.py).
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import random

import hypothesis
import pytest

from caovan_demo import build
from caovan_kernels import contract
from tests.support.engine import Engine, start_engine, stop_engine

pytest_plugins = ("tests.support.random_inputs",)


# Random inputs are replayable: one seed per run, printed in the header; `--hypothesis-seed=N` replays run N. No
# example database (it would write .hypothesis/ into the checkout and replay old inputs silently); no deadline (a
# 2-core CI machine shared with an engine is slow at times: a hang is caught by the tests' own time bounds).
hypothesis.settings.register_profile("caovan", database=None, deadline=None, print_blob=True)
hypothesis.settings.load_profile("caovan")


SEED_KEY = pytest.StashKey[int]()


def pytest_configure(config: pytest.Config) -> None:
    worker = getattr(config, "workerinput", None)  # set in an xdist worker: the controller chose the seed
    seed = worker["caovan_seed"] if worker else config.getoption("hypothesis_seed", None)
    if seed is None:
        seed = random.SystemRandom().randrange(2**32)
    if config.getoption("hypothesis_seed", None) != seed:
        config.option.hypothesis_seed = seed
        hypothesis.core.global_force_seed = seed  # the plugin read the option before this hook ran
    config.stash[SEED_KEY] = seed
    if worker:
        # vLLM's CPU build binds an engine's compute threads to core 0 unless told otherwise: each worker's
        # engines get their own core, so two engines generating at once do not share one.
        cores = os.sched_getaffinity(0)
        if worker["workercount"] <= len(cores):
            os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", str(sorted(cores)[int(worker["workerid"][2:])]))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:  # xdist's controller, once per worker
    node.workerinput["caovan_seed"] = node.config.stash[SEED_KEY]


# Each module's time in a full run (its tests' setup, call and teardown), for the order below; refreshed with
# `make test PYTEST_ARGS=--record-module-durations`. A module missing from it counts as UNKNOWN_ENGINE_S if it
# starts an engine, else as nothing.
MODULE_DURATIONS = Path(__file__).with_name("module_durations.json")
UNKNOWN_ENGINE_S = 120.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--record-module-durations", action="store_true",
                     help=f"write each test module's time in this run to {MODULE_DURATIONS.name} (the order in "
                          "which xdist hands modules to its workers)")


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist (`make test`: --dist loadscope --no-loadscope-reorder, each module on one worker so that its
    fixtures start an engine once) the longest modules go first, so that short ones fill the workers at the end
    instead of one long module running alone. The sort is stable: a module's tests keep their order."""
    if not hasattr(config, "workerinput"):  # an xdist worker (with xdist, only the workers collect)
        return
    known = json.loads(MODULE_DURATIONS.read_text())["seconds"] if MODULE_DURATIONS.is_file() else {}
    cost: dict[str, float] = {}
    for item in items:
        module = _module(item.nodeid)
        guess = UNKNOWN_ENGINE_S if item.get_closest_marker("engine") else 0.0
        cost[module] = known.get(module, max(cost.get(module, 0.0), guess))
    items.sort(key=lambda item: -cost[_module(item.nodeid)])


_recorded: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = _module(report.nodeid)
    _recorded[module] = _recorded.get(module, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if config.getoption("--record-module-durations") and not hasattr(config, "workerinput") and _recorded:
        seconds = {module: round(total, 1) for module, total in sorted(_recorded.items(), key=lambda kv: -kv[1])}
        MODULE_DURATIONS.write_text(json.dumps({"recorded": time.strftime("%Y-%m-%d"), "seconds": seconds},
                                               indent=1) + "\n")


def pytest_report_header(config: pytest.Config) -> str:
    return f"random seed: {config.stash[SEED_KEY]} (replay with --hypothesis-seed={config.stash[SEED_KEY]})"


@pytest.fixture(scope="session")
def random_seed(pytestconfig: pytest.Config) -> int:
    """The run's seed, for tests that draw random inputs without hypothesis."""
    return int(pytestconfig.stash[SEED_KEY])


@pytest.fixture(scope="session")
def demo_model_dir() -> Path:
    """The trained demo model (built once, then taken from the content-hashed cache)."""
    return build()


@pytest.fixture(scope="session")
def qwen3_5_model_dir() -> Path:
    """The trained demo model in Qwen3.6-27B's architecture, bf16 (built once, then cached like the default)."""
    return build(name="qwen3_5")


@pytest.fixture(scope="session")
def qwen3_5_awq_dir(qwen3_5_model_dir: Path) -> Path:
    """That model converted to AWQ int4 (AutoAWQ GEMM format)."""
    return build(name="qwen3_5-awq")


@pytest.fixture(scope="session")
def engine(demo_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Engine:
    """One real vLLM CPU engine on the demo model with MTP=3, shared by the whole session."""
    log_path = tmp_path_factory.mktemp("engine") / "engine.log"
    running = start_engine(demo_model_dir, contract.embedded_engine_args(), contract.embedded_engine_env(), log_path)
    yield running
    stop_engine(running)
