"""The daemon's Prometheus series, all named caovan_* (the engine's own vllm:* series stay at /metrics/engine)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from caovan_manager.engine.gpu import gpu_samples
from caovan_manager.logwatch import events as log
from caovan_manager.supervisor.effects import RESTART_CAUSES
from caovan_manager.supervisor.machine import MARKER_KINDS as MARKERS
from caovan_manager.supervisor.machine import TensorCore75
from caovan_manager.supervisor.messages import State

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class DaemonMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.engine_up = Gauge("caovan_engine_up", "1 while the engine is ready to serve", registry=r)
        self.engine_state = Gauge("caovan_engine_state", "1 for the supervisor's current state", ["state"],
                                  registry=r)
        self.restarts = Counter("caovan_engine_restarts", "Engine restarts by cause", ["cause"], registry=r)
        self.time_to_ready = Gauge("caovan_engine_time_to_ready_seconds", "Spawn to ready of the latest start",
                                   registry=r)
        self.prompt_tps = Gauge("caovan_prompt_tokens_per_second", "Prompt throughput (engine log)", registry=r)
        self.generation_tps = Gauge("caovan_generation_tokens_per_second", "Generation throughput (engine log)",
                                    registry=r)
        self.running = Gauge("caovan_engine_requests_running", "Requests running (engine log)", registry=r)
        self.waiting = Gauge("caovan_engine_requests_waiting", "Requests waiting (engine log)", registry=r)
        self.kv_usage = Gauge("caovan_kv_cache_usage_ratio", "KV cache usage 0..1 (engine log)", registry=r)
        self.acceptance = Gauge("caovan_spec_acceptance_rate", "MTP draft acceptance 0..1 (engine log)", registry=r)
        self.acceptance_length = Gauge("caovan_spec_mean_acceptance_length", "Mean acceptance length", registry=r)
        self.position_acceptance = Gauge("caovan_spec_position_acceptance_rate", "Acceptance per draft position",
                                         ["position"], registry=r)
        self.mtp_accepted = Counter("caovan_mtp_accepted_tokens", "MTP draft tokens accepted", registry=r)
        self.mtp_drafted = Counter("caovan_mtp_drafted_tokens", "MTP draft tokens proposed", registry=r)
        self.mtp_tokens = Gauge("caovan_mtp_num_speculative_tokens", "MTP tokens per step of the running engine",
                                registry=r)
        self.marker = Gauge("caovan_plugin_marker_active", "1 once the plugin printed this marker in the current run",
                            ["marker"], registry=r)
        self.plugin = Info("caovan_plugin", "Plugin version of the running engine", registry=r)
        self.tensorcore75_active = Gauge("caovan_tensorcore75_active", "1 while an engine process reports "
                                         "TensorCore75 (sm_75 tensor-core retargeting) ACTIVE", registry=r)
        self.tensorcore75_kernels = Gauge("caovan_tensorcore75_kernels", "Kernels compiled by the engine process "
                                          "with the most: retargeted to tensor cores, or kept on FMA by reason",
                                          ["decision", "reason"], registry=r)
        self.proxy_requests = Counter("caovan_proxy_requests", "Proxied requests by endpoint and status",
                                      ["endpoint", "status"], registry=r)
        self.proxy_latency = Histogram("caovan_proxy_request_duration_seconds", "Whole proxied request",
                                       ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.proxy_ttft = Histogram("caovan_proxy_time_to_first_token_seconds", "Request to first streamed chunk",
                                    ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.proxy_queue = Gauge("caovan_proxy_queue_depth", "Requests waiting for the engine", registry=r)
        self.proxy_in_flight = Gauge("caovan_proxy_in_flight", "Requests being served by the engine", registry=r)
        for state in State:
            self.engine_state.labels(state.value).set(0)
        for cause in RESTART_CAUSES:
            self.restarts.labels(cause)
        for marker in MARKERS:
            self.marker.labels(marker).set(0)
        r.register(GpuCollector())

    def bind_gate(self, waiting: Callable[[], float], in_flight: Callable[[], float]) -> None:
        self.proxy_queue.set_function(waiting)
        self.proxy_in_flight.set_function(in_flight)

    def state_changed(self, state: State) -> None:
        for each in State:
            self.engine_state.labels(each.value).set(1 if each is state else 0)
        self.engine_up.set(1 if state is State.READY else 0)

    def new_run(self, version_label: str) -> None:
        for marker in MARKERS:
            self.marker.labels(marker).set(0)
        self.plugin.info({"version": version_label})
        self.tensorcore75_changed(TensorCore75())

    def tensorcore75_changed(self, view: TensorCore75) -> None:
        self.tensorcore75_active.set(1 if view.status is not None and view.status.active else 0)
        self.tensorcore75_kernels.clear()  # kept reasons differ from run to run
        # Nothing retargeted until a count line says otherwise (an engine without TensorCore75 prints none). The
        # reason is named because Prometheus drops empty labels and the dashboard's legend reads it.
        self.tensorcore75_kernels.labels("retargeted", "tensor_cores").set(view.kernels.retargeted if view.kernels else 0)
        if view.kernels is not None:
            for reason, count in view.kernels.kept_by_reason.items():
                self.tensorcore75_kernels.labels("kept", reason).set(count)

    def log_event(self, event: log.LogEvent) -> None:
        if isinstance(event, log.Throughput):
            self.prompt_tps.set(event.prompt_tps)
            self.generation_tps.set(event.generation_tps)
            self.running.set(event.running)
            self.waiting.set(event.waiting)
            self.kv_usage.set(event.kv_cache_usage_pct / 100.0)
        elif isinstance(event, log.SpecDecode):
            if event.acceptance_rate is not None:
                self.acceptance.set(event.acceptance_rate)
            if event.mean_acceptance_length is not None:
                self.acceptance_length.set(event.mean_acceptance_length)
            for position, rate in enumerate(event.per_position or ()):
                self.position_acceptance.labels(str(position)).set(rate)
            self.mtp_accepted.inc(max(event.accepted, 0))
            self.mtp_drafted.inc(max(event.drafted, 0))
        elif isinstance(event, log.EngineConfig) and event.mtp_tokens is not None:
            self.mtp_tokens.set(event.mtp_tokens)
        elif isinstance(event, log.PluginMtp):
            self.mtp_tokens.set(event.tokens)
        if event.kind in MARKERS:
            self.marker.labels(event.kind).set(1)
        if isinstance(event, log.PluginBanner):
            self.plugin.info({"version": event.version})


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
