"""The daemon's configuration: defaults < `--config` file (TOML or YAML) < CAOVAN_* environment < command line.

Validated once at start; `load_settings` turns pydantic's errors into one message that names the field, where the
value came from and what to do. The engine's environment is derived here too, so the daemon, `/doctor` and the
tests all see the same one.
"""

from __future__ import annotations

import getpass
import os
import re
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)

from caovan_kernels import contract
from caovan_kernels.contract import STALE_ENV_PREFIXES
from caovan_manager.errors import ConfigError


def default_state_dir() -> Path:
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "caovan"


class EngineSettings(BaseModel):
    """What the daemon launches and how."""

    model: str | None = Field(None, description="Model directory or name; none = the embedded demo model.")
    args: list[str] = Field(default_factory=list, description="Extra vLLM arguments, passed through unchanged.")
    cuda_visible_devices: str | None = Field(None, description="GPU indices as nvidia-smi numbers them, e.g. '0,1'.")
    omp_num_threads: int | None = Field(None, ge=1, description="OMP_NUM_THREADS; none = keep the environment's.")
    cache_dir: Path = Field(default_factory=contract.cache_dir, description="Root of per-user compiler caches.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra engine environment (wins over defaults).")

    @model_validator(mode="before")
    @classmethod
    def _no_port(cls, data: Any) -> Any:
        if isinstance(data, dict) and "port" in data:
            raise ValueError("engine.port is gone: the engine now listens on a private Unix socket that only the "
                             "daemon can reach, and on no TCP port; remove engine.port (clients use the daemon's port)")
        return data

    @field_validator("cuda_visible_devices")
    @classmethod
    def _gpu_list(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"\s*(\d+|GPU-[0-9a-fA-F-]+)(\s*,\s*(\d+|GPU-[0-9a-fA-F-]+))*\s*",
                                                  value):
            raise ValueError(f"expected GPU indices or UUIDs separated by commas (like '0,1'), got {value!r}")
        return value.replace(" ", "") if value else value


MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")


class ModelSettings(BaseModel):
    """One entry of the `models` table: an engine the daemon starts when a request names it."""

    model: str | None = Field(None, description="Model directory or Hugging Face id; none = the embedded demo model.")
    args: list[str] = Field(default_factory=list, description="vLLM arguments of this model's engine.")
    gpus: list[int] | None = Field(None, description="GPU indices (nvidia-smi's) this engine runs on; none = all. "
                                                    "Models whose sets overlap never run at the same time.")
    aliases: list[str] = Field(default_factory=list, description="Other names requests may use for this model.")
    ttl_s: float = Field(0, ge=0, description="Unload after this long without requests; 0 = stay loaded.")
    preload: bool = Field(False, description="Start at daemon start instead of at the first request.")
    sleep: bool = Field(False, description="Swapped out by vLLM's sleep mode (level 1: weights kept in host memory, "
                                           "the process kept) instead of a stop, so it comes back without a cold "
                                           "start. CUDA/ROCm vLLM only; elsewhere swaps stop it (the launch "
                                           "decisions say why). The idle ttl and /unload still stop it.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment of this model's engine.")

    @field_validator("gpus")
    @classmethod
    def _gpu_set(cls, value: list[int] | None) -> list[int] | None:
        if value is not None:
            if not value:
                raise ValueError("an empty GPU list runs nowhere; leave gpus out to use every GPU")
            if any(index < 0 for index in value) or len(set(value)) != len(value):
                raise ValueError(f"expected distinct GPU indices like [0, 1], got {value}")
        return value

    @field_validator("args")
    @classmethod
    def _own_names(cls, value: list[str]) -> list[str]:
        if any(part == "--served-model-name" or part.startswith("--served-model-name=") for part in value):
            raise ValueError("--served-model-name is set by the daemon from the entry's name and aliases (requests "
                             "are routed by them); remove it and list other names under aliases")
        return value

    @field_validator("aliases")
    @classmethod
    def _alias_names(cls, value: list[str]) -> list[str]:
        for alias in value:
            if not MODEL_NAME.fullmatch(alias):
                raise ValueError(f"alias {alias!r}: use letters, digits and . _ : / - (at most 128)")
        return value


class SwapSettings(BaseModel):
    """How models with overlapping GPUs take turns."""

    fairness_s: float = Field(60, ge=0, description="The turn of a busy model: after this long ready it gives its "
                                                    "GPUs to a model waiting for them (draining first).")
    idle_s: float = Field(5, ge=0, description="A model whose last request ended less than this long ago still "
                                               "counts as busy (a client's next request usually follows soon).")


