"""The plugin store: version names cannot leave the store, and only real Caovan builds get in."""

from __future__ import annotations

import zipfile

import pytest

from caovan_manager.errors import PluginStoreError, UnknownVersion
from caovan_manager.plugins.store import PluginStore


@pytest.mark.parametrize("name", ["../x", "..", "a/b", "/etc", "0.1.0/../../x", "", ".hidden", "a\\b", "x" * 65,
                                  "0.1..0", "%2e%2e"])
def test_version_names_cannot_escape(tmp_path, name):
    store = PluginStore(tmp_path / "plugins")
    with pytest.raises(PluginStoreError):
        store.version_dir(name)
    with pytest.raises(PluginStoreError):
        store.site_dir(name)


def test_unknown_version_says_what_to_do(tmp_path):
    store = PluginStore(tmp_path / "plugins")
    with pytest.raises(UnknownVersion, match="caovan plugins add"):
        store.site_dir("9.9.9")
    assert store.site_dir(None) is None
    assert store.versions() == []


def test_source_must_be_a_wheel_or_project(tmp_path):
    store = PluginStore(tmp_path / "plugins")
    text = tmp_path / "notes.txt"
    text.write_text("hi")
    with pytest.raises(PluginStoreError, match="neither a wheel"):
        store.add(text)
    with pytest.raises(PluginStoreError, match="neither a wheel"):
        store.add(tmp_path)


def _wheel(path, name: str, version: str, package: str) -> None:
    dist = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(f"{package}/__init__.py", f"__version__ = '{version}'\n")
        whl.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        whl.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(f"{dist}/RECORD", "")


def test_a_wheel_of_another_distribution_is_refused(tmp_path):
    store = PluginStore(tmp_path / "plugins")
    wheel = tmp_path / "other-1.0-py3-none-any.whl"
    _wheel(wheel, "other", "1.0", "other")
    with pytest.raises(PluginStoreError, match="is not a Caovan plugin"):
        store.add(wheel)
    assert store.versions() == [] and not list((tmp_path / "plugins").iterdir())


def test_a_broken_wheel_gets_pips_reason(tmp_path):
    store = PluginStore(tmp_path / "plugins")
    wheel = tmp_path / "caovan-0.9.0-py3-none-any.whl"
    wheel.write_bytes(b"this is not a zip file")
    with pytest.raises(PluginStoreError, match="installing caovan-0.9.0-py3-none-any.whl failed"):
        store.add(wheel)


def test_a_caovan_wheel_is_installed_once(tmp_path):
    store = PluginStore(tmp_path / "plugins")
    wheel = tmp_path / "caovan-0.9.0-py3-none-any.whl"
    _wheel(wheel, "caovan", "0.9.0", "caovan_kernels")
    meta = store.add(wheel)
    assert meta["version"] == "0.9.0"
    assert (store.site_dir("0.9.0") / "caovan_kernels" / "__init__.py").is_file()
    assert [v["version"] for v in store.versions()] == ["0.9.0"]
    with pytest.raises(PluginStoreError, match="already in the store"):
        store.add(wheel)
