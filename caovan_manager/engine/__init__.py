"""The real effects on the engine: its process group, launch spec, HTTP probes and NVML."""
