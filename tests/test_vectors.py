"""Search by meaning (issue 26): similarity_search and generate_embedding over pgvector.

Against real PostgreSQL with pgvector (the embedded 18 and pgserver 16 wheels ship it; where
the server lacks it, the database tests skip saying so), through an MCP client session. The
rankings are checked against reference computations written here, over the vectors as
PostgreSQL stores them (float4). The HTTP providers are checked against a server on 127.0.0.1
that speaks each API (the request and answer shapes OpenAI and Ollama document).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import asyncpg
import numpy as np
import pytest
import pytest_asyncio
from mcpclient import call, call_error, connect, fetch, module_database
from pgbed import PgServer

from pg_mcp_server.config import ServerSettings
from pg_mcp_server.database.vectors import Search, schema_vectors, table_vectors, vector_literal
from pg_mcp_server.demo import load_demo
from pg_mcp_server.demo.vectors import descriptions, load_vectors, vectors_sql
from pg_mcp_server.embeddings import EmbeddingError
from pg_mcp_server.embeddings.remote import RemoteEmbedder

DIMS = 16
ROWS = 600
RNG = np.random.default_rng(26)
VECTORS = RNG.standard_normal((ROWS, DIMS)).round(5)
L2 = RNG.standard_normal((ROWS, DIMS)).round(5)
QUERY = RNG.standard_normal(DIMS).round(5).tolist()
CATEGORIES = ("alpha", "beta", "gamma")
KEY = "sk-test-7f3a9c1e5b"  # an API key that must never show


def body(i: int) -> str:
    words = [f"doc {i}", "lion" if i % 7 == 0 else "cat"]
    if i % 29 == 0:
        words += ["zebra"] * (1 + i % 3)  # ~20 matches, ranked by how often
    return " ".join(words)


def setup_sql() -> str:
    rows = ",\n".join(
        f"({i}, '{CATEGORIES[i % 3]}', '{body(i)}', "
        f"'{vector_literal(VECTORS[i].tolist(), 'vector')}', "
        f"'{vector_literal(L2[i].tolist(), 'vector')}')"
        for i in range(ROWS)
    )
    return f"""
CREATE EXTENSION vector;
CREATE TABLE docs (id int PRIMARY KEY, category text NOT NULL, body text NOT NULL,
                   emb vector({DIMS}) NOT NULL, l2 vector({DIMS}) NOT NULL);
INSERT INTO docs VALUES {rows};
-- lists = 1: one list holds every row, so the default probes = 1 reads them all (exact)
CREATE INDEX docs_l2_idx ON docs USING ivfflat (l2 vector_l2_ops) WITH (lists = 1);
CREATE TABLE big (id int PRIMARY KEY, emb vector(32) NOT NULL);
INSERT INTO big SELECT i, (SELECT array_agg(sin(i * 12.9898 + j * 78.233))
                             FROM generate_series(1, 32) AS j)::vector
  FROM generate_series(1, 2000) AS i;
