"""Reading a caller's rows.

- `reader`: how a query runs (guard, describe, wrap, bind, one round trip, PostgreSQL's JSON).
- `rewrite`: the reading statement built around the caller's parse tree.
- `params`: `$n` parameters bound to the types PostgreSQL inferred.
- `values`: how a column's values become JSON.
- `sampling`: get_sample_rows.
- `redaction`, `lineage`: where sensitive values come from and which outputs carry them.
- `hints`: errors that carry the fix.
"""
