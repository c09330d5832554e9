"""The vLLM plugin: loaded by vLLM in every process through the `vllm.general_plugins` entry point."""
