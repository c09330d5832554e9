#!/bin/sh
# The other Triton releases TensorCore75 supports, for tests/sm75/test_triton_versions.py: each minor release's
# newest patch in its own --target folder under .triton-matrix/ (the test puts one ahead of the venv's own Triton on
# PYTHONPATH). Idempotent: a folder already holding its release is kept.
set -eu
PY=${PYTHON:-.venv/bin/python}
OWN=$($PY -c 'import triton; print(".".join(triton.__version__.split(".")[:2]))')
for minor in $($PY -c 'from caovan_kernels.tensorcore75 import TESTED_TRITON; print(" ".join(f"{a}.{b}" for a, b in TESTED_TRITON))'); do
    [ "$minor" = "$OWN" ] && continue
    dest=".triton-matrix/$minor"
    if [ -f "$dest/.installed" ]; then
        continue
    fi
    rm -rf "$dest"
    $PY -m pip install -q --no-deps --target "$dest" "triton==$minor.*"
    touch "$dest/.installed"
    echo "Triton $minor installed in $dest"
done
