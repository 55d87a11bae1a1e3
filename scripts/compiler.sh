#!/usr/bin/env bash
# A C++ compiler for the block-weight kernel (specviz/runtime/kernels/blockmm.cpp; Debian package g++, root or sudo).
# Without one SpecViz still runs, on dense fp32 weights: about 6x slower per token on a CPU.
set -euo pipefail
if [ -n "${CXX:-}" ] || command -v g++ >/dev/null || command -v c++ >/dev/null; then exit 0; fi
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq g++ >/dev/null
