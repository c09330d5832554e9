"""Build a launch profile: AutoSpec, AutoMem, DynamicTP, Elastic-KV, dtype and flag hygiene, one reason each.

User-pinned flags always win: the profile then only explains (and warns where its memory model disagrees)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from caovan_kernels.contract import (
    GREEDY_DEFAULTS,
    GREEDY_ONLY,
    KV_REPORT_DECISION,
    MTP_DEFAULT,
    SAMPLING_DECISION,
    SLEEP_MODE_FLAG,
    SPLIT_KV,
    SPLIT_KV_DECISION,
    SPLIT_KV_MODES,
    TRUE_WORDS,
)
from caovan_kernels.draft_vocab import hot_set
from caovan_kernels.errors import DraftVocabError, ProfileError, ProxyConfigError
from caovan_kernels.turing import proxy

from . import memory
from .gpus import GIB, MIB, GpuInfo, Inventory, detect_gpus, parse_inventory
from .launch_profile import Decision, LaunchProfile
from .model import ModelFacts, load_model_facts
from .user_args import PinnedArgs, UserFlag, canonical_flag, read_pinned
from .vllm_abilities import VllmAbilities, detect_vllm, version_tuple

DEFAULT_MAX_NUM_SEQS = 4  # a few concurrent chats on a home server; pin --max-num-seqs for more
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048  # prefill chunk; bounds the activation peak AutoMem counts
MIN_CONTEXT = 4096  # shortest context worth serving; below it AutoSpec drafts fewer tokens
MTP_MAX = 4
MTP_MAX_POOL_MARGIN_PCT = 10  # MTP=4 only if the full context for every sequence leaves this much of the pool free
MAX_GPU_MEMORY_UTILIZATION_PCT = 95
FP8_NATIVE_MIN_SM = 89  # Triton's fp8e4nv (what vLLM's fp8 KV kernels use) starts at Ada
# vLLM 0.21 does not cache prefixes of hybrid models; 0.26 does by default (GDN state in "align" mode); the releases
# between were not read and are planned for as 0.26 (the larger state).
HYBRID_PREFIX_CACHING_OFF_UNTIL = "0.21"
TURING_ATTENTION_BACKEND = "TRITON_ATTN"  # the only attention vLLM offers on sm_75 (FlashInfer needs sm_80 from 0.24)


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def _mib(n: int) -> str:
    return f"{n / MIB:.1f} MiB"


@dataclass
class _Builder:
    abilities: VllmAbilities
    pinned: PinnedArgs
    decisions: list[Decision] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    memory: dict[str, int] = field(default_factory=dict)
    draft_attention_backend: str | None = None  # put into the speculative config the profile writes

    def note(self, name: str, value: object, reason: str) -> None:
        self.decisions.append(Decision(name, str(value), reason))

    def pinned_flag(self, *canonical: str) -> UserFlag | None:
        return self.pinned.pinned(*canonical)

    def count(self, flag: str) -> int | None:
        """A pinned count (tokens, bytes) as vLLM reads it, or None."""
        try:
            return self.pinned.count(flag)
        except ValueError as exc:
            raise ProfileError(f"{exc}; fix it in the command line") from None

    def decide(self, name: str, flag: str, value: object | None, reason: str) -> None:
        """Record a decision that sets `flag` (with `value`, or as a switch when value is None), unless the user
        pinned it or the installed vLLM cannot take it."""
        user = self.pinned_flag(canonical_flag(flag, self.abilities)[0])
        if user is not None:
            same = user.value == (str(value) if value is not None else None)
            self.note(name, user.value if user.value is not None else user.written,
                      f"pinned by user ({user.written}); " + ("the profile agrees: " if same else
                      f"the profile would choose {value if value is not None else flag}: ") + reason)
            return
        if not self.abilities.accepts(flag):
            self.note(name, "not set", f"the {self.abilities.describe()} has no {flag}; {reason}")
            return
        if flag in self.abilities.deprecated:
            self.note(name, "not set", f"{flag} is deprecated in the {self.abilities.describe()}; {reason}")
            return
        self.flags += [flag] if value is None else [flag, str(value)]
        self.note(name, value if value is not None else flag, reason)


def _drop_stale_user_flags(b: _Builder) -> list[UserFlag]:
    dropped = []
    for flag in b.pinned.flags:
        if flag.written in b.abilities.deprecated or flag.canonical in b.abilities.deprecated:
            dropped.append(flag)
            b.note("flags", f"dropped {flag.written}",
                   f"deprecated in the {b.abilities.describe()}; remove it from your command")
        elif b.abilities.serve_parser and not b.abilities.accepts(flag.written):
            dropped.append(flag)
            b.note("flags", f"dropped {flag.written}",
                   f"the {b.abilities.describe()} does not accept it (removed or misspelt); `vllm serve` "
                   "would refuse to start with it")
    return dropped


def _drop_sleep_mode_on_cpu(b: _Builder) -> list[UserFlag]:
    """vLLM's sleep mode needs CUDA or ROCm: its CPU build refuses to start with the flag."""
    flag = b.pinned_flag(SLEEP_MODE_FLAG)
    if flag is None or flag.written != SLEEP_MODE_FLAG:
        return []
    b.note("sleep mode", f"dropped {flag.written}", "vLLM's sleep mode needs a CUDA or ROCm GPU and its CPU build "
                                                    "refuses to start with it; a swap stops this engine instead")
    return [flag]


