"""Search by meaning (issue 26): generate_embedding and similarity_search over pgvector.

similarity_search checks the table and columns against the catalog (database/vectors), embeds
`query_text` with the configured provider (embeddings/), builds its statement from quoted
identifiers, `$n` parameters and the caller's filter (database/vectors/search.py), and runs it
the way execute_query runs SQL (`Reader.query`): the guard, the bound parameters, the row
budget and redaction all apply. Fusion (RRF) and MMR re-rank the candidates it returns.
"""

from __future__ import annotations

import json
import math
import time
from typing import Annotated, Any

from mcp_types import CallToolResult
from pydantic import Field

from pg_mcp_server.app import AppContext
from pg_mcp_server.database.catalog import tables as catalog
from pg_mcp_server.database.guard import quote_ident
from pg_mcp_server.database.sql import parse, walk
from pg_mcp_server.database.vectors import (
    Column,
    Search,
    Table,
    mmr,
    parse_vector,
    rrf,
    table_vectors,
    vector_literal,
)
from pg_mcp_server.embeddings import EmbeddingError, embedder
from pg_mcp_server.errors import ColumnNotFoundError, ParameterError, closest, did_you_mean
from pg_mcp_server.models.vectors import EmbeddingOutput, SimilaritySearchOutput
from pg_mcp_server.tools.registry import READ_ONLY, ToolDef, make_tool, ok
from pg_mcp_server.tools.schema_tools import resolve_table

MAX_TEXT_CHARS = 32_000
MAX_LIMIT = 100
# Rows each list offers to fusion or MMR: a few times the answer, at least what an HNSW scan
# returns by default (hnsw.ef_search = 40).
CANDIDATES_PER_ROW = 4
MIN_CANDIDATES = 40
MAX_CANDIDATES = 400
SIGNIFICANT = 7  # digits kept of an embedding's floats (float32 holds about 7)
_TEXT_TYPES = {"text", "varchar", "bpchar", "name", "citext", "tsvector"}
_HIDDEN = {"__vector", "vector_rank", "text_position"}

GENERATE_EMBEDDING = """Turn text into a vector with the server's embedding model (the one
similarity_search uses for query_text). EMBEDDING_ERROR when the provider fails.
Example: generate_embedding(text="rain jacket") -> {"embedding": [0.0123, -0.0871, ...],
"dimensions": 256, "model": "wordllama-l2_supercat-256", "provider": "local"}"""

SIMILARITY_SEARCH = """Rows of a table nearest to `query_text` (embedded by the server) or
`query_vector`, by a pgvector column, ordered by the distance its HNSW/IVFFlat index supports
(cosine if none); each row has `distance` (smaller is nearer). `columns`: default every
non-vector column. `filter`: a WHERE condition with $1, $2 ... from `filter_params`, guarded
like execute_query. Hybrid: `text_column` (text or tsvector) also ranks full-text matches of
query_text (websearch syntax), fused by reciprocal rank: `score` = sum of 1/(60 + position).
`mmr_lambda` in [0, 1] re-ranks for diversity (1 = relevance only): `mmr_score`.
Example: similarity_search(table_name="product_descriptions", column="embedding",
query_text="keeps me dry in the rain", limit=3) -> {"columns": [...], "rows": [[8, "Classic
Umbrella ...", 0.41], ...], "distance": "cosine", "operator": "<=>", "index": "...",
"ranking": "vector"}"""


def _rounded(values: list[float]) -> list[float]:
    return [float(f"{v:.{SIGNIFICANT}g}") if math.isfinite(v) else v for v in values]


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


async def _embed_one(app: AppContext, text: str) -> tuple[list[float], str, str]:
    provider = embedder(app.settings.server)
    vectors = await provider.embed([text])
    return vectors[0], provider.model, provider.provider


