"""pgvector: vector columns and their indexes (`columns`), and the similarity search
statement built for them (`search`), with the re-rankings done over its candidates.

The rest of the server imports these names from here (the face); the modules are
imported on first use, so importing one part does not load the others."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pg_mcp_server.database import face

if TYPE_CHECKING:
    from pg_mcp_server.database.vectors.columns import (
        Column as Column,
        Table as Table,
        VectorIndex as VectorIndex,
        schema_vectors as schema_vectors,
        table_vectors as table_vectors,
    )
    from pg_mcp_server.database.vectors.search import (
        RRF_K as RRF_K,
        Search as Search,
        mmr as mmr,
        parse_vector as parse_vector,
        rrf as rrf,
        vector_literal as vector_literal,
    )

__getattr__ = face(
    __name__,
    {
        "columns": ["Column", "schema_vectors", "Table", "table_vectors", "VectorIndex"],
        "search": ["mmr", "parse_vector", "rrf", "RRF_K", "Search", "vector_literal"],
    },
)
