"""Text to vectors, for generate_embedding and similarity_search's `query_text`.

- `local`: the wordllama model whose weights install with its wheel (the `vectors` extra):
  no service, nothing downloaded at run time.
- `remote`: an OpenAI-compatible `/v1/embeddings` service and Ollama's `/api/embed`, over
  httpx, with a timeout, retries with back-off (429, 5xx, refused connections; Retry-After
  honoured) and batching. The API key is a secret: it goes in the Authorization header and
  nowhere else (not in logs, errors, or a child's environment: __main__ removes it).

`embedder(settings)` makes the one configured provider; a provider that is down, answers an
error or a vector of the wrong length raises `EmbeddingError` (EMBEDDING_ERROR), naming the
provider and its URL without credentials.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit, urlunsplit

from pg_mcp_server.errors import PgMcpError

if TYPE_CHECKING:
    from pg_mcp_server.config import ServerSettings


class EmbeddingError(PgMcpError):
    """The embedding provider failed, answered an error or a vector of the wrong length."""

    code = "EMBEDDING_ERROR"
    default_suggestion = (
        "Check the embedding service (MCP_EMBEDDING_URL, MCP_EMBEDDING_MODEL) or pass "
        "query_vector instead of query_text."
    )


class Embedder(Protocol):
    provider: str  # "local", "openai", "ollama"
    model: str

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order, each of the same length; EmbeddingError otherwise."""
        ...


def shown_url(url: str) -> str:
    """`url` as errors may show it: no user:password@, query or fragment (a key may be there)."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def checked(
    provider: str, vectors: list[list[float]], count: int, dimensions: int | None
) -> list[list[float]]:
    """The vectors a provider answered, refused unless one per text, all of one length, and
    that length `dimensions` when it is set."""
    if len(vectors) != count:
        raise EmbeddingError(
            f"The {provider} embedding provider answered {len(vectors)} vectors for {count} texts",
            context={"provider": provider},
        )
    lengths = sorted({len(v) for v in vectors})
    if lengths and (len(lengths) > 1 or (dimensions is not None and lengths[0] != dimensions)):
        raise EmbeddingError(
            f"The {provider} embedding provider answered vectors of {lengths} dimensions, "
            f"expected {dimensions if dimensions is not None else 'one length'}",
            suggestion=(
                "Set MCP_EMBEDDING_DIMENSIONS to the model's dimension, or choose a model that "
                "makes vectors of the length the column holds."
            ),
            context={"provider": provider, "dimensions": lengths, "expected": dimensions},
        )
    return vectors


def embedder(settings: ServerSettings) -> Embedder:
    """The configured provider; EmbeddingError when it is `none` or cannot be made."""
    kind = settings.embedding_provider
    if kind == "local":
        from pg_mcp_server.embeddings.local import LocalEmbedder

        return LocalEmbedder(settings.embedding_dimensions)
    if kind in ("openai", "ollama"):
        from pg_mcp_server.embeddings.remote import RemoteEmbedder

        return RemoteEmbedder(kind, settings)
    raise EmbeddingError(
        "No embedding provider is configured (MCP_EMBEDDING_PROVIDER=none)",
        suggestion="Pass query_vector instead, or ask the operator to set MCP_EMBEDDING_PROVIDER.",
    )


__all__ = ["Embedder", "EmbeddingError", "checked", "embedder", "shown_url"]
