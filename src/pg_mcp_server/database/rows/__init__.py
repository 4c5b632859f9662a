"""Reading a caller's rows.

- `reader`: how rows are read, for every tool (`Reader`: guard, describe, wrap, bind, one
  round trip, PostgreSQL's JSON; custom SQL's rows as the driver decodes them).
- `output`: the budget rows are cut to (`has_more`, the notes) and the output dict.
- `rewrite`: the reading statement built around the caller's parse tree.
- `params`: `$n` parameters bound to the types PostgreSQL inferred.
- `values`: how a column's values become JSON (PostgreSQL's, and the driver's).
- `sampling`: get_sample_rows.
- `redaction`, `lineage`: where sensitive values come from and which outputs carry them.
- `hints`: errors that carry the fix.
"""
