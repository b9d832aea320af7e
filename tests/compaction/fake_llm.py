"""A small HTTP server on loopback that speaks the OpenAI Chat Completions and Anthropic
Messages APIs, and fails on demand: the request's ``model`` picks the behaviour."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SUMMARY = "The user asked to fix the parser; the assistant edited src/parser.py and ran the tests."


class _Handler(BaseHTTPRequestHandler):
    server: FakeLLMServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        request = json.loads(self.rfile.read(length))
        anthropic = self.path.endswith("/messages")
        self.server.requests.append({"path": self.path, "body": request})
        mode = request.get("model", "ok")
        if mode == "stall":
            self.server.stop.wait(10)
        if mode == "fail500":
            return self._send(
                500, b'{"error": {"message": "internal error", "type": "server_error"}}'
            )
        if mode == "overflow":
            error = {
                "type": "invalid_request_error",
                "message": "prompt is too long: 250000 tokens > 200000 maximum",
                "code": "context_length_exceeded",
            }
            body = {"type": "error", "error": error} if anthropic else {"error": error}
            return self._send(400, json.dumps(body).encode())
        if mode == "junk":
            return self._send(200, b"<html>\x00\xff not json", "application/json")
        text = "" if mode == "empty" else SUMMARY
        model = request["model"]
        if anthropic:
            body = {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 10},
            }
        else:
            body = {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 0,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": text},
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
            }
        return self._send(200, json.dumps(body).encode())


class FakeLLMServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, Any]] = []
        self.stop = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@contextmanager
def serve() -> Iterator[FakeLLMServer]:
    server = FakeLLMServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stop.set()
        server.shutdown()
        server.server_close()
        thread.join(5)
