"""What a definitions file holds, once validated (loader.py), and how a bad one is reported."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

ToolType = Literal["sql", "pl-do", "pl-func"]
TSV = "text/tab-separated-values"
JSON = "application/json"


class DefinitionsError(Exception):
    """A definitions file that cannot be served: every problem found, one line each, as
    `file:line: tool 0: type is required` (pgEdge's messages, with the file and line)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Where:
    """A definition's place: `tool 3` in messages, with its name once known, and its line."""

    kind: str
    index: int
    line: int
    name: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.index}" + (f" ({self.name})" if self.name else "")


@dataclass(frozen=True)
class ArgumentSpec:
    name: str
    description: str
    required: bool
    completion: str | None = None  # SQL returning the values to offer, $1 = what was typed
    boolean: bool = False  # pgEdge's `type: boolean`: the value must be true or false


@dataclass(frozen=True)
class MessageSpec:
    role: Literal["user", "assistant"]
    type: Literal["text", "image", "resource"]
    text: str = ""  # text: with {{argument}} placeholders
    data: str = ""  # image: base64
    mime_type: str = ""  # image
    uri: str = ""  # resource: may hold placeholders too


@dataclass(frozen=True)
class PromptSpec:
    where: Where
    name: str
    title: str
    description: str
    arguments: list[ArgumentSpec]
    messages: list[MessageSpec]


@dataclass(frozen=True)
class ResourceSpec:
    """A fixed resource, or a template when `uri` has {parameters} (then `sql` binds them as
    $1, $2 in the order they appear in the URI)."""

    where: Where
    uri: str
    name: str
    title: str
    description: str
    type: Literal["sql", "static"]
    mime_type: str
    sql: str = ""
    data: Any = None
    parameters: list[ArgumentSpec] = field(default_factory=list)

    @property
    def is_template(self) -> bool:
        return bool(self.parameters)


@dataclass(frozen=True)
class ToolSpec:
    where: Where
    name: str
    title: str
    description: str
    type: ToolType
    input_schema: dict[str, Any]
    sql: str = ""
    language: str = ""
    code: str = ""
    returns: str = ""
    returns_set: bool = False  # pl-func: SETOF or TABLE(...), so rows rather than one value
    statement: str = ""  # pl-do: the DO block; pl-func: the CREATE FUNCTION (plcode.py)
    function: str = ""  # pl-func: its function's name in pg_temp (plcode.function_name)
    timeout_ms: int | None = None
    allow_writes: bool = False  # what the file asks; writes need MCP_ALLOW_WRITE_TOOLS too
    writes: str = ""  # sql: the command it writes with (INSERT, UPDATE, ...), "" if it reads

    @property
    def properties(self) -> list[str]:
        """Argument names in input_schema order: `sql` binds them as $1, $2, ..."""
        return list(self.input_schema.get("properties", {}))


@dataclass(frozen=True)
class Definitions:
    path: str
    prompts: list[PromptSpec] = field(default_factory=list)
    resources: list[ResourceSpec] = field(default_factory=list)
    tools: list[ToolSpec] = field(default_factory=list)

    def problem(self, where: Where, message: str, line: int | None = None) -> str:
        return f"{self.path}:{line or where.line}: {where}: {message}"


@dataclass(frozen=True)
class Reserved:
    """The built-ins a definition may not shadow."""

    tools: frozenset[str]
    prompts: frozenset[str]
    resources: frozenset[str]  # fixed URIs
    templates: frozenset[str]  # URI templates
