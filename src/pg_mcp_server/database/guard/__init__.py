"""The read-only guard (docs/security.md).

- `gate`: one SELECT and nothing else, parsed with pglast; the entry point (`SqlGuard`).
- `state`: the catalog facts kept current per call, and the relation locks taken first.
- `reach`: from a statement's names to every object whose code PostgreSQL could run.
- `rules`: how each object is judged (volatile, untrusted owner, refused built-ins, ...).
- `facts`: the catalog facts themselves, read from PostgreSQL (nothing here judges).
"""
