"""OpenAI-compatible (`POST {url}/embeddings`) and Ollama (`POST {url}/api/embed`) providers.

Request and answer shapes (tests/test_vectors.py serves both):
- openai: `{"model", "input": [texts], "encoding_format": "float", "dimensions"?}` with
  `Authorization: Bearer <key>` -> `{"data": [{"index", "embedding": [floats]}], "model"}`;
  `data` may come in any order, `index` says whose it is.
- ollama: `{"model", "input": [texts]}` -> `{"model", "embeddings": [[floats], ...]}`.

Texts go in batches of MCP_EMBEDDING_BATCH_SIZE. A batch answered 429 or 5xx, or whose
connection failed, is sent again up to MCP_EMBEDDING_RETRIES times after 0.5 s, 1 s, 2 s ...
(at most 8 s), or after the Retry-After the answer asks for when it asks for at most 30 s
(longer: fail now and say so). A timeout (MCP_EMBEDDING_TIMEOUT_S) is not retried: the
caller has waited long enough. Errors name the provider and its URL without credentials;
the answer's body is quoted only as far as 200 characters, and the key never.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, quote_plus

import httpx2 as httpx

from pg_mcp_server.embeddings import EmbeddingError, checked, shown_url

if TYPE_CHECKING:
    from pg_mcp_server.config import ServerSettings

logger = logging.getLogger(__name__)

DEFAULTS = {
    "openai": ("https://api.openai.com/v1", "text-embedding-3-small"),
    "ollama": ("http://127.0.0.1:11434", "nomic-embed-text"),
}
BACKOFF_S = 0.5
BACKOFF_MAX_S = 8.0
RETRY_AFTER_MAX_S = 30.0
_BODY_CHARS = 200


def retry_after(value: str | None) -> float | None:
    """Seconds a Retry-After header asks for (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class RemoteEmbedder:
    def __init__(self, provider: str, settings: ServerSettings) -> None:
        url, model = DEFAULTS[provider]
        self.provider = provider
        self.url = (settings.embedding_url or url).rstrip("/")
        self.model = settings.embedding_model or model
        self.dimensions = settings.embedding_dimensions
        self.timeout = settings.embedding_timeout_s
        self.retries = settings.embedding_retries
        self.batch = settings.embedding_batch_size
        self._key = settings.embedding_api_key  # SecretStr: its repr is '**********'
        path = "/embeddings" if provider == "openai" else "/api/embed"
        self.endpoint = self.url + path

    def _error(self, message: str, **context: Any) -> EmbeddingError:
        return EmbeddingError(
            f"The {self.provider} embedding provider at {shown_url(self.endpoint)} {message}",
            context={"provider": self.provider, "url": shown_url(self.endpoint), **context},
        )

    def _quoted(self, body: str, status: int) -> str:
        """The start of an error answer, never any of the key: a gateway may echo the request,
        its headers too, encoded (JSON escapes, percent-encoding). A refused login's answer is
        not quoted at all; any other that holds 8 characters of the key, in any of those
        forms, is not quoted either."""
        if status in (401, 403):
            return "(the login was refused: check MCP_EMBEDDING_API_KEY; its answer is not shown)"
        key = self._key.get_secret_value() if self._key is not None else ""
        if key:
            forms = {key, json.dumps(key)[1:-1], quote(key, safe=""), quote_plus(key)}
            window = min(8, len(key))
            for form in forms:
                if any(form[i : i + window] in body for i in range(len(form) - window + 1)):
                    return "(its answer repeats part of the key, so it is not shown)"
        return body[:_BODY_CHARS]

    def _request(self, texts: Sequence[str]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "input": list(texts)}
        if self.provider == "openai":
            body["encoding_format"] = "float"
            if self.dimensions is not None:
                body["dimensions"] = self.dimensions
        return body

    def _vectors(self, answer: Any) -> list[list[float]]:
        try:
            if self.provider == "openai":
                data = sorted(answer["data"], key=lambda d: int(d["index"]))
                vectors = [d["embedding"] for d in data]
            else:
                vectors = answer["embeddings"]
            return [[float(x) for x in v] for v in vectors]
        except (KeyError, TypeError, ValueError):
            raise self._error("answered JSON without embeddings in the expected shape") from None

    async def _post(self, client: httpx.AsyncClient, texts: Sequence[str]) -> list[list[float]]:
        headers = {}
        if self._key is not None:
            headers["Authorization"] = "Bearer " + self._key.get_secret_value()
        attempt = 0
        while True:
            wait: float | None = None
            try:
                response = await client.post(
                    self.endpoint, json=self._request(texts), headers=headers
                )
            except httpx.TimeoutException:
                raise self._error(
                    f"did not answer within {self.timeout:g} s (MCP_EMBEDDING_TIMEOUT_S)"
                ) from None
            except httpx.TransportError as exc:
                failure = self._error(f"could not be reached ({type(exc).__name__})")
            else:
                if response.status_code < 400:
                    try:
                        answer = response.json()
                    except ValueError:
                        raise self._error("answered something that is not JSON") from None
                    return self._vectors(answer)
                failure = self._error(
                    f"answered HTTP {response.status_code}: "
                    + self._quoted(response.text, response.status_code),
                    status=response.status_code,
                )
                retryable = response.status_code == 429 or response.status_code >= 500
                if not retryable:
                    raise failure
                wait = retry_after(response.headers.get("retry-after"))
                if wait is not None and wait > RETRY_AFTER_MAX_S:
                    failure.message += f" (it asks to retry after {wait:.0f} s)"
                    raise failure
            if attempt >= self.retries:
                raise failure
            if wait is None:
                wait = min(BACKOFF_S * 2**attempt, BACKOFF_MAX_S)
            attempt += 1
            logger.info(
                "embedding provider %s: %s; retry %d in %.1f s",
                self.provider,
                failure.context.get("status", "unreachable") if failure.context else "",
                attempt,
                wait,
            )
            await asyncio.sleep(wait)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            for start in range(0, len(texts), self.batch):
                chunk = texts[start : start + self.batch]
                vectors.extend(
                    checked(
                        self.provider, await self._post(client, chunk), len(chunk), self.dimensions
                    )
                )
        return vectors
