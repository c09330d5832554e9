"""The page needs no build step and nothing from the network: every asset it names is a file in web/, and no asset
refers to another host."""

from __future__ import annotations

import re
from pathlib import Path

WEB = Path(__file__).resolve().parents[2] / "web"


def test_page_assets_are_local_files() -> None:
    html = (WEB / "index.html").read_text()
    named = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert "app.js" in named and "style.css" in named
    for ref in named:
        assert ref.startswith("data:") or (WEB / ref).is_file(), f"index.html names {ref}, which is not in web/"
    for script in WEB.glob("*.js"):
        for imported in re.findall(r'^import .* from "\./([^"]+)";$', script.read_text(), re.M):
            assert (WEB / imported).is_file(), f"{script.name} imports {imported}, which is not in web/"


def test_no_asset_reaches_another_host() -> None:
    assets = [path for path in WEB.iterdir() if path.suffix in (".html", ".js", ".css")]
    assert len(assets) >= 4
    for path in assets:
        found = re.search(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", path.read_text(), re.I)
        assert not found, f"{path.name} refers to another host: {found.group()}"
