"""search_tables: where does a thing live? Names and comments of tables and columns in every
schema, ranked, in one catalog statement.

A query is cut into words (plurals folded: "emails" finds email, "categories" category). Each
word scores a table by its best match there: the table's name equal (10) or containing it (6),
a column's name equal (5) or containing it (4), the table's comment (3), a column's comment
(2); "embedding", "vector", "semantic" and "similar" match a pgvector column as a name
containing them would (4). Tables matching more of the words rank first, then by score.
Matching is substring containment on lower-cased text, which needs no extension and reads
100,000 columns in tens of milliseconds.
"""

from __future__ import annotations

import re
from typing import Any

import asyncpg

from pg_mcp_server.database.catalog.tables import (
    ROW_FACTS,
    VECTOR_TYPES,
    column_lines,
    cut_comment,
)
from pg_mcp_server.database.sql import statement
from pg_mcp_server.errors import ParameterError

MAX_WORDS = 8
# Words (after plurals are folded) that find pgvector columns by their type.
VECTOR_WORDS = ["embedding", "vector", "semantic", "similar", "similarity"]
COLUMNS_SHOWN = 5  # matching columns shown per table, best first
DESCRIPTION_CHARS = 200  # of a matching table's comment, then the cut mark
# Words that say nothing about where data lives ("which table has customer emails?").
# fmt: off
_STOP = frozenset({
    "a", "an", "and", "any", "are", "by", "column", "columns", "data", "do", "does", "find",
    "for", "from", "has", "have", "in", "is", "it", "of", "on", "or", "table", "tables", "that",
    "the", "there", "to", "what", "where", "which", "who", "with",
})
# fmt: on

# The columns of table r that matched most words, best first.
_BEST_COLUMNS = f"""AND a.attnum = ANY (ARRAY(
    SELECT h.attnum FROM hits h WHERE h.oid = r.oid AND h.attnum IS NOT NULL
    GROUP BY h.attnum ORDER BY count(*) DESC, max(h.score) DESC, h.attnum
    LIMIT {COLUMNS_SHOWN}))"""