class SupervisorSettings(BaseModel):
    startup_timeout_s: float = Field(600, gt=0, description="Engine start to ready; longer = failed start.")
    ready_poll_s: float = Field(1.0, gt=0, description="Interval of /health polls while starting.")
    stop_grace_s: float = Field(30, ge=0, description="SIGTERM to SIGKILL of the engine's process group.")
    drain_timeout_s: float = Field(60, ge=0, description="How long a graceful restart waits for in-flight requests.")
    backoff_initial_s: float = Field(2, gt=0)
    backoff_max_s: float = Field(120, gt=0)
    max_restarts: int = Field(5, ge=0, description="Consecutive failed starts/crashes before the state `failed`.")
    progress_interval_s: float = Field(5, gt=0, description="Interval of the engine /metrics forward-progress check.")
    hang_timeout_s: float = Field(120, gt=0, description="Requests running but no token generated this long = hung.")
    gpu_release_timeout_s: float = Field(30, ge=0, description="Wait for NVML to show the GPU memory released.")
    sleep_timeout_s: float = Field(120, gt=0, description="Longest POST /sleep or /wake_up of a model with `sleep`; "
                                                          "longer = the engine is stopped (or restarted) instead.")
    smoke_prompt: str = "The capital of France is"
    smoke_max_tokens: int = Field(4, ge=1)

    @model_validator(mode="after")
    def _backoff_order(self) -> SupervisorSettings:
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError("backoff_max_s must be at least backoff_initial_s")
        return self


class ProxySettings(BaseModel):
    queue_size: int = Field(256, ge=0, description="Requests that may wait while the engine is not ready.")
    queue_wait_s: float = Field(300, ge=0, description="Longest wait of a queued request before a 503.")
    connect_timeout_s: float = Field(5, gt=0)
    read_timeout_s: float = Field(600, gt=0, description="Longest silence from the engine within one response.")
    retry_after_s: int = Field(10, ge=1, description="Retry-After of a 503.")
    max_body_mib: int = Field(64, ge=1, description=(
        "Largest request body relayed, in MiB; a larger one gets a 413 (from its Content-Length, before it is read, "
        "or once a chunked body passes it). Bodies are held whole while they wait for the engine: up to "
        "queue_size x this in all."))


