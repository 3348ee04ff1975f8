#!/usr/bin/env bash
# Fails when a C++ source of the project is not formatted as .clang-format says (clang-format 14,
# Debian's `clang-format` package). Usage: tools/check_format.sh [--fix]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
fmt="$(command -v clang-format-14 || command -v clang-format || true)"
[[ -n "$fmt" ]] || { echo "check_format.sh: clang-format not found (tools/setup.sh installs it)" >&2; exit 2; }
mapfile -t files < <(git ls-files -- '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h' 2>/dev/null ||
                     find sim tests bench kernels_profiles -name '*.[ch]pp' -o -name '*.cu')
if [[ "${1:-}" == --fix ]]; then
  "$fmt" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$fmt" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [[ ${#bad[@]} -gt 0 ]]; then
  printf 'not formatted (run tools/check_format.sh --fix): %s\n' "${bad[@]}"
  exit 1
fi
echo "${#files[@]} files formatted"
