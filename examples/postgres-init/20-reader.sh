#!/bin/sh
# Run by the postgres image on its first start, after 10-demo.sql: the role the server logs in
# as, which can only read (the server refuses writes anyway; this is the backstop behind it).
set -eu
psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v reader_password="$MCP_READER_PASSWORD" <<'SQL'
CREATE ROLE mcp_reader LOGIN PASSWORD :'reader_password';
GRANT CONNECT ON DATABASE :"DBNAME" TO mcp_reader;
GRANT USAGE ON SCHEMA public TO mcp_reader;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO mcp_reader;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO mcp_reader;
ALTER ROLE mcp_reader SET default_transaction_read_only = on;
SQL