CREATE INDEX big_emb_idx ON big USING hnsw (emb vector_cosine_ops);
CREATE SCHEMA seen;
CREATE VIEW seen.docs AS SELECT id, body, emb FROM public.docs;
ANALYZE;
"""


async def require_pgvector(pg: PgServer) -> None:
    rows = await fetch(pg.admin_dsn, "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
    if not rows:
        pytest.skip(f"this PostgreSQL ({pg.source}) has no pgvector extension")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def vec_dsn(pg: PgServer) -> AsyncIterator[str]:
    await require_pgvector(pg)
    async with module_database(pg, "vectors", setup_sql()) as dsn:
        yield dsn


# --- a local server speaking the OpenAI and Ollama embedding APIs ---------------------------


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float


Reply = tuple[int, dict[str, str], Any]


@dataclass
class FakeApi:
    """Answers each request with the next scripted reply, else `default(request body)`."""

    url: str
    default: Callable[[str, dict[str, Any]], Reply]
    script: list[Reply | None] = field(default_factory=list)  # None: never answer
    seen: list[Seen] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)


def answer(provider: str, vectors: list[list[float]]) -> Any:
    if provider == "ollama":
        return {"model": "nomic-embed-text", "embeddings": vectors}
    # OpenAI's shape; the items in reverse, as `index` (not the order) says whose each is
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    return {"object": "list", "data": data[::-1], "model": "text-embedding-3-small"}


def query_vector_for(provider: str, body: dict[str, Any]) -> Reply:
    return 200, {}, answer(provider, [QUERY for _ in body["input"]])


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake: FakeApi

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", 0))
            body = json.loads(self.rfile.read(length))
            fake.seen.append(Seen(self.path, dict(self.headers), body, time.monotonic()))
            reply = fake.script.pop(0) if fake.script else fake.default(self.path, body)
            if reply is None:  # hold the request until the test ends
                fake.release.wait(30)
                return
            status, headers, payload = reply
            data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
            self.send_response(status)
            for k, v in {"content-type": "application/json", **headers}.items():
                self.send_header(k, v)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    port = server.server_address[1]

    def default(path: str, body: dict[str, Any]) -> Reply:
        return query_vector_for("ollama" if path == "/api/embed" else "openai", body)

    fake = FakeApi(f"http://127.0.0.1:{port}", default)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        fake.release.set()
        server.shutdown()
        server.server_close()


def openai(api: FakeApi, **more: Any) -> dict[str, Any]:
    return {
        "embedding_provider": "openai",
        "embedding_url": api.url + "/v1",
        "embedding_api_key": KEY,
        **more,
    }


# --- reference computations ------------------------------------------------------------


def f32(rows: np.ndarray) -> np.ndarray:
    """The vectors as pgvector stores them (float4)."""
    return rows.astype(np.float32).astype(np.float64)


def cosine_distances(rows: np.ndarray, query: list[float]) -> np.ndarray:
    q = f32(np.array(query))
    m = f32(rows)
    return np.asarray(1 - (m @ q) / (np.linalg.norm(m, axis=1) * np.linalg.norm(q)))


def nearest(
    distances: np.ndarray, k: int, allowed: Callable[[int], bool] | None = None
) -> list[int]:
    order = sorted((d, i) for i, d in enumerate(distances) if allowed is None or allowed(i))
    return [i for _, i in order[:k]]


def reference_mmr(
    query: np.ndarray, candidates: np.ndarray, lam: float, k: int
) -> list[tuple[int, float]]:
    def sim(a: np.ndarray, b: np.ndarray) -> float:
        return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))

    chosen: list[tuple[int, float]] = []
    rest = list(range(len(candidates)))
    while rest and len(chosen) < k:
        scores = [
            lam * sim(query, candidates[i])
            - (1 - lam) * max((sim(candidates[i], candidates[j]) for j, _ in chosen), default=0)
            for i in rest
        ]
        best = int(np.argmax(scores))  # the first of equal scores
        chosen.append((rest[best], scores[best]))
        rest.pop(best)
    return chosen


def column(out: dict[str, Any], name: str) -> list[Any]:
    at = [c["name"] for c in out["columns"]].index(name)
    return [r[at] for r in out["rows"]]


# --- similarity_search -----------------------------------------------------------------


async def test_exact_nearest_neighbours_equal_brute_force(vec_dsn: str) -> None:
    async with connect(vec_dsn) as client:
        out = await call(
            client, "similarity_search", table_name="docs", column="emb", query_vector=QUERY
        )
    distances = cosine_distances(VECTORS, QUERY)
    assert column(out, "id") == nearest(distances, 10)
    assert column(out, "distance") == pytest.approx(sorted(distances)[:10], abs=1e-6)
    assert (out["distance"], out["operator"]) == ("cosine", "<=>")
    assert "index" not in out and "no HNSW/IVFFlat index on emb" in out["note"]
    # every non-vector column by default, and the vectors not
    assert [c["name"] for c in out["columns"]] == ["id", "category", "body", "distance"]


async def test_the_index_operator_class_gives_the_distance(vec_dsn: str) -> None:
    async with connect(vec_dsn) as client:
        out = await call(
            client,
            "similarity_search",
            table_name="docs",
            column="l2",
            query_vector=QUERY,
            limit=7,
            columns=["id"],
        )
    distances = np.linalg.norm(f32(L2) - f32(np.array(QUERY)), axis=1)
    assert (out["distance"], out["operator"], out["index"]) == ("l2", "<->", "docs_l2_idx")
    assert column(out, "id") == nearest(distances, 7)
    assert column(out, "distance") == pytest.approx(sorted(distances)[:7], rel=1e-6)


async def test_filter_with_parameters(vec_dsn: str) -> None:
    async with connect(vec_dsn) as client:
        out = await call(
            client,
            "similarity_search",
            table_name="docs",
            column="emb",
            query_vector=QUERY,
            columns=["id", "category"],
            filter="category = $1 AND id > $2",
            filter_params=["beta", 100],
        )
    distances = cosine_distances(VECTORS, QUERY)
    expected = nearest(distances, 10, lambda i: CATEGORIES[i % 3] == "beta" and i > 100)
    assert column(out, "id") == expected
    assert set(column(out, "category")) == {"beta"}


async def test_the_filter_passes_the_guard(vec_dsn: str) -> None:
    async with connect(vec_dsn) as client:
        for condition in (
            "true) UNION SELECT 1 FROM docs WHERE (true",  # parses, as a UNION
            "pg_terminate_backend(pg_backend_pid())",
        ):
            body = await call_error(
                client,
                "similarity_search",
                table_name="docs",
                column="emb",
                query_vector=QUERY,
                filter=condition,
            )
            assert body["error"]["code"] == "WRITE_OPERATION_DENIED", condition


async def test_the_hnsw_index_is_used(vec_dsn: str) -> None:
    """The statement similarity_search builds is answered by the index: its plan (enable_seqscan
    left alone) and the index's scan counter, which the call moves."""
    query = [math.cos(j) for j in range(32)]
    conn = await asyncpg.connect(vec_dsn)
    try:
        table = await table_vectors(conn, "public", "big")
    finally:
        await conn.close()
    assert table is not None
    emb = table.column("emb")
    assert emb is not None and emb.dimensions == 32
    operator, distance, index = emb.distance()
    assert (operator, distance, index and index.name) == ("<=>", "cosine", "big_emb_idx")
    search = Search("public", "big", emb, operator, ["id"], None, 0, 5, 40)
    scans = "SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = 'big_emb_idx'"
    before = (await fetch(vec_dsn, scans))[0][0]
    async with connect(vec_dsn) as client:
        plan = await call(
            client,
            "explain_query",
            sql=search.sql(),
            params=[vector_literal(query, "vector")],
        )
        assert "Index Scan using big_emb_idx on big" in plan["plan"], plan["plan"]
        out = await call(
            client, "similarity_search", table_name="big", column="emb", query_vector=query
        )
    assert out["index"] == "big_emb_idx" and out["row_count"] == 10
    # Statistics reach pg_stat_user_indexes when the backend flushes them (within ~10 s).
    deadline = time.monotonic() + 30
    while (await fetch(vec_dsn, scans))[0][0] == before:
        assert time.monotonic() < deadline, "the index was never scanned"
        await asyncio.sleep(0.2)


