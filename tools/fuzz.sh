#!/usr/bin/env bash
# Fuzzes the configuration front end (cluster, workload, sweep and runs files, Hugging Face
# config.json, --set overrides; tests/fuzz/config_fuzz.cpp) with libFuzzer under AddressSanitizer
# and UndefinedBehaviorSanitizer, for a bounded time. Fails on a crash, an exception that is not
# a stepsim error, a leak, an input taking more than 10 s or a process above 2 GB.
#
#   tools/fuzz.sh [SECONDS]      default 120; the build goes to build-fuzz (FUZZ_BUILD overrides)
#
# Seeds: every bundled topology, workload, sweep, runs file and config.json, plus the regression
# corpus tests/fuzz/regress (replayed by the ctest fuzz_regressions in every build). A finding is
# left in build-fuzz/fuzz/findings/: fix it, then copy it into tests/fuzz/regress.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-120}"
build="${FUZZ_BUILD:-$root/build-fuzz}"
cd "$root"

if ! command -v clang++-14 >/dev/null 2>&1 ||
  ! dpkg-query -W -f='${Status}' libclang-rt-14-dev 2>/dev/null | grep -q "install ok installed"; then
  ./tools/setup.sh fuzz # clang-14 and its libFuzzer runtime
fi

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++-14 \
  -DSTEPSIM_SANITIZE=address,undefined -DSTEPSIM_FUZZ=ON -DSTEPSIM_BUILD_BENCH=OFF \
  -DSTEPSIM_BUILD_KERNEL_SUITE=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target config_fuzz

work="$build/fuzz"
rm -rf "$work/seeds"
mkdir -p "$work/seeds" "$work/corpus" "$work/findings"
# A seed is the reader's number (config_fuzz.cpp) followed by a bundled file.
seed() {
  local kind="$1" file="$2"
  { printf "\\x0$kind"; cat "$file"; } >"$work/seeds/$kind-$(echo "$file" | tr '/' '_')"
}
for f in topologies/*.yaml topologies/calibration/*.yaml; do [ -e "$f" ] && seed 0 "$f"; done
for f in workloads/*.yaml; do seed 1 "$f"; done
for f in sweeps/*.yaml; do seed 2 "$f"; done
for f in tests/validate/data/*.yaml; do seed 3 "$f"; done
for f in workloads/hf/*.json; do seed 4 "$f"; done
printf '\x05parallel.tp=2\ncluster.nodes=2\nmodel.layers=8\n' >"$work/seeds/5-set"

export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
log="$work/fuzz.log"
rc=0
"$build/tests/fuzz/config_fuzz" "$work/corpus" "$work/seeds" tests/fuzz/regress \
  -dict=tests/fuzz/config.dict -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -max_len=262144 -artifact_prefix="$work/findings/" -print_final_stats=1 >"$log" 2>&1 || rc=$?
tail -n 20 "$log"
runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")"
speed="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")"
echo "fuzz.sh: ${runs:-?} executions in ${seconds} s (${speed:-?}/s), exit ${rc}"
if [ "$rc" -ne 0 ]; then
  echo "fuzz.sh: a finding is in $work/findings/ (full log: $log)" >&2
  exit 1
fi
