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
#   FP8_FAST_ACCUM   1 to time fp8 GEMMs with cuBLASLt's fast accumulation (default 0: split)
#   STEPSIM          a built `stepsim` binary: adds `stepsim kernels --workload W` for workloads/*.yaml
#   SHAPES_DIR       a folder of shape lists (`stepsim kernels` output) to time too, for a GPU
#                    machine without a stepsim build
#   TORCH_KERNELS    1 (default): when python3 has PyTorch with CUDA, time fused attention, norms
#                    and GELU through it (tools/time_kernels_torch.py), the kernels frameworks run;
#                    0: attention is left to the model, norms and GELU are the suite's own kernels
#   OUT              if set, the profile and the log are copied there too
# Sized to finish well inside 10 minutes: about 1-2 min to build, 10 s of checks, ~1 min of
# PyTorch kernels, <= 6 min timing.
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
[ "${FP8_FAST_ACCUM:-0}" = 1 ] && args+=(--fp8-fast-accum)
if [ -n "${STEPSIM:-}" ] && [ -x "$STEPSIM" ]; then
  for w in "$ROOT"/workloads/*.yaml; do
    [ -e "$w" ] || continue
    list=$BUILD/shapes-$(basename "$w" .yaml).csv
    "$STEPSIM" kernels --workload "$w" >"$list"
    args+=(--shapes "$list")
  done
fi

if [ -n "${SHAPES_DIR:-}" ]; then
  for list in "$SHAPES_DIR"/*.csv; do
    [ -e "$list" ] && args+=(--shapes "$list")
  done
fi

if [ "${TORCH_KERNELS:-1}" = 1 ] && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  echo "== fused attention, norms and GELU through PyTorch"
  "$SUITE" "${args[@]}" --list-shapes "$BUILD/all-shapes.csv" >/dev/null
  python3 "$ROOT/tools/time_kernels_torch.py" "$BUILD/all-shapes.csv" --out "$BUILD/torch-times.csv" | tee -a "$LOG"
  args+=(--times "$BUILD/torch-times.csv")
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
