#!/usr/bin/env bash
# Measures a kernel profile on this machine's GPU (docs/kernels.md, "Running the suite").
#   kernels_profiles/run_suite.sh            # build, check, time, write kernels_profiles/data/<gpu>.csv
# Environment (all optional):
#   GPU_KIND         profile/cluster gpu.kind, e.g. H100-SXM5-80GB (default: from the device name)
#   CUDA_ARCH        CMAKE_CUDA_ARCHITECTURES (default: native)
#   BUILD_DIR        build directory (default: build-suite at the repository root)
#   BUDGET_S         seconds of timing per shape (default 0.15)
#   TOTAL_BUDGET_S   stop timing new shapes after this many seconds (default 360)
#   NAIVE_ATTENTION  1 to also time the naive fallback attention kernels (slow; default 0)
#   STEPSIM          a built `stepsim` binary: adds `stepsim kernels --workload W` for workloads/*.yaml
#   OUT              if set, the profile and the log are copied there too
# Sized to finish well inside 10 minutes: about 1-2 min to build, 10 s of checks, <= 6 min timing.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build-suite}
JOBS=${JOBS:-$(nproc)}
LOG=$BUILD/suite.log
mkdir -p "$BUILD"

echo "== configure and build ($BUILD)"
cmake -S "$ROOT/kernels_profiles/standalone" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-native}" >"$BUILD/configure.log"
cmake --build "$BUILD" -j "$JOBS" --target stepsim_kernel_suite >"$BUILD/build.log"
SUITE=$BUILD/kernels_profiles/stepsim_kernel_suite
[ -x "$SUITE" ] || { echo "no suite binary (is nvcc on PATH? see $BUILD/configure.log)" >&2; exit 1; }

echo "== correctness checks"
"$SUITE" --check-only | tee "$LOG"

args=(--reference --budget-s "${BUDGET_S:-0.15}" --total-budget-s "${TOTAL_BUDGET_S:-360}")
[ -n "${GPU_KIND:-}" ] && args+=(--gpu-kind "$GPU_KIND")
[ "${NAIVE_ATTENTION:-0}" = 1 ] && args+=(--naive-attention)
if [ -n "${STEPSIM:-}" ] && [ -x "$STEPSIM" ]; then
  for w in "$ROOT"/workloads/*.yaml; do
    [ -e "$w" ] || continue
    list=$BUILD/shapes-$(basename "$w" .yaml).csv
    "$STEPSIM" kernels --workload "$w" >"$list"
    args+=(--shapes "$list")
  done
fi

echo "== timing"
"$SUITE" "${args[@]}" --out "$BUILD/profile.csv" | tee -a "$LOG"
kind=$(sed -n 's/^# gpu_kind: //p' "$BUILD/profile.csv")
dest=$ROOT/kernels_profiles/data/$kind.csv
cp "$BUILD/profile.csv" "$dest"
echo "== wrote $dest"
if [ -n "${OUT:-}" ]; then
  cp "$BUILD/profile.csv" "$OUT/$kind.csv"
  cp "$LOG" "$OUT/suite.log"
fi
