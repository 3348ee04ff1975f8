#!/usr/bin/env bash
# Installs the Debian packages stepsim needs, if any are missing. Run as root on Debian 12.
#   tools/setup.sh            what building and testing need
#   tools/setup.sh fuzz       also clang 14 and its libFuzzer runtime (tools/fuzz.sh)
#   tools/setup.sh --browser  also Chromium, for the ctest report_chromium that renders the HTML
#                             report (about 120 MB to download, 400 MB installed; `make test` asks for it)
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libsimgrid-dev libboost-dev libyaml-cpp-dev libspdlog-dev nlohmann-json3-dev zlib1g-dev
  libcli11-dev                                   # the command line (header-only)
  libgtest-dev libbenchmark-dev
  clang-format                                   # tools/check_format.sh (ctest format)
  python3
  python3-dev pybind11-dev                       # the Python module (python/, docs/python.md)
  libopenmpi-dev openmpi-bin python3-matplotlib  # `stepsim sweep` under mpirun; tools/plot_sweep.py
)

if [ "${1:-}" = fuzz ]; then
  packages+=(clang-14 libclang-rt-14-dev)
fi
if [ "${1:-}" = --browser ]; then
  packages+=(chromium)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing missing Debian packages: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=sudo
  else
    echo "setup: run as root (or install: ${missing[*]})" >&2
    exit 1
  fi
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
