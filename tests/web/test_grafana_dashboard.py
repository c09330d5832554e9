"""The Grafana dashboard: the committed JSON is exactly the generator's output, and every series its queries read
is one the daemon's real metrics registry exports (the engine's vllm:* series are checked against the real engine
in test_prometheus_queries.py)."""

from __future__ import annotations

import re

import pytest
from prometheus_client import generate_latest

from caovan_manager import metrics as daemon_metrics
from caovan_manager.gpu import GpuSample
from web.grafana import generate

SELECTOR = re.compile(r"(caovan_\w+)(\{[^}]*\})?")


@pytest.fixture
def exported(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """Sample names in the exposition text of a fresh DaemonMetrics; NVML is replaced by one GPU so the GPU
    collector writes its families as it does on a GPU machine."""
    gpu = GpuSample(index=0, name="NVIDIA GeForce RTX 2080 Ti", memory_used_bytes=1 << 30,
                    memory_total_bytes=22 << 30, utilization_pct=50.0, temperature_c=60.0, power_w=180.0)
    monkeypatch.setattr(daemon_metrics, "gpu_samples", lambda: [gpu])
    text = generate_latest(daemon_metrics.DaemonMetrics().registry).decode()
    names = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        # A labelled family without children yet still has its TYPE line; a histogram's samples carry suffixes.
        names.update({f"{name}_bucket", f"{name}_sum", f"{name}_count"} if kind == "histogram" else {name})
    return names


def test_committed_json_is_the_generators_output() -> None:
    assert generate.DASHBOARD_PATH.read_text() == generate.render(), (
        "web/grafana/caovan-dashboard.json is out of date: run python web/grafana/generate.py")
    assert generate.main(["--check"]) == 0


def test_every_query_reads_a_series_the_daemon_exports(exported: set[str]) -> None:
    dashboard = generate.build()
    unknown = {}
    engine_series = set()
    for where, target in generate.queries(dashboard):
        names = generate.metric_names(target["expr"])
        assert names, f"{where}: no caovan_* or vllm:* series in {target['expr']!r}"
        for name in names:
            if name.startswith("vllm:"):
                engine_series.add(name)
            elif name not in exported:
                unknown.setdefault(where, []).append(name)
    assert not unknown, f"panels query series the daemon does not export: {unknown}"
    assert engine_series <= {"vllm:generation_tokens_total", "vllm:prompt_tokens_total"}, engine_series


def test_queries_select_by_the_dashboard_variables() -> None:
    dashboard = generate.build()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert variables["job"]["type"] == variables["instance"]["type"] == variables["model"]["type"] == "query"
    assert variables["model"]["definition"].startswith("label_values(caovan_engine_up{")
    assert variables["model"]["multi"] and variables["model"]["includeAll"]
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
    for where, target in generate.queries(dashboard):
        for name, labels in SELECTOR.findall(target["expr"]):
            assert labels and 'job=~"$job"' in labels and 'instance=~"$instance"' in labels, (where, name)
            # Every engine-scoped series has a model label; the GPUs are the machine's, whichever model runs.
            assert ('model=~"$model"' in labels) != name.startswith("caovan_gpu_"), (where, name)
        for name in re.findall(r"vllm:\w+\{[^}]*\}", target["expr"]):
            assert 'instance=~"$instance"' in name, where


def test_panels_cover_the_operators_questions() -> None:
    dashboard = generate.build()
    series = {name for _, target in generate.queries(dashboard) for name in generate.metric_names(target["expr"])}
    wanted = {
        "tokens/s": {"caovan_generation_tokens_per_second", "caovan_prompt_tokens_per_second"},
        "acceptance": {"caovan_spec_acceptance_rate", "caovan_spec_mean_acceptance_length",
                       "caovan_spec_position_acceptance_rate"},
        "engine state and restarts": {"caovan_engine_state", "caovan_engine_up", "caovan_engine_restarts_total"},
        "model swaps": {"caovan_model_swaps_total", "caovan_model_swap_duration_seconds_bucket"},
        "plugin version and markers": {"caovan_plugin_info", "caovan_plugin_marker_active"},
        "TensorCore75": {"caovan_tensorcore75_active", "caovan_tensorcore75_kernels"},
        "proxy": {"caovan_proxy_request_duration_seconds_bucket", "caovan_proxy_time_to_first_token_seconds_bucket",
                  "caovan_proxy_queue_depth"},
        "GPU": {"caovan_gpu_memory_used_bytes", "caovan_gpu_utilization_percent", "caovan_gpu_temperature_celsius",
                "caovan_gpu_power_watts"},
    }
    missing = {topic: names - series for topic, names in wanted.items() if names - series}
    assert not missing, missing


def test_panels_fit_the_grid_without_overlapping() -> None:
    taken: set[tuple[int, int]] = set()
    for panel in generate.build()["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= generate.GRID_WIDTH, panel["title"]
        cells = {(grid["x"] + dx, grid["y"] + dy) for dx in range(grid["w"]) for dy in range(grid["h"])}
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells
