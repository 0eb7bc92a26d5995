"""Fake serving workers on loopback, for a router run as it is deployed.

A router that tokenises through its workers and forwards requests to them is given HTTP
servers that answer as a vLLM server would, for the endpoints a router calls: ``/health``,
``/v1/models``, ``/get_server_info``, ``/kv_event_sources``, ``POST /tokenize`` and ``POST
/v1/completions/render`` (the prompt's token ids: a prompt here is the token ids written
in decimal, separated by spaces) and ``POST /v1/completions`` (an empty completion). Each
server records which paths it was asked, so a test can tell what the router did.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: The largest request body a fake worker reads.
MAX_BODY = 4 * 1024 * 1024


def prompt_text(tokens: tuple[int, ...] | list[int]) -> str:
    """A prompt whose tokens, as the fake workers tokenise it, are ``tokens``."""
    return " ".join(str(t) for t in tokens)


def tokens_of(prompt: object) -> list[int]:
    """The tokens of a prompt written by :func:`prompt_text` (a list of ints as it is)."""
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return prompt
    if not isinstance(prompt, str):
        return []
    return [int(word) for word in prompt.split() if word.isdigit()]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _reply(self, answer: object) -> None:
        body = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.server.asked[self.path.split("?")[0]] += 1
        if self.path.startswith("/v1/models"):
            model = {"id": self.server.model, "object": "model", "max_model_len": 1 << 20}
            self._reply({"object": "list", "data": [model]})
        else:
            self._reply({})

    def do_POST(self) -> None:
        path = self.path.split("?")[0]
        self.server.asked[path] += 1
        length = min(int(self.headers.get("content-length") or 0), MAX_BODY)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            body = {}
        tokens = tokens_of(body.get("prompt") if isinstance(body, dict) else None)
        if path.endswith("/render"):
            self._reply([{"token_ids": tokens}])
        elif path == "/tokenize":
            self._reply({"tokens": tokens, "count": len(tokens), "max_model_len": 1 << 20})
        else:
            usage = {"prompt_tokens": len(tokens), "completion_tokens": 0}
            choice = {"index": 0, "text": "", "finish_reason": "stop"}
            self._reply({"object": "text_completion", "choices": [choice], "usage": usage})


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, model: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.model = model
        self.asked: Counter[str] = Counter()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A router that hangs up before the reply is written (it had what it needed) is
        no error of the worker's; anything else is printed as the base class does."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class FakeWorker:
    """One fake worker serving on a free loopback port until :meth:`stop`."""

    def __init__(self, model: str) -> None:
        self.server = _Server(model)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def asked(self) -> Counter[str]:
        return self.server.asked

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
