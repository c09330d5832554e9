"""The relay's allowlist and the README's list of relayed routes are one set."""

from __future__ import annotations

import re
from pathlib import Path

from caovan_manager.proxy.allowlist import RELAYED

README = Path(__file__).resolve().parents[3] / "README.md"


def readme_routes() -> set[str]:
    section = re.search(r"<!-- relayed-routes:.*?-->(.*?)<!-- /relayed-routes -->", README.read_text(), re.S)
    assert section, "the README's Security section lost its relayed-routes list"
    return set(re.findall(r"`((?:GET|POST|PUT|DELETE) /v1/[^`]+)`", section.group(1)))


def test_the_readme_lists_exactly_the_routes_the_relay_forwards():
    relayed = {f"{route.method} {route.label}" for route in RELAYED}
    listed = readme_routes()
    assert listed == relayed, f"in the README only: {listed - relayed}; in the allowlist only: {relayed - listed}"