def _spec_tokens_pinned(b: _Builder, m: ModelFacts) -> int | None:
    """Draft tokens the user asked for, or None when they pinned nothing about speculation."""
    config = b.pinned.value("--speculative-config")
    tokens = b.pinned.value("--num-speculative-tokens") or b.pinned.value("--spec-tokens")
    if config is not None:
        try:
            tokens = json.loads(config).get("num_speculative_tokens", tokens)
        except (json.JSONDecodeError, AttributeError):
            raise ProfileError(f"--speculative-config {config!r} is not a JSON object; write it like "
                               '\'{"method":"mtp","num_speculative_tokens":3}\'') from None
    if tokens is not None:
        return int(tokens)
    if config is not None or b.pinned_flag("--spec-method", "--spec-model") is not None:
        return max(m.mtp_layers, 1)  # vLLM drafts as many tokens as the model has MTP layers when not told
    return None


def _spec_config(tokens: int, draft_attention_backend: str | None = None) -> str:
    config: dict[str, object] = {"method": "mtp", "num_speculative_tokens": tokens}
    if draft_attention_backend is not None:
        config["attention_backend"] = draft_attention_backend
    return json.dumps(config, separators=(",", ":"))


# ---------------------------------------------------------------------------------------------------------- CPU

def _plan_cpu(b: _Builder, m: ModelFacts, inventory: Inventory) -> str:
    b.note("device", "CPU", f"no GPU ({inventory.source}): AutoMem, DynamicTP and Elastic-KV do not apply; vLLM's "
                            "CPU build sizes its KV cache from VLLM_CPU_KVCACHE_SPACE (GiB)")
    b.decide("dtype", "--dtype", "bfloat16", "vLLM's CPU path for GDN layers asserts bfloat16")
    if not m.has_mtp:
        b.note("AutoSpec", "off", "the model has no MTP head (mtp_num_hidden_layers / num_nextn_predict_layers is 0)")
        return "CPU"
    if _spec_tokens_pinned(b, m) is not None:
        b.note("AutoSpec", b.pinned.value("--speculative-config") or "pinned", "pinned by user")
    else:
        b.decide("AutoSpec", "--speculative-config", _spec_config(MTP_DEFAULT),
                 f"MTP={MTP_DEFAULT}: the model has an MTP head; host memory is not modelled on CPU")
    if m.num_gdn_layers:
        b.decide("prefix-caching", "--no-enable-prefix-caching", None,
                 "prefix caching with MTP on CPU reaches a Triton-only kernel (precopy_mamba_align_fused_kernel) "
                 "and crashes")
    if not triton_runs_on_cpu():
        b.note(SAMPLING_DECISION, GREEDY_ONLY,
               "speculative decoding's sampler is Triton code, which vLLM's CPU build runs only with a Triton CPU "
               "backend (none installed; PyPI has none): requests that sample would get wrong tokens and top_k "
               "stops the engine, so the daemon refuses temperature > 0; greedy requests are exact")
        _greedy_by_default(b)
    return "CPU"


def _greedy_by_default(b: _Builder) -> None:
    """Make a request without `temperature` decode greedily on a greedy-only engine: vLLM fills it in from the model's
    generation config, which samples for most checkpoints."""
    reason = ("a request without `temperature` takes the model's generation config, which samples for most "
              "checkpoints (Qwen's: 0.6 to 0.7); this engine decodes greedily only")
    pinned = b.pinned.value("--override-generation-config")
    if pinned is None:
        b.decide("greedy default", "--override-generation-config", json.dumps(GREEDY_DEFAULTS), reason)
        return
    try:
        overrides = json.loads(pinned)
        greedy = float(overrides["temperature"]) == 0.0  # vLLM samples at any temperature above 0 (at least 0.01)
    except (ValueError, TypeError, KeyError):
        greedy = False
    if not greedy:
        raise ProfileError(f"--override-generation-config must set \"temperature\": 0 here: {reason}; add it to the "
                           f"JSON object you pinned")
    b.note("greedy default", pinned, f"pinned by user; {reason}")


