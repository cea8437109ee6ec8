#!/usr/bin/env bash
# The C++ lines changed since the commit named in .ci/format-base must be as clang-format
# writes them (.clang-format: Google style, 100 columns). Only changed lines: older code is
# reformatted when it is next touched, not in one sweeping commit. A session moves the base
# forward when it lands. Fix a failure with: git clang-format-14 "$(cat .ci/format-base)"
set -euo pipefail
src="${1:?usage: check_format.sh SOURCE_DIR}"
cd "$src"
tool=""
for t in git-clang-format-14 git-clang-format; do
  if command -v "$t" >/dev/null; then tool="$t"; break; fi
done
if [[ -z "$tool" ]]; then echo "SKIP: git-clang-format not installed (Debian clang-format)"; exit 77; fi
if [[ ! -d .git && ! -f .git ]]; then echo "SKIP: not a git checkout"; exit 77; fi
base="$(tr -d '[:space:]' < .ci/format-base)"
if ! git rev-parse --verify -q "${base}^{commit}" >/dev/null; then
  echo "SKIP: format base $base is not in this checkout's history (shallow clone?)"
  exit 77
fi
binary="$(command -v "${tool#git-}")"
out="$("$tool" --binary "$binary" --diff --extensions cc,h "$base" 2>&1 || true)"
if grep -q '^diff --git' <<<"$out"; then
  echo "$out"
  echo "format: lines changed since $base are not clang-format's (see above)"
  exit 1
fi
echo "format: every C++ line changed since $base is clang-format's"
