"""Token-in/token-out for multi-turn episodes: the exact tokens of a conversation, never re-encoded.

An episode's token sequence is built by appending, never by re-rendering:

- the prompt: the chat template over the task's messages (and the tools'
  schemas), with the assistant generation prompt, encoded once;
- each model turn: the ids the engine sampled, as they are, with their
  behaviour log-probs (mask 1);
- after a model turn, the rest of the template's turn ending the model did not
  write itself (ChatML's "\\n" after ``<|im_end|>``, or the whole ending when the
  turn was cut by length), then the environment's messages: both as the
  *delta* the template adds, rendered against a fixed one-message history and
  encoded on their own (mask 0, log-prob 0.0).

So the model's own tokens are never decoded and re-encoded (rllm-org/rllm#816),
and the learner trains on exactly what the rollout sampled.

**The extension property.** After every environment reply the whole
conversation is rendered again, as the template would render it from
scratch, and compared with the text of the tokens built so far. They differ
when the template rewrites earlier turns: Qwen3's strips the ``<think>``
block of every assistant turn before the last user message
(verl-project/verl#6719, PrimeIntellect-ai/prime-rl#1334). That is detected,
never spliced silently: ``add_env_messages`` returns it, the episode counts it
(``Episode.template_rewrites``) and the rollout's ``on_template_rewrite`` says
what happens: ``keep`` (the default) goes on with the tokens the model actually
conditioned on, which is the training-consistent history (what verl's agent
loop and SkyRL do); ``end`` ends the episode there (``template_rewrite``).

**Tools the template ignores.** A template without a tools branch (SmolLM2's)
renders the prompt the same with and without ``tools=``: the model would never
see the schemas. That is detected on the first such prompt and warned once per
template (``chat_template_ignores_tools``), with the fix: describe the tools in a
system message (``Transcript.tools_shown`` is False for such an episode).

Not covered: parsing tool calls (``rlvr.rollout.tools``), the loop itself
(``rlvr.rollout.episodes``).
"""

from __future__ import annotations

from typing import Any, Protocol

from rlvr.actors.logs import get_logger

log = get_logger(__name__)
_warned_tools_ignored: set[str] = set()  # the templates already warned about, once per process

# The fixed history every delta is rendered against.
_PROBE_USER = {"role": "user", "content": "."}
_PROBE_REPLY = "\u2063probe\u2063"  # text no model writes


class ChatCodec(Protocol):
    """What a transcript needs of a tokenizer."""

    def render(self, messages: list[dict[str, Any]], *, tools: list[dict] | None, add_generation_prompt: bool) -> str: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class HFChatCodec:
    """A transformers tokenizer with its chat template (``chat_template_kwargs``:
    extra template variables, e.g. ``enable_thinking`` for Qwen3)."""

    def __init__(self, tokenizer: Any, chat_template_kwargs: dict[str, Any] | None = None) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise TemplateMissingError("a multi-turn episode needs a tokenizer with a chat template")
        self.tokenizer = tokenizer
        self.kwargs = dict(chat_template_kwargs or {})

    def render(self, messages: list[dict[str, Any]], *, tools: list[dict] | None, add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=add_generation_prompt, tokenize=False, **self.kwargs
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)


def _warn_tools_ignored(codec: ChatCodec, names: list[str]) -> None:
    template = str(getattr(getattr(codec, "tokenizer", None), "chat_template", None) or type(codec).__name__)
    if template in _warned_tools_ignored:
        return
    _warned_tools_ignored.add(template)
    log.warning(
        "chat_template_ignores_tools", tools=names,
        detail="the model's chat template renders the prompt the same with and without `tools` (it has no tools "
               "branch, like SmolLM2's), so the model is never shown the tools' schemas",
        fix="describe the tools and how to call them in a system message yourself: learn.dataset.system_prompt, "
            "or a system message from the environment's reset(); [rollout] tool_format = \"plain\" takes a line "
            "`name(argument)` as a call; or use a model whose template renders tools (Qwen2.5, Qwen3, Llama 3.1)",
    )


class TemplateMissingError(ValueError):
    """The model has no chat template: its environment messages could not be written."""


class TemplateNotAppendableError(ValueError):
    """Even against a fixed history, the template does not append a message: no delta exists."""


