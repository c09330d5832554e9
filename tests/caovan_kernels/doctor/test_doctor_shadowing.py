"""Which copy of the plugin is imported: a `caovan_kernels` folder in the working directory shadows the installed
one for `python -m` (and for every vLLM process started that way); the doctor must say so."""

from __future__ import annotations

import shutil
from pathlib import Path

from doctor_cases import VENV_BIN, by_name, run_doctor_process

import caovan_kernels

INSTALLED = Path(caovan_kernels.__file__).parent


def _copy_plugin(tmp_path: Path, version: str | None) -> Path:
    copy = tmp_path / "caovan_kernels"
    shutil.copytree(INSTALLED, copy, ignore=shutil.ignore_patterns("__pycache__"))
    if version is not None:
        init = copy / "__init__.py"
        init.write_text(init.read_text().replace(f'__version__ = "{caovan_kernels.__version__}"',
                                                 f'__version__ = "{version}"'))
    return copy


def test_older_copy_in_the_working_directory_fails(tmp_path):
    copy = _copy_plugin(tmp_path, "0.0.1")
    code, report, _ = run_doctor_process("--only", "plugin-copy", cwd=tmp_path)
    check = by_name(report)["plugin copy"]
    assert code == 1 and check["status"] == "FAIL"
    assert f"caovan_kernels 0.0.1 from {copy}" in check["detail"]
    assert f"the installed caovan is {caovan_kernels.__version__}" in check["detail"]
    assert str(copy) in check["fix"]


def test_same_version_copy_elsewhere_also_fails(tmp_path):
    copy = _copy_plugin(tmp_path, None)
    code, report, _ = run_doctor_process("--only", "plugin-copy", cwd=tmp_path)
    check = by_name(report)["plugin copy"]
    assert code == 1 and check["status"] == "FAIL"
    assert f"installed at {INSTALLED}" in check["detail"] and f"the copy in {tmp_path} shadows it" in check["detail"]
    assert str(copy) in check["fix"]


def test_console_script_imports_the_installed_copy_but_warns_about_the_folder(tmp_path):
    _copy_plugin(tmp_path, "0.0.1")
    code, report, _ = run_doctor_process("--only", "plugin-copy", cwd=tmp_path,
                                         command=[str(VENV_BIN / "caovan-sm75-doctor")])
    checks = by_name(report)
    assert code == 0
    assert checks["plugin copy"]["status"] == "PASS" and str(INSTALLED) in checks["plugin copy"]["detail"]
    assert checks["working directory"]["status"] == "WARN"
    assert "python -m" in checks["working directory"]["detail"]


def test_clean_run_passes():
    code, report, _ = run_doctor_process("--only", "plugin-copy", cwd=INSTALLED.parent.parent)
    assert code == 0 and [c["status"] for c in report["checks"]] == ["PASS"]
