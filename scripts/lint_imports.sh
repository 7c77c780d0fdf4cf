#!/usr/bin/env bash
# Check the import layers (the contracts in pyproject.toml's [tool.importlinter])
# with import-linter. The folders install as subpackages of the `rlvr`
# namespace through setuptools' editable finder, which import-linter cannot
# follow, so the check runs on a tree of links shaped like the installed one:
# <tmp>/rlvr/<folder> -> ./<folder>. RLVR_LINT_ROOT points at another checkout
# (tests/test_import_layers.py checks that a forbidden import fails it).
set -euo pipefail
cd "$(dirname "$0")/.."
src="${RLVR_LINT_ROOT:-$PWD}"
tree="$(mktemp -d "${TMPDIR:-/tmp}/rlvr-lint.XXXXXX")"
trap 'rm -rf "$tree"' EXIT
mkdir "$tree/rlvr"
for root in $(sed -n 's/^ROOTS = (\(.*\))$/\1/p' setup.py | tr -d '",'); do
  ln -s "$src/$root" "$tree/rlvr/$root"
done
PYTHONPATH="$tree" exec .venv/bin/lint-imports --no-cache --no-logo "$@" pyproject.toml
