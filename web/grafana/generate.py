"""The Grafana dashboard of the Caovan daemon, generated from code so its queries cannot drift from the metric names.

Run `python web/grafana/generate.py` after changing a panel; it rewrites caovan-dashboard.json beside this file.
`--check` exits 1 when the committed file differs from what this module generates (the tests do the same).

Every query selects the daemon's series with the `job` and `instance` variables, and its per-model series (all but
the GPUs') with the `model` variable too; panels showing several models name the model in their legends. The
engine's own `vllm:*` series, re-exposed by the daemon at /metrics/engine (the primary model's engine), are scraped as
another job on the same address and so select by `instance` only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from caovan_manager.supervisor.effects import RESTART_CAUSES
from caovan_manager.supervisor.state import State

DASHBOARD_PATH = Path(__file__).with_name("caovan-dashboard.json")
UID = "caovan-daemon"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
DAEMON = 'job=~"$job", instance=~"$instance"'
MODEL = 'model=~"$model"'
ENGINE = 'instance=~"$instance"'
RATE = "$__rate_interval"
GRID_WIDTH = 24

# A metric name inside a PromQL expression: the daemon's caovan_* or the engine's vllm:* series.
METRIC_NAME = re.compile(r"\b(?:caovan_[a-zA-Z0-9_]*|vllm:[a-zA-Z0-9_:]*)")


def daemon(metric: str) -> str:
    """A selector of one of the daemon's per-model series for the chosen job, instance and models."""
    return f"{metric}{{{DAEMON}, {MODEL}}}"


def gpu(metric: str) -> str:
    """A selector of a GPU series: the machine's GPUs carry no model label, whichever model runs on them."""
    return f"{metric}{{{DAEMON}}}"


def engine(metric: str) -> str:
    """A selector of one of the engine's own series (the daemon's /metrics/engine) for the chosen instance."""
    return f"{metric}{{{ENGINE}}}"


def quantile(q: float, histogram: str, recent: bool = True) -> str:
    """The q-quantile of one of the daemon's histograms, per model: of the observations of the last few scrapes, or
    (recent=False) of all since the daemon started. The latter also counts a model's first observation, which
    rate() and increase() cannot see: the model's series appear with it."""
    buckets = daemon(histogram + "_bucket")
    return f"histogram_quantile({q}, sum by (le, model) ({f'rate({buckets}[{RATE}])' if recent else buckets}))"


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str
    instant: bool = False


@dataclass
class Panel:
    title: str
    kind: str  # the Grafana panel type
    targets: list[Target]
    width: int
    height: int = 8
    unit: str = "short"
    description: str = ""
    min: float | None = None
    max: float | None = None
    options: dict[str, Any] = field(default_factory=dict)
    mappings: list[dict[str, Any]] = field(default_factory=list)
    thresholds: list[dict[str, Any]] | None = None
    custom: dict[str, Any] = field(default_factory=dict)


@dataclass
class Row:
    title: str
    panels: list[Panel]


TENSORCORE75_MAPPING = [{"type": "value", "options": {
    "0": {"text": "off", "color": "text", "index": 0},
    "1": {"text": "ACTIVE", "color": "green", "index": 1}}}]
ACTIVE_MAPPING = [{"type": "value", "options": {
    "0": {"text": "not seen", "color": "text", "index": 0},
    "1": {"text": "active", "color": "green", "index": 1}}}]
ANSWERS_MAPPING = [{"type": "value", "options": {
    "0": {"text": "verified", "color": "green", "index": 0},
    "1": {"text": "DEGRADED", "color": "red", "index": 1}}}]
STATE_MAPPING = [{"type": "value", "options": {
    "0": {"text": " ", "color": "transparent", "index": 0},
    "1": {"text": "current", "color": "green", "index": 1}}}]
UP_MAPPING = [{"type": "value", "options": {
    "0": {"text": "down", "color": "red", "index": 0},
    "1": {"text": "ready", "color": "green", "index": 1}}}]
# A model that is not loaded is normal where models take turns: not ready is no alarm colour in the Models row.
LOADED_MAPPING = [{"type": "value", "options": {
    "0": {"text": "not ready", "color": "text", "index": 0},
    "1": {"text": "ready", "color": "green", "index": 1}}}]
