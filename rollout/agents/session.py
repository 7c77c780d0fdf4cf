"""One agent episode on the endpoint: its key, its limits, and every token the model sampled for it.

``AgentEndpoint.open`` makes a session; each request the agent sends with its
key goes through ``AgentSession.complete``:

1. **Limits.** A request past ``max_requests``, or once the model has generated
   ``max_tokens`` tokens in the episode (all segments), is refused (HTTP 403,
   which neither SDK retries) and ends the episode: ``end_reason`` becomes
   ``max_turns`` or ``token_budget`` and ``limit_hit`` is set, for the runner to
   stop the agent. A request is served whole: each generation asks for at most
   the tokens left (``sampling.max_tokens`` capped), so the last one may finish
   ``length``. A conversation longer than the engine's ``max_prompt_tokens``
   is refused (400, ``context_length_exceeded``) and ends ``prompt_cap``; so is
   one whose segments would hold more tokens, all together, than one Sample
   message carries (``protocol.validate.MAX_EPISODE_TOKENS``: many compactions
   of a long history). An
   engine failure ends it ``aborted`` with ``failure`` set: the runner raises it
   (it is the replica's, not the episode's).
2. **The model's own words back.** An assistant message the agent sends back that
   is one the model wrote (same visible text and calls: ``replies.reply_key``,
   whichever API it came from) is rendered as the model's own text, tool-call
   markup and all, so the template reproduces the tokens that were sampled.
3. **Render and match.** The messages are rendered with the model's chat template
   (``ChatCodec``, rollout/transcript.py) with the request's tools and the
   generation prompt. Where that text starts with the text of a segment's tokens
   (the extension property), the segment is extended: the rest of the text is
   encoded on its own and appended with mask 0 (what the agent added: tool
   results, new user messages, the end of the model's turn it did not write) and
   log-prob 0.0, and the model continues from the segment's exact tokens. Where
   no segment's text is a prefix of it (the agent edited, truncated or
   summarised its history, or a sub-agent runs a conversation of its own), a new
   segment starts from the rendered prompt, and that is logged: two histories are
   never spliced. Of several matching segments the longest is extended; a
   segment whose generation is in flight is not (a parallel request starts its
   own).
4. **Generate and record.** The engine generates one completion from those ids
   with the run's sampling (``sampling``: the task's, never the agent's); its ids
   and behaviour log-probs are appended as sampled (mask 1), with the policy
   version of the turn. A generation of no tokens (an engine's ``abort``)
   records nothing (no turn, no segment) and is answered 503, which both SDKs
   retry by default; the retry counts as a request.

``outcome()`` is the episode as the rollout publishes it, an ``EpisodeResult``
(``AgentOutcome``): the segment of the last model turn is the Sample's prompt
ids and completion; the others, in the order they started, are
``Episode.segments`` (protocol/samples.py, each trained as its own sequence with
the episode's advantage), and ``Episode.agent`` is set (the Sample's prompt ids
are the agent's: ``sample_meaning`` leaves them out, so a group generated again
is a duplicate of the same slot, not a conflict). ``reported_reward`` (``POST /v1/rlvr/reward``) becomes
``Episode.env_reward`` and the last turn's ``turn_rewards``.

Not here: the HTTP wire (openai_wire.py, anthropic_wire.py, endpoint.py), wall
time and the agent's process (the runner's).
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Annotated, Any

import anyio
import msgspec
from msgspec import Meta

from rlvr.actors.logs import get_logger
from rlvr.protocol import Completion, Episode, SamplingParams, Turn
from rlvr.protocol import validate
from rlvr.protocol.samples import ENV_FAILURES, Segment
from rlvr.rollout.engines.base import PromptTooLongError
from rlvr.rollout.episodes import EpisodeResult
from rlvr.rollout.agents.replies import ReplyCall, parse_reply, reply_key
from rlvr.rollout.tools import ToolFormat
from rlvr.rollout.transcript import ChatCodec, Transcript

log = get_logger(__name__)

AgentOutcome = EpisodeResult  # what the rollout turns into a Sample, as for an environment's episode
MAX_REWARD = 1e6  # |reported reward| at most (protocol/validate.py's bound on rewards)
_TRANSCRIPT_ENTRIES = 1000  # Episode.transcript keeps the last request's last messages (validate: 4 * MAX_TURNS)
_TRANSCRIPT_CHARS = 20_000  # of each message
_TRANSCRIPT_TOTAL = 1_000_000  # of all of them (validate: MAX_TEXT_CHARS)
_TOOL_NAMES = 63  # Episode.tool_calls keeps the most called, the rest as "other" (validate: MAX_COMPONENTS)


class AgentLimits(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Per episode: requests (model turns) and tokens the model may generate, all segments together."""

    max_requests: Annotated[int, Meta(gt=0, le=256)] = 16
    max_tokens: Annotated[int, Meta(gt=0)] = 4096


