"""The daemon's Prometheus series, all named caovan_* (the engine's own vllm:* series stay at /metrics/engine)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from caovan_manager.canary.verdict import PURPOSES, CanaryVerdict
from caovan_manager.gpu import gpu_samples
from caovan_manager.logwatch import events
from caovan_manager.supervisor.effects import RESTART_CAUSES
from caovan_manager.supervisor.run import MARKER_KINDS, TensorCore75View
from caovan_manager.supervisor.state import State, StateChanged

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


SWAP_BUCKETS = (1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)


class DaemonMetrics:
    """The registry and its families. Engine series carry the model's name (`model`); `for_model` gives the view
    one model's supervisor, effects and gate write through."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        m = ["model"]
        self.engine_up = Gauge("caovan_engine_up", "1 while the model's engine is ready to serve", m, registry=r)
        self.engine_state = Gauge("caovan_engine_state", "1 for the supervisor's current state", [*m, "state"],
                                  registry=r)
        self.restarts = Counter("caovan_engine_restarts", "Engine restarts by cause", [*m, "cause"], registry=r)
        self.time_to_ready = Gauge("caovan_engine_time_to_ready_seconds", "Spawn to ready of the latest start", m,
                                   registry=r)
        self.prompt_tps = Gauge("caovan_prompt_tokens_per_second", "Prompt throughput (engine log)", m, registry=r)
        self.generation_tps = Gauge("caovan_generation_tokens_per_second", "Generation throughput (engine log)", m,
                                    registry=r)
        self.running = Gauge("caovan_engine_requests_running", "Requests running (engine log)", m, registry=r)
        self.waiting = Gauge("caovan_engine_requests_waiting", "Requests waiting (engine log)", m, registry=r)
        self.kv_usage = Gauge("caovan_kv_cache_usage_ratio", "KV cache usage 0..1 (engine log)", m, registry=r)
        self.acceptance = Gauge("caovan_spec_acceptance_rate", "MTP draft acceptance 0..1 (engine log)", m,
                                registry=r)
        self.acceptance_length = Gauge("caovan_spec_mean_acceptance_length", "Mean acceptance length", m, registry=r)
        self.position_acceptance = Gauge("caovan_spec_position_acceptance_rate", "Acceptance per draft position",
                                         [*m, "position"], registry=r)
        self.mtp_accepted = Counter("caovan_mtp_accepted_tokens", "MTP draft tokens accepted", m, registry=r)
        self.mtp_drafted = Counter("caovan_mtp_drafted_tokens", "MTP draft tokens proposed", m, registry=r)
        self.mtp_tokens = Gauge("caovan_mtp_num_speculative_tokens", "MTP tokens per step of the running engine", m,
                                registry=r)
        self.marker = Gauge("caovan_plugin_marker_active", "1 once the plugin printed this marker in the current run",
                            [*m, "marker"], registry=r)
        self.plugin = Info("caovan_plugin", "Plugin version of the running engine", m, registry=r)
        self.tensorcore75_active = Gauge("caovan_tensorcore75_active", "1 while an engine process reports "
                                         "TensorCore75 (sm_75 tensor-core retargeting) ACTIVE", m, registry=r)
        self.tensorcore75_kernels = Gauge("caovan_tensorcore75_kernels", "Kernels compiled by the engine process "
                                          "with the most: retargeted to tensor cores, or kept on FMA by reason",
                                          [*m, "decision", "reason"], registry=r)
        self.swaps = Counter("caovan_model_swaps", "Starts of this model that stopped another one for its GPUs", m,
                             registry=r)
        self.swap_duration = Histogram("caovan_model_swap_duration_seconds", "From stopping the models in its way "
                                       "to ready, for starts that swapped another model out", m,
                                       buckets=SWAP_BUCKETS, registry=r)
        self.last_used = Gauge("caovan_model_last_used_timestamp_seconds", "When a request last left or entered "
                               "this model's queue (Unix time)", m, registry=r)
        # OutputLock's canary: the engine's decode path checked against its own prefill path.
        self.canary_runs = Counter("caovan_canary_runs", "Canary runs by purpose (start, wake, activation, "
                                   "periodic, on_demand), whatever their result", [*m, "purpose"], registry=r)
        self.canary_failures = Counter("caovan_canary_failures", "Canary runs whose decode tokens disagreed with "
                                       "the prefill beyond the tie margin", m, registry=r)
        self.canary_not_run = Counter("caovan_canary_not_run", "Canary runs that could not check the answers "
                                      "(busy engine, request error, timeout): never counted as a pass", m, registry=r)
        self.canary_agreement = Gauge("caovan_canary_agreement", "Share of the last checked canary's tokens that were "
                                      "the prefill's first choice (0..1)", m, registry=r)
        self.canary_last_success = Gauge("caovan_canary_last_success_timestamp_seconds", "When a canary last passed "
                                         "(Unix time; 0 = none yet)", m, registry=r)
        self.canary_degraded = Gauge("caovan_canary_degraded", "1 while the engine's last completed canary failed "
                                     "(the degraded condition)", m, registry=r)
        # Proxy series: `model` is a configured name, or "unknown" for a request naming none of them.
        self.proxy_requests = Counter("caovan_proxy_requests", "Proxied requests by endpoint and status",
                                      [*m, "endpoint", "status"], registry=r)
        self.proxy_latency = Histogram("caovan_proxy_request_duration_seconds", "Whole proxied request",
                                       [*m, "endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.proxy_ttft = Histogram("caovan_proxy_time_to_first_token_seconds", "Request to first streamed chunk",
                                    [*m, "endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.proxy_queue = Gauge("caovan_proxy_queue_depth", "Requests waiting for the engine", m, registry=r)
        self.proxy_in_flight = Gauge("caovan_proxy_in_flight", "Requests being served by the engine", m, registry=r)
        r.register(GpuCollector())

    def for_model(self, name: str) -> ModelMetrics:
        return ModelMetrics(self, name)


class ModelMetrics:
    """One model's series (every family's child with model=<name>), zeroed where a dashboard expects a value."""

    def __init__(self, families: DaemonMetrics, name: str) -> None:
        self.f = families
        self.name = name
        self._kept_reasons: set[str] = set()
        for state in State:
            families.engine_state.labels(name, state.value).set(0)
        families.engine_up.labels(name).set(0)
        for cause in RESTART_CAUSES:
            families.restarts.labels(name, cause)
        for marker in MARKER_KINDS:
            families.marker.labels(name, marker).set(0)
        families.swaps.labels(name)
        families.swap_duration.labels(name)  # at zero: a model's first swap is then an increase rate() sees
        for purpose in PURPOSES:
            families.canary_runs.labels(name, purpose)
        families.canary_failures.labels(name)
        families.canary_not_run.labels(name)
        families.canary_last_success.labels(name).set(0)
        families.canary_degraded.labels(name).set(0)

    def bind_gate(self, waiting: Callable[[], float], in_flight: Callable[[], float]) -> None:
        self.f.proxy_queue.labels(self.name).set_function(waiting)
        self.f.proxy_in_flight.labels(self.name).set_function(in_flight)

    def state_changed(self, change: StateChanged) -> None:
        for each in State:
            self.f.engine_state.labels(self.name, each.value).set(1 if each is change.state else 0)
        self.f.engine_up.labels(self.name).set(1 if change.state is State.READY else 0)
        if change.ready_after_s is not None:
            self.f.time_to_ready.labels(self.name).set(change.ready_after_s)

    def restarted(self, cause: str) -> None:
        self.f.restarts.labels(self.name, cause).inc()

    def canary_checked(self, verdict: CanaryVerdict, degraded: bool) -> None:
        f, name = self.f, self.name
        f.canary_runs.labels(name, verdict.purpose).inc()
        if verdict.result == "failed":
            f.canary_failures.labels(name).inc()
        elif verdict.result == "not_run":
            f.canary_not_run.labels(name).inc()
        else:
            f.canary_last_success.labels(name).set(verdict.at)
        if verdict.agreement is not None:
            f.canary_agreement.labels(name).set(verdict.agreement)
        f.canary_degraded.labels(name).set(1 if degraded else 0)

    def swapped_in(self, waited_s: float) -> None:
        self.f.swaps.labels(self.name).inc()
        self.f.swap_duration.labels(self.name).observe(waited_s)

    def used(self, unix_time: float) -> None:
        self.f.last_used.labels(self.name).set(unix_time)

    def new_run(self, version_label: str) -> None:
        for marker in MARKER_KINDS:
            self.f.marker.labels(self.name, marker).set(0)
        self.f.plugin.labels(self.name).info({"version": version_label})
        self.tensorcore75_changed(TensorCore75View())

    def tensorcore75_changed(self, view: TensorCore75View) -> None:
        f, name = self.f, self.name
        f.tensorcore75_active.labels(name).set(1 if view.status is not None and view.status.active else 0)
        for reason in self._kept_reasons:  # kept reasons differ from run to run
            f.tensorcore75_kernels.remove(name, "kept", reason)
        self._kept_reasons = set(view.kernels.kept_by_reason) if view.kernels else set()
        # Nothing retargeted until a count line says otherwise (an engine without TensorCore75 prints none). The
        # reason is named because Prometheus drops empty labels and the dashboard's legend reads it.
        f.tensorcore75_kernels.labels(name, "retargeted", "tensor_cores").set(
            view.kernels.retargeted if view.kernels else 0)
        if view.kernels is not None:
            for reason, count in view.kernels.kept_by_reason.items():
                f.tensorcore75_kernels.labels(name, "kept", reason).set(count)

    def log_event(self, event: events.LogEvent) -> None:
        f, name = self.f, self.name
        if isinstance(event, events.Throughput):
            f.prompt_tps.labels(name).set(event.prompt_tps)
            f.generation_tps.labels(name).set(event.generation_tps)
            f.running.labels(name).set(event.running)
            f.waiting.labels(name).set(event.waiting)
            f.kv_usage.labels(name).set(event.kv_cache_usage_pct / 100.0)
        elif isinstance(event, events.SpecDecode):
            if event.acceptance_rate is not None:
                f.acceptance.labels(name).set(event.acceptance_rate)
            if event.mean_acceptance_length is not None:
                f.acceptance_length.labels(name).set(event.mean_acceptance_length)
            for position, rate in enumerate(event.per_position or ()):
                f.position_acceptance.labels(name, str(position)).set(rate)
            f.mtp_accepted.labels(name).inc(max(event.accepted, 0))
            f.mtp_drafted.labels(name).inc(max(event.drafted, 0))
        elif isinstance(event, events.EngineConfig) and event.mtp_tokens is not None:
            f.mtp_tokens.labels(name).set(event.mtp_tokens)
        elif isinstance(event, events.PluginMtp):
            f.mtp_tokens.labels(name).set(event.tokens)
        if event.kind in MARKER_KINDS:
            f.marker.labels(name, event.kind).set(1)
        if isinstance(event, events.PluginBanner):
            f.plugin.labels(name).info({"version": event.version})


class GpuCollector(Collector):
    """GPU figures read from NVML at scrape time; nothing where NVML is absent."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        samples = gpu_samples()
        if not samples:
            return
        families = {
            "memory_used_bytes": GaugeMetricFamily("caovan_gpu_memory_used_bytes", "GPU memory used", labels=["gpu"]),
            "memory_total_bytes": GaugeMetricFamily("caovan_gpu_memory_total_bytes", "GPU memory", labels=["gpu"]),
            "utilization_pct": GaugeMetricFamily("caovan_gpu_utilization_percent", "GPU utilisation",
                                                 labels=["gpu"]),
            "temperature_c": GaugeMetricFamily("caovan_gpu_temperature_celsius", "GPU temperature", labels=["gpu"]),
            "power_w": GaugeMetricFamily("caovan_gpu_power_watts", "GPU power draw", labels=["gpu"]),
        }
        for sample in samples:
            for field, family in families.items():
                family.add_metric([str(sample.index)], getattr(sample, field))
        yield from families.values()
