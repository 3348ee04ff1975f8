#!/usr/bin/env bash
# Builds with AddressSanitizer and UndefinedBehaviorSanitizer (GCC) and runs tests under them.
#
#   tools/sanitize.sh          the CI subset: the core, parser/config, model, graph and engine
#                              unit tests, each test in a process of its own, JOBS at a time
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
# -O1 -g1 (line tables: reports keep file:line) as the sanitizers' documentation advises: one
# heavy file (graph/step_builder.cpp) compiles in 5.1 s of CPU instead of 12.5 s at -O2 -g.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DSTEPSIM_SANITIZE=address,undefined \
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
# SimGrid runs one simulation per process (docs/engine.md), as ctest runs these tests: each test
# runs in a process of its own, $jobs at a time; a failing test's output is printed whole.
logs="$build/sanitize-logs"
rm -rf "$logs" && mkdir -p "$logs"
status=0
for t in "${tests[@]}"; do
  bin="$(find "$build/tests" -name "$t" -type f -perm -u+x | head -n 1)"
  # --gtest_list_tests: "Suite." lines, then "  Test" lines (a "  # ..." comment after either).
  "$bin" --gtest_list_tests | awk '/^[^ ]/ { suite = $1 } /^  / { print suite $1 }' >"$logs/$t.list"
  rc=0
  xargs -P "$jobs" -I{} sh -c 'log="$2/$(echo "$1" | tr / _).log"
    "$0" --gtest_filter="$1" --gtest_brief=1 >"$log" 2>&1 || { echo "sanitize.sh: $1 failed"; cat "$log"; exit 255; }' \
    "$bin" {} "$logs" <"$logs/$t.list" || rc=$?
  echo "sanitize.sh: $t: $(wc -l <"$logs/$t.list") tests, exit $rc"
  [ "$rc" -eq 0 ] || status=1
done
exit "$status"
