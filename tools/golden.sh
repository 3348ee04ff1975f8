#!/usr/bin/env bash
# The golden tier: every bundled topology x workload pair and a set of small cases covering each
# feature (tests/golden/cases.txt), run with one stepsim binary and compared byte for byte with
# the outputs committed under tests/golden/expected/ (tests/golden/README.md).
#
#   tools/golden.sh check  [BUILD_DIR] [PATTERN]   compare; exit 1 and show the differences
#   tools/golden.sh update [BUILD_DIR] [PATTERN]   rewrite the expected outputs
#   tools/golden.sh list   [BUILD_DIR] [PATTERN]   print the case names
#
# BUILD_DIR holds the stepsim binary (default build). PATTERN is a shell glob over case names
# (default *; e.g. 'pair/*', 'feature/zero*', 'validate/*'). JOBS sets how many cases run at
# once (default: the number of cores). A change that moves an output is committed together with
# `update`'s result, and the commit says why.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mode="${1:-}"
build="${2:-build}"
pattern="${3:-*}"
case "$mode" in check|update|list) ;; *)
  echo "usage: tools/golden.sh check|update|list [BUILD_DIR] [PATTERN]" >&2; exit 2 ;;
esac
[[ "$build" = /* ]] || build="$root/$build"
bin="$build/stepsim"
[[ -x "$bin" ]] || { echo "golden.sh: no stepsim binary at $bin (build it first)" >&2; exit 2; }
expected="$root/tests/golden/expected"
jobs="${JOBS:-$(nproc)}"
cd "$root"

# Every case as "name<TAB>arguments": the pairs of bundled files, then tests/golden/cases.txt.
cases() {
  local t w
  for t in topologies/*.yaml; do
    for w in workloads/*.yaml; do
      printf 'pair/%s/%s\trun --cluster %s --workload %s --no-trace\n' \
        "$(basename "$t" .yaml)" "$(basename "$w" .yaml)" "$t" "$w"
    done
  done
  sed -e 's/[[:space:]]*#.*$//' -e '/^[[:space:]]*$/d' tests/golden/cases.txt |
    awk -F'[[:space:]]*[|][[:space:]]*' '{ printf "%s\t%s\n", $1, $2 }'
}

selected() {
  local name args
  while IFS=$'\t' read -r name args; do
    # shellcheck disable=SC2053
    [[ "$name" == $pattern ]] && printf '%s\t%s\n' "$name" "$args"
  done < <(cases)
  return 0
}

# run_case NAME ARGS DEST: runs one case and leaves its outputs in DEST: exit_code, stdout.txt,
# stderr.txt (failed runs only; a successful run's stderr holds wall times), summary.json and
# whatever else the command writes (whole where small, as a sha256 digest in digests.txt where
# large: tasks.csv, trace.json, per-run folders of validate).
run_case() {
  local name="$1" args="$2" dest="$3" work rc=0
  work="$(mktemp -d)"
  mkdir -p "$dest"
  local -a argv
  read -r -a argv <<<"$args"
  case "${argv[0]}" in
    run) argv+=(--out "$work/out" --csv) ;;
    validate) argv+=(--out "$work/out" -j 2 --topologies topologies) ;;
    jobs) argv+=(--out "$work/out") ;;
  esac
  "$bin" "${argv[@]}" >"$work/stdout" 2>"$work/stderr" || rc=$?
  # `plan` reports its own wall times: masked, as they change from run to run.
  sed -E 's/(enumerate|estimate|simulate) [0-9.]+ s/\1 _ s/g' "$work/stdout" >"$dest/stdout.txt"
  echo "$rc" >"$dest/exit_code"
  [[ $rc -eq 0 ]] || cp "$work/stderr" "$dest/stderr.txt"
  if [[ -d "$work/out" ]]; then
    [[ -f "$work/out/summary.json" ]] && cp "$work/out/summary.json" "$dest/summary.json"
    # Digests of the files with the output folder's own (temporary) path written as $OUT.
    (cd "$work/out" && find . -type f ! -path ./summary.json | LC_ALL=C sort |
       while read -r f; do
         sed "s|$work/out|\$OUT|g" "$f" >"$work/normalised"
         printf '%s %s %s\n' "$(sha256sum <"$work/normalised" | cut -c1-64)" "$(wc -c <"$work/normalised")" "${f#./}"
       done) >"$dest/digests.txt"
    [[ -s "$dest/digests.txt" ]] || rm -f "$dest/digests.txt"
  fi
  rm -rf "$work"
}
export -f run_case
export bin

if [[ "$mode" == list ]]; then
  selected | cut -f1
  exit 0
fi

actual="$(mktemp -d)"
trap 'rm -rf "$actual"' EXIT
selected | awk -F'\t' -v dir="$actual" '{ printf "%s\t%s\t%s/%s\n", $1, $2, dir, $1 }' |
  tr '\n' '\0' | xargs -0 -P "$jobs" -I{} bash -c 'IFS=$'"'"'\t'"'"' read -r n a d <<<"$1"; run_case "$n" "$a" "$d"' _ {}
count=$(selected | wc -l)

if [[ "$mode" == update ]]; then
  selected | cut -f1 | while read -r name; do
    rm -rf "${expected:?}/$name"
    mkdir -p "$(dirname "$expected/$name")"
    cp -r "$actual/$name" "$expected/$name"
  done
  # Drop expected outputs of cases that no longer exist (only when every case was run).
  if [[ "$pattern" == "*" ]]; then
    known="$(mktemp)"
    selected | cut -f1 | LC_ALL=C sort >"$known"
    (cd "$expected" && find . -name exit_code | sed -e 's|^\./||' -e 's|/exit_code$||' | LC_ALL=C sort) |
      comm -23 - "$known" | while read -r gone; do rm -rf "${expected:?}/$gone"; echo "removed $gone"; done
    find "$expected" -type d -empty -delete
    rm -f "$known"
  fi
  echo "golden.sh: wrote $count cases under tests/golden/expected"
  exit 0
fi

failed=0
while read -r name; do
  if [[ ! -d "$expected/$name" ]]; then
    echo "MISSING $name: no expected outputs (a new case or bundled file: run tools/golden.sh update)"
    failed=$((failed + 1))
  elif ! diff -r "$expected/$name" "$actual/$name" >/dev/null; then
    echo "DIFFERS $name"
    diff -ru "$expected/$name" "$actual/$name" | head -n 40 || true
    failed=$((failed + 1))
  fi
done < <(selected | cut -f1)
if [[ $failed -gt 0 ]]; then
  echo "$failed of $count golden cases differ (tools/golden.sh update after an intended change)"
  exit 1
fi
echo "$count golden cases identical"
