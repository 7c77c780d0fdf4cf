"""The endpoint a rollout replica serves to the agents it runs: OpenAI- and Anthropic-compatible, per-episode keys.

One ``AgentEndpoint`` per replica: a Starlette app under uvicorn, in the
replica's event loop (beside its engine), on ``127.0.0.1`` and any free port by
default (``base_url``). Routes:

- ``POST /v1/chat/completions``: OpenAI Chat Completions (openai_wire.py).
- ``POST /v1/messages``: Anthropic Messages (anthropic_wire.py).
- ``POST /v1/messages/count_tokens``: the prompt tokens of a Messages request
  under the model's chat template, ``{"input_tokens": n}`` (coding harnesses ask
  it to size their context); it is no request of the episode and records nothing.
- ``GET /v1/models``, ``GET /v1/models/{id}``: the one model, ``model_name``,
  in a shape both SDKs read (``client.models.list()`` / ``.retrieve(id)``);
  whatever id is asked, the answer is that model.
- ``POST /v1/rlvr/reward`` ``{"reward": <number>}``: the agent's reward for its
  episode (finite, |r| <= 1e6; the last report wins), answered
  ``{"reward": r}``. It becomes the episode's environment reward
  (``AgentSession.reported_reward``), in the spirit of AReaL's ``/rl/set_reward``.

**Keys.** ``open(episode_id, limits)`` mints a random key for one episode and
returns its ``AgentSession``; every request must carry it, as
``Authorization: Bearer <key>`` (what the ``openai`` SDK sends from
``OPENAI_API_KEY``) or ``x-api-key: <key>`` (the ``anthropic`` SDK, from
``ANTHROPIC_API_KEY``). A request without one, with a wrong one, or with the key
of an episode already ``close``d is refused 401, in the error shape of the API
it called. The key says which episode a request belongs to; nothing in a request
body does. For clients: the OpenAI SDK takes ``base_url + "/v1"``, the Anthropic
SDK takes ``base_url``.

**Errors.** Each in its API's error shape: 400 for a body that does not decode
(the message names the field, e.g. ``$.messages[0].role``) or a request refused
(``n`` other than 1, a history the chat template cannot render), 400
``context_length_exceeded`` past the engine's prompt limit, 403 once the
episode's limits are reached (neither SDK retries 403), 413 past
``MAX_BODY_BYTES``, 500 when the engine fails, 503 (retried by both SDKs) when
it aborted a generation before its first token, 404 / 405 for a path or method
not served (OpenAI's Responses API among them: the OpenAI Agents SDK must use its
chat completions model), naming the routes that are. Model output that is not a
valid tool call is returned as text, never as an error.

**Sampling** is the run's (``sampling``, or ``open(..., sampling=)`` per
episode: the task's): an agent's ``temperature``, ``top_p``, ``max_tokens``,
``stop`` and the like are accepted and ignored, so they never change what is
trained.

**Exposure.** Loopback by default: only processes on the replica's machine
reach it. To serve agents on other machines, bind ``host`` to a private
interface and put it behind what authenticates and encrypts (a TLS-terminating
reverse proxy, an SSH tunnel, a service mesh): the per-episode key is a bearer
token, valid only while its episode runs, and travels in clear over plain HTTP.

Not covered: starting and stopping agents, wall time (rollout/agents/runner.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
from typing import Any

import msgspec
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from rlvr.actors.logs import get_logger
from rlvr.protocol import SamplingParams
from rlvr.rollout.agents import anthropic_wire, openai_wire
from rlvr.rollout.agents.session import AgentLimits, AgentRefusedError, AgentSession
from rlvr.rollout.tools import ToolFormat

log = get_logger(__name__)
MAX_BODY_BYTES = 16 << 20  # a request body, at most (a long agent history is a few MiB)
_START_TIMEOUT_S = 30.0


class _Reward(msgspec.Struct, forbid_unknown_fields=True):
    reward: float


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: SIGTERM is the replica's (it drains), not the endpoint's."""

    @contextlib.contextmanager
    def capture_signals(self):  # noqa: D401 (uvicorn's hook)
        yield


