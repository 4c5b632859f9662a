"""Whom to answer, read from a JSON-RPC message that will not be parsed whole.

A message over the size limit, nested deeper than a parser takes, or cut short by a timeout
still deserves an answer carrying its id. `Addressee` reads the bytes in pieces, as they
arrive, keeping a few counters and never more than a few hundred bytes: the top-level "id"
and whether the object has "method", "result" or "error" (to answer requests only, as
JSON-RPC says). The id can be anywhere: the TypeScript SDK writes it last, after the params.

Brackets are counted by `bytes.count` and strings skipped by a regular expression, about one
Python step per string (~0.15 s for 1 MB of `"a",`; 10 MB of `[[[[` or of one string take
milliseconds). Lenient by design: the message is refused anyway, this only picks the id for
the refusal.
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any, Final

_STRING_BODY = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*', re.DOTALL)
_SEGMENT_AND_STRING = re.compile(rb'([^"]*)"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_SCALAR_END = re.compile(rb"[,}\]\s]")
_WHITESPACE = b" \t\r\n"
_KEYS = frozenset((b"id", b"method", b"result", b"error"))
_MAX_KEY = 6  # bytes of a key worth keeping (the longest of _KEYS)
MAX_ID = 200  # characters of a string id; a longer one is not echoed back
_MAX_ID_TEXT = 6 * MAX_ID + 2  # raw bytes of an id worth decoding (every character escaped)
# An id that is there but is not echoed: a number with a fraction, a boolean, an object, ...
_UNUSABLE: Final = object()


def usable_id(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, str) and len(value) <= MAX_ID)


class Addressee:
    """Feed a message's bytes in order (`feed`), then ask `verdict()`."""

    def __init__(self) -> None:
        self.depth = 0
        self.started = False
        self.is_object = False
        self.done = False
        self.in_string = False
        self.escaped = False  # a piece ended on the backslash of an escape
        self.text: bytearray | None = None  # the current string's bytes, when they matter
        self.text_cap = 0
        self.text_is_key = False
        self.last = b""  # the last significant byte outside strings
        self.key: bytes | None = None  # a top-level key just read, before its ':'
        self.keys: set[bytes] = set()
        self.value: bytearray | None = None  # the id's raw text while it is being read
        self.awaiting_id = False  # after `"id":`, before its value
        self.id: Any = None
        self.id_found = False

    def feed(self, data: bytes) -> None:
        pos, size = 0, len(data)
        while pos < size and not self.done:
            if self.in_string:
                if self.escaped:
                    self._keep(data[pos : pos + 1])
                    self.escaped = False
                    pos += 1
                    continue
                body = _STRING_BODY.match(data, pos)
                assert body is not None  # the pattern matches the empty string too
                end = body.end()
                self._keep(data[pos:end])
                if end >= size:
                    return
                if data[end] == 0x5C:  # a backslash, its escaped byte in the next piece
                    self._keep(data[end : end + 1])
                    self.escaped = True
                    return
                self._string_ended()
                pos = end + 1
                continue
            pos = self._skip_nested(data, pos)
            quote = data.find(b'"', pos)
            end = size if quote < 0 else quote
            self._between(data[pos:end])
            if quote < 0 or self.done:
                return
            self._string_started()
            pos = quote + 1

    def _skip_nested(self, data: bytes, pos: int) -> int:
        """Past whole strings and what lies between them while inside the params (depth 2 or
        more, nothing being read): one regular-expression match each, no other step."""
        if self.depth < 2 or self.key is not None or self.awaiting_id or self.value is not None:
            return pos
        depth = self.depth
        while match := _SEGMENT_AND_STRING.match(data, pos):
            between = match.group(1)
            depth += between.count(b"{") + between.count(b"[")
            depth -= between.count(b"}") + between.count(b"]")
            if depth < 2:  # back among the top-level members: read with care
                break
            self.depth, self.last, pos = depth, b'"', match.end()
        return pos

    def verdict(self) -> tuple[bool, int | str | None]:
        """Whether the message is answered (a request, or too broken to tell), and the id."""
        request_id = self.id if self.id_found and usable_id(self.id) else None
        if not self.is_object:
            return True, None
        if b"method" in self.keys:
            return (True, request_id) if b"id" in self.keys else (False, None)
        if b"result" in self.keys or b"error" in self.keys:
            return False, None
        return True, request_id

    # -- strings ------------------------------------------------------------------------
    def _string_started(self) -> None:
        self.in_string = True
        self.text_is_key = False
        self.text = None
        if self.awaiting_id:
            self.awaiting_id = False
            self.text, self.text_cap = bytearray(b'"'), _MAX_ID_TEXT
        elif self.depth == 1 and self.last in (b"{", b","):
            self.text, self.text_cap, self.text_is_key = bytearray(), _MAX_KEY + 1, True

    def _keep(self, data: bytes) -> None:
        if self.text is not None and len(self.text) <= self.text_cap:
            self.text += data[: self.text_cap + 1 - len(self.text)]

    def _string_ended(self) -> None:
        self.in_string = False
        self.last = b'"'
        text, self.text = self.text, None
        if text is None:
            return
        if self.text_is_key:
            key = bytes(text)
            self.key = key if key in _KEYS else b""
            if key in _KEYS:
                self.keys.add(key)
            return
        self._decide_id(bytes(text) + b'"', len(text) <= self.text_cap)

    # -- what lies between strings ------------------------------------------------------
    def _between(self, data: bytes) -> None:
        rest = data.lstrip(_WHITESPACE)
        if not rest:
            return
        if not self.started:
            self.started = True
            self.is_object = rest[:1] == b"{"
            if not self.is_object:
                self.done = True
                return
        if self.key is not None:
            key, self.key = self.key, None
            if key == b"id" and rest[:1] == b":":
                self.awaiting_id = True
                self._id_value(rest[1:])
        elif self.awaiting_id or self.value is not None:
            self._id_value(rest)
        self.depth += data.count(b"{") + data.count(b"[") - data.count(b"}") - data.count(b"]")
        self.last = rest.rstrip(_WHITESPACE)[-1:]
        if self.depth <= 0 or (self.id_found and b"method" in self.keys):
            self.done = True

    def _id_value(self, data: bytes) -> None:
        """The id's value when it is not a string: a number, a literal, or a container."""
        if self.value is None:
            data = data.lstrip(_WHITESPACE)
            if not data:
                return  # the value is in the next piece (or it is a string)
            self.awaiting_id = False
            if data[:1] in (b"{", b"["):
                self._decide_id(b"", False)
                return
            self.value = bytearray()
        end = _SCALAR_END.search(data)
        self.value += data[: end.start() if end else len(data)][: _MAX_ID_TEXT + 1]
        if end is not None:
            text, self.value = bytes(self.value), None
            self._decide_id(text, len(text) <= _MAX_ID_TEXT)

    def _decide_id(self, text: bytes, whole: bool) -> None:
        self.id_found = True
        self.id = _UNUSABLE
        if whole:
            with contextlib.suppress(ValueError):
                self.id = json.loads(text)
        if self.depth <= 1 and b"method" in self.keys:
            self.done = True


def addressee(data: bytes) -> tuple[bool, int | str | None]:
    """`Addressee` over one whole message."""
    scan = Addressee()
    scan.feed(data)
    return scan.verdict()