async def test_hybrid_ranking_equals_reciprocal_rank_fusion(vec_dsn: str, api: FakeApi) -> None:
    async with connect(vec_dsn, **openai(api)) as client:
        out = await call(
            client,
            "similarity_search",
            table_name="docs",
            column="emb",
            query_text="zebra",
            text_column="body",
            columns=["id"],
        )
    # The reference: the 40 nearest by cosine distance, the full-text matches by ts_rank_cd
    # (fewer than 40; equal ranks in storage order, which is id order here), fused.
    distances = cosine_distances(VECTORS, QUERY)
    by_vector = {i: n for n, i in enumerate(nearest(distances, 40), start=1)}
    ranked = await fetch(
        vec_dsn,
        "SELECT id, ts_rank_cd(to_tsvector(body), websearch_to_tsquery('zebra')) AS r "
        "FROM docs WHERE to_tsvector(body) @@ websearch_to_tsquery('zebra') ORDER BY r DESC, id",
    )
    assert 10 < len(ranked) < 40
    by_text = {r["id"]: n for n, r in enumerate(ranked, start=1)}
    scores = {
        i: sum(1 / (60 + p) for p in (by_vector.get(i), by_text.get(i)) if p)
        for i in {*by_vector, *by_text}
    }
    expected = sorted(scores, key=lambda i: (-scores[i], distances[i]))[:10]
    assert column(out, "id") == expected
    assert column(out, "score") == pytest.approx([scores[i] for i in expected], abs=1e-7)
    assert out["ranking"] == "hybrid (reciprocal rank fusion, k=60)"
    assert out["model"] == "text-embedding-3-small"
    # both lists count: some rows are there by their words only
    assert {*by_text} & {*expected} and {*by_vector} - {*by_text} & {*expected}


