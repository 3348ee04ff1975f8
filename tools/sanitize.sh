#!/usr/bin/env bash
# Builds with AddressSanitizer and UndefinedBehaviorSanitizer (GCC) and runs tests under them.
#
#   tools/sanitize.sh          the CI subset: the core, parser/config, model, graph and engine
#                              unit tests (about 8 minutes on 2 cores from a cold build)
#   tools/sanitize.sh full     the whole suite (ctest; a long run, not in CI)
#
# The build goes to build-asan (SANITIZE_BUILD overrides). Undefined behaviour aborts the test.
# Leak detection is off for the engine (SimGrid keeps global state to exit and a failed replay's
# state is abandoned on purpose, docs/engine.md); the fuzz target checks the parser for leaks.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mode="${1:-subset}"
build="${SANITIZE_BUILD:-$root/build-asan}"
jobs="${JOBS:-$(nproc)}"
cd "$root"

launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTEPSIM_SANITIZE=address,undefined \
  -DSTEPSIM_BUILD_BENCH=OFF -DSTEPSIM_BUILD_KERNEL_SUITE=OFF "${launcher[@]}" >/dev/null
export ASAN_OPTIONS="detect_leaks=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

if [ "$mode" = full ]; then
  cmake --build "$build" -j"$jobs"
  cd "$build" && ctest -j"$jobs" --timeout 900 -E kernel_suite --output-on-failure
  exit
fi

tests=(core_test config_test model_test graph_test engine_test)
cmake --build "$build" -j"$jobs" --target "${tests[@]}"
status=0
for t in "${tests[@]}"; do
  bin="$(find "$build/tests" -name "$t" -type f -perm -u+x | head -n 1)"
  echo "sanitize.sh: $t"
  "$bin" --gtest_brief=1 || status=1
done
exit "$status"
