"""Every PromQL expression of the Grafana dashboard, evaluated by a real Prometheus that scraped a daemon serving the
real vLLM CPU engine (from web/prometheus/prometheus.yml), returns data after traffic and a restart.

Queries are evaluated the way Grafana does: range queries over the time Prometheus has watched (instant ones at the
end), with the dashboard's variables set to this daemon's job, instance and model. GPU panels return data only
where NVML sees a GPU; on a machine without one they must return nothing at all (the daemon exports no made-up zeros).
"""

from __future__ import annotations

import math
import re
import time

import httpx
import pytest

from tests.integration.daemon.conftest import ADMIN_KEY, INFERENCE_KEY
from tests.integration.daemon.load import StreamingLoad
from web.grafana import generate

from .conftest import PRIMARY

pytestmark = pytest.mark.engine

RATE_INTERVAL = "20s"  # what Grafana's $__rate_interval becomes at a 1 s scrape interval and a short time range
STEP_S = 2
LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def daemon_jobs(prometheus, instance: str) -> dict[str, str]:
    """job name -> scrape path, from Prometheus's targets (both must be up)."""
    jobs = {}
    for target in prometheus.api("targets")["activeTargets"]:
        if target["labels"]["instance"] == instance:
            assert target["health"] == "up", target
            jobs[target["labels"]["job"]] = target["scrapeUrl"].split(instance, 1)[1]
    return jobs


def substitute(expr: str, job: str, instance: str, model: str, range_s: int) -> str:
    return (expr.replace("$__rate_interval", RATE_INTERVAL).replace("$__range", f"{range_s}s")
            .replace("$job", job).replace("$instance", instance).replace("$model", model))


def finite_values(result: list[dict]) -> list[float]:
    values = []
    for series in result:
        pairs = series.get("values") or [series["value"]]
        values += [float(v) for _, v in pairs if math.isfinite(float(v))]
    return values


def swaps_observed(prometheus, at: float) -> float:
    """How many swaps the daemon's histogram counted (every model), as Prometheus scraped it."""
    result = prometheus.api("query", query="sum(caovan_model_swap_duration_seconds_count)", time=at)["result"]
    assert result, "caovan_model_swap_duration_seconds_count is not exported"
    return float(result[0]["value"][1])


def test_every_dashboard_query_returns_data(observed) -> None:
    daemon, prometheus = observed.daemon, observed.prometheus
    instance = f"127.0.0.1:{daemon.port}"

    # Traffic through the daemon: at least two engine log intervals, so throughput and acceptance samples arrive.
    with StreamingLoad(daemon.url, INFERENCE_KEY, concurrency=2, max_tokens=48) as load:
        load.wait_for_ok(2, 120)
        time.sleep(22)
    assert load.result.ok and not load.result.failed, load.result.summary("prometheus traffic", 0)
    if daemon.status()["restarts"] == 0:  # run on its own: the browser test's restart did not happen
        run = daemon.status()["engine"]["run_id"]
        assert httpx.post(f"{daemon.url}/restart", headers={"Authorization": f"Bearer {ADMIN_KEY}"},
                          timeout=30).status_code == 202
        daemon.wait_state("ready", 420, run_after=run)
        with StreamingLoad(daemon.url, INFERENCE_KEY, concurrency=1, max_tokens=16) as load:
            load.wait_for_ok(1, 120)
    time.sleep(3)  # a few more scrapes after the last request

    jobs = daemon_jobs(prometheus, instance)
    assert sorted(jobs.values()) == ["/metrics", "/metrics/engine"], jobs
    job = next(name for name, path in jobs.items() if path == "/metrics")
    # The dashboard's job and instance variables: label_values(caovan_engine_up, job), then instance.
    assert prometheus.api("label/job/values", **{"match[]": "caovan_engine_up"}) == [job]
    assert prometheus.api("label/instance/values", **{"match[]": f'caovan_engine_up{{job="{job}"}}'}) == [instance]
    # Then the model variable (one model here: the swap series exist at zero for it from the start).
    served = prometheus.api("label/model/values",
                            **{"match[]": f'caovan_engine_up{{job="{job}", instance="{instance}"}}'})
    assert served == [PRIMARY], served
    model = PRIMARY

    engine_page = httpx.get(f"{daemon.url}/metrics/engine", timeout=10).text
    gpu_exported = "caovan_gpu_" in httpx.get(f"{daemon.url}/metrics", timeout=10).text
    end = time.time()
    range_s = int(end - prometheus.started_at) + 1
    empty, wrong_legend, checked, gpu_checked, unobserved = [], [], 0, 0, 0
    for where, target in generate.queries(generate.build()):
        expr = substitute(target["expr"], job, instance, model, range_s)
        for name in generate.metric_names(expr):
            if name.startswith("vllm:"):
                assert f"\n{name}" in engine_page, f"{where}: the engine does not export {name}"
        if target.get("instant"):
            result = prometheus.api("query", query=expr, time=end)["result"]
        else:
            result = prometheus.api("query_range", query=expr, start=prometheus.started_at, end=end,
                                    step=STEP_S)["result"]
        if any(name.startswith("caovan_gpu_") for name in generate.metric_names(expr)):
            gpu_checked += 1
            if not gpu_exported:
                assert result == [], f"{where}: {expr} returned data although the daemon exports no GPU series"
                continue
        checked += 1
        if not finite_values(result):
            if "caovan_model_swap_duration_seconds" in expr and result and swaps_observed(prometheus, end) == 0:
                # No swap happened (one model): the quantile of no observations is NaN, and the series are there.
                unobserved += 1
                continue
            empty.append(f"{where}: {expr}")
        for label in LEGEND_LABEL.findall(target.get("legendFormat") or target.get("textFormat") or ""):
            if any(label not in series["metric"] for series in result):
                wrong_legend.append(f"{where}: legend label {label!r} missing in {expr}")
    print(f"SUMMARY prometheus: {checked - unobserved} dashboard queries returned data, {unobserved} swap "
          f"quantiles NaN over their exported zero series (no swap with one model), {gpu_checked} GPU queries "
          f"{'returned data' if gpu_exported else 'correctly empty (no NVML GPU here)'}")
    assert not empty, "dashboard queries without data after traffic:\n" + "\n".join(empty)
    assert not wrong_legend, "\n".join(wrong_legend)


def test_the_alert_rules_load_and_evaluate_on_the_daemons_series(observed) -> None:
    """The example configuration loads web/prometheus/alerts.yml; Prometheus evaluates each rule on the scraped
    daemon without error, and with the engine's canary passed, neither alert is pending or firing."""
    deadline = time.monotonic() + 60
    while True:
        groups = observed.prometheus.api("rules")["groups"]
        rules = {rule["name"]: rule for group in groups for rule in group["rules"]}
        if set(rules) >= {"CaovanAnswersDegraded", "CaovanCanaryStale"} and all(
                rule.get("lastEvaluation", "").startswith("20") and not rule["lastEvaluation"].startswith("0001")
                for rule in rules.values()):
            break
        assert time.monotonic() < deadline, f"the rules were not evaluated within 60 s: {groups}"
        time.sleep(1)
    for name, rule in rules.items():
        assert rule["health"] == "ok", (name, rule.get("lastError"))
        assert rule["state"] == "inactive", (name, rule["alerts"])
