"""SQL as trees (pglast).

- `tree`: walking pglast's JSON parse trees.
- `refs`: every catalog object a statement can reach by name.
- `pinned`: our own SQL rewritten so that every name is pg_catalog's.
"""