async def test_mmr_equals_a_reference_computation(vec_dsn: str) -> None:
    async with connect(vec_dsn) as client:
        out = await call(
            client,
            "similarity_search",
            table_name="docs",
            column="emb",
            query_vector=QUERY,
            columns=["id"],
            mmr_lambda=0.5,
        )
    candidates = nearest(cosine_distances(VECTORS, QUERY), 40)
    picked = reference_mmr(f32(np.array(QUERY)), f32(VECTORS[candidates]), 0.5, 10)
    assert column(out, "id") == [candidates[i] for i, _ in picked]
    assert column(out, "mmr_score") == pytest.approx([s for _, s in picked], abs=1e-6)
    # diversity costs relevance: not simply the 10 nearest
    assert column(out, "id") != candidates[:10]


async def test_bad_requests_are_structured_errors(vec_dsn: str, api: FakeApi) -> None:
    async with connect(vec_dsn, **openai(api, embedding_retries=0)) as client:

        async def error(**arguments: Any) -> dict[str, Any]:
            body = await call_error(client, "similarity_search", **arguments)
            assert KEY not in json.dumps(body)
            error: dict[str, Any] = body["error"]
            return error

        wrong = await error(table_name="docs", column="emb", query_vector=[1.0, 2.0])
        assert wrong["code"] == "PARAMETER_ERROR"
        assert "2 dimensions" in wrong["message"] and "vector(16)" in wrong["message"]

        unknown = await error(table_name="docs", column="embb", query_vector=QUERY)
        assert unknown["code"] == "COLUMN_NOT_FOUND" and "'emb'" in unknown["suggestion"]

        text = await error(table_name="docs", column="body", query_vector=QUERY)
        assert text["code"] == "PARAMETER_ERROR"
        assert "emb (vector(16)), l2 (vector(16))" in text["suggestion"]

        table = await error(table_name="doc", column="emb", query_vector=QUERY)
        assert table["code"] == "TABLE_NOT_FOUND" and "'docs'" in table["suggestion"]

        both = await error(table_name="docs", column="emb", query_vector=QUERY, query_text="x")
        assert both["code"] == "PARAMETER_ERROR"

        # $1 would be the query vector itself: the filter's $n are filter_params' only
        stray = await error(table_name="docs", column="emb", query_vector=QUERY, filter="id = $1")
        assert stray["code"] == "PARAMETER_ERROR" and "$1" in stray["message"]

        # a view: searched like a table, but its rows have no ctid for hybrid fusion
        view = {"table_name": "docs", "schema_name": "seen", "column": "emb"}
        out = await call(client, "similarity_search", **view, query_vector=QUERY, limit=3)
        assert column(out, "id") == nearest(cosine_distances(VECTORS, QUERY), 3)
        hybrid = await error(**view, query_text="zebra", text_column="body")
        assert hybrid["code"] == "PARAMETER_ERROR" and "needs a table" in hybrid["message"]

        api.script = [(500, {}, {"error": {"message": "model overloaded"}})]
        down = await error(table_name="docs", column="emb", query_text="zebra")
        assert down["code"] == "EMBEDDING_ERROR"
        assert "openai" in down["message"] and "HTTP 500" in down["message"]
        assert down["context"]["url"] == api.url + "/v1/embeddings"

        # an embedding of another dimension than the column's
        api.script = [(200, {}, answer("openai", [[0.5] * 8]))]
        short = await error(table_name="docs", column="emb", query_text="zebra")
        assert short["code"] == "PARAMETER_ERROR" and "8 dimensions" in short["message"]


