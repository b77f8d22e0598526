#!/usr/bin/env bash
# Debian's chromium, for the dashboard's browser test (tests/e2e/test_dashboard.py): the one thing
# the setup installs outside the project's folders, and only when no chromium is on PATH (or in
# $CHROMIUM). Prints the browser's path. Installing needs root and apt-get; without them it says
# so and exits 1 (the browser test then skips, or fails in CI).
set -euo pipefail

if [ -n "${CHROMIUM:-}" ] && [ -x "$CHROMIUM" ]; then
  echo "$CHROMIUM"
  exit 0
fi
for name in chromium chromium-browser; do
  if command -v "$name" >/dev/null 2>&1; then
    command -v "$name"
    exit 0
  fi
done
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup-chromium: no chromium on PATH: installing Debian's chromium package (apt-get)" >&2
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y chromium >&2; then
    apt-get update >&2
    apt-get install -y chromium >&2
  fi
  command -v chromium
  exit 0
fi
echo "setup-chromium: no chromium on PATH, and installing it needs root and apt-get: run 'apt-get install chromium'" >&2
exit 1
