"""What the plugin is asked to do: the plugin's environment variables (CAOVAN_*), then vLLM's --additional-config keys."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from caovan_kernels import contract
from caovan_kernels.draft_vocab import hot_set
from caovan_kernels.errors import PluginConfigError
from caovan_kernels.tensorcore75 import validate_mode

_TRUE = contract.TRUE_WORDS


@dataclass(frozen=True)
class EnginePluginSettings:
    """What the plugin is asked to do in one engine: on or off, where GDNCore runs, TensorCore75's mode."""

    enabled: bool = True
    mode: str = "auto"
    require_turbo3: bool = False
    # TensorCore75 (caovan_kernels/tensorcore75): auto, off or force.
    turing_mma: str = "auto"
    # The MTP verify's attention through the split-KV kernel (caovan_kernels/attention): auto or off.
    split_kv: str = "auto"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> EnginePluginSettings:
        env = os.environ if env is None else env
        settings = cls(
            enabled=env.get("CAOVAN_ENABLE", "1").strip().lower() in _TRUE,
            mode=env.get("CAOVAN_MODE", "auto").strip().lower(),
            require_turbo3=env.get("CAOVAN_REQUIRE_TURBO3", "0").strip().lower() in _TRUE,
            turing_mma=env.get("CAOVAN_TURING_MMA", "auto").strip().lower(),
            split_kv=env.get("CAOVAN_SPLIT_KV", "auto").strip().lower(),
        )
        return settings.validated("environment variable CAOVAN_MODE", "environment variable CAOVAN_TURING_MMA",
                                  "environment variable CAOVAN_SPLIT_KV")

    def with_additional_config(self, extra: Mapping[str, Any] | None) -> EnginePluginSettings:
        """Keys of --additional-config win over the environment: they are the per-launch choice."""
        if not extra:
            return self
        updated = self
        if "caovan" in extra:
            updated = replace(updated, enabled=bool(extra["caovan"]))
        if "caovan_mode" in extra:
            updated = replace(updated, mode=str(extra["caovan_mode"]).strip().lower())
        if "caovan_require_turbo3" in extra:
            updated = replace(updated, require_turbo3=bool(extra["caovan_require_turbo3"]))
        if "caovan_turing_mma" in extra:
            updated = replace(updated, turing_mma=str(extra["caovan_turing_mma"]).strip().lower())
        if "caovan_split_kv" in extra:
            updated = replace(updated, split_kv=str(extra["caovan_split_kv"]).strip().lower())
        # DraftVocab's value is read where vLLM builds the drafter; checked here too, so a bad one stops
        # caovan-vllm-serve before vLLM starts.
        hot_set.DraftVocabSpec.parse(extra.get(hot_set.SETTING))
        return updated.validated('--additional-config key "caovan_mode"', '--additional-config key "caovan_turing_mma"',
                                 '--additional-config key "caovan_split_kv"')

    def validated(self, where: str, turing_mma_where: str, split_kv_where: str) -> EnginePluginSettings:
        validate_mode(self.turing_mma, turing_mma_where)
        if self.split_kv not in contract.SPLIT_KV_MODES:
            raise PluginConfigError(
                f"Caovan plugin: {split_kv_where} is {self.split_kv!r}; use one of {', '.join(contract.SPLIT_KV_MODES)} "
                "(auto = the MTP verify's attention through the split-KV kernel where the batch leaves the GPU idle, "
                "off = vLLM's Triton attention throughout)"
            )
        if self.mode not in contract.CAOVAN_MODES:
            raise PluginConfigError(
                f"Caovan plugin: {where} is {self.mode!r}; use one of {', '.join(contract.CAOVAN_MODES)} "
                "(auto = our kernels where they measured faster than vLLM's, off = stock vLLM, "
                "force = our kernels everywhere)"
            )
        return self