async def test_pgvector_operators_pass_the_guard(vec_dsn: str) -> None:
    """pgvector's IVFFlat support functions are VOLATILE and take `internal`: only the index
    access method calls them, so the guard does not hold them against the operator."""
    sql = "SELECT id FROM docs ORDER BY l2 <-> $1 LIMIT 3"
    async with connect(vec_dsn) as client:
        out = await call(client, "execute_query", sql=sql, params=[vector_literal(QUERY, "x")])
    distances = np.linalg.norm(f32(L2) - f32(np.array(QUERY)), axis=1)
    assert [r[0] for r in out["rows"]] == nearest(distances, 3)


async def test_discovery_of_vector_columns(vec_dsn: str) -> None:
    """What describe_table, list_tables and search_tables can show of vector columns."""
    conn = await asyncpg.connect(vec_dsn)
    try:
        found = await schema_vectors(conn, "public")
    finally:
        await conn.close()
    shown = {t: [c.describe() for c in cols] for t, cols in found.items()}
    assert shown == {
        "big": [
            {
                "name": "emb",
                "type": "vector(32)",
                "dimensions": 32,
                "indexes": [
                    {
                        "name": "big_emb_idx",
                        "method": "hnsw",
                        "opclass": "vector_cosine_ops",
                        "distance": "cosine",
                        "operator": "<=>",
                    }
                ],
                "search_distance": "cosine",
                "search_operator": "<=>",
            }
        ],
        "docs": [
            {
                "name": "emb",
                "type": "vector(16)",
                "dimensions": 16,
                "indexes": [],
                "search_distance": "cosine",
                "search_operator": "<=>",
                "note": "no vector index: searches scan the table (cosine distance)",
            },
            {
                "name": "l2",
                "type": "vector(16)",
                "dimensions": 16,
                "indexes": [
                    {
                        "name": "docs_l2_idx",
                        "method": "ivfflat",
                        "opclass": "vector_l2_ops",
                        "distance": "l2",
                        "operator": "<->",
                    }
                ],
                "search_distance": "l2",
                "search_operator": "<->",
            },
        ],
    }


# --- the providers ---------------------------------------------------------------------


async def test_openai_request_shape_batches_and_order(api: FakeApi) -> None:
    settings = ServerSettings(**openai(api, embedding_batch_size=2, embedding_dimensions=DIMS))
    texts = ["one", "two", "three"]
    api.default = lambda _, body: (
        200,
        {},
        answer("openai", [[float(len(t))] * DIMS for t in body["input"]]),
    )
    vectors = await RemoteEmbedder("openai", settings).embed(texts)
    assert [v[0] for v in vectors] == [3.0, 3.0, 5.0]  # in the texts' order
    assert [s.path for s in api.seen] == ["/v1/embeddings"] * 2
    assert [s.body["input"] for s in api.seen] == [["one", "two"], ["three"]]
    first = api.seen[0]
    assert first.body == {
        "model": "text-embedding-3-small",
        "input": ["one", "two"],
        "encoding_format": "float",
        "dimensions": DIMS,
    }
    assert first.headers["Authorization"] == f"Bearer {KEY}"


