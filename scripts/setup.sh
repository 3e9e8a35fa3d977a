#!/usr/bin/env bash
# Installs what zerotrain needs on Debian 12 (apt-get), skipping what is already there.
set -euo pipefail

pkgs=(build-essential cmake ninja-build pkg-config
      libdnnl-dev libopenblas-dev nlohmann-json3-dev libcli11-dev
      libgtest-dev libbenchmark-dev libopenmpi-dev openmpi-bin
      python3 python3-numpy python3-torch python3-pip)
missing=()
for p in "${pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The safetensors reader from PyPI, used by tests that check our files with the real library.
if ! /usr/bin/python3 -c "import safetensors" >/dev/null 2>&1; then
    echo "setup: installing safetensors for /usr/bin/python3 (PyPI)"
    /usr/bin/python3 -m pip install -q --break-system-packages safetensors >/dev/null 2>&1 ||
        echo "setup: warning: could not install safetensors; tests that need it will be skipped"
fi
