"""One multi-turn episode: the model and an environment take turns until the episode ends.

The loop (``run_episode``): the environment's ``reset`` messages follow the
task's prompt; then, each turn, the engine generates from the conversation's
tokens (``Transcript``: token-in/token-out), the turn's tool calls are run if
it made any (their results are the next messages), else the environment's
``step`` answers it. It ends when a step says ``done`` (``done``), after the
task's ``max_turns`` (``max_turns``), when the episode's token budget is
spent (``token_budget``), when the environment fails or hangs (``env_error``,
``env_timeout``), when the chat template rewrote an earlier turn and the
rollout was told to end there (``template_rewrite``), or when the
conversation outgrew the engine's own prompt limit, ``max_prompt_tokens``,
before the episode's budget was spent (``prompt_cap``). The last two are the
rollout's cuts (``CUT_ENDS``), not the policy's: like the environment's
failures, they are scored ``error`` and never trained. Every end is recorded
in the sample's ``Episode``, with each turn's policy version, the
environment's rewards, the tools' calls and errors, and the transcript.

Nothing the environment does raises out of here: its failures are the
episode's end reason. The engine's failures (a dead engine, a cancellation
for a weight reload) do raise: they are the replica's, not the episode's.
"""

from __future__ import annotations

import math
import time
import zlib
from collections import Counter
from typing import Any, Literal

import msgspec
import structlog

from rlvr.actors.tracing import tracer
from rlvr.protocol import Completion, Episode, Task, Turn
from rlvr.protocol.samples import ENV_FAILURES
from rlvr.protocol.tasks import EnvSpec
from rlvr.rollout.engines.base import PromptTooLongError
from rlvr.rollout.envs.base import AssistantTurn, EpisodeTask, check_messages, convert_params, recorded_info, tool_reply
from rlvr.rollout.envs.registry import get_environment
from rlvr.rollout.envs.runner import EnvThread, EnvTimeoutError
from rlvr.rollout.tools import ToolFormat, call_tool, parse_tool_calls
from rlvr.rollout.transcript import Transcript

log = structlog.get_logger()


class EpisodeSettings(msgspec.Struct, frozen=True):
    env_timeout_s: float = 60.0
    tool_timeout_s: float = 30.0
    tool_format: ToolFormat = "hermes"
    on_template_rewrite: Literal["keep", "end"] = "keep"


class EpisodeResult(msgspec.Struct, frozen=True):
    """What one sample is made of: a single completion (``episode`` None) or a whole episode."""

    prompt_ids: list[int]
    completion: Completion
    text: str  # the last assistant turn: what verifiers read
    finish_reason: Literal["stop", "length", "abort", "rejected"]
    policy_version: int
    policy_version_max: int
    episode: Episode | None = None


def single_turn(group: Any, rejected: bool = False) -> list[EpisodeResult]:
    """A ``GroupResult``'s completions as results of one turn each."""
    return [
        EpisodeResult(group.prompt_ids, Completion(g.ids, g.logprobs), g.text, "rejected" if rejected else g.finish_reason,
                      group.weights_version_min, group.weights_version_max)
        for g in group.generations
    ]


def check_env_spec(spec: EnvSpec) -> None:
    """The task's environment exists here and takes its params (``ValueError`` saying why not)."""
    convert_params(get_environment(spec.name), spec.params)


class _Ended(Exception):
    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def episode_seed(task: Task) -> int:
    """The environment's seed: the same for a task's episodes, another for every task."""
    return zlib.crc32(task.task_id.encode()) ^ (task.sampling.seed or 0)


def prompt_messages(prompt: str | list) -> list[dict[str, Any]]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [{"role": m.role, "content": m.content} for m in prompt]