class Transcript:
    """One episode's tokens: the prompt, then the completion with its loss mask."""

    def __init__(self, codec: ChatCodec, messages: list[dict[str, Any]], tools: list[dict] | None = None) -> None:
        self.codec = codec
        self.tools = tools or None
        self.messages = [dict(m) for m in messages]
        self.prompt_text = codec.render(self.messages, tools=self.tools, add_generation_prompt=True)
        self.prompt_ids = codec.encode(self.prompt_text)
        # A template without a tools branch (SmolLM2's) renders the same text with or without them.
        self.tools_shown = self.tools is None or self.prompt_text != codec.render(
            self.messages, tools=None, add_generation_prompt=True)
        if not self.tools_shown:
            _warn_tools_ignored(codec, [t.get("function", t).get("name", "?") for t in self.tools or []])
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.mask: list[int] = []
        self._texts: list[str] = []  # the text of every appended run of tokens, in order
        self.closing = self._turn_closing()
        self.rewrites = 0

    # --- appending ---------------------------------------------------------------
    def add_model_turn(self, ids: list[int], logprobs: list[float], text: str) -> tuple[int, int]:
        """The model's tokens, as sampled; returns their span in the completion."""
        start = len(self.ids)
        self.ids += ids
        self.logprobs += logprobs
        self.mask += [1] * len(ids)
        self._texts.append(self.codec.decode(ids))
        self.messages.append({"role": "assistant", "content": text})
        return start, len(self.ids)

    def add_env_messages(self, messages: list[dict[str, Any]]) -> bool:
        """The end of the model's turn and the environment's ``messages``, as the
        template's delta (masked). Returns whether the template rewrote an earlier turn."""
        turn_text = self._texts[-1] if self._texts else ""
        rest = self._rest_of_closing(turn_text)
        delta = self._delta(messages)
        for piece in (rest, delta):
            if piece:
                ids = self.codec.encode(piece)
                self.ids += ids
                self.logprobs += [0.0] * len(ids)
                self.mask += [0] * len(ids)
                self._texts.append(piece)
        self.messages += [dict(m) for m in messages]
        rewrote = not self.extends()
        self.rewrites += rewrote
        return rewrote

    def extends(self) -> bool:
        """Whether the template, rendering the whole conversation anew, gives the
        text of the tokens built so far (the extension property)."""
        fresh = self.codec.render(self.messages, tools=self.tools, add_generation_prompt=True)
        return fresh == self.prompt_text + "".join(self._texts)

    @property
    def text(self) -> str:
        return self.prompt_text + "".join(self._texts)

    # --- the template's pieces -------------------------------------------------------
    def _turn_closing(self) -> str:
        """What the template writes after an assistant message's content ("<|im_end|>\\n")."""
        opened = self.codec.render([_PROBE_USER], tools=self.tools, add_generation_prompt=True)
        closed = self.codec.render([_PROBE_USER, {"role": "assistant", "content": _PROBE_REPLY}],
                                   tools=self.tools, add_generation_prompt=False)
        at = closed.find(_PROBE_REPLY)
        if at < 0 or not closed.startswith(opened[: min(len(opened), at)]):
            raise TemplateNotAppendableError("the chat template does not render an assistant message's content")
        return closed[at + len(_PROBE_REPLY):]

    def _rest_of_closing(self, turn_text: str) -> str:
        """The part of the turn ending the model did not write: after an end-of-turn
        token it emitted, the rest; after a turn cut short, all of it."""
        for cut in range(len(self.closing), 0, -1):
            if turn_text.endswith(self.closing[:cut]):
                return self.closing[cut:]
        return self.closing

    def _delta(self, messages: list[dict[str, Any]]) -> str:
        """What the template appends for ``messages`` (and the generation prompt) after a
        fixed history, so earlier turns are never rendered again."""
        base = self.codec.render([_PROBE_USER], tools=self.tools, add_generation_prompt=False)
        full = self.codec.render([_PROBE_USER, *messages], tools=self.tools, add_generation_prompt=True)
        if not full.startswith(base):
            raise TemplateNotAppendableError(
                "the chat template renders a history differently once a message follows it; "
                "its environment messages cannot be appended as tokens"
            )
        return full[len(base):]


__all__ = ["ChatCodec", "HFChatCodec", "TemplateMissingError", "TemplateNotAppendableError", "Transcript"]
