"""The Turing (sm_75) code path without a Turing GPU: the Turing proxy (proxy.py, any NVIDIA GPU) and compile-only
runs (compile_only.py, no GPU at all), both presenting a 2080 Ti (device_view.py) to code that sizes itself from the
device. See docs/turing-proxy.md."""