async def run_episode(engine: Any, task: Task, index: int, settings: EpisodeSettings) -> EpisodeResult:
    spec: EnvSpec = task.env  # type: ignore[assignment]
    env_cls = get_environment(spec.name)  # an unknown name raises: the task is refused, not the episode
    params = convert_params(env_cls, spec.params)
    state = _State(spec.name)
    try:
        env_cls.load_shared(params)
    except Exception as e:  # its own code: the episode ends saying what failed
        state.end, state.detail = "env_error", f"load_shared() raised {type(e).__name__}: {e}"[:2000]
        return _result(task, None, state)
    etask = EpisodeTask(task.task_id, task.index, index, task.prompt, task.record, task.dataset, episode_seed(task))
    codec = engine.chat_codec()
    thread = EnvThread(f"{task.task_id}/{index}")
    env = None
    transcript: Transcript | None = None
    try:
        env = await _env_call(thread, lambda: env_cls(params, etask), settings, state, "the environment's constructor")
        tools = {t.name: t for t in getattr(env, "tools", [])}
        first = check_messages(await _env_call(thread, env.reset, settings, state, "reset()"), "reset()")
        transcript = Transcript(codec, prompt_messages(task.prompt) + first, [t.schema() for t in tools.values()])
        state.transcript += [[m["role"], m["content"]] for m in transcript.messages]
        await _turns(engine, task, index, spec, settings, env, tools, transcript, thread, state)
    except _Ended as e:
        state.end, state.detail = e.reason, e.detail
    finally:
        if env is not None and not thread.dead:
            try:
                await _env_call(thread, env.close, settings, state, "close()")
            except _Ended:
                pass  # the episode already has its outcome; a failing close is not a new one
        thread.stop()
    if state.end in ENV_FAILURES:  # scored error, never trained: the replica's log says why (a server down ...)
        log.warning("env_episode_ended", episode=f"{task.task_id}/{index}", environment=spec.name,
                    reason=state.end, detail=state.detail)  # bounded at 2000: never cut to its first words
    return _result(task, transcript, state)


class _State:
    def __init__(self, environment: str) -> None:
        self.environment = environment
        self.turns: list[Turn] = []
        self.rewards: list[float] = []
        self.info: list[dict[str, Any]] = []  # each turn's StepResult.info ({} for a turn of tool calls)
        self.tool_calls: Counter[str] = Counter()
        self.tool_errors: Counter[str] = Counter()
        self.env_s = 0.0
        self.transcript: list[list[str]] = []
        self.end = "max_turns"
        self.detail = ""
        self.text = ""
        self.finish: Literal["stop", "length", "abort"] = "stop"
        self.versions: list[int] = []


async def _turns(engine, task: Task, index: int, spec: EnvSpec, settings: EpisodeSettings, env, tools,
                 tr: Transcript, thread: EnvThread, state: _State) -> None:
    for k in range(spec.max_turns):
        budget = spec.max_tokens - len(tr.ids)
        if budget <= 0:
            raise _Ended("token_budget", f"{len(tr.ids)} tokens used of {spec.max_tokens}")
        sampling = msgspec.structs.replace(
            task.sampling, max_tokens=min(task.sampling.max_tokens, budget),
            seed=None if task.sampling.seed is None else task.sampling.seed + 1009 * index + k,
        )
        try:
            with tracer().start_as_current_span("rollout.turn", attributes={"rlvr.turn": k, "rlvr.episode": index}):
                group = await engine.generate_ids(tr.prompt_ids + tr.ids, 1, sampling)
        except PromptTooLongError as e:  # the engine's limit, not the episode's budget: a cut, not an answer
            raise _Ended("prompt_cap", f"turn {k}: the conversation ({e.n_tokens} tokens) outgrew the engine's "
                                       f"max_prompt_tokens ({e.limit}) with {budget} of the episode's "
                                       f"max_tokens ({spec.max_tokens}) left") from None
        gen = group.generations[0]
        start, end = tr.add_model_turn(gen.ids, gen.logprobs, gen.text)
        state.turns.append(Turn(start, end, group.weights_version_min))
        state.versions += [group.weights_version_min, group.weights_version_max]
        state.text, state.finish = gen.text, gen.finish_reason
        state.transcript.append(["assistant", gen.text])
        calls, problems = parse_tool_calls(gen.text, settings.tool_format, tools) if tools else ([], [])
        if calls or problems:
            replies = await _run_tools(calls, problems, tools, settings, thread, state)
            state.rewards.append(0.0)
            state.info.append({})
        else:
            turn = AssistantTurn(gen.text, k, [], gen.finish_reason)
            result = await _env_call(thread, lambda: env.step(turn), settings, state, f"step() of turn {k}")
            reward = _reward(result)
            state.rewards.append(reward)
            state.info.append(recorded_info(result.info))
            if result.done:
                raise _Ended("done")
            replies = _messages(result, k)
        if k == spec.max_turns - 1:
            raise _Ended("max_turns")
        state.transcript += [[m["role"], m["content"]] for m in replies]
        if tr.add_env_messages(replies) and settings.on_template_rewrite == "end":
            raise _Ended("template_rewrite", f"turn {k}: the chat template rewrote an earlier turn")