def triton_runs_on_cpu() -> bool:
    """Whether the installed Triton has a CPU backend (the triton-cpu fork), as vLLM's CPU build asks of it."""
    try:  # here, not at the top: only the CPU plan needs Triton, and importing it costs a second

        from triton.backends import backends
    except ImportError:
        return False
    return "cpu" in backends


# ---------------------------------------------------------------------------------------------------------- GPU

def _usable_gpus(b: _Builder, inventory: Inventory) -> list[GpuInfo]:
    gpus = list(inventory.gpus)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    wanted = {int(x) for x in (visible or "").split(",") if x.strip().isdigit()}
    if inventory.source == "nvml" and wanted:  # GPU UUIDs are not mapped: then all GPUs are planned for
        gpus = [g for g in gpus if g.index in wanted]
        if not gpus:
            raise ProfileError(f"CUDA_VISIBLE_DEVICES={visible} names no GPU NVML sees ({inventory.source}); fix it "
                               "or unset it")
        b.env["CUDA_VISIBLE_DEVICES"] = visible
        b.note("GPUs", visible, "CUDA_VISIBLE_DEVICES set by user")
    groups: dict[tuple, list[GpuInfo]] = {}
    for g in gpus:
        groups.setdefault((g.name, g.capability, g.total_bytes), []).append(g)
    # Tensor parallelism wants identical cards: the largest group of equal GPUs serves.
    usable = max(groups.values(), key=len)
    if len(usable) < len(gpus) and "CUDA_VISIBLE_DEVICES" not in b.env:
        b.env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        b.env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g.index) for g in usable)
        b.note("GPUs", b.env["CUDA_VISIBLE_DEVICES"],
               f"{len(usable)} identical {usable[0].name} of {len(gpus)} GPUs; tensor parallelism needs equal "
               "cards, the others are left out")
    return usable


