"""`python -m caovan_kernels.doctor`: the doctor with this interpreter (what an engine started with -m would see)."""

from .cli import main

main()
