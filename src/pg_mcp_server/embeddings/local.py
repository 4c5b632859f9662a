"""The local provider: wordllama's l2_supercat model, whose 256-dimension weights and tokenizer
ship inside its wheel (the `vectors` extra).

`WordLlama.load` looks for the tokenizer under `<package>/tokenizer/` but the wheel has it in
`<package>/tokenizers/`, so by default it would download it from Hugging Face into
~/.cache/wordllama. Passing the package's own directory as `cache_dir` makes it find both
files there, and `disable_download=True` makes a missing file an error instead of a download
(tests/test_vectors.py loads it with sockets refused)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pg_mcp_server.embeddings import EmbeddingError, checked

MODEL = "wordllama-l2_supercat-256"
DIMS = (64, 128, 256)  # the shipped weights' 256, or a leading slice (Matryoshka-trained)


@functools.cache
def _load(dims: int) -> Any:
    """The model, loaded once per process (0.3 to 1 s, 16 MB of read-only weights, shared by
    every server in it); two first calls at once may both load it, harmlessly."""
    try:
        import wordllama
    except ImportError:
        raise EmbeddingError(
            "The local embedding model is not installed",
            suggestion=(
                "Install the vectors extra (pip install 'postgres-mcp-layered[vectors]'), "
                "or set MCP_EMBEDDING_PROVIDER to openai or ollama."
            ),
            context={"provider": "local"},
        ) from None
    return wordllama.WordLlama.load(
        cache_dir=Path(wordllama.__file__).parent,
        disable_download=True,
        trunc_dim=None if dims == 256 else dims,
    )


class LocalEmbedder:
    provider = "local"

    def __init__(self, dimensions: int | None) -> None:
        self.dims = dimensions or 256
        if self.dims not in DIMS:
            raise EmbeddingError(
                f"The local model makes vectors of 64, 128 or 256 dimensions, not {self.dims}",
                suggestion="Set MCP_EMBEDDING_DIMENSIONS to 64, 128 or 256, or leave it unset.",
                context={"provider": "local"},
            )
        self.model = MODEL if self.dims == 256 else f"{MODEL}[:{self.dims}]"

    def _embed(self, texts: list[str]) -> list[list[float]]:
        # Unit length: cosine and inner-product distances then rank alike.
        vectors = _load(self.dims).embed(texts, norm=True)
        return [[float(x) for x in v] for v in vectors]

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        # CPU work (tokenizing, a lookup and mean): off the event loop.
        vectors = await asyncio.to_thread(self._embed, list(texts))
        return checked(self.provider, vectors, len(texts), self.dims)
