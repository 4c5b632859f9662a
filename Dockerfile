# pg-mcp-server over Streamable HTTP. Build: docker build -t pg-mcp-server .
# Run:   docker run -e PG_DSN=... -e MCP_AUTH_TOKENS=... -e MCP_ALLOWED_HOSTS=mcp.example.com:* \
#          -p 127.0.0.1:8080:8080 pg-mcp-server
# In a container the server listens on all interfaces, so it refuses to start without
# MCP_AUTH_TOKENS (comma-separated bearer tokens) unless MCP_ALLOW_UNAUTHENTICATED=true (behind
# a proxy that authenticates). MCP_ALLOWED_HOSTS lists the Host header values accepted
# (DNS-rebinding protection; default: localhost and 127.0.0.1 only): add the name and port
# clients reach the server by, or they get 421. docker-compose.yml shows both with a database.
FROM python:3.12-slim

WORKDIR /app
RUN pip install --no-cache-dir uv
COPY pyproject.toml uv.lock README.md LICENSE ./
COPY src ./src
RUN uv sync --locked --no-dev --compile-bytecode && useradd --system --no-create-home mcp
USER mcp

ENV MCP_TRANSPORT=http \
    MCP_HOST=0.0.0.0 \
    MCP_PORT=8080 \
    MCP_LOG_FORMAT=json
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=6s --retries=3 \
    CMD ["/app/.venv/bin/python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8080/health', timeout=5)"]
# SIGTERM (docker stop) stops it in order: requests in progress finish, the pool closes.
CMD ["/app/.venv/bin/pg-mcp-server"]
