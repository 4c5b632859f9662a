#!/usr/bin/env bash
# Real MCP clients against the real server: the official conformance suite (HTTP) and MCP
# Inspector's CLI (HTTP and stdio), both on the --demo database. Needs Node 22, which comes from
# the npm package node@22 (installed here, beside the two tools, in .ci/.node).
set -euo pipefail
cd "$(dirname "$0")/.."
read -r -a UV <<< "${UV:-uv}"  # "uv", or "python3 -m uv" from .ci/run
NODE_DIR=.ci/.node
CONFORMANCE_VERSION=0.2.0-alpha.12  # the first line with the 2026-07-28 scenarios
INSPECTOR_VERSION=2.12.0
PORT=${CLIENTS_PORT:-18765}
URL="http://127.0.0.1:${PORT}/mcp"

mkdir -p "$NODE_DIR"
npm install --prefix "$NODE_DIR" --no-audit --no-fund --silent \
  node@22 "@modelcontextprotocol/conformance@${CONFORMANCE_VERSION}" \
  "@modelcontextprotocol/inspector@${INSPECTOR_VERSION}"
export PATH="$PWD/$NODE_DIR/node_modules/.bin:$PATH"
echo "node $(node --version)"

SERVER=$("${UV[@]}" run which pg-mcp-server)
"$SERVER" --demo --transport http --port "$PORT" --log-format text > .ci/.server.log 2>&1 &
SERVER_PID=$!
trap 'kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null || true' EXIT
for _ in $(seq 1 60); do
  curl -sf "http://127.0.0.1:${PORT}/health" > /dev/null && break
  sleep 0.5
done
curl -sf "http://127.0.0.1:${PORT}/health"; echo

# The scenarios that need no fixture tools of the suite's own (see docs/conformance.md):
# handshake-era ones, then the 2026-07-28 stateless ones. The baseline names the few checks
# inside them that need such a tool; any other failing check fails the run.
for scenario in server-initialize ping tools-list resources-list prompts-list \
    dns-rebinding-protection server-stateless caching http-header-validation \
    sep-2164-resource-not-found input-required-result-unsupported-methods; do
  out=$(conformance server --url "$URL" --scenario "$scenario" \
    --expected-failures .ci/conformance-baseline.yml 2>&1) || {
    echo "$out"; echo "conformance: $scenario failed"; exit 1; }
  echo "$scenario: $(echo "$out" | sed 's/\x1b\[[0-9;]*m//g' | grep -E '^Passed' | tail -n 1)"
done

# check NAME PATTERN COMMAND...: the command's output must contain PATTERN. Spawning --demo
# starts a whole PostgreSQL, which can outlast the Inspector's connect timeout on a loaded
# machine, so each check gets three tries, and the output is shown if all fail.
check() {
  local name=$1 pattern=$2; shift 2
  for attempt in 1 2 3; do
    if "$@" > .ci/.check.out 2>&1 && grep -q -- "$pattern" .ci/.check.out; then
      echo "ok: $name"; return 0
    fi
    echo "retrying $name (attempt $attempt failed)"
  done
  cat .ci/.check.out; echo "FAILED: $name"; return 1
}

check "inspector http tools/list" '"execute_query"' \
  mcp-inspector --cli "$URL" --transport http --method tools/list
check "inspector http tools/call" 'order_items' \
  mcp-inspector --cli "$URL" --transport http --method tools/call --tool-name list_tables
check "inspector stdio tools/list" '"find_join_path"' \
  mcp-inspector --cli "$SERVER" --demo --method tools/list
check "inspector stdio tools/call" 'order_status' \
  mcp-inspector --cli "$SERVER" --demo --method tools/call --tool-name describe_table \
  --tool-arg table_name=orders

# Resources and prompts: list, read one, get one, over both transports.
check "inspector http resources/list" '"pg://stat/activity"' \
  mcp-inspector --cli "$URL" --transport http --method resources/list
check "inspector http resources/read" '"server_version_num' \
  mcp-inspector --cli "$URL" --transport http --method resources/read --uri pg://system_info
check "inspector http prompts/list" '"analyze-table"' \
  mcp-inspector --cli "$URL" --transport http --method prompts/list
check "inspector http resources/templates/list" '"pg://schemas/{schema}/tables/{table}"' \
  mcp-inspector --cli "$URL" --transport http --method resources/templates/list
check "inspector http prompts/get" 'Analyze the table' \
  mcp-inspector --cli "$URL" --transport http --method prompts/get \
  --prompt-name analyze-table --prompt-args table=orders
check "inspector stdio resources/list" '"pg://system_info"' \
  mcp-inspector --cli "$SERVER" --demo --method resources/list
check "inspector stdio resources/read" 'order_status' \
  mcp-inspector --cli "$SERVER" --demo --method resources/read \
  --uri pg://schemas/public/tables/orders
check "inspector stdio prompts/list" '"write-query"' \
  mcp-inspector --cli "$SERVER" --demo --method prompts/list
check "inspector stdio prompts/get" 'How many orders' \
  mcp-inspector --cli "$SERVER" --demo --method prompts/get --prompt-name write-query \
  --prompt-args "question=How many orders shipped?"
# What the server tells a person who starts it in a terminal must work as written.
BANNER=$("${UV[@]}" run python -c 'import sys; from pg_mcp_server.__main__ import banner
print(banner(sys.argv[1:]))' "$SERVER" --demo | sed -n 's/^  npx /npx /p')
check "the terminal banner's Inspector command" '"list_tables"' bash -c "$BANNER"
# The README's Inspector lines on the demo, verbatim: npx fetches Node 22 and the Inspector as
# the README says, and `uv run` finds this clone's environment (brought up to date above).
if ! command -v uv > /dev/null; then
  mkdir -p .ci/.bin && printf '#!/bin/sh\nexec %s "$@"\n' "${UV[*]}" > .ci/.bin/uv
  chmod +x .ci/.bin/uv && export PATH="$PWD/.ci/.bin:$PATH"
fi
readme_lines=0
while IFS= read -r -d '' expect && IFS= read -r -d '' line; do
  readme_lines=$((readme_lines + 1))
  check "README Inspector line $readme_lines (${expect})" "\"${expect}\"" bash -c "$line"
done < <(python3 - <<'PY'
import re, sys
# Each `npx ...` command (continuation lines included) in the README's bash blocks that starts
# the demo, with a key its answer must hold.
EXPECT = {"tools/list": "tools", "tools/call": "content", "resources/read": "contents",
          "prompts/get": "messages"}
for block in open("README.md").read().split("```bash\n")[1:]:
    for cmd in re.findall(r"^npx .*?(?<!\\)$", block.split("```")[0], re.M | re.S):
        if "--demo" in cmd:
            method = re.search(r"--method (\S+?)'?(?:\s|$)", cmd).group(1)
            sys.stdout.write(EXPECT[method] + "\0" + cmd + "\0")
PY
)
[ "$readme_lines" -ge 5 ] || { echo "FAILED: found $readme_lines README Inspector lines"; exit 1; }
echo "clients: all passed"
