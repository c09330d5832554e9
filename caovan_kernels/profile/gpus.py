"""The GPUs a profile plans for: read through NVML, or given as an inventory for tests and planning.

Inventory syntax (`--gpus`): groups separated by commas, each `[N x] NAME MEMORY [smXY] [nvlink]`, e.g.
`2x RTX 2080 Ti 22GB sm75` or `1x RTX 3090 24GB, 1x RTX 2080 Ti 11GB`. MEMORY is in GiB (`22GB`, `22G`, `22GiB`; the
"GB" on a card's box is GiB: an "11 GB" 2080 Ti has 11264 MiB) or MiB (`22528MiB`). Without `smXY` the capability
comes from a small table of known names. `nvlink` marks the group's cards as bridged. `cpu` (or `none`) is an
inventory without GPUs. A JSON file works too: `{"gpus": [{"name": ..., "memory_gib": 22, "capability": "7.5",
"free_gib": 21.5, "reserved_gib": 0.3, "nvlink": false}]}` (or just the list; `reserved_gib`: what the driver holds,
as NVML reports it, default 0).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from caovan_kernels.errors import InventoryError

GIB = 1 << 30
MIB = 1 << 20

# Only consulted when the inventory omits smXY; NVML always reports the capability itself.
KNOWN_CAPABILITIES: dict[str, tuple[int, int]] = {
    "rtx 2080 ti": (7, 5), "rtx 2080": (7, 5), "rtx 2070": (7, 5), "titan rtx": (7, 5), "quadro rtx 8000": (7, 5),
    "quadro rtx 6000": (7, 5), "t4": (7, 5), "v100": (7, 0), "rtx 3090": (8, 6), "rtx 3080": (8, 6),
    "a10": (8, 6), "a100": (8, 0), "rtx 4090": (8, 9), "l4": (8, 9), "l40s": (8, 9), "h100": (9, 0), "h200": (9, 0),
}


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    capability: tuple[int, int]
    total_bytes: int
    free_bytes: int
    nvlink: bool = False  # bridged to its peers (P2P over NVLink)
    # Held by the driver and firmware (NVML's v2 memory info; 0 where it cannot say). NVML's total counts it, the
    # total a CUDA context sees (cudaMemGetInfo, which vLLM's budget is a fraction of) does not.
    reserved_bytes: int = 0

    @property
    def cuda_total_bytes(self) -> int:
        return self.total_bytes - self.reserved_bytes

    @property
    def sm(self) -> int:
        return self.capability[0] * 10 + self.capability[1]

    def describe(self) -> str:
        return f"GPU {self.index} {self.name} sm{self.sm} {self.total_bytes / GIB:.1f} GiB"


@dataclass(frozen=True)
class Inventory:
    gpus: tuple[GpuInfo, ...]
    source: str  # "nvml", "--gpus ...", a file name, or why none were found

    @property
    def cpu_only(self) -> bool:
        return not self.gpus


_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)\s*(gib|gb|g|mib|mb|m)$", re.IGNORECASE)
_GROUP = re.compile(r"^(?:(\d+)\s*[x×]\s+)?(.+?)$", re.IGNORECASE)


def parse_inventory(spec: str) -> Inventory:
    """Read `--gpus`: the inventory syntax above, or the path of a JSON file."""
    text = spec.strip()
    if text.lower() in ("cpu", "none", ""):
        return Inventory((), f"--gpus {spec!r}")
    if text.endswith(".json") or Path(text).is_file():
        return _from_json(Path(text))
    gpus: list[GpuInfo] = []
    for group in text.split(","):
        gpus.extend(_parse_group(group.strip(), first_index=len(gpus), spec=spec))
    return Inventory(tuple(gpus), f"--gpus {spec!r}")


def _parse_group(group: str, first_index: int, spec: str) -> list[GpuInfo]:
    match = _GROUP.match(group)
    count = int(match.group(1) or 1) if match else 1
    words = (match.group(2) if match else group).split()
    nvlink = any(w.lower() == "nvlink" for w in words)
    words = [w for w in words if w.lower() != "nvlink"]
    capability = None
    if words and re.fullmatch(r"sm_?\d{2,3}", words[-1], re.IGNORECASE):
        digits = re.sub(r"\D", "", words.pop())
        capability = (int(digits[:-1]), int(digits[-1]))
    memory = _MEMORY.match(words.pop()) if words else None
    if memory is None or not words:
        raise InventoryError(
            f"cannot read GPU group {group!r} in --gpus {spec!r}: write `[N x] NAME MEMORY [smXY] [nvlink]`, "
            "e.g. `2x RTX 2080 Ti 22GB sm75`")
    value, unit = float(memory.group(1)), memory.group(2).lower()
    total = int(value * (MIB if unit.startswith("m") else GIB))
    name = " ".join(words)
    if capability is None:
        capability = KNOWN_CAPABILITIES.get(name.lower().removeprefix("nvidia ").removeprefix("geforce "))
    if capability is None:
        raise InventoryError(
            f"unknown GPU {name!r} in --gpus {spec!r}: its compute capability is not in Caovan's table; add it, "
            f"e.g. `{group} sm86`")
    return [GpuInfo(first_index + i, name, capability, total, total, nvlink) for i in range(count)]


def _from_json(path: Path) -> Inventory:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InventoryError(f"cannot read GPU inventory {path}: {exc}") from None
    entries = data.get("gpus", []) if isinstance(data, dict) else data
    gpus = []
    for i, entry in enumerate(entries):
        try:
            major, minor = (int(x) for x in str(entry["capability"]).split("."))
            total = int(float(entry["memory_gib"]) * GIB)
            reserved = int(float(entry.get("reserved_gib", 0)) * GIB)
            free = int(float(entry["free_gib"]) * GIB) if "free_gib" in entry else total - reserved
            gpus.append(GpuInfo(i, str(entry["name"]), (major, minor), total, free, bool(entry.get("nvlink", False)),
                                reserved))
        except (KeyError, ValueError, TypeError) as exc:
            raise InventoryError(
                f"{path}: GPU entry {i} ({entry!r}) needs name, memory_gib and capability like \"7.5\" ({exc})"
            ) from None
    return Inventory(tuple(gpus), str(path))


def detect_gpus() -> Inventory:
    """This machine's GPUs through NVML; an empty inventory (with the reason) where there is none."""
    try:
        import pynvml
    except ImportError:
        return Inventory((), "nvidia-ml-py is not installed")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return Inventory((), f"NVML unavailable ({exc})")
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        gpus = []
        for i, handle in enumerate(handles):
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            name = pynvml.nvmlDeviceGetName(handle)
            gpus.append(GpuInfo(
                index=i,
                name=name.decode() if isinstance(name, bytes) else name,
                capability=tuple(pynvml.nvmlDeviceGetCudaComputeCapability(handle)),
                total_bytes=int(memory.total),
                free_bytes=int(memory.free),
                nvlink=_nvlink_to_all(pynvml, handle, [h for j, h in enumerate(handles) if j != i]),
                reserved_bytes=_driver_reserved(pynvml, handle),
            ))
        return Inventory(tuple(gpus), "nvml")
    finally:
        pynvml.nvmlShutdown()


def _driver_reserved(pynvml, handle) -> int:
    """The memory the driver and firmware hold, from NVML's v2 memory info (drivers since R510 count it in NVML's
    total); 0 where the driver or the binding has no v2."""
    try:
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2).reserved)
    except (pynvml.NVMLError, AttributeError, TypeError):
        return 0


def _nvlink_to_all(pynvml, handle, peers: list) -> bool:
    if not peers:
        return False
    try:
        return all(
            pynvml.nvmlDeviceGetP2PStatus(handle, peer, pynvml.NVML_P2P_CAPS_INDEX_NVLINK) == pynvml.NVML_P2P_STATUS_OK
            for peer in peers)
    except pynvml.NVMLError:
        return False