async def test_ollama_request_shape(api: FakeApi, demo_dsn: str) -> None:
    settings = {"embedding_provider": "ollama", "embedding_url": api.url}
    async with connect(demo_dsn, **settings) as client:
        out = await call(client, "generate_embedding", text="hello")
    assert (out["provider"], out["model"], out["dimensions"]) == ("ollama", "nomic-embed-text", 16)
    assert out["embedding"] == pytest.approx(QUERY)
    assert [(s.path, s.body) for s in api.seen] == [
        ("/api/embed", {"model": "nomic-embed-text", "input": ["hello"]})
    ]
    assert "Authorization" not in api.seen[0].headers


async def test_429_with_retry_after_then_success(api: FakeApi) -> None:
    api.script = [(429, {"Retry-After": "1"}, {"error": "slow down"})]
    vectors = await RemoteEmbedder("openai", ServerSettings(**openai(api))).embed(["x"])
    assert vectors == [QUERY]
    assert len(api.seen) == 2
    assert api.seen[1].at - api.seen[0].at >= 0.95  # waited as asked


async def test_5xx_is_retried_then_reported(api: FakeApi) -> None:
    api.script = [(503, {"Retry-After": "0"}, "busy")] * 3
    settings = ServerSettings(**openai(api, embedding_retries=2))
    with pytest.raises(EmbeddingError) as raised:
        await RemoteEmbedder("openai", settings).embed(["x"])
    assert len(api.seen) == 3 and "HTTP 503: busy" in raised.value.message


async def test_a_timeout_is_reported_not_retried(api: FakeApi) -> None:
    api.script = [None]
    settings = ServerSettings(**openai(api, embedding_timeout_s=0.5))
    with pytest.raises(EmbeddingError) as raised:
        await RemoteEmbedder("openai", settings).embed(["x"])
    assert "did not answer within 0.5 s" in raised.value.message
    assert len(api.seen) == 1


async def test_a_provider_that_is_down(demo_dsn: str) -> None:
    with socket_port() as port:  # bound, never listening: the connection is refused
        settings = {"embedding_provider": "ollama", "embedding_url": f"http://127.0.0.1:{port}"}
        async with connect(demo_dsn, **settings, embedding_retries=1) as client:
            body = await call_error(client, "generate_embedding", text="x")
    assert body["error"]["code"] == "EMBEDDING_ERROR"
    assert (
        "ollama" in body["error"]["message"] and "could not be reached" in body["error"]["message"]
    )


