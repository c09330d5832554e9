"""`caovan parse-log` against real vLLM log lines from public reports (vLLM 0.2 to 0.33, V0 and V1, bare and wrapped
by docker, compose, Ray, CI, sidecars and other loggers): data/public_vllm_lines.jsonl holds each line with the
address of the report it comes from and, written by hand from reading the line, the event it carries (null: none).

Score: every expected field (the kind, and each listed value) counts once; at least 98% must come out right."""

from __future__ import annotations

import json
import math
from pathlib import Path

from caovan_manager.logwatch import parse_line

CORPUS = Path(__file__).parent / "data" / "public_vllm_lines.jsonl"
REQUIRED = 0.98


def _same(expected: object, got: object) -> bool:
    if isinstance(expected, float) and isinstance(got, (int, float)):
        return math.isclose(expected, got, rel_tol=1e-9, abs_tol=1e-9)
    return expected == got


def score() -> tuple[int, int, list[str]]:
    right = total = 0
    misses = []
    for number, raw in enumerate(CORPUS.read_text().splitlines(), start=1):
        entry = json.loads(raw)
        event = parse_line(entry["line"])
        got = event.to_json() if event is not None else None
        expected = entry["expect"] or {"kind": None}
        for field, value in expected.items():
            total += 1
            have = (got or {"kind": None}).get(field)
            if _same(value, have):
                right += 1
            else:
                misses.append(f"line {number} ({entry['source']}): {field} expected {value!r}, got {have!r}")
    return right, total, misses


def test_the_corpus_is_real_and_large_enough():
    entries = [json.loads(raw) for raw in CORPUS.read_text().splitlines()]
    assert len(entries) >= 150
    assert all(entry["source"].startswith("https://github.com/") and entry["line"] for entry in entries)
    kinds = {(entry["expect"] or {}).get("kind") for entry in entries}
    assert {"throughput", "spec_decode", "engine_config", "fatal", None} <= kinds


def test_fields_read_from_public_vllm_lines():
    right, total, misses = score()
    print(f"SUMMARY public vLLM lines: {right}/{total} fields right ({right / total:.1%})")
    assert right / total >= REQUIRED, "\n".join(misses)