LINES = {"drawStyle": "line", "lineWidth": 2, "fillOpacity": 10, "showPoints": "never", "spanNulls": True}
BARS = {"drawStyle": "bars", "fillOpacity": 60, "showPoints": "never"}
STAT_NAME = {"textMode": "name", "colorMode": "background", "graphMode": "none",
             "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}
# textMode auto: the value alone for one series, the legend beside each value for several (one per model).
STAT_VALUE = {"textMode": "auto", "colorMode": "value", "graphMode": "none",
              "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}


def rows() -> list[Row]:
    return [
        Row("Engine", [
            Panel("Engine", "stat", [Target(daemon("caovan_engine_up"), "{{model}}")], 4, 5,
                  description="ready = the supervisor's state is `ready` (it serves requests)",
                  options=STAT_VALUE | {"colorMode": "background"}, mappings=UP_MAPPING,
                  thresholds=[{"color": "red", "value": None}, {"color": "green", "value": 1}]),
            Panel("State", "stat", [Target(f"{daemon('caovan_engine_state')} == 1", "{{model}}: {{state}}")], 4, 5,
                  description="The supervisor's state: " + ", ".join(state.value for state in State),
                  options=STAT_NAME, thresholds=[{"color": "blue", "value": None}]),
            Panel("Plugin version", "stat", [Target(daemon("caovan_plugin_info"), "{{model}}: {{version}}")], 4, 5,
                  description="The plugin version of the running engine (its banner once printed)",
                  options=STAT_NAME, thresholds=[{"color": "purple", "value": None}]),
            Panel("MTP tokens", "stat", [Target(daemon("caovan_mtp_num_speculative_tokens"), "{{model}}")], 3, 5,
                  description="Speculative (MTP) tokens per step of the running engine", options=STAT_VALUE),
            Panel("Time to ready", "stat", [Target(daemon("caovan_engine_time_to_ready_seconds"), "{{model}}")],
                  3, 5, unit="s", description="Spawn to ready of the latest engine start", options=STAT_VALUE),
            Panel("Restarts in range", "stat",
                  [Target(f"sum by (model) (increase({daemon('caovan_engine_restarts_total')}[$__range]))",
                          "{{model}}")], 6, 5,
                  description="Engine restarts of every cause within the dashboard's time range",
                  options=STAT_VALUE | {"colorMode": "background"},
                  thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1},
                              {"color": "red", "value": 5}]),
            Panel("Markers active", "stat",
                  [Target(daemon("caovan_plugin_marker_active"), "{{model}} {{marker}}")], 12, 6,
                  description="Log markers the plugin printed in the current run: banner, caovan_mode, MTP, "
                              "GDNCore real prefill, active dispatch",
                  options=STAT_VALUE | {"colorMode": "background", "textMode": "value_and_name",
                                        "orientation": "horizontal"},
                  mappings=ACTIVE_MAPPING),
            Panel("State over time", "state-timeline",
                  [Target(daemon("caovan_engine_state"), "{{model}} {{state}}")], 12, 6,
                  description="Which state the supervisor was in, when", mappings=STATE_MAPPING,
                  options={"showValue": "never", "mergeValues": True, "rowHeight": 0.8},
                  custom={"fillOpacity": 80}),
            Panel("Restarts by cause", "timeseries",
                  [Target(f"sum by (model, cause) (increase({daemon('caovan_engine_restarts_total')}[{RATE}]))",
                          "{{model}} {{cause}}")], 24, 6,
                  description=", ".join(RESTART_CAUSES), custom=BARS),
        ]),
        Row("Answers (OutputLock)", [
            Panel("Answers", "stat", [Target(daemon("caovan_canary_degraded"), "{{model}}")], 5, 5,
                  description="degraded = the last completed canary found decode tokens a prefill of the same text "
                              "does not pick (GET /status: canary.degraded has the evidence)",
                  options=STAT_VALUE | {"colorMode": "background"}, mappings=ANSWERS_MAPPING,
                  thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 1}]),
            Panel("Since the last passing canary", "stat",
                  [Target(f"time() - {daemon('caovan_canary_last_success_timestamp_seconds')} and "
                          f"{daemon('caovan_canary_last_success_timestamp_seconds')} > 0", "{{model}}")], 5, 5,
                  unit="s", description="A canary runs after every start, wake-up and activation, then every "
                                        "canary.interval_s on an idle enough engine", options=STAT_VALUE),
            Panel("Canary agreement", "timeseries", [Target(daemon("caovan_canary_agreement"), "{{model}}")], 7, 5,
                  unit="percentunit", min=0, max=1, custom=LINES,
                  description="Share of the last canary's tokens that were exactly the prefill's (ties within the "
                              "tie margin pass but count below 1)"),
            Panel("Canary runs", "timeseries", [
                Target(f"sum by (model, purpose) (increase({daemon('caovan_canary_runs_total')}[{RATE}]))",
                       "{{model}} {{purpose}}"),
                Target(f"sum by (model) (increase({daemon('caovan_canary_failures_total')}[{RATE}]))",
                       "{{model}} failed"),
                Target(f"sum by (model) (increase({daemon('caovan_canary_not_run_total')}[{RATE}]))",
                       "{{model}} could not run"),
            ], 7, 5, min=0, custom=BARS, description="Runs by why they ran; failures; runs that could not check"),
        ]),
        Row("Models (swapped on demand)", [
            Panel("Ready per model", "state-timeline", [Target(daemon("caovan_engine_up"), "{{model}}")], 9, 5,
                  description="When each model's engine served requests; models sharing GPUs take turns",
                  mappings=LOADED_MAPPING, options={"showValue": "never", "mergeValues": True, "rowHeight": 0.8},
                  custom={"fillOpacity": 80}),
            Panel("Swaps in range", "stat",
                  [Target(f"sum by (model) (increase({daemon('caovan_model_swaps_total')}[$__range]))", "{{model}}")],
                  5, 5, description="Starts of a model that stopped another one for its GPUs, within the time range",
                  options=STAT_VALUE, thresholds=[{"color": "blue", "value": None}]),
            # Swaps are rare, and often a model's first swap is the one to see: every swap since the daemon started.
            Panel("Swap duration", "bargauge", [
                Target(quantile(0.5, "caovan_model_swap_duration_seconds", recent=False), "{{model}} p50",
                       instant=True),
                Target(quantile(0.95, "caovan_model_swap_duration_seconds", recent=False), "{{model}} p95",
                       instant=True),
            ], 5, 5, unit="s", min=0,
                description="From stopping the models in its way to the swapped-in model's ready; every swap since "
                            "the daemon started",
                options={"orientation": "horizontal", "displayMode": "basic", "showUnfilled": True,
                         "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}),
            Panel("Idle since last request", "stat",
                  [Target(f"time() - {daemon('caovan_model_last_used_timestamp_seconds')}", "{{model}}")], 5, 5,
                  unit="s", description="Time since a request last entered or left the model's queue",
                  options=STAT_VALUE),
        ]),
        Row("Throughput", [
            Panel("Tokens per second", "timeseries", [
                Target(daemon("caovan_generation_tokens_per_second"), "{{model}} generation (engine log)"),
                Target(daemon("caovan_prompt_tokens_per_second"), "{{model}} prompt (engine log)"),
                Target(f"sum(rate({engine('vllm:generation_tokens_total')}[{RATE}]))", "generation (engine counter)"),
                Target(f"sum(rate({engine('vllm:prompt_tokens_total')}[{RATE}]))", "prompt (engine counter)"),
            ], 12, unit="tps", min=0, custom=LINES,
                description="The engine logs' 10-second averages beside the rate of the engine's own counters (the "
                            "primary model's engine, /metrics/engine)"),
            Panel("Queue depth and requests", "timeseries", [
                Target(daemon("caovan_proxy_queue_depth"), "{{model}} queued at the daemon (engine not ready)"),
                Target(daemon("caovan_proxy_in_flight"), "{{model}} in flight through the daemon"),
                Target(daemon("caovan_engine_requests_running"), "{{model}} running in the engine"),
                Target(daemon("caovan_engine_requests_waiting"), "{{model}} waiting in the engine"),
            ], 8, min=0, custom=LINES),
            Panel("KV cache usage", "timeseries", [Target(daemon("caovan_kv_cache_usage_ratio"), "{{model}}")], 4,
                  unit="percentunit", min=0, max=1, custom=LINES),
        ]),
        Row("Speculative decoding (MTP)", [
            Panel("Draft acceptance rate", "timeseries", [
                Target(daemon("caovan_spec_acceptance_rate"), "{{model}} acceptance (engine log)"),
                Target(f"sum by (model) (rate({daemon('caovan_mtp_accepted_tokens_total')}[{RATE}])) / "
                       f"sum by (model) (rate({daemon('caovan_mtp_drafted_tokens_total')}[{RATE}]))",
                       "{{model}} accepted / drafted"),
            ], 8, unit="percentunit", min=0, max=1, custom=LINES,
                description="Share of the MTP head's draft tokens the model accepted"),
            Panel("Mean acceptance length", "timeseries",
                  [Target(daemon("caovan_spec_mean_acceptance_length"), "{{model}}")], 6, min=1,
                  custom=LINES, description="Tokens produced per decode step (1 + accepted drafts)"),
            Panel("Acceptance by position", "bargauge",
                  [Target(daemon("caovan_spec_position_acceptance_rate"), "{{model}} position {{position}}",
                          instant=True)],
                  5, unit="percentunit", min=0, max=1,
                  options={"orientation": "horizontal", "displayMode": "gradient", "showUnfilled": True,
                           "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}},
                  thresholds=[{"color": "red", "value": None}, {"color": "orange", "value": 0.3},
                              {"color": "green", "value": 0.6}],
                  description="Acceptance of the draft token at each MTP position (the latest interval)"),
            Panel("MTP tokens per second", "timeseries", [
                Target(f"sum by (model) (rate({daemon('caovan_mtp_accepted_tokens_total')}[{RATE}]))",
                       "{{model}} accepted"),
                Target(f"sum by (model) (rate({daemon('caovan_mtp_drafted_tokens_total')}[{RATE}]))",
                       "{{model}} drafted"),
            ], 5, unit="tps", min=0, custom=LINES),
        ]),
        Row("OpenAI proxy", [
            Panel("Request latency", "timeseries", [
                Target(quantile(0.5, "caovan_proxy_request_duration_seconds"), "{{model}} p50"),
                Target(quantile(0.99, "caovan_proxy_request_duration_seconds"), "{{model}} p99"),
            ], 8, unit="s", min=0, custom=LINES, description="Whole proxied request, arrival to last byte"),
            Panel("Time to first token", "timeseries", [
                Target(quantile(0.5, "caovan_proxy_time_to_first_token_seconds"), "{{model}} p50"),
                Target(quantile(0.99, "caovan_proxy_time_to_first_token_seconds"), "{{model}} p99"),
            ], 8, unit="s", min=0, custom=LINES, description="Streamed requests: arrival to the first chunk"),
            Panel("Requests per second", "timeseries", [
                Target(f"sum by (model, endpoint, status) (rate({daemon('caovan_proxy_requests_total')}[{RATE}]))",
                       "{{model}} {{endpoint}} {{status}}"),
            ], 8, unit="reqps", min=0, custom=LINES),
        ]),
        Row("TensorCore75 (sm_75 tensor cores)", [
            Panel("TensorCore75", "stat", [Target(daemon("caovan_tensorcore75_active"), "{{model}}")], 6, 5,
                  description="ACTIVE while an engine process retargets Triton dots to sm_75 tensor cores; off "
                              "otherwise (/status says why)",
                  options=STAT_VALUE | {"colorMode": "background"}, mappings=TENSORCORE75_MAPPING,
                  thresholds=[{"color": "text", "value": None}, {"color": "green", "value": 1}]),
            Panel("TensorCore75 kernels", "bargauge",
                  [Target(daemon("caovan_tensorcore75_kernels"), "{{model}} {{decision}} {{reason}}")], 18, 5,
                  description="Kernels compiled by the engine process with the most: retargeted to tensor cores, "
                              "or kept on FMA by reason",
                  options={"orientation": "horizontal", "displayMode": "basic", "showUnfilled": True,
                           "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}),
        ]),
        Row("GPU (NVML; empty on a CPU engine)", [
            Panel("GPU memory", "timeseries", [
                Target(gpu("caovan_gpu_memory_used_bytes"), "GPU {{gpu}} used"),
                Target(gpu("caovan_gpu_memory_total_bytes"), "GPU {{gpu}} total"),
            ], 6, unit="bytes", min=0, custom=LINES),
            Panel("GPU utilisation", "timeseries",
                  [Target(gpu("caovan_gpu_utilization_percent"), "GPU {{gpu}}")], 6, unit="percent", min=0,
                  max=100, custom=LINES),
            Panel("GPU temperature", "timeseries",
                  [Target(gpu("caovan_gpu_temperature_celsius"), "GPU {{gpu}}")], 6, unit="celsius",
                  custom=LINES),
            Panel("GPU power", "timeseries", [Target(gpu("caovan_gpu_power_watts"), "GPU {{gpu}}")], 6,
                  unit="watt", min=0, custom=LINES),
        ]),
    ]


ANNOTATIONS = [
    {"name": "Engine restarts", "iconColor": "orange", "titleFormat": "engine restart",
     "textFormat": "{{model}}, cause: {{cause}}", "tagKeys": "model,cause",
     "expr": f"sum by (model, cause) (increase({daemon('caovan_engine_restarts_total')}[1m])) > 0"},
]


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": panel.unit, "mappings": panel.mappings, "custom": panel.custom,
                                "color": {"mode": "thresholds" if panel.thresholds else "palette-classic"}}
    if panel.thresholds:
        defaults["thresholds"] = {"mode": "absolute", "steps": panel.thresholds}
    if panel.min is not None:
        defaults["min"] = panel.min
    if panel.max is not None:
        defaults["max"] = panel.max
    options = panel.options or {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                                "tooltip": {"mode": "multi", "sort": "none"}}
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": panel.width, "h": panel.height},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options,
        "targets": [{"refId": chr(ord("A") + index), "datasource": DATASOURCE, "expr": target.expr,
                     "legendFormat": target.legend, "instant": target.instant, "range": not target.instant}
                    for index, target in enumerate(panel.targets)],
    }


def _layout(all_rows: list[Row]) -> list[dict[str, Any]]:
    """Rows one under the other; panels left to right, wrapping at Grafana's 24 columns."""
    panels: list[dict[str, Any]] = []
    y = 0
    next_id = 1
    for row in all_rows:
        panels.append({"id": next_id, "type": "row", "title": row.title, "collapsed": False,
                       "gridPos": {"x": 0, "y": y, "w": GRID_WIDTH, "h": 1}, "panels": []})
        next_id += 1
        y += 1
        x = 0
        line_height = 0
        for panel in row.panels:
            if x + panel.width > GRID_WIDTH:
                y += line_height
                x, line_height = 0, 0
            panels.append(_panel_json(panel, next_id, x, y))
            next_id += 1
            x += panel.width
            line_height = max(line_height, panel.height)
        y += line_height
    return panels


def _variables() -> list[dict[str, Any]]:
    def query(name: str, label: str, definition: str) -> dict[str, Any]:
        return {"name": name, "label": label, "type": "query", "datasource": DATASOURCE,
                "definition": definition, "query": {"query": definition, "refId": f"{name}-variable"},
                "refresh": 2, "includeAll": True, "multi": True, "allValue": ".*", "sort": 1,
                "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "options": []}

    return [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
         "refresh": 1, "current": {}, "options": [], "hide": 0},
        query("job", "Job", "label_values(caovan_engine_up, job)"),
        query("instance", "Instance", 'label_values(caovan_engine_up{job=~"$job"}, instance)'),
        query("model", "Model", f"label_values(caovan_engine_up{{{DAEMON}}}, model)"),
    ]


def build() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model."""
    return {
        "uid": UID,
        "title": "Caovan: vLLM engine, MTP acceptance, proxy, GPUs",
        "description": "The Caovan daemon's caovan_* series and the engine's own vllm:* series (/metrics/engine)",
        "tags": ["caovan", "vllm"],
        "editable": True,
        "graphTooltip": 1,
        "refresh": "10s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-30m", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "links": [],
        "templating": {"list": _variables()},
        "annotations": {"list": [
            {"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True, "hide": True,
             "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard"},
            *({"datasource": DATASOURCE, "enable": True, "hide": False, "step": "15s", "useValueForTime": False,
               **annotation} for annotation in ANNOTATIONS),
        ]},
        "panels": _layout(rows()),
    }


def render(dashboard: dict[str, Any] | None = None) -> str:
    """The JSON text exactly as committed (stable order, two-space indent, final newline)."""
    return json.dumps(dashboard or build(), indent=2, ensure_ascii=False) + "\n"


def queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every PromQL expression of the dashboard with where it comes from: ("panel title", target) for panel targets
    (legendFormat, instant), ("annotation name", annotation) for annotations."""
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target
    for annotation in dashboard["annotations"]["list"]:
        if "expr" in annotation:
            yield annotation["name"], annotation


def metric_names(expr: str) -> set[str]:
    return set(METRIC_NAME.findall(expr))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed JSON is not up to date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not DASHBOARD_PATH.is_file() or DASHBOARD_PATH.read_text() != text:
            print(f"{DASHBOARD_PATH} is out of date: run python {Path(__file__).name} to regenerate it",
                  file=sys.stderr)
            return 1
        return 0
    DASHBOARD_PATH.write_text(text)
    print(f"wrote {DASHBOARD_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
