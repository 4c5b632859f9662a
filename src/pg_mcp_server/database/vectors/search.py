"""similarity_search's statement, and the re-rankings done over its candidates.

The statement is text made of quoted identifiers from the catalog, `$n` parameters and the
caller's filter (which the guard's where_clause check admitted as one boolean expression);
it then runs through `Reader.query` like execute_query's SQL: the guard judges the whole of
it, values are bound, never spliced. Our own parts name pg_catalog's functions and
operators, and pgvector's operator in its type's schema (`OPERATOR("public".<=>)`), by hand:
pin() would pin the caller's filter too (see rows/sampling.py).

- Vector only: `ORDER BY <column> <op> $q LIMIT n` with the operator of the column's index,
  the shape an HNSW or IVFFlat index answers.
- Hybrid (`text_column`): the `candidates` nearest rows, by the same ORDER BY, and the
  `candidates` best full-text matches (`websearch_to_tsquery` over the column, or the
  column itself when it is a tsvector, ranked by `ts_rank_cd`), each numbered 1, 2, ...;
  their union comes back with both positions, and `fuse` scores each row by reciprocal rank
  fusion: the sum over the lists it is in of 1 / (RRF_K + position), RRF_K = 60 (Cormack,
  Clarke and Buettcher, SIGIR 2009). Rows are identified by (tableoid, ctid), which is
  stable within the statement's snapshot.
- MMR (`mmr_lambda`): the candidates come back with their vectors, and `mmr` picks `limit`
  of them one at a time, each maximising lambda * sim(query, row) - (1 - lambda) *
  max(sim(row, picked)), sim the cosine similarity (Carbonell and Goldstein, 1998).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from pg_mcp_server.database.guard import quote_ident
from pg_mcp_server.database.vectors.columns import Column

RRF_K = 60
VECTOR = "__vector"  # the hidden column MMR reads the candidates' vectors from
VECTOR_RANK = "vector_rank"
TEXT_RANK = "text_rank"
TEXT_POSITION = "text_position"


def vector_literal(values: Sequence[float], type_name: str) -> str:
    """The text form pgvector's input function reads: `[1,2]`, or `{1:1,2:2}/2` for sparsevec."""
    if type_name == "sparsevec":
        pairs = ",".join(f"{i}:{v!r}" for i, v in enumerate(values, start=1) if v != 0)
        return "{" + pairs + "}/" + str(len(values))
    return "[" + ",".join(repr(float(v)) for v in values) + "]"


def parse_vector(text: str) -> list[float]:
    """A vector or halfvec's text form as floats."""
    return [float(x) for x in json.loads(text)]


