#!/usr/bin/env python3
"""A small HTTP relay between onejob and llama-cpp-python's OpenAI-compatible server.

Why it exists: onejob's `openai-chat` adapter asks for structured output the way OpenAI
(and llama.cpp's own `llama-server`) define it:

    "response_format": {"type": "json_schema",
                        "json_schema": {"name": ..., "schema": {...}, "strict": true}}

llama-cpp-python's server (0.3.x) only accepts `{"type": "text"}` or
`{"type": "json_object", "schema": {...}}` and answers anything else with HTTP 500 (a
pydantic validation error), which onejob rightly classifies as an ambiguous outcome. Upstream
issue: abetlen/llama-cpp-python PR #1677 (still open).

This relay forwards every request unchanged to the upstream, except that on
POST /v1/chat/completions it rewrites a `json_schema` response_format into the
`json_object` + `schema` form llama-cpp-python understands (which it turns into a grammar).
Each rewrite is logged on stderr. It uses only the standard library.

Usage: structured_output_shim.py --listen 127.0.0.1:PORT --upstream http://127.0.0.1:PORT
"""

import argparse
import json
import sys
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "host",
}


def rewrite(body: bytes) -> tuple[bytes, bool]:
    """Rewrites a json_schema response_format into llama-cpp-python's json_object form."""
    try:
        request = json.loads(body)
    except ValueError:
        return body, False
    fmt = request.get("response_format") if isinstance(request, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return body, False
    schema = (fmt.get("json_schema") or {}).get("schema")
    request["response_format"] = (
        {"type": "json_object", "schema": schema}
        if schema is not None
        else {"type": "json_object"}
    )
    return json.dumps(request).encode(), True


class Relay(BaseHTTPRequestHandler):
    upstream = ""
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quieter than the default
        sys.stderr.write("shim: " + (fmt % args) + "\n")

    def _read_body(self):
        # onejob streams its chat request body (Transfer-Encoding: chunked).
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return body
                body += self.rfile.read(size)
                self.rfile.readline()  # the CRLF after each chunk
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else None

    def _relay(self):
        body = self._read_body()
        if (
            body
            and self.command == "POST"
            and self.path.rstrip("/").endswith("/chat/completions")
        ):
            body, changed = rewrite(body)
            if changed:
                sys.stderr.write(
                    "shim: rewrote response_format json_schema -> json_object+schema\n"
                )
        headers = {
            k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP
        }
        request = urllib.request.Request(
            self.upstream + self.path, data=body, headers=headers, method=self.command
        )
        try:
            with urllib.request.urlopen(request, timeout=600) as answer:
                status, answer_headers, payload = (
                    answer.status,
                    answer.headers,
                    answer.read(),
                )
        except urllib.error.HTTPError as error:
            status, answer_headers, payload = error.code, error.headers, error.read()
        except (urllib.error.URLError, OSError) as error:
            status, answer_headers = 502, None
            payload = json.dumps({"error": {"message": f"shim: upstream: {error}"}}).encode()
        self.send_response(status)
        content_type = (answer_headers or {}).get("Content-Type", "application/json")
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _relay


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True, help="HOST:PORT to listen on")
    parser.add_argument("--upstream", required=True, help="http://HOST:PORT of the server")
    args = parser.parse_args()
    host, port = args.listen.rsplit(":", 1)
    Relay.upstream = args.upstream.rstrip("/")
    server = ThreadingHTTPServer((host, int(port)), Relay)
    sys.stderr.write(f"shim: listening on {args.listen}, relaying to {Relay.upstream}\n")
    server.serve_forever()


if __name__ == "__main__":
    main()
