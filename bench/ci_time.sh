#!/usr/bin/env bash
# How long `.ci/run` takes from a fresh clone of HEAD, with the suite on PostgreSQL 18, 16 and
# 15 (the budget is 20 minutes on the 2-core machine). The clone sits in a temporary directory
# beside a link to ../shared, and is removed at the end. Uses the uv and npm caches as they are.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ln -s "$(cd "$repo/../shared" && pwd)" "$work/shared"
git clone -q "$repo" "$work/repo"
started=$SECONDS
status=0
CLIENTS_PORT=${CLIENTS_PORT:-18798} bash "$work/repo/.ci/run" > "$work/ci.log" 2>&1 || status=$?
total=$((SECONDS - started))
grep -E '^pytest on|passed|failed|^(FAILED|ERROR) ' "$work/ci.log" || true
echo ".ci/run: exit $status, ${total} s ($((total / 60)) min $((total % 60)) s)"
exit "$status"