def _valid_tp(m: ModelFacts, tp: int) -> str | None:
    """Why `tp` cannot split this model, or None when it can."""
    checks = [("attention heads", m.num_attention_heads), ("GDN key heads", m.gdn_key_heads),
              ("GDN value heads", m.gdn_value_heads)]
    for what, count in checks:
        if count and count % tp:
            return f"{what} ({count}) not divisible by {tp}"
    kv = m.num_key_value_heads
    if kv % tp and tp % kv:
        return f"KV heads ({kv}) neither divisible by nor dividing {tp}"
    q = m.quantization
    if q is not None and q.group_size > 0:
        for what, width in (("FFN width", m.intermediate_size or m.moe_intermediate_size),
                            ("attention output", m.num_attention_heads * m.head_dim),
                            ("GDN output", m.gdn_value_heads * m.gdn_value_head_dim)):
            if width and (width // tp) % q.group_size:
                return f"{what} {width}/{tp} is not a whole number of {q.group_size}-wide quantization groups"
    return None


def _choose_tp(b: _Builder, m: ModelFacts, gpus: list[GpuInfo]) -> int:
    user = b.pinned_flag("--tensor-parallel-size")
    if user is not None:
        tp = int(user.value)
        problem = _valid_tp(m, tp)
        b.note("DynamicTP", tp, "pinned by user" + (f"; warning: {problem}" if problem else ""))
        return tp
    if len(gpus) == 1:
        b.note("DynamicTP", 1, f"one usable GPU ({gpus[0].name}): no tensor parallelism")
        return 1
    rejected = []
    for tp in range(len(gpus), 0, -1):
        problem = _valid_tp(m, tp)
        if problem is None:
            why = f"{len(gpus)} usable {gpus[0].name}: TP={tp} splits attention ({m.num_attention_heads} heads, " \
                  f"{m.num_key_value_heads} KV)"
            if m.num_gdn_layers:
                why += f" and GDN ({m.gdn_key_heads} key / {m.gdn_value_heads} value heads)"
            why += " evenly" + (f"; not {', '.join(rejected)}" if rejected else "")
            b.decide("DynamicTP", "--tensor-parallel-size", tp, why)
            return tp
        rejected.append(f"{tp} ({problem})")
    raise ProfileError(f"no tensor-parallel size splits {m.path.name}: {'; '.join(rejected)}")


def _kv_dtype(b: _Builder, gpu: GpuInfo, fp16_reaches_target: bool) -> str:
    user = b.pinned.value("--kv-cache-dtype")
    refused_below = b.abilities.fp8_kv_min_sm
    refuses = refused_below is not None and gpu.sm < refused_below
    if user is not None:
        warn = ""
        if user.startswith("fp8") and (refuses or gpu.sm < FP8_NATIVE_MIN_SM):
            warn = f"; warning: fp8 KV on sm{gpu.sm} " + (
                f"is refused by the {b.abilities.describe()} ({b.abilities.fp8_source})" if refuses
                else "has no native fp8 in Triton")
        b.note("Elastic-KV dtype", user, "pinned by user" + warn)
        return user
    engine = "float16" if gpu.sm < 80 else "bfloat16"
    if refuses:
        b.note("Elastic-KV dtype", f"auto ({engine})",
               f"fp16 KV cache: sm{gpu.sm} uses TRITON_ATTN, and the {b.abilities.describe()} refuses an "
               f"fp8 KV cache there ({b.abilities.fp8_source})")
        return "auto"
    if gpu.sm < FP8_NATIVE_MIN_SM:
        b.note("Elastic-KV dtype", f"auto ({engine})",
               f"fp8 KV needs native fp8 (SM{FP8_NATIVE_MIN_SM}+); sm{gpu.sm} keeps the KV cache in {engine}")
        return "auto"
    if fp16_reaches_target:
        b.note("Elastic-KV dtype", f"auto ({engine})", f"{engine} KV already fits the full context; fp8 not needed")
        return "auto"
    b.decide("Elastic-KV dtype", "--kv-cache-dtype", "fp8",
             f"{engine} KV cannot hold the full context; fp8 (allowed by the {b.abilities.describe()} on "
             f"sm{gpu.sm}) doubles the tokens per GiB")
    return "fp8"


def _parallel_layout(b: _Builder, m: ModelFacts, gpus: list[GpuInfo], gpu: GpuInfo) -> int:
    """dtype, DynamicTP and custom all-reduce; returns the tensor-parallel size."""
    if gpu.sm < 80:
        b.decide("dtype", "--dtype", "half", f"sm{gpu.sm} has no bfloat16")
    else:
        user = b.pinned.value("--dtype")
        b.note("dtype", user or f"auto ({m.dtype})", "pinned by user" if user else f"sm{gpu.sm} runs the "
               "checkpoint's dtype")
    tp = _choose_tp(b, m, gpus)
    if tp > 1:
        if all(g.nvlink for g in gpus[:tp]):
            b.note("custom-all-reduce", "on", "the GPUs are NVLink-bridged: vLLM's custom all-reduce applies")
        else:
            b.decide("custom-all-reduce", "--disable-custom-all-reduce", None,
                     f"{gpu.name} cards over PCIe without NVLink P2P: custom all-reduce does not apply; NCCL does "
                     "the all-reduce")
    return tp


def _auto_mem(b: _Builder, gpu: GpuInfo, measured: bool) -> int:
    """gpu_memory_utilization; returns vLLM's budget in bytes on the GPU with the least free memory."""
    # vLLM's budget is the fraction of the total CUDA reports, which leaves out what the driver holds.
    total = gpu.cuda_total_bytes
    user_util = b.pinned.value("--gpu-memory-utilization")
    if user_util is not None:
        b.note("AutoMem", user_util, "pinned by user")
        return int(total * float(user_util))
    outside = memory.OUTSIDE_BUDGET_BYTES
    pct = min(MAX_GPU_MEMORY_UTILIZATION_PCT, (gpu.free_bytes - outside) * 100 // total)
    if pct <= 0:
        raise ProfileError(f"{gpu.describe()} has only {_gib(gpu.free_bytes)} free; free GPU memory first "
                           "(nvidia-smi shows who holds it)")
    held = f" ({_mib(gpu.reserved_bytes)} more held by the driver)" if gpu.reserved_bytes else ""
    b.decide("AutoMem", "--gpu-memory-utilization", f"{pct / 100:.2f}",
             f"{_gib(gpu.free_bytes)} free{'' if measured else ' (planning: assumed idle)'} of "
             f"{_gib(total)} on {gpu.name}{held}, minus {_mib(outside)} kept outside vLLM's budget (the "
             "engine's CUDA context and allocator headroom: vLLM refuses to start when less than its budget is free)")
    return total * pct // 100


TURING = (7, 5)


def _on_turing_proxy() -> bool:
    try:
        return proxy.requested() is not None
    except ProxyConfigError as exc:
        raise ProfileError(str(exc)) from None


def _turing_proxy_backends(b: _Builder, m: ModelFacts) -> None:
    """On the Turing proxy vLLM still picks its backends from the real GPU (FlashAttention on an H100, for the
    target and, chosen separately, the MTP drafter): pin what a 2080 Ti gets, so the proxy runs its code path."""
    reason = f"{proxy.ENV} is set: vLLM reads the real GPU, a 2080 Ti gets {TURING_ATTENTION_BACKEND} only"
    b.decide("attention backend", "--attention-backend", TURING_ATTENTION_BACKEND, reason)
    if not m.has_mtp:
        return
    if not b.abilities.draft_attention_backend:
        b.note("drafter attention backend", "not set", f"the {b.abilities.describe()}'s speculative config has no "
               "attention_backend: the MTP drafter's attention is chosen from the real GPU")
    elif _spec_tokens_pinned(b, m) is not None:
        config = b.pinned.value("--speculative-config") or ""
        if "attention_backend" not in config:
            b.note("drafter attention backend", "not set", f"{reason}; add \"attention_backend\":"
                   f"\"{TURING_ATTENTION_BACKEND}\" to your --speculative-config for the drafter to run so too")
    else:
        b.draft_attention_backend = TURING_ATTENTION_BACKEND  # said once AutoSpec writes a speculative config


def _plan_gpu(b: _Builder, m: ModelFacts, inventory: Inventory) -> str:
    gpus = _usable_gpus(b, inventory)
    gpu = min(gpus, key=lambda g: g.free_bytes)
    if _on_turing_proxy():  # dtype and KV cache as on a 2080 Ti (no bf16, no fp8 KV), memory as this GPU has it
        _turing_proxy_backends(b, m)
        gpu = replace(gpu, capability=TURING)
        gpus = [replace(g, capability=TURING) for g in gpus]
    tp = _parallel_layout(b, m, gpus, gpu)
    text_only = b.pinned_flag("--language-model-only") is not None
    weights = memory.weight_bytes_per_gpu(m, tp, vision=not text_only)
    budget = _auto_mem(b, gpu, measured=inventory.source == "nvml")
    num_seqs = b.count("--max-num-seqs") or DEFAULT_MAX_NUM_SEQS
    b.decide("max-num-seqs", "--max-num-seqs", DEFAULT_MAX_NUM_SEQS, "sequences served at once; each holds its own "
             "GDN state and its full context in the KV budget")
    batched = b.count("--max-num-batched-tokens") or DEFAULT_MAX_NUM_BATCHED_TOKENS
    b.decide("max-num-batched-tokens", "--max-num-batched-tokens", DEFAULT_MAX_NUM_BATCHED_TOKENS,
             "prefill chunk; bounds the activation peak counted below")
    activations = memory.activation_bytes(m, tp, batched)
    overheads = memory.inside_budget_overheads(cuda_graphs=b.pinned_flag("--enforce-eager") is None)
    overheads += _draft_vocab_rows(b, m, tp) * m.hidden_size * memory.ENGINE_DTYPE_BYTES
    left = budget - weights.total - activations - overheads
    pinned_pool = b.count("--kv-cache-memory-bytes")
    pool = left if pinned_pool is None else pinned_pool
    b.memory.update(gpu_total_bytes=gpu.total_bytes, gpu_reserved_bytes=gpu.reserved_bytes,
                    gpu_free_bytes=gpu.free_bytes, budget_bytes=budget,
                    weights_bytes=weights.total, activation_bytes=activations, overhead_bytes=overheads,
                    pool_bytes=pool, tensor_parallel=tp)
    spent = (f"budget {_gib(budget)} - weights {_gib(weights.total)} - activations {_gib(activations)} "
             f"({batched}-token prefill) - {_gib(overheads)} for vLLM's weight load and CUDA graphs (and DraftVocab's "
             f"rows) = {_gib(left)}")
    if pinned_pool is not None:
        # vLLM then takes the pool as given and skips its free-memory profile: the budget bounds nothing.
        short = "" if pinned_pool <= left else (
            f"; warning: the {_gib(budget)} budget leaves {_gib(max(left, 0))} for it ({spent}), "
            f"{_gib(pool - left)} short; vLLM does not check a pinned pool, so the GPU must hold it beyond the "
            "budget: lower --kv-cache-memory-bytes or raise --gpu-memory-utilization")
        b.note("AutoMem budget", _gib(pool), "pinned by user (--kv-cache-memory-bytes): vLLM's KV cache and GDN "
               "state pool per GPU, taken as given" + short)
    elif pool <= 0:
        raise ProfileError(
            f"{m.path.name} does not fit on {tp}x {gpu.name}: weights {_gib(weights.total)} + activations "
            f"{_gib(activations)} per GPU exceed the {_gib(budget)} budget; use more GPUs or a smaller quantization")
    else:
        b.note("AutoMem budget", _gib(pool), f"per GPU: {spent} for KV cache and GDN state")
    _vision_tower(b, m, tp, text_only)

    target = b.count("--max-model-len") or m.max_position_embeddings
    ssm_bytes = memory.DTYPE_BYTES.get(b.pinned.value("--mamba-ssm-cache-dtype") or m.ssm_state_dtype, 2)
    prefix_caching = _prefix_caching(b, m)

    def layout(spec: int, kv_bytes: int) -> memory.CacheLayout:
        return memory.cache_layout(m, tp, spec, kv_bytes, ssm_bytes, prefix_caching)

    base_spec = MTP_DEFAULT if m.has_mtp else 0
    fp16_fits = layout(base_spec, 2).bytes_for(num_seqs, target) <= pool
    kv_dtype = _kv_dtype(b, gpu, fp16_fits)
    kv_bytes = memory.DTYPE_BYTES.get(kv_dtype, 2)
    spec = _auto_spec(b, m, pool, num_seqs, target, lambda s: layout(s, kv_bytes))
    if spec and b.draft_attention_backend:
        b.note("drafter attention backend", b.draft_attention_backend, f"{proxy.ENV} is set: vLLM reads the real GPU "
               "and chooses the MTP drafter's backend separately; set in the speculative config")
    _split_kv(b, gpu, spec)
    chosen = layout(spec, kv_bytes)
    fit = chosen.max_model_len(pool, num_seqs)
    b.memory.update(kv_bytes_per_token=chosen.kv_bytes_per_token, block_tokens=chosen.block_tokens,
                    gdn_state_bytes_per_seq=chosen.gdn_state_bytes_per_seq, max_model_len_fit=fit,
                    spec_tokens=spec)
    length = _elastic_len(b, m, chosen, pool, num_seqs, fit)
    b.memory.update(vllm_kv_cache_tokens=chosen.kv_cache_tokens(pool, length))
    b.note(KV_REPORT_DECISION, f"{chosen.kv_cache_tokens(pool, length)} tokens",
           f"what vLLM should log for this plan: \"GPU KV cache size\" and \"Maximum concurrency for {length} tokens "
           f"per request: {chosen.concurrency(pool, length):.2f}x\" (its count: whole {chosen.block_tokens}-token "
           "blocks, GDN state included); a start that logs less than --max-num-seqs serves fewer full-length "
           "sequences than planned")
    if m.vision is not None and b.abilities.accepts("--language-model-only"):
        vision = memory.vision_params(m) * memory.ENGINE_DTYPE_BYTES // tp
        freed = vision // chosen.block_bytes * chosen.block_tokens // chosen.attention_groups
        if text_only:
            b.note("text only", "pinned by user", f"the vision tower is not loaded: about {_gib(vision)} per GPU "
                   "left out of the weights above; images are refused")
        else:
            b.note("text only", "not set", f"--language-model-only would not build the vision tower: about "
                   f"{_gib(vision)} per GPU, {freed} more KV tokens; images would be refused. The profile keeps the "
                   "model's abilities; pin the flag to serve text only")
    return f"{tp}x {gpu.name} sm{gpu.sm}"


def _split_kv(b: _Builder, gpu: GpuInfo, spec: int) -> None:
    """Whether the MTP verify's attention will run through the plugin's split-KV kernel, which takes the place of
    vLLM's TRITON_ATTN (docs/split-kv.md): said here so that `caovan profile` shows it before an engine starts."""
    try:
        extra = json.loads(b.pinned.value("--additional-config") or "{}")
    except ValueError:  # caovan-vllm-serve refuses it before vLLM starts
        extra = {}
    extra = extra if isinstance(extra, dict) else {}
    setting = str(extra.get("caovan_split_kv", os.environ.get("CAOVAN_SPLIT_KV", "auto"))).strip().lower()
    backend = b.pinned.value("--attention-backend")
    # Read as the plugin reads them (caovan_kernels.vllm.settings): the key wins over the environment.
    enabled = bool(extra["caovan"]) if "caovan" in extra else \
        os.environ.get("CAOVAN_ENABLE", "1").strip().lower() in TRUE_WORDS
    if not enabled:
        value, why = "off", "the Caovan plugin is off for this engine"
    elif setting not in SPLIT_KV_MODES or setting == "off":
        value, why = "off", f"caovan_split_kv is {setting!r}: vLLM's Triton attention throughout"
    elif spec == 0:
        value, why = "not used", "no speculative decoding: every decode step has one query token, vLLM's kernel's case"
    elif backend is not None and backend != TURING_ATTENTION_BACKEND:
        value, why = "not used", (f"--attention-backend {backend} is pinned; the kernel takes "
                                  f"{TURING_ATTENTION_BACKEND}'s place only")
    elif gpu.sm >= 80 and backend is None:
        value, why = "not used", (f"vLLM picks FlashAttention or FlashInfer on sm_{gpu.sm}, not "
                                  f"{TURING_ATTENTION_BACKEND}, whose place the kernel takes")
    else:
        value, why = "on", (f"{TURING_ATTENTION_BACKEND} verifies the {1 + spec} tokens of each MTP step with the "
                            "whole context in a few programs per sequence; the split-KV kernel spreads that context "
                            "over the GPU, so the step stays nearly flat as the context grows (the engine logs "
                            f"{SPLIT_KV})")
    b.note(SPLIT_KV_DECISION, value, why)


def _draft_vocab_rows(b: _Builder, m: ModelFacts, tp: int) -> int:
    """The lm_head rows DraftVocab copies on the busiest GPU (the drafter's hot rows; 0 when it is off). The
    vocabulary is split into contiguous shards, so a hot set of low ids lands on the first GPU whole."""
    raw = b.pinned.value("--additional-config")
    try:
        spec = hot_set.DraftVocabSpec.parse((json.loads(raw) if raw else {}).get(hot_set.SETTING))
    except (ValueError, AttributeError):  # not JSON, or not an object: caovan-vllm-serve refuses it first
        return 0
    if spec is None or not m.has_mtp:
        return 0
    shard = -(-m.vocab_size // tp)
    try:
        ids = (range(min(spec.size or 0, m.vocab_size)) if spec.file is None
               else hot_set.read_ranked_ids(spec.file, m.vocab_size)[:spec.size])
    except DraftVocabError as exc:
        b.note("DraftVocab", "not counted", f"{exc}; the engine will refuse it")
        return 0
    per_gpu = [0] * tp
    for token in ids:
        per_gpu[token // shard] += 1
    rows = max(per_gpu)
    b.note("DraftVocab", f"{spec.describe()}", f"the drafter scores {len(ids)} of {m.vocab_size} ids; its hot "
           f"lm_head rows are copied at load: {rows} on the busiest GPU, "
           f"{_gib(rows * m.hidden_size * memory.ENGINE_DTYPE_BYTES)}, counted with vLLM's load overheads below")
    return rows


def _prefix_caching(b: _Builder, m: ModelFacts) -> bool:
    """Whether the engine will cache prefixes, which for a GDN model keeps one more state slot per sequence."""
    if not m.num_gdn_layers:
        return False
    user = b.pinned_flag("--enable-prefix-caching")
    if user is not None:
        return user.written != "--no-enable-prefix-caching"
    version = b.abilities.version
    on = version is None or version_tuple(version)[:2] > version_tuple(HYBRID_PREFIX_CACHING_OFF_UNTIL)[:2]
    b.note("prefix caching", "on" if on else "off",
           (f"the {b.abilities.describe()} caches prefixes of hybrid models by default: each GDN layer keeps one more "
            "state slot per sequence (counted below); --no-enable-prefix-caching frees it" if on else
            f"the {b.abilities.describe()} does not cache prefixes of hybrid models"))
    return on


def _vision_tower(b: _Builder, m: ModelFacts, tp: int, text_only: bool) -> None:
    """Count the tower, and refuse a quantization config vLLM cannot build it with (before vLLM fails obscurely)."""
    if m.vision is None:
        return
    b.note("vision tower", f"{_gib(memory.vision_params(m) * memory.ENGINE_DTYPE_BYTES // tp)} per GPU",
           "estimated from vision_config and " + ("left out: served text only" if text_only
                                                  else "counted in the weights"))
    q = m.quantization
    width = m.vision.intermediate_size // tp
    if q is None or q.group_size <= 0 or not width % q.group_size:
        return
    if not q.modules_not_converted:  # vLLM then reads which layers are unquantized from the checkpoint itself
        b.note("vision tower quantization", "from the checkpoint", "modules_to_not_convert is empty: vLLM reads "
               "the unquantized layers from the checkpoint; if it fails with \"input size is not aligned with the "
               "quantized weight shape\", add \"visual\" to modules_to_not_convert in config.json")
        return
    # vLLM renames the entries as it renames the checkpoint's tensors (model.visual. -> visual.) before matching
    skipped = [entry.replace("model.visual.", "visual.", 1) for entry in q.modules_not_converted]
    if any(entry in "visual.blocks.0.mlp.linear_fc2" for entry in skipped):
        return
    raise ProfileError(
        f"{m.path}/config.json: quantization_config ({q.method}) covers the vision tower (no modules_to_not_convert "
        f"entry matches its layers, named visual.blocks.N...), and its MLP ({m.vision.intermediate_size} wide, "
        f"{width} per GPU) is not a whole number of {q.group_size}-wide groups: vLLM cannot build it (\"input size "
        "is not aligned with the quantized weight shape\"), with or without --language-model-only, which still "
        "builds the tower's layers. Quantized checkpoints normally keep the tower in 16 bit: if no visual.* tensor "
        "of the checkpoint is a qweight, add \"visual\" to quantization_config.modules_to_not_convert in "
        "config.json")


def _auto_spec(b: _Builder, m: ModelFacts, pool: int, num_seqs: int, target: int, layout) -> int:
    if not m.has_mtp:
        b.note("AutoSpec", "off", "the model has no MTP head (mtp_num_hidden_layers / num_nextn_predict_layers is 0)")
        return 0
    pinned = _spec_tokens_pinned(b, m)
    if pinned is not None:
        b.note("AutoSpec", pinned, "pinned by user")
        return pinned
    need_max = layout(MTP_MAX).bytes_for(num_seqs, target)
    if need_max * 100 <= pool * (100 - MTP_MAX_POOL_MARGIN_PCT):
        b.decide("AutoSpec", "--speculative-config", _spec_config(MTP_MAX, b.draft_attention_backend),
                 f"MTP={MTP_MAX}: {num_seqs} x {target} tokens with {MTP_MAX} draft slots need {_gib(need_max)}, "
                 f"leaving over {MTP_MAX_POOL_MARGIN_PCT}% of the {_gib(pool)} pool free")
        return MTP_MAX
    for spec in range(MTP_DEFAULT, 0, -1):
        fit = min(layout(spec).max_model_len(pool, num_seqs), target)
        if fit >= min(MIN_CONTEXT, target):
            why = f"MTP={spec}" + (" (default)" if spec == MTP_DEFAULT else f": MTP={spec + 1} leaves under "
                                   f"{MIN_CONTEXT} tokens per sequence")
            why += f"; MTP={MTP_MAX} would need {_gib(need_max)} for {num_seqs} x {target} tokens, over " \
                   f"{100 - MTP_MAX_POOL_MARGIN_PCT}% of the {_gib(pool)} pool"
            b.decide("AutoSpec", "--speculative-config", _spec_config(spec, b.draft_attention_backend), why)
            return spec
    b.note("AutoSpec", "off", f"even MTP=1 leaves under {MIN_CONTEXT} tokens per sequence; no speculation")
    return 0


def _elastic_len(b: _Builder, m: ModelFacts, layout: memory.CacheLayout, pool: int, num_seqs: int, fit: int) -> int:
    """Decide --max-model-len; returns the length the engine will run with."""
    per_seq = (f"GDN state {_mib(layout.gdn_state_bytes_per_seq)} per sequence, KV {layout.kv_bytes_per_token} B "
               f"per token in {layout.block_tokens}-token blocks")
    user = b.count("--max-model-len")
    if user is not None:
        need = layout.bytes_for(num_seqs, user)
        warn = "" if need <= pool else (
            f"; warning: {num_seqs} x {user} tokens need {_gib(need)} but the pool holds {_gib(pool)}: only {fit} "
            f"tokens fit per sequence, or {layout.concurrency(pool, user):.2f} sequences of {user}")
        b.note("Elastic-KV", user, "pinned by user" + warn)
        return user
    if fit <= 0:
        raise ProfileError(
            f"no context fits: {num_seqs} sequences x {per_seq} exceed the {_gib(pool)} pool; lower --max-num-seqs "
            "or add GPUs")
    length = min(fit, m.max_position_embeddings)
    why = f"{num_seqs} sequence(s) in the {_gib(pool)} pool; {per_seq}"
    why += f"; the model's maximum (memory allows {fit})" if length < fit else "; the largest that fits"
    b.decide("Elastic-KV", "--max-model-len", length, why)
    return length


# ------------------------------------------------------------------------------------------------------ public

def build_profile(model_dir: str | Path, user_args: list[str] | None = None, inventory: Inventory | str | None = None,
                  abilities: VllmAbilities | None = None) -> LaunchProfile:
    """The launch profile for a local model directory on the given (or detected) GPUs and vLLM."""
    facts = load_model_facts(model_dir)
    abilities = abilities or detect_vllm()
    if isinstance(inventory, str):
        inventory = parse_inventory(inventory)
    inventory = inventory or detect_gpus()
    b = _Builder(abilities, read_pinned(list(user_args or []), abilities))
    dropped = _drop_stale_user_flags(b)
    if inventory.cpu_only:
        dropped += _drop_sleep_mode_on_cpu(b)
    device = _plan_cpu(b, facts, inventory) if inventory.cpu_only else _plan_gpu(b, facts, inventory)
    return LaunchProfile(
        model=str(model_dir),
        args=b.pinned.without(dropped) + b.flags,
        env=b.env,
        decisions=b.decisions,
        device=f"{device} ({inventory.source})",
        vllm=abilities.source,
        memory=b.memory,
    )


def apply_profile(model: str, user_args: list[str], inventory: Inventory | str | None = None) -> LaunchProfile:
    """What `caovan-vllm-serve` runs: the user's arguments plus the profile's decisions they did not pin.

    A model that is not a local directory with a config.json (a hub name) gets the user's arguments unchanged."""
    if not (Path(model) / "config.json").is_file():
        return LaunchProfile(model, list(user_args), {}, [Decision(
            "profile", "skipped", f"{model!r} is not a local directory with config.json; the launch profile needs "
                                  "the model's config (download it first to get AutoSpec/AutoMem/Elastic-KV)")],
            device="unknown", vllm="not inspected")
    return build_profile(model, user_args, inventory)
