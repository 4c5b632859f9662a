"""The schema map's line for a column (list_tables with include_columns, search_tables), as
docs/tools.md defines it, made from catalog facts the tests read themselves."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pg_mcp_server.database.rows import cut_marker

COMMENT_CHARS = 80

# Per column of the relations of schema $1: its head ("name type"), whether it is in the
# primary key, its comment, and the foreign keys it is in (a partitioned table's include
# those declared on its partitions, not the clones of its own; targets folded onto their
# root), each as {conname, cols, ref_cols, target, validated}.
TRUTH_MAP = """
SELECT c.relname AS table, quote_ident(a.attname) || ' ' || format_type(a.atttypid, a.atttypmod)
           AS head,
       EXISTS (SELECT 1 FROM pg_constraint p WHERE p.conrelid = c.oid AND p.contype = 'p'
               AND a.attnum = ANY (p.conkey)) AS pk,
       col_description(c.oid, a.attnum) AS comment,
       ARRAY(SELECT json_build_object(
                 'conname', k.conname, 'validated', k.convalidated,
                 'target', CASE WHEN dst.relnamespace <> c.relnamespace
                                THEN quote_ident(dn.nspname) || '.' ELSE '' END
                           || quote_ident(dst.relname),
                 'cols', ARRAY(SELECT fa.attname FROM unnest(k.conkey) WITH ORDINALITY u(n, o)
                               JOIN pg_attribute fa ON fa.attrelid = k.conrelid
                                AND fa.attnum = u.n ORDER BY u.o),
                 'ref_cols', ARRAY(SELECT ra.attname FROM unnest(k.confkey) WITH ORDINALITY u(n, o)
                                   JOIN pg_attribute ra ON ra.attrelid = k.confrelid
                                    AND ra.attnum = u.n ORDER BY u.o))::text
             FROM pg_constraint k
             JOIN pg_class dst ON dst.oid = coalesce(pg_partition_root(k.confrelid), k.confrelid)
             JOIN pg_namespace dn ON dn.oid = dst.relnamespace
             WHERE k.contype = 'f' AND a.attnum = ANY (k.conkey) AND (k.conrelid = c.oid
                OR (c.relkind = 'p' AND k.conparentid = 0
                    AND k.conrelid IN (SELECT relid FROM pg_partition_tree(c.oid))))) AS keys
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND NOT c.relispartition
ORDER BY c.relname, a.attnum
"""


def ident(name: str) -> str:
    import re

    if re.fullmatch(r"[a-z_][a-z0-9_$]*", name):
        return name
    return '"' + name.replace('"', '""') + '"'


def map_line(
    head: str, pk: bool, keys: Iterable[dict[str, Any]], comment: str | None, marker: str = ""
) -> str:
    """`head` ("name type"), " PK", each key (one-column keys first, then by name; keys with
    the same columns and target shown once, by their first name), `marker` (a vector
    column's), then the comment, cut after COMMENT_CHARS characters and marked."""
    name = head.split(" ", 1)[0]
    unique: dict[tuple[Any, ...], dict[str, Any]] = {}
    for k in sorted(keys, key=lambda k: k["conname"]):
        unique.setdefault((k["target"], tuple(k["cols"]), tuple(k["ref_cols"])), k)
    line = head + (" PK" if pk else "")
    for k in sorted(unique.values(), key=lambda k: (len(k["cols"]), k["conname"])):
        cols = [ident(c) for c in k["cols"]]
        refs = [ident(c) for c in k["ref_cols"]]
        if len(cols) == 1:
            line += f" -> {k['target']}.{refs[0]}" + ("" if k["validated"] else " [NOT VALID]")
        elif cols[0] == name:
            line += f" -> {k['target']}({', '.join(refs)}) [key {ident(k['conname'])} with "
            line += ", ".join(cols[1:]) + ("" if k["validated"] else ", NOT VALID") + "]"
        else:
            line += f" [in key {ident(k['conname'])}]"
    line += marker
    if comment is not None:
        cut = comment[:COMMENT_CHARS] + cut_marker(len(comment))
        line += " -- " + (comment if len(comment) <= COMMENT_CHARS else cut)
    return line