class AgentEndpoint:
    def __init__(self, engine: Any, codec: Any = None, *, sampling: SamplingParams, tool_format: ToolFormat,
                 host: str = "127.0.0.1", port: int = 0, model_name: str = "rlvr-policy") -> None:
        """``codec``: a ``ChatCodec`` (rollout/transcript.py); None: the engine's (``engine.chat_codec()``)."""
        self.engine, self.codec = engine, codec
        self.sampling, self.tool_format, self.model_name = sampling, tool_format, model_name
        self.host, self.port = host, port
        self._sessions: dict[str, AgentSession] = {}
        self._server: _Server | None = None
        self._task: asyncio.Task | None = None
        self.app = Starlette(routes=[
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
            Route("/v1/messages", self._messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", self._count_tokens, methods=["POST"]),
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/v1/models/{model:path}", self._models, methods=["GET"]),
            Route("/v1/rlvr/reward", self._reward, methods=["POST"]),
        ], exception_handlers={404: _unserved, 405: _unserved})

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    # --- lifetime ------------------------------------------------------------------------
    async def start(self) -> None:
        """Bind (``port = 0``: any free port, then ``base_url`` names it) and serve in this event loop."""
        if self.codec is None:
            self.codec = self.engine.chat_codec()
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(1024)  # connections wait in the backlog until uvicorn accepts them
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off",
                                timeout_keep_alive=30)
        self._server = _Server(config)
        self._task = asyncio.get_running_loop().create_task(self._server.serve(sockets=[sock]))
        async with asyncio.timeout(_START_TIMEOUT_S):
            while not self._server.started:
                if self._task.done():
                    self._task.result()  # its exception
                    raise RuntimeError("the agent endpoint stopped while starting")
                await asyncio.sleep(0.01)
        log.info("agent_endpoint", url=self.base_url, model=self.model_name)

    async def stop(self) -> None:
        """Stop serving: every key stops working; requests in flight get up to 5 s to finish."""
        for s in self._sessions.values():
            s.closed = True
        self._sessions.clear()
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        try:
            async with asyncio.timeout(5.0):
                await asyncio.shield(self._task)
        except TimeoutError:
            self._server.force_exit = True
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        self._server = self._task = None

    # --- episodes ------------------------------------------------------------------------
    def open(self, episode_id: str, limits: AgentLimits, *, sampling: SamplingParams | None = None) -> AgentSession:
        """A new episode's session and key (``session.key``); ``sampling``: the task's (default: the endpoint's)."""
        if self.codec is None:
            self.codec = self.engine.chat_codec()
        key = "rlvr-" + secrets.token_urlsafe(32)
        session = AgentSession(key=key, episode_id=episode_id, limits=limits, engine=self.engine, codec=self.codec,
                               sampling=sampling or self.sampling, tool_format=self.tool_format)
        self._sessions[key] = session
        return session

    def close(self, session: AgentSession) -> None:
        """The episode's key stops working at once; a request in flight records nothing more."""
        session.closed = True
        self._sessions.pop(session.key, None)

    def _session(self, request: Request) -> AgentSession:
        auth = request.headers.get("authorization", "")
        key = auth[7:].strip() if auth[:7].lower() == "bearer " else request.headers.get("x-api-key", "")
        session = self._sessions.get(key) if key else None
        if session is None:
            raise AgentRefusedError(401, "authentication_error", "a valid episode key is required (Authorization: "
                                    "Bearer <key> or x-api-key: <key>); this one is missing, wrong or closed")
        return session

    # --- routes --------------------------------------------------------------------------
    async def _chat(self, request: Request) -> Response:
        return await self._serve(request, openai_wire)

    async def _messages(self, request: Request) -> Response:
        return await self._serve(request, anthropic_wire)

    async def _serve(self, request: Request, wire: Any) -> Response:
        try:
            session = self._session(request)
            req = _decoded(wire.decode_request, await _body(request))
            messages, tools, parse = wire.template_messages(req)
            reply = await session.complete(messages, tools, parse_calls=parse)
        except AgentRefusedError as e:
            return JSONResponse(wire.error(e.status, e.kind, e.message, e.param), e.status)
        except Exception as e:  # the engine's failure: the session recorded it for the runner
            log.warning("agent_request_failed", error=f"{type(e).__name__}: {e}"[:500])
            return JSONResponse(wire.error(500, "api_error", f"the request failed: {type(e).__name__}"), 500)
        if wire is openai_wire:
            if req.stream:
                return _sse(openai_wire.chunks(req, reply, self.model_name, self.codec))
            return JSONResponse(openai_wire.completion(req, reply, self.model_name, self.codec))
        if req.stream:
            return _sse(anthropic_wire.events(reply, self.model_name))
        return JSONResponse(anthropic_wire.message(reply, self.model_name))

    async def _count_tokens(self, request: Request) -> Response:
        try:
            session = self._session(request)
            req = _decoded(anthropic_wire.decode_request, await _body(request))
            messages, tools, _ = anthropic_wire.template_messages(req)
            n = session.count_tokens(messages, tools)
        except AgentRefusedError as e:
            return JSONResponse(anthropic_wire.error(e.status, e.kind, e.message, e.param), e.status)
        return JSONResponse({"input_tokens": n})

    async def _models(self, request: Request) -> Response:
        """The model list, or (``/v1/models/{id}``) the one model; a refusal in the shape of the API the
        caller speaks (the Anthropic SDK sends ``anthropic-version``)."""
        wire = anthropic_wire if "anthropic-version" in request.headers else openai_wire
        try:
            self._session(request)
        except AgentRefusedError as e:
            return JSONResponse(wire.error(e.status, e.kind, e.message), e.status)
        listed = openai_wire.models(self.model_name)
        return JSONResponse(listed["data"][0] if "model" in request.path_params else listed)

    async def _reward(self, request: Request) -> Response:
        try:
            session = self._session(request)
            body = _decoded(lambda b: msgspec.json.decode(b, type=_Reward), await _body(request))
            try:
                session.report_reward(body.reward)
            except ValueError as e:
                raise AgentRefusedError(400, "invalid_request_error", str(e), "reward") from None
        except AgentRefusedError as e:
            return JSONResponse(openai_wire.error(e.status, e.kind, e.message, e.param), e.status)
        return JSONResponse({"reward": session.reported_reward})


