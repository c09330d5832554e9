"""Log watcher: vLLM engine log lines -> typed events (throughput, spec decode, startup, plugin markers, fatal)."""

from .events import (
    EngineConfig,
    EngineReady,
    Event,
    Fatal,
    LogEvent,
    PluginBanner,
    PluginDispatch,
    PluginMode,
    PluginMtp,
    PluginRealPrefill,
    SpecDecode,
    Throughput,
)
from .parser import parse_line, parse_lines

__all__ = [
    "EngineConfig",
    "EngineReady",
    "Event",
    "Fatal",
    "LogEvent",
    "PluginBanner",
    "PluginDispatch",
    "PluginMode",
    "PluginMtp",
    "PluginRealPrefill",
    "SpecDecode",
    "Throughput",
    "parse_line",
    "parse_lines",
]
