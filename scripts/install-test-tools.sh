#!/bin/sh
# Installs what the tests drive: Debian's Chromium with its matching chromedriver (the browser test),
# Prometheus (the scrape test; its promtool checks the alert rules) and systemd (systemd-analyze checks the service
# unit). Idempotent and quick: does nothing when all are present.
set -eu

PACKAGES="chromium chromium-driver prometheus systemd"

missing=""
for package in $PACKAGES; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $package"
    fi
done
if [ -z "$missing" ]; then
    echo "test tools already installed:$(printf ' %s' $PACKAGES)"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "install-test-tools: need root (or sudo) to apt-get install:$missing" >&2
        exit 1
    fi
else
    SUDO=""
fi

# Fresh package lists: a machine's cached lists can be old enough that their download links are gone.
$SUDO apt-get update -q

# No recommends: Prometheus would pull its node exporter, Chromium a desktop's worth of fonts and themes.
# shellcheck disable=SC2086
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
echo "installed:$missing"