SEARCH = statement(
    "catalog.search.SEARCH",
    f"""
WITH words AS (
    SELECT u.word, u.ord FROM pg_catalog.unnest($1::text[]) WITH ORDINALITY AS u(word, ord)
),
rel AS MATERIALIZED (
    SELECT c.oid, c.relname, c.relkind, c.relnamespace, n.nspname,
           pg_catalog.lower(c.relname) AS lname,
           pg_catalog.lower(coalesce(d.description, '')) AS ldescription, d.description
    FROM pg_catalog.pg_class c
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_catalog.pg_description d
      ON d.objoid = c.oid AND d.classoid = 'pg_catalog.pg_class'::regclass AND d.objsubid = 0
    WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND NOT c.relispartition
      AND n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'
),
-- Columns are matched before they are joined to their tables, so that only the few that match
-- are; one LIKE ANY ($3: '%word%' each) picks them in the scan, then the words score them.
column_hits AS (
    SELECT a.attrelid AS oid, a.attnum, w.ord, CASE WHEN a.lname = w.word THEN 5 ELSE 4 END AS score
    FROM (SELECT attrelid, attnum, pg_catalog.lower(attname) AS lname
          FROM pg_catalog.pg_attribute
          WHERE attnum > 0 AND NOT attisdropped
            AND pg_catalog.lower(attname) OPERATOR(pg_catalog.~~) ANY ($3::text[])) a
    JOIN words w ON pg_catalog.strpos(a.lname, w.word) > 0
    UNION ALL
    -- "embedding", "vector", "semantic", "similar": the pgvector columns, whatever their name
    -- (read only when the query has such a word).
    SELECT a.attrelid, a.attnum, w.ord, 4
    FROM pg_catalog.pg_attribute a
    JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
    JOIN words w ON w.word = ANY ($5::text[])
    WHERE EXISTS (SELECT 1 FROM words v WHERE v.word = ANY ($5::text[]))
      AND t.typname::text = ANY ($6::text[]) AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT d.objoid, d.objsubid::int2, w.ord, 2
    FROM pg_catalog.pg_description d
    JOIN words w ON pg_catalog.strpos(pg_catalog.lower(d.description), w.word) > 0
    WHERE d.classoid = 'pg_catalog.pg_class'::regclass AND d.objsubid > 0
),
hits AS MATERIALIZED (
    SELECT rel.oid, NULL::int2 AS attnum, w.ord,
           CASE WHEN rel.lname = w.word THEN 10
                WHEN pg_catalog.strpos(rel.lname, w.word) > 0 THEN 6 ELSE 3 END AS score
    FROM rel JOIN words w
      ON pg_catalog.strpos(rel.lname, w.word) > 0
      OR pg_catalog.strpos(rel.ldescription, w.word) > 0
    UNION ALL
    SELECT h.oid, h.attnum, h.ord, h.score FROM column_hits h JOIN rel ON rel.oid = h.oid
),
ranked AS (
    SELECT best.oid, sum(best.score) AS score, count(*) AS words
    FROM (SELECT oid, ord, max(score) AS score FROM hits GROUP BY oid, ord) best
    GROUP BY best.oid
),
-- How many match, and the ranked listing's fingerprint (its names in order: what a cursor into
-- it must still see, see catalog/pages.py).
summary AS (
    SELECT count(*) AS total,
           pg_catalog.md5(pg_catalog.array_agg(
               pg_catalog.format('%I.%I', rel.nspname, rel.relname)
               ORDER BY ranked.words DESC, ranked.score DESC, rel.nspname, rel.relname
           )::pg_catalog.text) AS listing
    FROM ranked JOIN rel ON rel.oid = ranked.oid
),
page AS (
    SELECT ranked.*, rel.nspname, rel.relname
    FROM ranked JOIN rel ON rel.oid = ranked.oid
    ORDER BY ranked.words DESC, ranked.score DESC, rel.nspname, rel.relname
    LIMIT $2 OFFSET $4
)
-- One row of NULLs besides the summary when the page is empty.
SELECT m.*, summary.total, summary.listing
FROM summary LEFT JOIN LATERAL (
    SELECT r.nspname AS schema_name, r.relname AS table_name,
           CASE r.relkind WHEN 'r' THEN 'table' WHEN 'p' THEN 'partitioned table'
               WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view'
               WHEN 'f' THEN 'foreign table' END AS type,
           {cut_comment("r.description", str(DESCRIPTION_CHARS))} AS description,
           facts.empty, pc.relispopulated AS populated,
           ARRAY(SELECT a.attname::text
                 FROM pg_catalog.pg_constraint k
                 CROSS JOIN LATERAL pg_catalog.unnest(k.conkey) WITH ORDINALITY AS u(attnum, o)
                 JOIN pg_catalog.pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.attnum
                 WHERE k.conrelid = r.oid AND k.contype = 'p'
                 ORDER BY u.o) AS primary_key,
           {column_lines("r", _BEST_COLUMNS)} AS columns,
           page.words, page.score
    FROM page JOIN rel r ON r.oid = page.oid
    JOIN pg_catalog.pg_class pc ON pc.oid = page.oid
    CROSS JOIN {ROW_FACTS.format(c="pc")}
) m ON true
ORDER BY m.words DESC, m.score DESC, m.schema_name, m.table_name
""",
)


def search_words(query: str) -> list[str]:
    """The query's words, lower-cased, without stop words, plurals folded, at most MAX_WORDS:
    letters and digits only, so none is special in a LIKE pattern."""
    words = []
    for word in re.findall(r"[^\W_]+", query.lower()):
        if len(word) < 2 or word in _STOP:
            continue
        if len(word) > 4 and word.endswith("ies"):
            word = word[:-3] + "y"
        elif len(word) > 4 and word.endswith(("ses", "xes", "shes", "ches")):
            word = word[:-2]
        elif len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        if word not in words:
            words.append(word)
    if not words:
        raise ParameterError(
            f"The query {query!r} has no word to search for",
            suggestion="Give a few words of a table or column name or comment, e.g. 'email'.",
        )
    return words[:MAX_WORDS]


async def search_tables(
    conn: asyncpg.Connection, query: str, limit: int, offset: int = 0
) -> tuple[list[dict[str, Any]], int, str]:
    """The `limit` matches after the best `offset`, how many tables match in all, and the
    ranked listing's fingerprint."""
    words = search_words(query)
    rows = await conn.fetch(
        SEARCH, words, limit, [f"%{w}%" for w in words], offset, VECTOR_WORDS, list(VECTOR_TYPES)
    )
    shown = (
        "schema_name",
        "table_name",
        "type",
        "description",
        "empty",
        "populated",
        "primary_key",
        "columns",
    )
    matches = [{k: r[k] for k in shown} for r in rows if r["schema_name"] is not None]
    return matches, int(rows[0]["total"]), rows[0]["listing"] or ""
