"""Agents the rollout runs: one episode per run of the agent, under the episode's limits (docs/agents.md).

``AgentRunner.play(task, index)`` plays sample ``index`` of ``task`` as one agent episode:

1. It waits for a place (``max_concurrent`` episodes per replica, all tasks together), opens an
   episode on the replica's ``AgentEndpoint`` (a key of its own, the task's sampling, the limits) and
   runs the agent with it:

   - a **command** (``[rollout.agent] command``) is started through ``rlvr.rollout.agents.supervise``
     (its own session and process group, a subreaper that kills every process the agent left when it
     ends), with only the environment ``pass_env`` and ``env`` give plus the episode's variables
     (``episode_env``); the task as JSON (``task_json``) on stdin and/or in the file
     ``RLVR_TASK_FILE``. Its answer is the last non-empty line of its stdout, or, when that line is
     a JSON object, its ``"answer"`` (and an optional ``"reward"``).
   - a **callable** (``[rollout.agent] callable``) is awaited as ``fn(client, task)`` in a thread
     with an event loop of its own (code that blocks cannot stall the replica or its endpoint);
     ``client`` is an ``AgentClient``. It returns the answer, or ``{"answer": ..., "reward": ...}``.

2. The episode ends when the agent exits or returns (``done``), when a limit refuses a request
   (the session's reason: ``max_turns`` for ``max_requests``, ``token_budget`` for ``max_tokens``,
   ``prompt_cap``: the agent is stopped at once), after ``timeout_s`` (``env_timeout``), or when the
   agent fails (``env_error``: a non-zero exit, an exception, no request to the model, a reward
   that is no finite number), with what happened in ``Episode.detail`` (stderr's tail, its end
   kept: a traceback's last line says what failed). An agent that asked the model and then gave an
   empty answer (printed nothing, returned None or "") is ``done`` with the answer "": saying
   nothing is the policy's answer, judged by the verifier like any other, never dropped.
   The verifier scores ``env_timeout``/``env_error`` episodes outcome ``error``: dropped by the
   learner with a counted reason, never a reward of 0. A stopped command gets SIGTERM, its
   supervisor kills the agent's process group and every orphan, and is SIGKILLed itself after
   ``_KILL_GRACE_S``. A callable is cancelled; one that ignores cancellation is abandoned in its
   thread (logged) and its episode still ends ``env_timeout``.

3. The answer (the verifier reads it like any completion's text), a reported reward (stdout's, the
   callable's, or ``POST /v1/rlvr/reward``: it becomes ``Episode.env_reward``) and the session's
   tokens (``AgentSession.outcome``) make the ``EpisodeResult`` the rollout publishes.

Only the engine's own failure (``session.failure``) or a cancellation (a weight reload that aborts
tasks, a shutdown) raises out of ``play``: they are the replica's, not the episode's; the agent is
stopped and reaped first.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from typing import Any

import anyio
import msgspec

from rlvr.actors.logs import get_logger
from rlvr.protocol import Task
from rlvr.rollout.agents.config import AgentConfig, AgentConfigError, resolve_program
from rlvr.rollout.agents.session import AgentLimits, AgentSession
from rlvr.rollout.episodes import EpisodeResult, prompt_messages

log = get_logger(__name__)

_KILL_GRACE_S = 5.0  # a stopped supervisor's time to kill the agent's processes before it is SIGKILLed
_DRAIN_S = 5.0  # after the agent exits, time for its output to be read
_STDOUT_BYTES = 1 << 20  # an agent's stdout kept (the end of it: the answer is at the end)
_STDERR_BYTES = 4096  # the tail of stderr read
# The tail of stderr put in Episode.detail (bounded at 2000 characters, its start kept): with the words before
# it, short enough that the end of a traceback, the line that names the exception, is never cut off.
_STDERR_DETAIL_CHARS = 1800
_ANSWER_CHARS = 1 << 16  # an answer longer than this is cut (a Sample's text is bounded)


class AgentClient(msgspec.Struct, frozen=True):
    """What a callable agent is given to reach the endpoint for its one episode."""

    openai_base_url: str  # for openai.OpenAI(base_url=...): ends in /v1
    anthropic_base_url: str  # for anthropic.Anthropic(base_url=...)
    api_key: str  # the episode's key: api_key= of either SDK
    reward_url: str  # POST {"reward": r} with the key as a bearer token
    model: str
    episode_id: str
    max_requests: int
    max_tokens: int
    timeout_s: float


class _Run(msgspec.Struct):
    """How the agent's run went (before the session's own reason is considered)."""

    answer: str | None = None
    reward: Any = None
    end_reason: str | None = None  # "env_error" | "env_timeout" | None (it finished)
    detail: str = ""


def load_callable(spec: str) -> Any:
    """The agent function ``"package.module:function"``, checked: an async function (``AgentConfigError``)."""
    module, _, attr = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as e:
        raise AgentConfigError(f"rollout.agent.callable: cannot import {spec!r}: {type(e).__name__}: {e}") from None
    if not inspect.iscoroutinefunction(obj) and not inspect.iscoroutinefunction(getattr(obj, "__call__", None)):
        raise AgentConfigError(f"rollout.agent.callable: {spec!r} is not an async function "
                               "(async def agent(client, task) -> answer)")
    return obj


def task_json(task: Task, index: int, episode_id: str, cfg: AgentConfig, model: str) -> dict[str, Any]:
    """The task as the agent sees it: the prompt's messages, ids, limits, and only the record fields
    ``record_keys`` names (never the verifier's spec: it holds the gold answer)."""
    return {
        "episode_id": episode_id, "task_id": task.task_id, "sample_index": index, "dataset": task.dataset,
        "index": task.index, "purpose": task.purpose, "messages": prompt_messages(task.prompt),
        "record": {k: task.record[k] for k in cfg.record_keys if k in task.record},
        "model": model, "limits": {"max_requests": cfg.max_requests, "max_tokens": cfg.max_tokens,
                                   "timeout_s": cfg.timeout_s},
    }


def episode_env(cfg: AgentConfig, client: AgentClient, task_file: str | None) -> dict[str, str]:
    """A command agent's whole environment: what ``pass_env`` lets through, ``env``, and the episode's."""
    env = {k: os.environ[k] for k in cfg.pass_env if k in os.environ}
    env.update(cfg.env)
    env.update({
        "OPENAI_BASE_URL": client.openai_base_url, "OPENAI_API_KEY": client.api_key,
        "ANTHROPIC_BASE_URL": client.anthropic_base_url, "ANTHROPIC_API_KEY": client.api_key,
        "RLVR_EPISODE_ID": client.episode_id, "RLVR_REWARD_URL": client.reward_url, "RLVR_MODEL": client.model,
        "RLVR_MAX_REQUESTS": str(client.max_requests), "RLVR_MAX_TOKENS": str(client.max_tokens),
        "RLVR_TIMEOUT_S": f"{client.timeout_s:g}",
    })
    if task_file is not None:
        env["RLVR_TASK_FILE"] = task_file
    return env


def parse_answer(stdout: str) -> tuple[str | None, Any]:
    """(answer, reward) from a command agent's stdout: its last non-empty line, or that line's JSON
    object's ``answer`` and ``reward``. (None, None): it printed nothing."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        return None, None
    last = lines[-1].strip()
    if last.startswith("{"):
        try:
            obj = json.loads(last)
        except ValueError:
            return last, None
        if isinstance(obj, dict) and "answer" in obj:
            return _as_answer(obj["answer"]), obj.get("reward")
    return last, None


def _as_answer(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


class AgentRunner:
    """Plays agent episodes on one replica's endpoint (see the module docstring)."""

    def __init__(self, cfg: AgentConfig, endpoint: Any) -> None:
        self.cfg, self.endpoint = cfg, endpoint
        self.fn = load_callable(cfg.callable) if cfg.callable else None
        self.program = self.check()
        self.limiter = anyio.CapacityLimiter(cfg.max_concurrent)
        self.limits = AgentLimits(max_requests=cfg.max_requests, max_tokens=cfg.max_tokens)
        self.ends: Counter[str] = Counter()  # episodes by end reason, for the heartbeat
        self.running = 0
        self.abandoned = 0  # callables that ignored cancellation and still hold a thread

    def check(self) -> str | None:
        """The command's program, resolved (``AgentConfigError`` naming the key when it is not there)."""
        return resolve_program(self.cfg) if self.cfg.command else None

    def client(self, session: AgentSession, episode_id: str) -> AgentClient:
        base = self.endpoint.base_url
        return AgentClient(openai_base_url=base + "/v1", anthropic_base_url=base, api_key=session.key,
                           reward_url=base + "/v1/rlvr/reward", model=self.cfg.model_name, episode_id=episode_id,
                           max_requests=self.cfg.max_requests, max_tokens=self.cfg.max_tokens,
                           timeout_s=self.cfg.timeout_s)

    async def play(self, task: Task, index: int) -> EpisodeResult:
        episode_id = f"{task.task_id}/{index}"
        async with self.limiter:
            session = self.endpoint.open(episode_id, self.limits, sampling=task.sampling)
            self.running += 1
            try:
                client = self.client(session, episode_id)
                work = task_json(task, index, episode_id, self.cfg, self.cfg.model_name)
                if self.fn is not None:
                    run = await self._call(session, client, work)
                else:
                    run = await self._command(session, client, work)
            finally:
                self.running -= 1
                self.endpoint.close(session)
        if session.failure is not None:  # the engine failed under the agent: the replica's failure
            raise session.failure
        result = self._result(session, run)
        self.ends[result.episode.end_reason] += 1  # type: ignore[union-attr]
        if result.episode.end_reason != "done":  # type: ignore[union-attr]
            log.info("agent_episode_ended", episode=episode_id, reason=result.episode.end_reason,  # type: ignore[union-attr]
                     detail=result.episode.detail)  # type: ignore[union-attr]  (bounded; its last line names the error)
        return result

    def _result(self, session: AgentSession, run: _Run) -> EpisodeResult:
        reason, detail, text = run.end_reason, run.detail, run.answer
        if session.end_reason is not None:  # a limit refused a request: the agent was stopped for it
            reason, detail, text = session.end_reason, session.detail, None
        elif reason is None:
            if run.reward is not None:
                try:
                    session.report_reward(run.reward)
                except ValueError as e:
                    reason, detail = "env_error", f"the agent's reward: {e}"
            if reason is None and session.requests == 0:
                reason, detail = "env_error", "the agent finished without a request to the model"
            elif reason is None and text is None:
                text = ""  # it asked the model and answered nothing: the policy's empty answer, for the verifier
        if reason in ("env_error", "env_timeout"):
            text = None
        return session.outcome(end_reason=reason or "done", detail=detail, environment=self.cfg.name,
                               text=None if text is None else text[:_ANSWER_CHARS])

    # --- a callable ------------------------------------------------------------------------------
    async def _call(self, session: AgentSession, client: AgentClient, work: dict[str, Any]) -> _Run:
        loop = asyncio.get_running_loop()
        finished = asyncio.Event()
        box: dict[str, Any] = {}

        async def main() -> Any:
            box["loop"], box["task"] = asyncio.get_running_loop(), asyncio.current_task()
            return await self.fn(client, work)  # type: ignore[misc]

        def thread() -> None:
            try:
                box["result"] = asyncio.run(main())
            except BaseException as e:  # noqa: BLE001 (the agent's failure is its episode's end)
                box["error"] = e
            finally:
                with contextlib.suppress(RuntimeError):  # the replica's loop is gone: nobody waits
                    loop.call_soon_threadsafe(finished.set)

        threading.Thread(target=thread, name=f"agent {client.episode_id}", daemon=True).start()
        why = await self._until_done(session, finished.wait)
        if why is not None:  # stop it: cancel the agent's task in its own loop, and give it a moment
            if "loop" in box:
                with contextlib.suppress(RuntimeError):
                    box["loop"].call_soon_threadsafe(box["task"].cancel)
            with anyio.CancelScope(shield=True), anyio.move_on_after(_KILL_GRACE_S):
                await finished.wait()
            if not finished.is_set():
                self.abandoned += 1
                log.warning("agent_abandoned", episode=client.episode_id, abandoned=self.abandoned,
                            detail="the agent callable ignored its cancellation; its thread is left running")
            return _Run(end_reason=why[0], detail=why[1])
        if "error" in box:
            e = box["error"]
            return _Run(end_reason="env_error", detail=f"the agent raised {type(e).__name__}: {e}"[:2000])
        result = box.get("result")
        if isinstance(result, dict):
            if "answer" not in result:
                return _Run(end_reason="env_error", detail="the agent returned a dict without \"answer\"")
            return _Run(answer=_as_answer(result["answer"]), reward=result.get("reward"))
        if result is None:
            return _Run()
        return _Run(answer=_as_answer(result))

    # --- a command --------------------------------------------------------------------------------
    async def _command(self, session: AgentSession, client: AgentClient, work: dict[str, Any]) -> _Run:
        data = json.dumps(work).encode()
        with tempfile.TemporaryDirectory(prefix="rlvr-agent-") as tmp:
            task_file = None
            if "file" in self.cfg.task_via:
                task_file = os.path.join(tmp, "task.json")
                with open(task_file, "wb") as f:
                    f.write(data)
            argv = [sys.executable, "-P", "-m", "rlvr.rollout.agents.supervise", "--parent", str(os.getpid()),
                    "--", self.program, *self.cfg.command[1:]]
            proc = await anyio.open_process(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, env=episode_env(self.cfg, client, task_file),
                                            cwd=self.cfg.cwd or None, start_new_session=True)
            out, err = bytearray(), bytearray()
            try:
                async with anyio.create_task_group() as io:
                    io.start_soon(_feed, proc.stdin, data if "stdin" in self.cfg.task_via else b"")
                    io.start_soon(_read, proc.stdout, out, _STDOUT_BYTES)
                    io.start_soon(_read, proc.stderr, err, _STDERR_BYTES)
                    why = await self._until_done(session, proc.wait)
                    if why is not None:
                        await _stop(proc)
                    # The supervisor killed what the agent left, so the pipes close; whatever still holds
                    # one (nothing should) is not waited for past _DRAIN_S.
                    io.cancel_scope.deadline = anyio.current_time() + _DRAIN_S
            finally:
                with anyio.CancelScope(shield=True):
                    await _stop(proc)
        tail = err.decode(errors="replace").strip()[-_STDERR_DETAIL_CHARS:]
        if why is not None:
            return _Run(end_reason=why[0], detail=why[1] + (f"; stderr: {tail}" if tail else ""))
        if proc.returncode != 0:
            how = (f"killed by signal {proc.returncode - 128}" if proc.returncode > 128
                   else f"exited with status {proc.returncode}")
            return _Run(end_reason="env_error", detail=f"the agent {how}" + (f"; stderr: {tail}" if tail else ""))
        answer, reward = parse_answer(out.decode(errors="replace"))
        return _Run(answer=answer, reward=reward)

    async def _until_done(self, session: AgentSession, done: Any) -> tuple[str, str] | None:
        """Wait for ``done()``; None when it came, else (end reason, detail) of why the agent must stop."""
        why: tuple[str, str] | None = None
        with anyio.move_on_after(self.cfg.timeout_s) as timer:
            async with anyio.create_task_group() as tg:
                async def limit() -> None:
                    nonlocal why
                    await session.limit_hit.wait()
                    why = (session.end_reason or "aborted", session.detail)
                    tg.cancel_scope.cancel()

                tg.start_soon(limit)
                await done()
                tg.cancel_scope.cancel()
        if timer.cancelled_caught and why is None:
            why = ("env_timeout", f"the agent ran past rollout.agent.timeout_s = {self.cfg.timeout_s:g}s")
        return why


async def _feed(stream: Any, data: bytes) -> None:
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        if data:
            await stream.send(data)
        await stream.aclose()


async def _read(stream: Any, buf: bytearray, cap: int) -> None:
    """Read ``stream`` to its end, keeping its last ``cap`` bytes."""
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        async for chunk in stream:
            buf += chunk
            if len(buf) > cap:
                del buf[: len(buf) - cap]


async def _stop(proc: Any) -> None:
    """SIGTERM the supervisor (it kills the agent's group and orphans), then SIGKILL its group."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    with anyio.move_on_after(_KILL_GRACE_S):
        await proc.wait()
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


__all__ = ["AgentClient", "AgentRunner", "episode_env", "load_callable", "parse_answer", "task_json"]