async def _unserved(request: Request, exc: Exception) -> Response:
    """A path or method the endpoint does not serve (OpenAI's Responses API, a typo): a JSON error naming
    what is served, in the caller's API's shape, not Starlette's plain text."""
    status = getattr(exc, "status_code", 404)
    wire = anthropic_wire if "anthropic-version" in request.headers else openai_wire
    message = (f"{request.method} {request.url.path} is not served here; this endpoint serves POST "
               f"/v1/chat/completions (OpenAI Chat Completions: with the OpenAI Agents SDK, use its chat "
               f"completions model, not the Responses API), POST /v1/messages, POST /v1/messages/count_tokens, "
               f"GET /v1/models and POST /v1/rlvr/reward")
    return JSONResponse(wire.error(status, "invalid_request_error", message), status)


async def _body(request: Request) -> bytes:
    """The request body, refused 413 past MAX_BODY_BYTES (counted as it arrives, whatever Content-Length says)."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise AgentRefusedError(413, "request_too_large", f"the request body is over {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _decoded(decode: Any, body: bytes) -> Any:
    try:
        return decode(body)
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        param = str(e).rsplit("at `$.", 1)[-1].rstrip("`") if "at `$." in str(e) else None
        raise AgentRefusedError(400, "invalid_request_error", f"invalid request body: {e}", param) from None


def _sse(events: list[bytes]) -> StreamingResponse:
    async def send():
        for e in events:
            yield e

    return StreamingResponse(send(), media_type="text/event-stream", headers={"cache-control": "no-cache"})


__all__ = ["MAX_BODY_BYTES", "AgentEndpoint"]