class SecuritySettings(BaseModel):
    admin_keys: list[SecretStr] = Field(default_factory=list, description="Keys for admin calls; none = open.")
    inference_keys: list[SecretStr] = Field(default_factory=list, description="Keys for /v1/*; none = open.")
    metrics_keys: list[SecretStr] = Field(default_factory=list, description="Keys for /metrics; none = open.")
    trusted_origins: list[str] = Field(default_factory=list, description=(
        "Browser origins besides the daemon's own address that may make admin calls, e.g. "
        "'https://caovan.example.com' for a dashboard behind a reverse proxy that rewrites the Host header."))
    allowed_hosts: list[str] = Field(default_factory=list, description=(
        "Names besides IP addresses, localhost, this machine's name and the listening host that clients may reach "
        "the daemon by (the Host they send), e.g. 'gpu-box.lan' or a container's service name; other names are "
        "refused, as a web page using DNS rebinding would send them. '*' accepts any name."))

    @field_validator("trusted_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        for origin in value:
            if not re.fullmatch(r"https?://[^/\s]+/?", origin):
                raise ValueError(f"expected origins like 'https://host[:port]' (scheme and address, no path), "
                                 f"got {origin!r}")
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        for host in value:
            if host != "*" and not re.fullmatch(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?\.?", host):
                raise ValueError(f"expected host names like 'gpu-box.lan' (no scheme, port or path), or '*', "
                                 f"got {host!r}")
        return value


class PluginSettings(BaseModel):
    store_dir: Path | None = Field(None, description="Installed plugin versions; none = <state_dir>/plugins.")
    verify_requests: int = Field(4, ge=1, description="Completions of the verification benchmark.")
    verify_max_tokens: int = Field(48, ge=1)
    throughput_margin: float = Field(0.25, ge=0, le=1, description="Allowed relative tokens/s loss.")
    acceptance_margin: float = Field(0.10, ge=0, le=1, description="Allowed absolute acceptance-rate loss.")
    banner_timeout_s: float = Field(30, ge=0, description="Wait for the plugin banner after ready.")
    draft_vocab_min_speedup: float = Field(
        1.0, gt=0, description="A DraftVocab switch is kept only if its tokens/s exceed the baseline's times this "
                               "(1.0: it must be faster).")


# The canary's built-in prompts: prose, a list, code, arithmetic, Chinese, a passage whose prefill spans several of
# the GDN kernels' 64-token chunks, and runs of unrelated words. No learnt pattern carries the continuation of those,
# so it leans on what the layers' state holds: the small CPU demo model, which memorised its text, decodes familiar
# prompts right even from a never-written GDN state, but not these two (docs/verification.md). Any text works: the
# check needs no stored answer.
CANARY_PROMPTS = (
    "The capital of France is",
    "Monday, Tuesday, Wednesday,",
    "def fibonacci(n):\n    ",
    "Question: what is 17 plus 25? Answer:",
    "请用一句话介绍长城：",
    "A lighthouse keeper kept a log of every ship that passed the rocks below his tower. In the spring he counted "
    "fishing boats and ferries; in the summer, yachts and the occasional tall ship with its sails furled; in the "
    "autumn the storms came and the log filled with the names of freighters that sheltered in the bay until the "
    "wind turned. One night in November the lamp failed, and he climbed the stairs with a lantern and",
    "from forest was one of of of market coffee the blue at night of winter from city window engine from three",
    "from music this of stone engine market was as letter this for two garden night garden doctor by",
)


class DraftVocabSettings(BaseModel):
    """DraftVocab's learnt hot vocabulary: the daemon counts the tokens of the replies it relays, per model."""

    learn: bool = Field(True, description="Count the relayed replies' tokens into <state_dir>/draft-vocab/<model>.json "
                                          "(token-id counts only, never text).")
    learn_queue_bytes: int = Field(8 << 20, ge=0, description="Replies waiting to be counted, at most this many "
                                                               "bytes; beyond it a reply is skipped, never delayed.")
    learn_write_every_tokens: int = Field(50_000, ge=1, description="Rewrite the file after this many new tokens "
                                                                    "(and when the daemon stops).")
    learn_batch_s: float = Field(1.0, ge=0, description="Count the replies queued over this long in one batch.")
    learn_min_tokens: int = Field(20_000, ge=1, description='Tokens counted before {"setting": "learnt"} is taken.')
    learn_coverage: float = Field(0.999, gt=0, le=1, description='The learnt hot vocabulary: the fewest most '
                                                                  'frequent ids that cover this share of the counted '
                                                                  'tokens.')


class CanarySettings(BaseModel):
    """OutputLock's canary: after every start, wake-up and plugin activation, then periodically, the engine's decode
    path is checked against its own prefill path (greedy; no stored answer needed)."""

    enabled: bool = Field(True, description="Check answers after starts, wake-ups and activations, and on the timer.")
    prompts: list[str] = Field(default_factory=lambda: list(CANARY_PROMPTS), min_length=1,
                               description="Prompts of a canary run (greedy completions); the built-in set covers "
                                           "prose, code, arithmetic, Chinese, a multi-chunk prefill and unrelated "
                                           "words.")
    max_tokens: int = Field(24, ge=2, le=1024, description="Tokens generated and checked per prompt.")
    tie_margin: float = Field(0.25, ge=0, description=(
        "A generated token that is not the prefill's first counts as a tie, not a failure, when its log-probability "
        "is within this of the first's (fp16/bf16 prefill and decode kernels differ in their last bits)."))
    timeout_s: float = Field(120, gt=0, description="Longest canary run; longer = `not run` (never a pass).")
    interval_s: float = Field(900, ge=0, description="Seconds between periodic runs on a ready engine; 0 = only "
                                                     "after starts, wake-ups, activations and on request.")
    idle_s: float = Field(2, ge=0, description="A periodic run sends each request only after no user request has "
                                               "been in flight for this long.")
    busy_wait_s: float = Field(300, gt=0, description="How long a periodic run waits for such a quiet moment "
                                                      "before it reports `not run` (busy).")
    action: Literal["alert", "restart", "rollback", "fallback"] = Field("alert", description=(
        "On a failed canary: alert (the engine serves, marked degraded), restart (as after a crash, with backoff "
        "and supervisor.max_restarts), rollback (back to the last plugin version whose canary passed) or fallback "
        "(restart with fallback_args added). A plugin activation whose canary fails is rolled back whatever this "
        "says."))
    fallback_args: list[str] = Field(default_factory=lambda: ["--enforce-eager"], description=(
        "vLLM arguments added for action = fallback: no CUDA graphs and no torch.compile by default; "
        "['--compilation-config', '{\"cudagraph_mode\": \"PIECEWISE\"}'] keeps piecewise graphs, "
        "['--additional-config', '{\"caovan_mode\": \"off\"}'] runs stock vLLM kernels."))

    @field_validator("prompts")
    @classmethod
    def _prompts(cls, value: list[str]) -> list[str]:
        if any(not prompt.strip() for prompt in value):
            raise ValueError("an empty canary prompt checks nothing; remove it")
        return value


class LogSettings(BaseModel):
    dir: Path | None = Field(None, description="Engine log files; none = <state_dir>/logs.")
    max_bytes: int = Field(20_000_000, ge=1000)
    backups: int = Field(5, ge=0)
    ring_lines: int = Field(5000, ge=10)
    keep_runs: int = Field(50, ge=1, description="Log files of this many most recent runs are kept; older deleted.")
    console: bool = Field(False, description="Also write each engine line to the daemon's stderr as "
                                             "`engine-<run> | <line>`, for journald (`caovan parse-log` reads it).")


class Settings(BaseSettings):
    """Everything `caovan serve` reads. Nested fields in the environment: CAOVAN_ENGINE__PORT=8001."""

    model_config = SettingsConfigDict(
        env_prefix="CAOVAN_", env_nested_delimiter="__", extra="forbid", validate_default=True
    )

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    state_dir: Path = Field(default_factory=default_state_dir)
    web_dir: Path | None = Field(None, description="Dashboard folder; none = the project's web/.")
    doctor_cache_s: float = Field(300, ge=0)
    access_log: bool = Field(False, description="A console line per HTTP request, with the client's address "
                                                "(uvicorn's access log). Off by default: /metrics counts requests by "
                                                "model, endpoint and status. The engine's own access log is off "
                                                "either way (its requests all come from the daemon).")
    engine: EngineSettings = Field(default_factory=EngineSettings)
    supervisor: SupervisorSettings = Field(default_factory=SupervisorSettings)
    proxy: ProxySettings = Field(default_factory=ProxySettings)
    security: SecuritySettings = Field(default_factory=SecuritySettings)
    plugins: PluginSettings = Field(default_factory=PluginSettings)
    draft_vocab: DraftVocabSettings = Field(default_factory=DraftVocabSettings)
    logs: LogSettings = Field(default_factory=LogSettings)
    canary: CanarySettings = Field(default_factory=CanarySettings)
    models: dict[str, ModelSettings] = Field(default_factory=dict, description="Several models swapped on demand "
                                             "by the request's model name; none = the one `engine` model.")
    swap: SwapSettings = Field(default_factory=SwapSettings)

    # Set by load_settings before construction; class-level because pydantic-settings builds sources per class.
    config_file: ClassVar[Path | None] = None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, _PrefixedEnv(settings_cls)]
        path = cls.config_file
        if path is not None:
            if path.suffix.lower() == ".toml":
                sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
            else:
                sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
        return tuple(sources)

    @model_validator(mode="after")
    def _model_table(self) -> Settings:
        if self.models and self.engine.model:
            raise ValueError("engine.model and a models table were both given; name the model in the table (or "
                             "drop the table to serve engine.model alone)")
        seen: dict[str, str] = {}
        for name, entry in self.models.items():
            if not MODEL_NAME.fullmatch(name):
                raise ValueError(f"models.{name}: a model name uses letters, digits and . _ : / - (at most 128)")
            for each in (name, *entry.aliases):
                if each in seen:
                    raise ValueError(f"models.{name}: the name {each!r} is already used by models.{seen[each]}; "
                                     f"every name and alias must be unique")
                seen[each] = name
        return self

    @property
    def plugin_store_dir(self) -> Path:
        return self.plugins.store_dir or self.state_dir / "plugins"

    @property
    def log_dir(self) -> Path:
        return self.logs.dir or self.state_dir / "logs"

    @property
    def database_path(self) -> Path:
        return self.state_dir / "caovan.sqlite3"

    def secrets(self) -> list[str]:
        """Every configured key, for masking in logs, status and errors."""
        keys = self.security.admin_keys + self.security.inference_keys + self.security.metrics_keys
        return [key.get_secret_value() for key in keys if key.get_secret_value()]


class _PrefixedEnv(PydanticBaseSettingsSource):
    """CAOVAN_* variables for the daemon's own fields only.

    The plugin's own variables share the prefix (CAOVAN_REQUIRE_TURBO3, CAOVAN_CACHE_DIR, CAOVAN_FLASHQLA_*) and belong to
    the engine, so an unknown CAOVAN_ name is ignored here instead of failing `extra="forbid"`."""

    def __init__(self, settings_cls: type[BaseSettings]) -> None:
        super().__init__(settings_cls)
        from pydantic_settings import EnvSettingsSource

        self._inner = EnvSettingsSource(settings_cls, env_prefix="CAOVAN_", env_nested_delimiter="__")

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self._inner.get_field_value(field, field_name)

    def __call__(self) -> dict[str, Any]:
        values = self._inner()
        return {name: value for name, value in values.items() if name in self.settings_cls.model_fields}


CONFIG_SUFFIXES = (".toml", ".yaml", ".yml")


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Read and validate the configuration; raise ConfigError with a readable message."""
    if config_file is not None:
        if config_file.suffix.lower() not in CONFIG_SUFFIXES:
            raise ConfigError(f"config file {config_file}: unknown format {config_file.suffix!r}; "
                              f"use a .toml, .yaml or .yml file")
        if not config_file.is_file():
            raise ConfigError(f"config file {config_file} does not exist or is not a file; check the --config path")
    Settings.config_file = config_file
    try:
        return Settings(**{key: value for key, value in overrides.items() if value is not None})
    except ValidationError as exc:
        raise ConfigError(_explain(exc, config_file)) from None
    except (ValueError, OSError) as exc:  # a file that does not parse as TOML/YAML
        raise ConfigError(f"config file {config_file}: cannot be read: {exc}") from None
    finally:
        Settings.config_file = None


def _explain(exc: ValidationError, config_file: Path | None) -> str:
    where = f"the config file {config_file}, " if config_file else ""
    lines = [f"invalid configuration ({where}CAOVAN_* environment or command line):"]
    for error in exc.errors():
        dotted = ".".join(str(part) for part in error["loc"])
        env_name = "CAOVAN_" + "__".join(str(part) for part in error["loc"]).upper()
        if not error["loc"]:  # a check across fields: its message names them
            lines.append(f"  {error['msg'].removeprefix('Value error, ')}")
        elif error["type"] == "extra_forbidden":
            lines.append(f"  {dotted}: unknown setting; remove it or check its spelling")
        else:
            # Never echo the input of a key field back.
            shown = "" if "key" in dotted else f" (got {error.get('input')!r})"
            lines.append(f"  {dotted}: {error['msg']}{shown}; set it in the file or as {env_name}")
    return "\n".join(lines)


# The engine's environment ------------------------------------------------------------------------------------------

def engine_environment(settings: Settings, base: dict[str, str] | None = None) -> dict[str, str]:
    """The engine's environment: the daemon's own, minus stale variables, plus the plugin's launch defaults."""
    env = {name: value for name, value in (os.environ if base is None else base).items()
           if not name.startswith(STALE_ENV_PREFIXES) and not _is_daemon_variable(name)}
    user = _user_name()
    cache = settings.engine.cache_dir
    defaults = {
        # Index GPUs like nvidia-smi does, so CUDA_VISIBLE_DEVICES means what the user reads there.
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "TORCHINDUCTOR_CACHE_DIR": str(cache / f"torchinductor-{user}"),
        "TRITON_CACHE_DIR": str(cache / f"triton-{user}"),
        "TRITON_CACHE_AUTOTUNING": "1",
        "CAOVAN_CACHE_DIR": str(cache),
    }
    for name, value in defaults.items():
        env.setdefault(name, value)
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    if settings.engine.cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = settings.engine.cuda_visible_devices
    if settings.engine.omp_num_threads is not None:
        env["OMP_NUM_THREADS"] = str(settings.engine.omp_num_threads)
    env.update(settings.engine.env)
    # Unbuffered: the supervisor reads the engine's log line by line as it happens.
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _is_daemon_variable(name: str) -> bool:
    # The daemon's own settings (keys among them) stay out of the engine's environment.
    if not name.startswith("CAOVAN_"):
        return False
    return name[len("CAOVAN_"):].split("__")[0].lower() in Settings.model_fields


def _user_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())