def _column(table: Table, name: str, table_name: str, what: str) -> Column:
    found = table.column(name)
    if found is None:
        names = [c.name for c in table.columns]
        similar = closest(name, names)
        raise ColumnNotFoundError(
            f"Column '{name}' does not exist in table '{table_name}'",
            suggestion=did_you_mean(similar, f"The {what} must be one of: {', '.join(names)}."),
            context={"requested_column": name, "similar_columns": similar},
        )
    return found


def _vector_column(table: Table, name: str, table_name: str) -> Column:
    vectors = table.vectors
    listed = (
        ", ".join(f"{c.name} ({c.type})" for c in vectors)
        or "none: the table has no vector, halfvec or sparsevec column"
    )
    if table.column(name) is None and vectors:
        similar = closest(name, [c.name for c in vectors]) or [vectors[0].name]
        raise ColumnNotFoundError(
            f"Column '{name}' does not exist in table '{table_name}'",
            suggestion=did_you_mean(similar, f"Its vector columns: {listed}."),
            context={"requested_column": name, "vector_columns": [c.name for c in vectors]},
        )
    column = _column(table, name, table_name, "column")
    if not column.is_vector:
        raise ParameterError(
            f"Column '{name}' of '{table_name}' is {column.type}, not a pgvector column",
            suggestion=f"Search a vector column. Its vector columns: {listed}.",
            context={"column": name, "type": column.type, "vector_columns": listed},
        )
    return column


def _query_vector(given: list[float], column: Column, source: str) -> list[float]:
    if not all(isinstance(v, int | float) and math.isfinite(v) for v in given):
        raise ParameterError(
            "query_vector must hold finite numbers only",
            suggestion="Pass the vector as a JSON array of numbers.",
        )
    if column.dimensions is not None and len(given) != column.dimensions:
        raise ParameterError(
            f"The {source} has {len(given)} dimensions; column '{column.name}' holds {column.type}",
            suggestion=(
                f"Pass a vector of {column.dimensions} numbers"
                + (
                    ", or configure an embedding model that makes them "
                    "(MCP_EMBEDDING_MODEL, MCP_EMBEDDING_DIMENSIONS)"
                    if source != "query_vector"
                    else ""
                )
                + "."
            ),
            context={"dimensions": len(given), "column_dimensions": column.dimensions},
        )
    return [float(v) for v in given]


def _filter_params(condition: str, given: int) -> None:
    """The filter's $n must be filter_params': ours (the query vector, the words) follow
    them, and a filter that named one would compare with the query by accident."""
    tree = parse(f"SELECT 1 WHERE {condition}")
    used = {v["number"] for k, v in walk(tree) if k == "ParamRef" and "number" in v}
    if used and max(used) > given:
        raise ParameterError(
            f"The filter uses ${max(used)} but filter_params has {given} value(s)",
            suggestion="Pass one value in filter_params for each $n the filter uses.",
            context={"parameters_used": sorted(used), "filter_params": given},
        )


