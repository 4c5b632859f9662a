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
# uv, pinned (the version uv.lock is checked with): later builds install the same way.
RUN pip install --no-cache-dir uv==0.13.9
# The image's own Python, never one uv would download.
ENV UV_PYTHON_DOWNLOADS=never

# The dependencies first, from the lock alone: this layer is rebuilt only when pyproject.toml
# or uv.lock change, not at every change to the code. The redis extra: replicas of this image
# share paged results through MCP_RESULT_STORE=redis://... (README, "Several replicas").
COPY pyproject.toml uv.lock ./
RUN uv sync --locked --no-dev --extra redis --no-install-project --compile-bytecode
# Then the project itself, on top.
COPY README.md LICENSE ./
COPY src ./src
RUN uv sync --locked --no-dev --extra redis && useradd --system --no-create-home mcp
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
