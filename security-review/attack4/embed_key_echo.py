"""attack4 / target 3: the embedding provider's API key in an error answer.

A provider or gateway that answers an error echoing the request's Authorization header: the
server replaces the key's exact text before quoting the body, but not an encoded form of it:
JSON with escaped slashes (PHP's json_encode, some gateways), or percent-encoding. A key with
`/` or `+` (base64 keys) then reaches the caller in the EMBEDDING_ERROR message. Fake provider
on a local port; no database needed beyond the bed.
Run: PYTHONPATH=tests:security-review uv run python security-review/attack4/embed_key_echo.py
"""
import asyncio
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import quote

from common import as_role, tool
from mcpclient import connect

KEY = "sk-abc/def+ghi/jkl0123456789"


class Echo(BaseHTTPRequestHandler):
    mode = "json"

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("content-length", 0)))
        auth = self.headers.get("authorization", "")
        if Echo.mode == "json":  # escaped slashes, as PHP's json_encode writes them
            body = '{"error":"invalid key","header":"' + auth.replace("/", "\\/") + '"}'
        elif Echo.mode == "url":
            body = "invalid key " + quote(auth)
        else:
            body = "invalid key " + auth
        data = body.encode()
        self.send_response(401)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


async def main() -> int:
    srv = HTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_port}/v1"
    leaks = 0
    async with connect(as_role("reader"), embedding_provider="openai", embedding_url=url,
                       embedding_api_key=KEY, embedding_retries=0) as cl:
        for mode in ("plain", "json", "url"):
            Echo.mode = mode
            ok, body = await tool(cl, "generate_embedding", text="hello")
            text = json.dumps(body)
            pieces = [p for p in ("abc", "def", "ghi", "jkl0123") if p in text]
            leaked = len(pieces) >= 3
            leaks += leaked
            print(f"echo {mode}: key in the error: {leaked}", body["error"]["message"][:220] if not ok else text[:200])
    srv.shutdown()
    print("FINDING" if leaks else "held")
    return int(bool(leaks))


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