def vector_tools(default_schema: str) -> list[ToolDef]:
    async def generate_embedding(
        app: AppContext,
        text: Annotated[
            str,
            Field(min_length=1, max_length=MAX_TEXT_CHARS, description="The text to embed"),
        ],
    ) -> Annotated[CallToolResult, EmbeddingOutput]:
        vector, model, provider = await _embed_one(app, text)
        output = EmbeddingOutput(
            embedding=_rounded(vector), dimensions=len(vector), model=model, provider=provider
        )
        budget = app.settings.server.answer_budget_bytes
        if _size(output.dump()) > budget:
            raise EmbeddingError(
                f"The embedding ({len(vector)} dimensions) is larger than the "
                f"{budget}-byte answer budget",
                suggestion="Pass the text as similarity_search's query_text instead.",
                context={"dimensions": len(vector), "answer_budget_bytes": budget},
            )
        return ok(output)

    async def similarity_search(
        app: AppContext,
        table_name: Annotated[str, Field(description="Table to search")],
        column: Annotated[str, Field(description="Its vector column")],
        query_text: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=MAX_TEXT_CHARS,
                description="Text to search for",
            ),
        ] = None,
        query_vector: Annotated[
            list[float] | None,
            Field(min_length=1, description="Vector to search for"),
        ] = None,
        schema_name: Annotated[str, Field(description="Schema of the table")] = default_schema,
        limit: Annotated[int, Field(ge=1, le=MAX_LIMIT, description="Rows to return")] = 10,
        columns: Annotated[
            list[str] | None,
            Field(description="Columns to return"),
        ] = None,
        filter: Annotated[
            str | None,
            Field(description='WHERE condition, e.g. "category = $1"'),
        ] = None,
        filter_params: Annotated[
            list[Any] | None,
            Field(description="Values of the filter's $n"),
        ] = None,
        text_column: Annotated[
            str | None,
            Field(description="Column for hybrid full-text ranking"),
        ] = None,
        mmr_lambda: Annotated[
            float | None,
            Field(ge=0, le=1, description="MMR diversity re-ranking"),
        ] = None,
    ) -> Annotated[CallToolResult, SimilaritySearchOutput]:
        if (query_text is None) == (query_vector is None):
            raise ParameterError(
                "Pass exactly one of query_text and query_vector",
                suggestion="query_text is embedded by the server; query_vector is used as is.",
            )
        if text_column is not None and query_text is None:
            raise ParameterError(
                "Hybrid search (text_column) needs query_text: the words to match",
                suggestion="Pass query_text, or leave text_column out.",
            )
        schema, table_name = await resolve_table(app, schema_name, table_name, default_schema)
        table = await app.db.run(lambda conn: table_vectors(conn, schema, table_name), own=True)
        if table is None:

            async def missing(conn: Any) -> Exception:
                return await catalog.missing_table(conn, schema, table_name)

            raise await app.db.run(missing, own=True)
        vector_column = _vector_column(table, column, table_name)
        if columns is None:
            output = [c.name for c in table.columns if not c.is_vector]
        else:
            output = [_column(table, c, table_name, "columns").name for c in columns]
        document = None
        if text_column is not None:
            document = _column(table, text_column, table_name, "text_column")
            if document.type_name not in _TEXT_TYPES:
                raise ParameterError(
                    f"text_column '{text_column}' is {document.type}, not text or tsvector",
                    suggestion="Name a text, varchar or tsvector column for full-text ranking.",
                    context={"column": text_column, "type": document.type},
                )
        if document is not None and table.kind not in ("r", "p", "m"):
            raise ParameterError(
                f"Hybrid search needs a table: '{table_name}' is a view or foreign table, "
                "whose rows have no ctid to fuse the two rankings on",
                suggestion="Search the table the view reads, or leave text_column out.",
            )
        if mmr_lambda is not None and vector_column.type_name == "sparsevec":
            raise ParameterError(
                "MMR re-ranking needs dense vectors; the column is sparsevec",
                suggestion="Leave mmr_lambda out for a sparsevec column.",
            )
        source = "query_vector"
        model = None
        given: list[float] = query_vector or []
        if query_text is not None:
            given, model, provider = await _embed_one(app, query_text)
            source = f"embedding of query_text ({provider} model {model})"
        vector = _query_vector(given, vector_column, source)
        operator, distance, index = vector_column.distance()
        frm = f"{quote_ident(schema)}.{quote_ident(table_name)} AS t"
        condition = None
        if filter is not None and filter.strip():
            condition = app.guard.where_clause(filter, frm)
            _filter_params(condition, len(filter_params or []))
        params = [*(filter_params or []), vector_literal(vector, vector_column.type_name)]
        if document is not None:
            params.append(query_text)
        candidates = min(max(limit * CANDIDATES_PER_ROW, MIN_CANDIDATES), MAX_CANDIDATES)
        reranked = document is not None or mmr_lambda is not None
        search = Search(
            schema=schema,
            table=table_name,
            column=vector_column,
            operator=operator,
            output=output,
            filter=condition,
            filter_params=len(filter_params or []),
            limit=limit,
            candidates=candidates,
            text_column=document,
            with_vectors=mmr_lambda is not None,
        )
        sql = search.sql()
        started = time.perf_counter()
        # Hybrid: the union of the two lists, up to twice the candidates.
        rows_read = (2 if document is not None else 1) * (candidates if reranked else limit)
        result = await app.db.run(
            lambda conn: app.reader.query(conn, sql, params, limit=rows_read),
            explicit=True,
            prelude=lambda: app.guard.prelude(sql),
        )
        names = [c.name for c in result.columns]
        rows = result.rows
        extra: dict[str, list[Any]] = {}
        ranking = "vector"
        if document is not None:
            vp, tp, dist = (names.index(n) for n in ("vector_rank", "text_position", "distance"))
            scored = [(rrf([r[vp], r[tp]]), r) for r in rows]
            scored.sort(key=lambda s: (-s[0], s[1][dist] is None, s[1][dist] or 0.0))
            rows = [r for _, r in scored]
            extra["score"] = [round(s, 8) for s, _ in scored]
            ranking = "hybrid (reciprocal rank fusion, k=60)"
        if mmr_lambda is not None:
            try:
                vectors = [parse_vector(r[names.index("__vector")]) for r in rows]
            except (ValueError, TypeError):
                raise ParameterError(
                    f"MMR needs the candidates' vectors, and column '{column}' is redacted "
                    "(its name matches MCP_SENSITIVE_COLUMN_PATTERN)",
                    suggestion="Leave mmr_lambda out.",
                ) from None
            picked = mmr(vector, vectors, mmr_lambda, limit)
            rows = [rows[i] for i, _ in picked]
            for key, values in list(extra.items()):
                extra[key] = [values[i] for i, _ in picked]
            extra["mmr_score"] = [round(s, 8) for _, s in picked]
            ranking += f", mmr (lambda={mmr_lambda:g})"
        rows = rows[:limit]
        keep = [i for i, n in enumerate(names) if n not in _HIDDEN]
        out_columns = [
            {"name": result.columns[i].name, "data_type": result.columns[i].data_type} for i in keep
        ]
        out_columns += [{"name": k, "data_type": "double precision"} for k in extra]
        out_rows = [[r[i] for i in keep] + [extra[k][n] for k in extra] for n, r in enumerate(rows)]
        notes = list(result.notes)
        if index is None:
            notes.append(f"no HNSW/IVFFlat index on {column}: cosine distance, every row compared")
        elif index.partial:
            notes.append(f"index {index.name} is partial: used only when the filter implies it")
        # The answer budget: rows past it are left out, and the note says so.
        budget = app.settings.server.answer_budget_bytes
        size = _size(out_columns) + 400
        for n, row in enumerate(out_rows):
            size += _size(row) + 1
            if size > budget and n > 0:
                out_rows = out_rows[:n]
                notes.append(f"cut at {n} rows by the {budget}-byte answer budget")
                break
        return ok(
            SimilaritySearchOutput.model_validate(
                {
                    "columns": out_columns,
                    "rows": out_rows,
                    "row_count": len(out_rows),
                    "distance": distance,
                    "operator": operator,
                    "index": index.name if index is not None else None,
                    "ranking": ranking,
                    "model": model,
                    "execution_time_ms": round((time.perf_counter() - started) * 1000, 3),
                    "note": "; ".join(notes),
                }
            )
        )

    return [
        make_tool(
            generate_embedding,
            name="generate_embedding",
            title="Generate embedding",
            description=GENERATE_EMBEDDING,
            # It reads nothing of the database, and may ask a service outside it.
            annotations=READ_ONLY.model_copy(update={"open_world_hint": True}),
        ),
        make_tool(
            similarity_search,
            name="similarity_search",
            title="Similarity search",
            description=SIMILARITY_SEARCH,
        ),
    ]
