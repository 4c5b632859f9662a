"""The catalog tools' SQL: one pinned statement per tool over pg_catalog.

- `tables`: list_schemas, list_tables, describe_table.
- `keys`: foreign keys and the cached foreign-key graph.
- `joinpaths`, `joinsql`: find_join_path and the JOIN it writes.
- `search`: search_tables.
- `names`: schema and table names for completions and prompts.
- `server_info`: what the server resources report about PostgreSQL itself.
"""
