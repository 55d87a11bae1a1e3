#!/usr/bin/env bash
# Headless Chromium, its driver and a CJK font for the browser tests (Debian packages; root or sudo).
set -euo pipefail
have_font() { fc-list 2>/dev/null | grep -qi "wenquanyi\|noto sans cjk"; }
if command -v chromium >/dev/null && command -v chromedriver >/dev/null && have_font; then exit 0; fi
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver fonts-wqy-microhei >/dev/null
