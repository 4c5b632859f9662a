"""Catalog answers cut to the answer budget (MCP_ANSWER_BUDGET_BYTES), and the cursor that
continues them.

A catalog tool lists items (tables, columns, matches, keys); when they do not all fit in the
budget, the answer holds the first ones that do, says how many more there are, and carries
`next_cursor`. The cursor is stateless: catalog reads are cheap (and describe_table's are
cached), so the next call reads the listing again and continues at the cursor's offset, on
any replica, with no store. It is base64url of a small JSON object: the tool, a hash of the
call's other arguments, the offset, and a fingerprint of the listing the page was cut from
(its items' identities in order). The next call compares that fingerprint with the listing it
reads now: when they differ (objects added, dropped or renamed in between) it says so in its
note instead of silently skipping or repeating an item.

No signature: a cursor carries only an offset into a listing its holder may read anyway
(with `offset`, or by calling again), so forging one gains nothing, and a key replicas share
would be one more secret to deploy. The tool and argument checks are for mistakes (a cursor
passed to another call), not for security.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pg_mcp_server.errors import ParameterError

# Bytes kept free for what is added after the items are counted: next_cursor and the note.
RESERVE = 700
# Longer than any cursor we make (about 150 characters): not worth decoding.
MAX_CURSOR = 1000
# Items sized in one encoding by `fit`: a describe_table's columns mostly, and never more than
# one chunk encoded past the budget.
_CHUNK = 32

_START_OVER = "or call without cursor to start from the first page"


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def fingerprint(names: Sequence[str]) -> str:
    """A listing's fingerprint, from its items' identities in order."""
    return hashlib.sha256("\x00".join(names).encode()).hexdigest()[:16]


def _arguments_hash(arguments: dict[str, Any]) -> str:
    return hashlib.sha256(_dumps(arguments).encode()).hexdigest()[:16]


def encode(tool: str, arguments: dict[str, Any], offset: int, listing: str) -> str:
    """The cursor continuing `tool`'s answer for `arguments` (all but cursor and offset) at
    item `offset` of the listing whose fingerprint is `listing`."""
    body = {"t": tool, "a": _arguments_hash(arguments), "o": offset, "l": listing}
    return base64.urlsafe_b64encode(_dumps(body).encode()).decode().rstrip("=")


@dataclass(frozen=True)
class Cursor:
    offset: int
    listing: str


def decode(cursor: str, tool: str, arguments: dict[str, Any]) -> Cursor:
    """The cursor `tool` was given for `arguments`, checked: PARAMETER_ERROR when it is not
    one this server made, or was made by another tool or for other arguments."""
    try:
        if len(cursor) > MAX_CURSOR:
            raise ValueError(cursor)
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        body = json.loads(raw)
        made_by, made_for = body["t"], body["a"]
        offset, listing = body["o"], body["l"]
        if not (
            isinstance(offset, int) and offset >= 0 and isinstance(listing, str)
        ) or not isinstance(made_by, str):
            raise ValueError(cursor)
    except (binascii.Error, ValueError, TypeError, KeyError, RecursionError):
        raise ParameterError(
            "The cursor is not one this server made",
            suggestion=f"Pass next_cursor exactly as the last answer gave it, {_START_OVER}.",
            context={"cursor": cursor[:200]},
        ) from None
    if made_by != tool:
        raise ParameterError(
            f"This cursor continues {made_by}, not {tool}",
            suggestion=f"Pass it to {made_by} with the arguments it was given, {_START_OVER}.",
            context={"cursor_tool": made_by},
        )
    if made_for != _arguments_hash(arguments):
        raise ParameterError(
            f"This cursor continues a {tool} call with other arguments",
            suggestion=(
                "Repeat the call that gave the cursor with the same arguments, changing only "
                f"cursor, {_START_OVER}."
            ),
            context={"arguments_received": arguments},
        )
    return Cursor(offset, listing)


def size(value: Any) -> int:
    """Bytes of `value` in the answer's JSON text."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def fit(base: dict[str, Any], items: Sequence[Any], budget: int) -> int:
    """How many of `items` (from the first) fit in an answer of `budget` bytes made of `base`
    (the answer with its item lists empty) and them; at least one, so that every page moves
    on."""
    left = budget - size(base) - RESERVE
    count = 0
    # Each item takes its bytes and a comma; a list of them encodes to that sum plus one (two
    # brackets, one comma fewer). Sized a chunk at a time, item by item only in the chunk that
    # does not fit: one encoding per item cost 0.04-0.09 ms of a describe_table call.
    for start in range(0, len(items), _CHUNK):
        chunk = items[start : start + _CHUNK]
        whole = size(list(chunk)) - 1
        if whole <= left:
            left -= whole
            count += len(chunk)
            continue
        for item in chunk:
            left -= size(item) + 1
            if left < 0:
                break
            count += 1
        break
    return max(count, 1) if items else 0


def note(
    what: str,
    start: int,
    shown: int,
    total: int,
    *,
    changed: bool = False,
) -> str | None:
    """What a page holds and how to read on; None when it holds everything."""
    parts = []
    if changed:
        parts.append(
            f"the {what} changed since the cursor was made (added, dropped or renamed), so an "
            f"item may be skipped or repeated at this page's start: {_START_OVER} to be sure"
        )
    end = start + shown
    if start or end < total:
        held = f"{what} {start + 1}-{end} of {total}" if shown else f"no {what} past {start}"
        if end < total:
            held += f"; {total - end} more: call again with cursor=next_cursor"
        parts.append(held)
    return "; ".join(parts) or None