@dataclass(frozen=True)
class Search:
    schema: str
    table: str
    column: Column
    operator: str
    output: Sequence[str]  # the columns shown, each a column of the table
    filter: str | None  # the caller's condition as the guard admitted it, wrapped
    filter_params: int  # how many $n the filter uses: ours come after
    limit: int
    candidates: int  # how many rows each list offers to fusion or MMR
    text_column: Column | None = None
    with_vectors: bool = False  # for MMR

    @property
    def source(self) -> str:
        return f"{quote_ident(self.schema)}.{quote_ident(self.table)}"

    def _distance(self, alias: str = "t") -> str:
        c = self.column
        cast = f"{quote_ident(c.type_schema)}.{quote_ident(c.type_name)}"
        op = f"OPERATOR({quote_ident(c.type_schema)}.{self.operator})"
        return f"{alias}.{quote_ident(c.name)} {op} ${self.filter_params + 1}::{cast}"

    def _where(self, *more: str) -> str:
        parts = [p for p in (self.filter, *more) if p]
        return " WHERE " + " AND ".join(parts) if parts else ""

    def _selected(self) -> str:
        cols = [f"t.{quote_ident(c)}" for c in self.output]
        cols.append(f"{self._distance()} AS distance")
        if self.with_vectors:
            cols.append(f"t.{quote_ident(self.column.name)} AS {VECTOR}")
        return ", ".join(cols)

    def _document(self) -> tuple[str, str]:
        """The text column as a tsvector, and the query: websearch syntax (words, "a phrase",
        -not, or), with the server's default_text_search_config."""
        assert self.text_column is not None
        col = f"t.{quote_ident(self.text_column.name)}"
        if self.text_column.type_name != "tsvector":
            col = f"pg_catalog.to_tsvector({col}::pg_catalog.text)"
        query = f"pg_catalog.websearch_to_tsquery(${self.filter_params + 2}::pg_catalog.text)"
        return col, query

    def sql(self) -> str:
        if self.text_column is None:
            n = self.candidates if self.with_vectors else self.limit
            return (
                f"SELECT {self._selected()} FROM {self.source} AS t{self._where()} "
                f"ORDER BY {self._distance()} LIMIT {int(n)}"
            )
        doc, query = self._document()
        matches = f"{doc} OPERATOR(pg_catalog.@@) {query}"
        n = int(self.candidates)
        return (
            "WITH vec AS (SELECT v.toid, v.tid, pg_catalog.row_number() OVER "
            "(ORDER BY v.distance, v.tid) AS position FROM (SELECT t.tableoid AS toid, "
            f"t.ctid AS tid, {self._distance()} AS distance FROM {self.source} AS t"
            f"{self._where()} ORDER BY {self._distance()} LIMIT {n}) AS v), "
            "txt AS (SELECT x.toid, x.tid, pg_catalog.row_number() OVER "
            "(ORDER BY x.rank DESC, x.tid) AS position FROM (SELECT t.tableoid AS toid, "
            f"t.ctid AS tid, pg_catalog.ts_rank_cd({doc}, {query}) AS rank "
            f"FROM {self.source} AS t{self._where(matches)} "
            f"ORDER BY pg_catalog.ts_rank_cd({doc}, {query}) DESC LIMIT {n}) AS x), "
            "ids AS (SELECT u.toid, u.tid, pg_catalog.min(u.vp) AS vp, pg_catalog.min(u.tp) AS tp "
            "FROM (SELECT toid, tid, position AS vp, NULL::pg_catalog.int8 AS tp FROM vec "
            "UNION ALL SELECT toid, tid, NULL::pg_catalog.int8, position FROM txt) AS u "
            "GROUP BY u.toid, u.tid) "
            f"SELECT {self._selected()}, ids.vp AS {VECTOR_RANK}, "
            f"CASE WHEN {matches} THEN pg_catalog.ts_rank_cd({doc}, {query}) END AS {TEXT_RANK}, "
            f"ids.tp AS {TEXT_POSITION} "
            f"FROM ids JOIN {self.source} AS t ON t.tableoid OPERATOR(pg_catalog.=) ids.toid "
            "AND t.ctid OPERATOR(pg_catalog.=) ids.tid"
        )


def rrf(positions: Sequence[int | None]) -> float:
    """Reciprocal rank fusion of a row's positions (1 = first) in the lists it is in."""
    return sum(1.0 / (RRF_K + p) for p in positions if p is not None)


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def mmr(
    query: Sequence[float], vectors: Sequence[Sequence[float]], lam: float, k: int
) -> list[tuple[int, float]]:
    """Maximal marginal relevance: (index into `vectors`, its MMR score when picked), `k` of
    them in the order picked; ties go to the earlier candidate."""
    relevance = [_cosine(query, v) for v in vectors]
    picked: list[tuple[int, float]] = []
    # the highest similarity of each candidate to any picked one
    closest = [-math.inf] * len(vectors)
    left = list(range(len(vectors)))
    while left and len(picked) < k:
        best, best_score = -1, -math.inf
        for i in left:
            redundancy = closest[i] if picked else 0.0
            score = lam * relevance[i] - (1 - lam) * redundancy
            if score > best_score:
                best, best_score = i, score
        picked.append((best, best_score))
        left.remove(best)
        for i in left:
            closest[i] = max(closest[i], _cosine(vectors[i], vectors[best]))
    return picked
