"""Demo database for ``pg-mcp-server --demo``: a small, fully commented online-shop schema.

The SQL lives in ``demo.sql`` next to this file (shipped as package data).
"""

from pg_mcp_server.demo.loader import astart_demo, demo_sql, load_demo, start_demo

__all__ = ["DEMO_DATABASE", "astart_demo", "demo_sql", "load_demo", "start_demo"]

DEMO_DATABASE = "demo"
