"""Fake serving workers on loopback, for a router run as it is deployed.

A router that tokenises through its workers and forwards requests to them is given HTTP
servers that answer as a vLLM server would, for the endpoints a router calls: ``/health``,
``/v1/models``, ``/get_server_info``, ``/kv_event_sources``, ``POST /tokenize`` and ``POST
/v1/completions/render`` (the prompt's token ids: a prompt here is the token ids written
in decimal, separated by spaces) and ``POST /v1/completions`` (an empty completion). Each
server records which paths it was asked, and which data-parallel rank each completion
was sent to (the ``X-data-parallel-rank`` header a data-parallel router adds), so a test
can tell what the router did. Given an API key, a worker refuses (401) every ``/v1/``
request without it as a bearer token, as a vLLM server started with ``--api-key`` does.
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
#: The header a data-parallel router names the rank of a request in.
RANK_HEADER = "x-data-parallel-rank"


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

    def _refused(self, path: str) -> bool:
        """Whether the request lacks the worker's API key where it is required (then
        answered 401 and counted as ``refused``)."""
        key = self.server.api_key
        if key is None or not path.startswith("/v1/"):
            return False
        if self.headers.get("authorization") == f"Bearer {key}":
            return False
        self.server.asked["refused"] += 1
        body = json.dumps({"error": "Unauthorized"}).encode()
        self.send_response(401)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        return True

    def do_GET(self) -> None:
        self.server.asked[self.path.split("?")[0]] += 1
        if self._refused(self.path):
            return
        if self.path.startswith("/v1/models"):
            model = {"id": self.server.model, "object": "model", "max_model_len": 1 << 20}
            self._reply({"object": "list", "data": [model]})
        else:
            self._reply({})

    def do_POST(self) -> None:
        path = self.path.split("?")[0]
        self.server.asked[path] += 1
        if self._refused(path):
            return
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
            rank = self.headers.get(RANK_HEADER, "")
            if rank.isdigit():
                self.server.ranks[int(rank)] += 1
            usage = {"prompt_tokens": len(tokens), "completion_tokens": 0}
            choice = {"index": 0, "text": "", "finish_reason": "stop"}
            self._reply({"object": "text_completion", "choices": [choice], "usage": usage})


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, model: str, api_key: str | None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.model = model
        self.api_key = api_key
        self.asked: Counter[str] = Counter()
        self.ranks: Counter[int] = Counter()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A router that hangs up before the reply is written (it had what it needed) is
        no error of the worker's; anything else is printed as the base class does."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class FakeWorker:
    """One fake worker serving on a free loopback port until :meth:`stop` (its ``/v1/``
    endpoints for callers with ``api_key`` only, when it is given)."""

    def __init__(self, model: str, api_key: str | None = None) -> None:
        self.server = _Server(model, api_key)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def asked(self) -> Counter[str]:
        return self.server.asked

    @property
    def ranks(self) -> Counter[int]:
        """Completions sent to each data-parallel rank (by the router's rank header)."""
        return self.server.ranks

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
