"""Output models of generate_embedding and similarity_search (issue 26). As in results.py, no
descriptions: these become outputSchemas, and the tool descriptions say what each field holds."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import WithJsonSchema

from pg_mcp_server.models.compact import Compact

_ARRAY = WithJsonSchema({"type": "array"})


class EmbeddingOutput(Compact):
    embedding: Annotated[list[float], _ARRAY]
    dimensions: int
    model: str
    provider: str


class SearchColumn(Compact):
    name: str
    data_type: str


class SimilaritySearchOutput(Compact):
    columns: Annotated[list[SearchColumn], _ARRAY]
    rows: Annotated[list[list[Any]], _ARRAY]
    row_count: int
    distance: str  # cosine, l2, negative_inner_product, l1
    operator: str
    index: str | None = None
    ranking: str  # vector, hybrid (rrf), and/or mmr
    model: str | None = None  # the embedding model of query_text
    execution_time_ms: float
    note: str = ""
