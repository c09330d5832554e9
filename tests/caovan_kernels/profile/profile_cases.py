"""Shared inputs of the profile tests."""

from pathlib import Path

QWEN36_AWQ = Path(__file__).parent / "fixtures" / "qwen3_6_27b_awq"
TWO_2080TI = "2x RTX 2080 Ti 22GB sm75"
