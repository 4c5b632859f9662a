"""find_join_path: shortest foreign-key paths between two tables.

The graph (tables as nodes, each foreign key an edge walkable both ways) is built once per
catalog fingerprint and cached. A search computes breadth-first distances from the goal, then
enumerates simple paths from the start, pruning any branch that can no longer reach the goal
within the depth searched (the shortest path's, and one more); it stops counting at `PATH_CAP`
so a dense schema cannot explode. joinsql.py writes the SQL and the fan-out notes.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from pg_mcp_server.database.catalog import tables as catalog
from pg_mcp_server.database.catalog.keys import FAN_OUT, GRAPH, ForeignKey
from pg_mcp_server.errors import PathNotFoundError

PATH_CAP = 1000
MAX_DEPTH = 6  # PRD: max_depth is 1..6
SHOWN_PATHS = 3  # paths of the shortest depth shown in full

# A referencing table and its key columns: whose fan-out statistics a path needs.
FanKey = tuple[int, tuple[str, ...]]


@dataclass(frozen=True)
class Edge:
    """A foreign key walked in one direction."""

    key: ForeignKey
    forward: bool  # from the referencing table to the referenced one

    @property
    def start(self) -> int:
        return self.key.from_oid if self.forward else self.key.to_oid

    @property
    def end(self) -> int:
        return self.key.to_oid if self.forward else self.key.from_oid

    @property
    def start_columns(self) -> tuple[str, ...]:
        return self.key.from_columns if self.forward else self.key.to_columns

    @property
    def end_columns(self) -> tuple[str, ...]:
        return self.key.to_columns if self.forward else self.key.from_columns

    @property
    def multiplies(self) -> bool:
        """Walking to the referencing table, a row may meet many (unless its key is unique)."""
        return not self.forward and not self.key.from_unique

    @property
    def fan_key(self) -> FanKey:
        return (self.key.from_oid, self.key.from_columns)

    @property
    def always_matches(self) -> bool:
        """Walking to the referenced table over NOT NULL key columns of a validated key,
        every row has a match; a nullable key, a NOT VALID one (whose existing rows were
        never checked), or walking to the referencing side, may find none."""
        return self.forward and self.key.not_null and self.key.validated


Path = list[Edge]


def join_types(path: Path) -> list[str]:
    """INNER while every row is sure to match; LEFT from the first step that may not, and
    LEFT after it too, since a later INNER JOIN would drop the rows the LEFT JOIN kept."""
    types: list[str] = []
    outer = False
    for edge in path:
        outer = outer or not edge.always_matches
        types.append("LEFT JOIN" if outer else "INNER JOIN")
    return types


@dataclass
class Found:
    """The paths of a search, shortest first: those of the shortest depth and one more."""

    start: int
    goal: int
    paths: list[Path]
    capped: bool  # more than PATH_CAP: `paths` is not all of them

    @property
    def shown(self) -> list[Path]:
        """The paths of the shortest depth, at most SHOWN_PATHS."""
        return [p for p in self.paths if len(p) == len(self.paths[0])][:SHOWN_PATHS]

    @property
    def fan_keys(self) -> list[FanKey]:
        """The keys whose fan-out statistics the shown paths need."""
        return list(dict.fromkeys(e.fan_key for p in self.shown for e in p if e.multiplies))


class Graph:
    def __init__(self, keys: list[ForeignKey]) -> None:
        self.names: dict[int, tuple[str, str]] = {}
        self.visible: dict[int, bool] = {}  # found by the search path without a schema
        adjacency: dict[int, list[Edge]] = defaultdict(list)
        for key in keys:
            self.names[key.from_oid] = (key.from_schema, key.from_table)
            self.names[key.to_oid] = (key.to_schema, key.to_table)
            self.visible[key.from_oid] = key.from_visible
            self.visible[key.to_oid] = key.to_visible
            if key.from_oid == key.to_oid:
                continue  # a self-reference never shortens a path between two tables
            adjacency[key.from_oid].append(Edge(key, True))
            adjacency[key.to_oid].append(Edge(key, False))
        self.adjacency = {
            oid: sorted(edges, key=lambda e: (self.names[e.end], e.key.constraint_name))
            for oid, edges in adjacency.items()
        }
        self.oids = {name: oid for oid, name in self.names.items()}
        # The distinct neighbours of each table, for the breadth-first searches.
        self.next: dict[int, tuple[int, ...]] = {
            oid: tuple(dict.fromkeys(e.end for e in edges)) for oid, edges in self.adjacency.items()
        }

    def levels(self, origin: int, limit: int | None = None) -> Iterator[list[int]]:
        """The tables 1, 2, ... joins away from `origin`, one list per distance."""
        seen = {origin}
        level = [origin]
        depth = 0
        while level and (limit is None or depth < limit):
            depth += 1
            following: list[int] = []
            for node in level:
                for n in self.next.get(node, ()):
                    if n not in seen:
                        seen.add(n)
                        following.append(n)
            if following:
                yield following
            level = following

    def distances(self, origin: int, limit: int | None = None) -> dict[int, int]:
        dist = {origin: 0}
        for depth, level in enumerate(self.levels(origin, limit), start=1):
            dist.update(dict.fromkeys(level, depth))
        return dist

    def distance(self, start: int, goal: int, limit: int | None = None) -> int | None:
        """Joins on the shortest path, or None when the tables are not connected (within
        `limit` joins)."""
        if start == goal:
            return 0
        for depth, level in enumerate(self.levels(start, limit), start=1):
            if goal in level:
                return depth
        return None

    def paths(self, start: int, goal: int, max_depth: int) -> tuple[list[Path], bool]:
        """Simple paths of at most `max_depth` edges, shortest first; True if capped."""
        if start == goal:
            return [[]], False
        to_goal = self.distances(goal, max_depth)
        if to_goal.get(start, max_depth + 1) > max_depth:
            return [], False
        found: list[Path] = []
        path: Path = []
        visited = {start}

        def walk(node: int) -> bool:
            budget = max_depth - len(path) - 1
            for edge in self.adjacency.get(node, ()):
                nxt = edge.end
                if nxt in visited or to_goal.get(nxt, max_depth + 1) > budget:
                    continue
                path.append(edge)
                if nxt == goal:
                    found.append(list(path))
                else:
                    visited.add(nxt)
                    stop = walk(nxt)
                    visited.discard(nxt)
                    if stop:
                        return True
                path.pop()
                if len(found) >= PATH_CAP:
                    return True
            return False

        capped = walk(start)
        found.sort(key=lambda p: (len(p), [(self.names[e.end], e.key.constraint_name) for e in p]))
        return found, capped

    def find(self, start: int, goal: int, max_depth: int) -> Found:
        """The paths of the shortest depth and of one more, within `max_depth` joins."""
        shortest = self.distance(start, goal, max_depth)
        if shortest is None:
            return Found(start, goal, [], False)
        paths, capped = self.paths(start, goal, min(max_depth, shortest + 1))
        return Found(start, goal, paths, capped)

    def neighbours(self, origin: int, limit: int = 8) -> list[str]:
        """Names of the nearest related tables, for suggestions: nearest first, then by name,
        searching only as far as it takes to find `limit` of them."""
        near: list[tuple[str, str]] = []
        for level in self.levels(origin):
            near += sorted(self.names[o] for o in level)
            if len(near) >= limit:
                break
        return [f"{s}.{t}" for s, t in near[:limit]]


@dataclass(frozen=True)
class GraphState:
    snapshot: str | None = None
    fingerprint: str | None = None
    graph: Graph = field(default_factory=lambda: Graph([]))


@dataclass
class GraphCache:
    """The foreign-key graph, rebuilt only when the catalog fingerprint changes; the
    fingerprint itself is computed only when the database snapshot has moved (see GRAPH).
    Snapshot, fingerprint and graph change together, so concurrent calls cannot pair a new
    fingerprint with an old graph."""

    state: GraphState = field(default_factory=GraphState)

    @property
    def graph(self) -> Graph:
        return self.state.graph

    async def load(
        self,
        conn: asyncpg.Connection,
        start: tuple[str, str],
        goal: tuple[str, str],
        fan_keys: list[FanKey],
    ) -> tuple[Graph, int, int, dict[FanKey, float | None]]:
        """The graph, the oids of both ends and the fan-out ratios of `fan_keys` (one
        statement); TABLE_NOT_FOUND if an end is missing."""
        seen = self.state
        row = await conn.fetchrow(
            GRAPH, seen.snapshot, seen.fingerprint, *start, *goal, _fan_keys_json(fan_keys)
        )
        assert row is not None
        for end, oid in ((start, row["from_oid"]), (goal, row["to_oid"])):
            if oid is None:
                raise await catalog.missing_table(conn, *end)
        state = seen
        if row["keys"] is not None:  # the fingerprint changed: a new graph
            keys = [ForeignKey.from_json(k) for k in row["keys"]]
            state = GraphState(row["snapshot"], row["fingerprint"], Graph(keys))
        elif row["fingerprint"] is not None:  # checked just now: the same graph, newer snapshot
            state = GraphState(row["snapshot"], row["fingerprint"], seen.graph)
        if state is not seen and self.state is seen:  # only over what this call started from
            self.state = state
        ratios = _ratios(row["fan_out"])
        return state.graph, int(row["from_oid"]), int(row["to_oid"]), ratios

    async def search(
        self, conn: asyncpg.Connection, start: tuple[str, str], goal: tuple[str, str], depth: int
    ) -> tuple[Graph, Found, dict[FanKey, float | None]]:
        """The paths between two tables (within `depth` joins) and the fan-out ratios their
        steps need. The search runs on the cached graph first, so that the statement that
        checks the graph brings the statistics too: one statement while the catalog stays
        the same. After a change it runs again, and the statistics are asked for apart."""
        cached = self.graph
        guess = None
        if start in cached.oids and goal in cached.oids:
            guess = cached.find(cached.oids[start], cached.oids[goal], depth)
        graph, start_oid, goal_oid, ratios = await self.load(
            conn, start, goal, guess.fan_keys if guess else []
        )
        if (
            guess is not None
            and graph is cached
            and (guess.start, guess.goal) == (start_oid, goal_oid)
        ):
            return graph, guess, ratios
        found = graph.find(start_oid, goal_oid, depth)
        missing = [k for k in found.fan_keys if k not in ratios]
        if missing:
            ratios |= _ratios(await conn.fetchval(FAN_OUT, _fan_keys_json(missing)))
        return graph, found, ratios


def _fan_keys_json(fan_keys: list[FanKey]) -> str:
    return json.dumps([{"oid": oid, "columns": list(columns)} for oid, columns in fan_keys])


def _ratios(rows: list[dict[str, Any]]) -> dict[FanKey, float | None]:
    return {
        (int(r["oid"]), tuple(r["columns"])): None if r["ratio"] is None else float(r["ratio"])
        for r in rows
    }


def no_path(
    graph: Graph, start: int, goal: int, names: tuple[str, str], max_depth: int
) -> PathNotFoundError:
    """PATH_NOT_FOUND, saying what would help: a larger max_depth, or what each side reaches."""
    origin, target = names
    dist = graph.distance(start, goal)
    context: dict[str, object] = {"max_depth": max_depth}
    if dist is not None:
        context["shortest_depth"] = dist
        if dist <= MAX_DEPTH:
            suggestion = f"A path with {dist} joins exists: call again with max_depth={dist}."
        else:
            suggestion = (
                f"The shortest path needs {dist} joins (more than {MAX_DEPTH}); go through an "
                "intermediate table with two find_join_path calls."
            )
        message = f"No foreign-key path of at most {max_depth} joins from {origin} to {target}"
    else:
        related = graph.neighbours(start), graph.neighbours(goal)
        context["from_related"], context["to_related"] = related
        suggestion = (
            "The tables are not connected by foreign keys. "
            f"{origin} relates to: {', '.join(related[0]) or 'no table'}; "
            f"{target} relates to: {', '.join(related[1]) or 'no table'}. "
            "They may still join on other columns: compare them with describe_table."
        )
        message = f"No foreign-key path connects {origin} and {target}"
    return PathNotFoundError(message, suggestion=suggestion, context=context)
