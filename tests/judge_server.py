"""A local OpenAI-compatible HTTP endpoint whose answers a test sets: the judge's failure modes on demand.

It stands in for the judge *model* only (what the judge verifier does with an
answer, a delay, a 503 or a 401 is what the tests are about); the real
server, ``vllm serve`` on a tiny model, is tests/verify/test_judge_vllm.py.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class JudgeServer:
    def __init__(self) -> None:
        self.answer = "7"  # what the judge says
        self.delay_s = 0.0  # seconds before it answers
        self.fail_first = 0  # answer 503 to this many requests first
        self.status = 200  # or 401, 400...
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                server.requests.append(body)
                server.headers.append(dict(self.headers))
                if server.delay_s:
                    time.sleep(server.delay_s)  # the judge model thinking (a hung one, for the timeout test)
                if server.fail_first > 0:
                    server.fail_first -= 1
                    self._send(503, {"error": "overloaded"})
                elif server.status != 200:
                    self._send(server.status, {"error": "refused"})
                elif self.path.endswith("/chat/completions"):
                    self._send(200, {"choices": [{"message": {"role": "assistant", "content": server.answer}}]})
                else:
                    self._send(200, {"choices": [{"text": server.answer}]})

            def _send(self, code: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> JudgeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
