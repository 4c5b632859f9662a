# pg-mcp-server over Streamable HTTP. Build: docker build -t pg-mcp-server .
# Run:   docker run -e PG_DSN=... -e MCP_AUTH_TOKENS=... -p 127.0.0.1:8080:8080 pg-mcp-server
FROM python:3.12-slim

WORKDIR /app
RUN pip install --no-cache-dir uv
COPY pyproject.toml uv.lock README.md ./
COPY src ./src
RUN uv sync --locked --no-dev && useradd --system --no-create-home mcp
USER mcp

# In a container the server must listen on all interfaces; it then refuses to start without
# MCP_AUTH_TOKENS unless MCP_ALLOW_UNAUTHENTICATED=true (for use behind an authenticating proxy).
ENV MCP_TRANSPORT=http \
    MCP_HOST=0.0.0.0 \
    MCP_PORT=8080 \
    MCP_LOG_FORMAT=json
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=6s --retries=3 \
    CMD ["/app/.venv/bin/python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8080/health', timeout=5)"]
CMD ["/app/.venv/bin/pg-mcp-server"]