async def test_the_key_never_shows(
    api: FakeApi, demo_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A gateway that echoes the request's headers in its error answer.
    api.default = lambda _, body: (401, {}, f"bad key: Bearer {KEY}")
    async with connect(demo_dsn, **openai(api)) as client:
        body = await call_error(client, "generate_embedding", text="x")
    assert body["error"]["code"] == "EMBEDDING_ERROR" and "HTTP 401" in body["error"]["message"]
    assert KEY not in json.dumps(body) and KEY not in caplog.text
    assert KEY not in repr(ServerSettings(**openai(api)))


@pytest.mark.parametrize(
    "echo",
    [
        lambda key: json.dumps({"error": f"Bearer {key}"}).replace("/", "\\/"),  # JSON escapes
        lambda key: "header=Bearer%20" + urllib.parse.quote(key, safe=""),  # percent-encoded
        lambda key: f"upstream said: ...{key[3:15]}...",  # a piece of it
    ],
)
async def test_no_form_of_the_key_shows_in_an_error(api: FakeApi, echo: Any) -> None:
    """A gateway's 500 (retried, then reported) that echoes the key, encoded or in part."""
    key = "sk-pr0j/9x+Qz7=w2Lm4"  # slashes and pluses: JSON and URLs encode them
    api.default = lambda _, body: (500, {}, echo(key))
    settings = ServerSettings(**{**openai(api, embedding_retries=0), "embedding_api_key": key})
    with pytest.raises(EmbeddingError) as raised:
        await RemoteEmbedder("openai", settings).embed(["x"])
    said = json.dumps([raised.value.message, raised.value.context])
    assert "HTTP 500" in said and "not shown" in said
    for i in range(len(key) - 7):
        assert key[i : i + 8] not in said


async def test_a_wrong_dimension_from_the_provider(api: FakeApi, demo_dsn: str) -> None:
    async with connect(demo_dsn, **openai(api, embedding_dimensions=8)) as client:
        body = await call_error(client, "generate_embedding", text="x")
    assert body["error"]["code"] == "EMBEDDING_ERROR"
    assert "[16] dimensions, expected 8" in body["error"]["message"]


class socket_port:
    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        return int(self.sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


# --- the local model -------------------------------------------------------------------

_OFFLINE = """
import asyncio, socket

def refused(*args, **kwargs):
    raise OSError("network use refused by the test")

socket.socket.connect = refused
socket.create_connection = refused
from pg_mcp_server.embeddings.local import LocalEmbedder
print(len(asyncio.run(LocalEmbedder(None).embed(["hello"]))[0]))
"""


def test_the_local_model_loads_without_the_network(tmp_path: Any) -> None:
    pytest.importorskip("wordllama", reason="the vectors extra is not installed")
    env = {**os.environ, "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _OFFLINE], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "256"
    assert not (tmp_path / ".cache").exists()  # nothing fetched into a cache either


async def test_the_local_model_embeds_by_meaning(demo_dsn: str) -> None:
    pytest.importorskip("wordllama", reason="the vectors extra is not installed")
    async with connect(demo_dsn) as client:

        async def embed(text: str) -> np.ndarray:
            out = await call(client, "generate_embedding", text=text)
            assert (out["provider"], out["dimensions"]) == ("local", 256)
            return np.array(out["embedding"])

        rain, umbrella, kettle = [
            await embed(t) for t in ("heavy rain", "umbrella for rain", "tea kettle")
        ]
    assert np.linalg.norm(rain) == pytest.approx(1, abs=1e-5)
    assert rain @ umbrella > rain @ kettle


# --- the demo --------------------------------------------------------------------------


def test_the_demo_embeddings_are_the_local_models() -> None:
    pytest.importorskip("wordllama", reason="the vectors extra is not installed")
    from pg_mcp_server.embeddings.local import LocalEmbedder

    stored = {
        int(m[1]): (m[2].replace("''", "'"), json.loads(m[3]))
        for m in re.finditer(r"\((\d+), '((?:[^']|'')*)', '(\[[^\]]*\])'\)", vectors_sql())
    }
    texts = descriptions()
    assert {p: t for p, (t, _) in stored.items()} == texts
    made = asyncio.run(LocalEmbedder(256).embed(list(texts.values())))
    for (p, (_, vector)), fresh in zip(sorted(stored.items()), made, strict=True):
        assert vector == pytest.approx(fresh, abs=6e-5), p


async def test_the_demo_finds_umbrellas_for_rain(pg: PgServer) -> None:
    pytest.importorskip("wordllama", reason="the vectors extra is not installed")
    await require_pgvector(pg)
    db = await pg.create_database("demovec")
    try:
        await load_demo(db.dsn)
        assert await load_vectors(db.dsn)
        async with connect(db.dsn) as client:
            out = await call(
                client,
                "similarity_search",
                table_name="product_descriptions",
                column="embedding",
                query_text="something to keep me dry when it rains",
                limit=3,
            )
    finally:
        await pg.drop_database(db.name)
    assert all("Umbrella" in d for d in column(out, "description"))
    assert out["index"] == "product_descriptions_embedding_idx"