class AgentRefusedError(Exception):
    """A request the session will not serve: ``status`` and ``kind`` for the wire, ``param`` the field."""

    def __init__(self, status: int, kind: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.param = status, kind, message, param


@dataclass
class Reply:
    """One request's answer: what the model sampled and how the APIs show it."""

    ids: list[int]
    logprobs: list[float]
    text: str  # the engine's text of the turn (tool-call markup included)
    content: str  # the visible text: ``text`` without the calls' markup
    calls: list[ReplyCall]
    finish_reason: str  # "stop" | "length" | "abort"
    prompt_tokens: int
    segment: int  # index of the segment it extended or started (in the order segments started)
    new_segment: bool


@dataclass(eq=False)
class _Segment:
    prompt_ids: list[int]
    text: str  # the text of every token so far: the rendered prompt, then each appended piece
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    busy: bool = False  # a generation from its tokens is in flight

    def append(self, ids: list[int], logprobs: list[float], mask: int, text: str) -> None:
        self.ids += ids
        self.logprobs += logprobs
        self.mask += [mask] * len(ids)
        self.text += text


class AgentSession:
    """One episode's key, limits, segments and outcome (see the module docstring)."""

    def __init__(self, *, key: str, episode_id: str, limits: AgentLimits, engine: Any, codec: ChatCodec,
                 sampling: SamplingParams, tool_format: ToolFormat) -> None:
        self.key, self.episode_id, self.limits = key, episode_id, limits
        self.engine, self.codec, self.sampling, self.tool_format = engine, codec, sampling, tool_format
        self.limit_hit = anyio.Event()  # a limit ended the episode (or the engine failed): stop the agent
        self.end_reason: str | None = None  # "max_turns", "token_budget", "prompt_cap", "aborted"
        self.detail = ""
        self.reported_reward: float | None = None
        self.failure: BaseException | None = None  # the engine's exception, for the runner to raise
        self.closed = False
        self.requests = 0  # requests served (model turns)
        self.generated = 0  # model tokens, all segments
        self.segments: list[_Segment] = []
        self.tool_calls: Counter[str] = Counter()
        self._own: dict[tuple, str] = {}  # reply_key -> the model's own text of that turn
        self._closings: dict[str, str] = {}  # tools (JSON) -> the template's assistant-turn ending
        self._last: _Segment | None = None
        self._last_text = ""
        self._last_finish = "stop"
        self._transcript: list[list[str]] = []
        self._versions: list[int] = []  # each turn's lowest and highest policy version
        self._opened = time.monotonic()
        self._generating_s = 0.0

    # --- requests ------------------------------------------------------------------------
    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *,
                       parse_calls: bool = True) -> Reply:
        """Serve one request: ``messages`` in chat-template form (role, content, and an assistant's
        ``tool_calls`` as ``{"type": "function", "function": {"name", "arguments": dict}}``), ``tools``
        as OpenAI function schemas. Raises ``AgentRefusedError``."""
        self._admit()
        self.requests += 1
        messages = [self._own_words(m) for m in messages]
        try:
            full = self.codec.render(messages, tools=tools or None, add_generation_prompt=True)
        except Exception as e:  # the template's own check (roles out of order, a missing field)
            raise AgentRefusedError(400, "invalid_request_error", f"the chat template cannot render these "
                                    f"messages: {type(e).__name__}: {e}"[:2000], "messages") from None
        seg = self._match(full)
        if seg is None:
            seg, delta, delta_ids = _Segment(self.codec.encode(full), full), "", []
            if self.segments:
                log.info("agent_new_segment", episode=self.episode_id, segments=len(self.segments) + 1,
                         detail="the request's history does not extend the tokens of any earlier segment "
                                "(edited, truncated or summarised, or a conversation of its own)")
        else:
            delta = full[len(seg.text):]
            delta_ids = self.codec.encode(delta) if delta else []
        prompt = seg.prompt_ids + seg.ids + delta_ids
        sampling = msgspec.structs.replace(
            self.sampling, max_tokens=min(self.sampling.max_tokens, self.limits.max_tokens - self.generated),
            seed=None if self.sampling.seed is None else self.sampling.seed + self.requests)
        recorded = sum(len(s.prompt_ids) + len(s.ids) for s in self.segments)
        grown = recorded + (len(delta_ids) if seg in self.segments else len(prompt)) + sampling.max_tokens
        if grown > validate.MAX_EPISODE_TOKENS:  # one Sample message holds the episode: validate's bound
            self._end("prompt_cap", f"request {self.requests}: the episode's segments would hold {grown} tokens, "
                                    f"more than one sample carries ({validate.MAX_EPISODE_TOKENS})")
            raise AgentRefusedError(400, "context_length_exceeded", self.detail, "messages")
        seg.busy = True
        started = time.monotonic()
        try:
            group = await self.engine.generate_ids(prompt, 1, sampling)
        except PromptTooLongError as e:
            self._end("prompt_cap", f"request {self.requests}: the conversation ({e.n_tokens} tokens) outgrew the "
                                    f"engine's max_prompt_tokens ({e.limit})")
            raise AgentRefusedError(400, "context_length_exceeded", self.detail, "messages") from None
        except Exception as e:  # a cancellation (the agent hung up) is no failure: it propagates as it is
            self.failure = e
            self._end("aborted", f"request {self.requests}: the engine failed: {type(e).__name__}: {e}"[:2000])
            raise
        finally:
            seg.busy = False
            self._generating_s += time.monotonic() - started
        if self.closed:  # the episode's outcome is taken: nothing more is recorded
            raise AgentRefusedError(401, "authentication_error", "this episode's key was closed during the request")
        gen = group.generations[0]
        if not gen.ids:  # nothing sampled (an engine's "abort"): nothing recorded, the agent's retry matches again
            raise AgentRefusedError(503, "server_error", "the engine aborted this generation before its first "
                                    "token; retry the request")
        new = seg not in self.segments
        if new:
            self.segments.append(seg)
        if delta_ids:
            seg.append(delta_ids, [0.0] * len(delta_ids), 0, delta)
        turn_text = self.codec.decode(gen.ids)
        start = len(seg.ids)
        seg.append(list(gen.ids), list(gen.logprobs), 1, turn_text)
        seg.turns.append(Turn(start, len(seg.ids), group.weights_version_min))
        self._versions += [group.weights_version_min, group.weights_version_max]
        self.generated += len(gen.ids)
        offered = {t["function"]["name"]: t["function"].get("parameters") or {} for t in tools or []
                   if isinstance(t.get("function"), dict) and "name" in t["function"]} if parse_calls else {}
        content, calls = parse_reply(gen.text, self.tool_format, offered)
        self.tool_calls.update(c.name for c in calls)
        own = self._own_text(turn_text, tools)
        self._own[reply_key(content, [(c.name, c.arguments) for c in calls])] = own
        self._last, self._last_text, self._last_finish = seg, gen.text, gen.finish_reason
        self._transcript = [[m.get("role", ""), _shown(m)] for m in messages] + [["assistant", gen.text]]
        return Reply(list(gen.ids), list(gen.logprobs), gen.text, content, calls, gen.finish_reason, len(prompt),
                     self.segments.index(seg), new)

    def count_tokens(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
        """The prompt tokens ``messages`` would take, rendered as ``complete`` renders them (the generation
        prompt included); no request is counted and nothing is recorded. Raises ``AgentRefusedError``."""
        if self.closed:
            raise AgentRefusedError(401, "authentication_error", "this episode's key is closed")
        try:
            full = self.codec.render([self._own_words(m) for m in messages], tools=tools or None,
                                     add_generation_prompt=True)
        except Exception as e:
            raise AgentRefusedError(400, "invalid_request_error", f"the chat template cannot render these "
                                    f"messages: {type(e).__name__}: {e}"[:2000], "messages") from None
        return len(self.codec.encode(full))

    def report_reward(self, reward: float) -> None:
        """The agent's reward for its episode (the last report wins); ``ValueError`` unless finite and bounded."""
        if not isinstance(reward, (int, float)) or isinstance(reward, bool) or not math.isfinite(reward) \
                or abs(reward) > MAX_REWARD:
            raise ValueError(f"reward must be a finite number in [-{MAX_REWARD:g}, {MAX_REWARD:g}], got {reward!r}")
        self.reported_reward = float(reward)

    def _admit(self) -> None:
        if self.closed:
            raise AgentRefusedError(401, "authentication_error", "this episode's key is closed")
        if self.end_reason is not None:
            raise AgentRefusedError(403, "permission_error", f"the episode has ended ({self.end_reason}): "
                                                             f"{self.detail}")
        if self.requests >= self.limits.max_requests:
            self._end("max_turns", f"the agent sent more than max_requests = {self.limits.max_requests} requests")
        elif self.generated >= self.limits.max_tokens:
            self._end("token_budget", f"the model generated {self.generated} tokens of max_tokens = "
                                      f"{self.limits.max_tokens}")
        if self.end_reason is not None:
            raise AgentRefusedError(403, "permission_error", f"the episode's limit is reached: {self.detail}")

    def _end(self, reason: str, detail: str) -> None:
        if self.end_reason is None:
            self.end_reason, self.detail = reason, detail
        self.limit_hit.set()

    def _own_words(self, m: dict[str, Any]) -> dict[str, Any]:
        """An assistant message the model wrote, as the model wrote it; any other message as it is."""
        if m.get("role") != "assistant":
            return m
        calls = [(c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls") or []]
        own = self._own.get(reply_key(m.get("content") or "", calls))
        return m if own is None else {"role": "assistant", "content": own}

    def _match(self, full: str) -> _Segment | None:
        """The segment whose tokens' text ``full`` extends (the longest; none in flight)."""
        best = None
        for seg in self.segments:
            if not seg.busy and full.startswith(seg.text) and (best is None or len(seg.text) >= len(best.text)):
                best = seg
        return best

    def _own_text(self, turn_text: str, tools: list[dict] | None) -> str:
        """The content of the model's turn: its tokens' text without the end of turn it wrote
        (the template writes that after the content)."""
        tkey = json.dumps(tools, sort_keys=True, default=str) if tools else ""
        closing = self._closings.get(tkey)
        if closing is None:
            closing = self._closings[tkey] = Transcript(self.codec, [{"role": "user", "content": "."}],
                                                        tools or None).closing
        for cut in range(len(closing), 0, -1):
            if turn_text.endswith(closing[:cut]):
                return turn_text[: len(turn_text) - cut]
        return turn_text

    # --- the episode -----------------------------------------------------------------------
    def outcome(self, *, end_reason: str | None = None, detail: str = "", environment: str = "agent",
                text: str | None = None) -> AgentOutcome:
        """The episode as a Sample's parts. ``end_reason`` (the runner's: ``done``, ``env_error``,
        ``env_timeout``...) wins; None: the session's own (a limit) or ``done``. ``text``: the final
        answer the verifier reads (None: the last model turn's text). ``environment``: the agent's name."""
        reason = end_reason or self.end_reason or "done"
        detail = detail or (self.detail if reason == self.end_reason else "")
        v_min = min(self._versions, default=self.engine.weights_version)
        v_max = max(self._versions, default=self.engine.weights_version)
        main = self._last
        turns = main.turns if main is not None else []
        reward = self.reported_reward
        episode = Episode(
            environment=environment, turns=turns, end_reason=reason,  # type: ignore[arg-type]
            turn_rewards=[0.0] * (len(turns) - 1) + [reward] if reward is not None and turns else [],
            env_reward=reward or 0.0, tool_calls=_bounded_counts(self.tool_calls),
            env_s=round(max(0.0, time.monotonic() - self._opened - self._generating_s), 6), detail=detail[:2000],
            transcript=_bounded_transcript(self._transcript),
            segments=[Segment(s.prompt_ids, Completion(s.ids, s.logprobs, s.mask), s.turns)
                      for s in self.segments if s is not main],
            agent=True,
        )
        final = self._last_text if text is None else text
        if main is None:  # no model turn: nothing to train on
            return EpisodeResult([], Completion([], []), final, "abort", v_min, v_max, episode)
        finish = "abort" if reason in ENV_FAILURES else self._last_finish
        return EpisodeResult(main.prompt_ids, Completion(main.ids, main.logprobs, main.mask), final, finish,
                             v_min, v_max, episode)


def _shown(m: dict[str, Any]) -> str:
    content = m.get("content") or ""
    if m.get("tool_calls"):
        content += json.dumps([c.get("function") for c in m["tool_calls"]], default=str)
    return content[:_TRANSCRIPT_CHARS]


def _bounded_transcript(entries: list[list[str]]) -> list[list[str]]:
    """The last entries, at most _TRANSCRIPT_ENTRIES and _TRANSCRIPT_TOTAL characters (validate's bounds)."""
    kept, total = [], 0
    for role, content in reversed(entries[-_TRANSCRIPT_ENTRIES:]):
        total += len(role) + len(content)
        if total > _TRANSCRIPT_TOTAL:
            break
        kept.append([role, content])
    return kept[::-1]


def _bounded_counts(counts: Counter[str]) -> dict[str, int]:
    if len(counts) <= _TOOL_NAMES + 1:
        return dict(counts)
    kept = dict(counts.most_common(_TOOL_NAMES))
    kept["other"] = sum(counts.values()) - sum(kept.values())
    return kept


__all__ = ["AgentLimits", "AgentOutcome", "AgentRefusedError", "AgentSession", "Reply"]