async def _run_tools(calls, problems, tools, settings: EpisodeSettings, thread: EnvThread,
                     state: _State) -> list[dict[str, Any]]:
    replies = []
    for call in calls:
        state.tool_calls[call.name] += 1
        started = time.monotonic()
        try:
            with tracer().start_as_current_span("rollout.tool", attributes={"rlvr.tool": call.name}) as span:
                result = await thread.call(lambda c=call: call_tool(tools, c, settings.tool_timeout_s),
                                           settings.tool_timeout_s + 5.0, f"tool {call.name}")
                if span.is_recording() and result.error:
                    span.set_attribute("rlvr.tool_error", result.error[:200])
        except EnvTimeoutError as e:  # a tool that would not even be cancelled
            state.tool_errors[call.name] += 1
            replies.append(tool_reply(call.name, f"error: {e}"))
            continue
        finally:
            state.env_s += time.monotonic() - started
        if result.error:
            state.tool_errors[call.name] += 1
        replies.append(tool_reply(call.name, result.content))
    for problem in problems:
        state.tool_errors["unparsed"] += 1
        replies.append(tool_reply("unparsed", f"error: {problem}"))
    return replies


async def _env_call(thread: EnvThread, fn, settings: EpisodeSettings, state: _State, what: str) -> Any:
    started = time.monotonic()
    try:
        return await thread.call(fn, settings.env_timeout_s, what)
    except EnvTimeoutError as e:
        raise _Ended("env_timeout", str(e)) from None
    except Exception as e:  # the environment's own failure ends the episode, saying so
        raise _Ended("env_error", f"{what} raised {type(e).__name__}: {e}"[:2000]) from None
    finally:
        state.env_s += time.monotonic() - started


def _reward(result: Any) -> float:
    from rlvr.rollout.envs.base import StepResult

    if not isinstance(result, StepResult):
        raise _Ended("env_error", f"step() returned {type(result).__name__}, not a StepResult")
    try:
        reward = float(result.reward)
    except (TypeError, ValueError):
        raise _Ended("env_error", f"step() gave a reward that is not a number: {result.reward!r}") from None
    if not math.isfinite(reward):
        raise _Ended("env_error", f"step() gave a reward of {reward!r}")
    return reward


def _messages(result: Any, k: int) -> list[dict[str, Any]]:
    try:
        return check_messages(result.messages, f"step() of turn {k}")
    except ValueError as e:
        raise _Ended("env_error", str(e)) from None


def _result(task: Task, tr: Transcript | None, state: _State) -> EpisodeResult:
    v_min = min(state.versions, default=0)
    v_max = max(state.versions, default=0)
    episode = Episode(
        environment=state.environment, turns=state.turns, end_reason=state.end,  # type: ignore[arg-type]
        turn_rewards=state.rewards, env_reward=sum(state.rewards), tool_calls=dict(state.tool_calls),
        tool_errors=dict(state.tool_errors), env_s=round(state.env_s, 6), detail=state.detail,
        transcript=state.transcript, template_rewrites=tr.rewrites if tr is not None else 0,
        info=state.info if any(state.info) else [],
    )
    if tr is None or not any(tr.mask):  # no turn of the policy's: nothing to train on
        return EpisodeResult(tr.prompt_ids if tr else [], Completion([], []), state.text, "abort", v_min, v_max,
                             episode)
    finish = "abort" if state.end in ENV_FAILURES else state.finish
    return EpisodeResult(tr.prompt_ids, Completion(tr.ids, tr.logprobs, tr.mask), state.text, finish, v_min, v_max,
                         episode)


__all__ = ["EpisodeResult", "EpisodeSettings", "check_env_spec", "episode_seed", "prompt_messages", "run_episode",
           "single_turn"]
