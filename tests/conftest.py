from __future__ import annotations

import os
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

from caovan_manager import embedded
from caovan_manager.demo import build
from tests.support.engine import Engine, start_engine, stop_engine


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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist (`make test`: --dist loadscope, each module on one worker so its fixtures start an engine once),
    the engine tests go first, so that the short tests fill the workers at the end instead of one long engine
    module running alone."""
    if hasattr(config, "workerinput"):  # an xdist worker (with xdist, only the workers collect)
        items.sort(key=lambda item: item.get_closest_marker("engine") is None)


def pytest_report_header(config: pytest.Config) -> str:
    return f"random seed: {config.stash[SEED_KEY]} (replay with --hypothesis-seed={config.stash[SEED_KEY]})"


@pytest.fixture(scope="session")
def random_seed(pytestconfig: pytest.Config) -> int:
    """The run's seed, for tests that draw random inputs without hypothesis."""
    return int(pytestconfig.stash[SEED_KEY])


@pytest.fixture
def gen(request: pytest.FixtureRequest) -> torch.Generator:
    """A CPU generator with a fresh seed per test (inputs are drawn on the CPU, then moved): the seed is printed
    (shown on failure) and CAOVAN_TEST_SEED replays it."""
    seed = int(os.environ.get("CAOVAN_TEST_SEED", "0")) or int.from_bytes(os.urandom(4), "little")
    print(f"\n[{request.node.name}] seed={seed} (replay: CAOVAN_TEST_SEED={seed})")
    return torch.Generator().manual_seed(seed)


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
    running = start_engine(demo_model_dir, embedded.engine_args(), embedded.engine_env(), log_path)
    yield running
    stop_engine(running)
