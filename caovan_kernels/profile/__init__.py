"""Launch profiles: vLLM arguments for a model on given GPUs and the installed vLLM, one reason per decision
(AutoSpec, AutoMem, DynamicTP, Elastic-KV, dtype, flag hygiene)."""

from .gpus import GpuInfo, Inventory, detect_gpus, parse_inventory
from .launch_profile import Decision, LaunchProfile
from .model import ModelFacts, load_model_facts
from .planner import apply_profile, build_profile
from .vllm_abilities import VllmAbilities, detect_vllm, from_version_table

__all__ = [
    "Decision", "GpuInfo", "Inventory", "LaunchProfile", "ModelFacts", "VllmAbilities", "apply_profile",
    "build_profile", "detect_gpus", "detect_vllm", "from_version_table", "load_model_facts", "parse_inventory",
]
