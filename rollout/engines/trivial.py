"""A stand-in engine for the walking skeleton: it answers arithmetic prompts.

The prompt (plain text, or the last chat message) ends with an expression and
"=", such as "12+7=". With probability ``accuracy`` the engine answers the
right integer, otherwise one of a few nearby wrong ones, chosen uniformly.
``ids`` are the utf-8 bytes of the answer; the log-prob of the choice sits on
the first token and the others get 0, so the sequence log-prob is log p.

It imports no torch and loads "weights" by only bumping its version, so the
bus, the actor and the learner can be exercised on any machine. A prompt with
no expression gets the answer "?" (wrong for any verifier).

Test aid: with ``hold_file`` set, each generation first waits (cancellably)
until that file exists, so bus tests can hold a task inside a replica.

Load tests (``lengths``, bench/scale): each completion is as long as a
reasoning model's, drawn from a lognormal and cut at the task's max_tokens,
with ids from a real vocabulary's range and ~4 characters of text per token
ending with "#### <answer>"; ``tokens_per_s`` paces the engine like a decoder.
With ``sigma = 0`` every completion is exactly ``median_tokens`` long (cut at
max_tokens): how the tests send samples of 200k and 1M tokens (issue 46).
"""

from __future__ import annotations

import math
import pathlib
import random
import re

import anyio
import msgspec

from rlvr.protocol.tasks import ChatMessage, SamplingParams
from rlvr.protocol.weights import WeightFile
from rlvr.rollout.engines.base import Generation, GroupResult, TrivialEngineConfig, TrivialLengthsConfig
from rlvr.rollout.weights import WeightsRejectedError, verify_weight_files

_EXPR = re.compile(r"(-?\d+)\s*([-+*])\s*(-?\d+)\s*=\s*$")
_LAST_EXPR = re.compile(r"(-?\d+)\s*([-+*])\s*(-?\d+)\s*=")
_WRONG_OFFSETS = (-3, -2, -1, 1, 2, 3)
# Long completions are cut from pools drawn once: drawing every id would cost the replica more CPU than
# the bus it is there to load. 2**16 tokens: longer completions wrap around.
_POOL_TOKENS = 1 << 16
# English text runs at about 4 characters per token in BPE vocabularies (OpenAI's tokenizer guide).
_CHARS_PER_TOKEN = 4
_WORDS = ("so", "the", "sum", "is", "we", "check", "each", "term", "then", "carry", "wait", "let", "me",
          "verify", "again", "digit", "step", "result", "therefore", "add", "subtract", "value", "of", "and")


def solve(text: str) -> int | None:
    """The value of the expression the text ends with, or None."""
    m = _EXPR.search(text)
    if m is None:
        return None
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    return a + b if op == "+" else a - b if op == "-" else a * b


class ByteChatCodec:
    """The trivial engine's "tokenizer": utf-8 bytes, and a chat template of one
    ``role: content`` line per message (the generation prompt is ``assistant: ``).
    Append-only, as a real template should be."""

    def render(self, messages: list[dict], *, tools: list[dict] | None, add_generation_prompt: bool) -> str:
        text = "".join(f"{m['role']}: {m['content']}\n" for m in messages)
        return text + ("assistant: " if add_generation_prompt else "")

    def encode(self, text: str) -> list[int]:
        return list(text.encode())

    def decode(self, ids: list[int]) -> str:
        return bytes(ids).decode(errors="replace")


def _take(pool, start: int, n: int):
    """``n`` items of ``pool`` (a list or a str) from ``start``, wrapping around."""
    out = pool[start:start + n]
    while len(out) < n:
        out += pool[: n - len(out)]
    return out


class LongCompletions:
    """Completions of drawn lengths, cut from pools of ids, log-probs and text made once."""

    def __init__(self, cfg: TrivialLengthsConfig, seed: int) -> None:
        self.cfg = cfg
        rng = random.Random(f"lengths/{seed}")
        self.ids = [rng.randrange(cfg.vocab_size) for _ in range(_POOL_TOKENS)]
        self.logprobs = [-min(rng.expovariate(1.0), 50.0) for _ in range(_POOL_TOKENS)]
        text = " ".join(rng.choice(_WORDS) for _ in range(_POOL_TOKENS * _CHARS_PER_TOKEN // 4))
        self.text = _take(text, 0, _POOL_TOKENS * _CHARS_PER_TOKEN)

    def length(self, rng: random.Random) -> int:
        return max(1, round(rng.lognormvariate(math.log(self.cfg.median_tokens), self.cfg.sigma)))

    def completion(self, rng: random.Random, answer: str, logp: float, max_tokens: int) -> Generation:
        n = self.length(rng)
        at = rng.randrange(_POOL_TOKENS)
        ids, logprobs = _take(self.ids, at, min(n, max_tokens)), _take(self.logprobs, at, min(n, max_tokens))
        logprobs[0] = logp  # the choice of answer, as a short answer carries it
        chars = len(ids) * _CHARS_PER_TOKEN
        if n > max_tokens:  # cut before the answer, as a real engine cuts a long one
            return Generation(ids=ids, logprobs=logprobs, text=_take(self.text, at, chars), finish_reason="length")
        end = f"\n#### {answer}"
        return Generation(ids=ids, logprobs=logprobs, text=_take(self.text, at, max(0, chars - len(end))) + end,
                          finish_reason="stop")


class TrivialEngine:
    def __init__(self, cfg: TrivialEngineConfig) -> None:
        self.cfg = cfg
        self.weights_version = 0
        self._rng = random.Random(cfg.seed)
        self.long = LongCompletions(cfg.lengths, cfg.seed) if cfg.lengths is not None else None
        self._free_at = 0.0  # when the paced "decoder" is next free (anyio clock)

    async def start(self) -> None:
        return None

    def _answer(self, rng: random.Random, truth: int | None) -> tuple[str, float]:
        if truth is None:
            return "?", 0.0
        acc = self.cfg.accuracy
        if rng.random() < acc:
            return str(truth), math.log(acc)
        return str(truth + rng.choice(_WRONG_OFFSETS)), math.log((1.0 - acc) / len(_WRONG_OFFSETS))

    async def generate(
        self, prompt: str | list[ChatMessage], n: int, sampling: SamplingParams
    ) -> GroupResult:
        text = prompt if isinstance(prompt, str) else (prompt[-1].content if prompt else "")
        return await self._answer_group(text, solve(text), n, sampling, long=self.long is not None)

    async def generate_ids(self, prompt_ids: list[int], n: int, sampling: SamplingParams) -> GroupResult:
        """A turn of an episode: the answer to the last expression in the conversation."""
        text = bytes(prompt_ids).decode(errors="replace")
        found = _LAST_EXPR.findall(text)
        truth = solve(f"{found[-1][0]}{found[-1][1]}{found[-1][2]}=") if found else None
        result = await self._answer_group(text, truth, n, sampling)
        return msgspec.structs.replace(result, prompt_ids=list(prompt_ids))

    def chat_codec(self) -> ByteChatCodec:
        return ByteChatCodec()

    async def score(self, rows: list[tuple[list[int], list[int]]]) -> tuple[list[list[float]], int]:
        """No model to ask: every target token has probability ``accuracy`` (plumbing only)."""
        return [[math.log(self.cfg.accuracy)] * len(t) for _, t in rows], self.weights_version

    async def _pace(self, tokens: int) -> None:
        """Wait as a decoder of ``tokens_per_s`` would take for ``tokens`` more, after what it already owes."""
        rate = self.cfg.lengths.tokens_per_s if self.cfg.lengths is not None else 0.0
        if rate > 0:
            self._free_at = max(anyio.current_time(), self._free_at) + tokens / rate
            await anyio.sleep_until(self._free_at)

    async def _answer_group(
        self, text: str, truth: int | None, n: int, sampling: SamplingParams, long: bool = False
    ) -> GroupResult:
        if self.cfg.hold_file:
            hold = pathlib.Path(self.cfg.hold_file)
            while not hold.exists():
                await anyio.sleep(0.02)
        rng = self._rng if sampling.seed is None else random.Random(f"{self.cfg.seed}/{sampling.seed}/{text}")
        generations = []
        for _ in range(n):
            answer, logp = self._answer(rng, truth)
            if long and self.long is not None:
                generations.append(self.long.completion(rng, answer, logp, sampling.max_tokens))
                continue
            ids = list(answer.encode())
            finish = "stop"
            if len(ids) > sampling.max_tokens:
                ids, finish = ids[: sampling.max_tokens], "length"
            logprobs = [logp] + [0.0] * (len(ids) - 1)
            generations.append(
                Generation(ids=ids, logprobs=logprobs, text=bytes(ids).decode(errors="replace"), finish_reason=finish)
            )
        await self._pace(sum(len(g.ids) for g in generations))
        v = self.weights_version
        return GroupResult(
            prompt_ids=list(text.encode()), generations=generations, weights_version_min=v, weights_version_max=v
        )

    async def load_weights(
        self, directory: pathlib.Path, version: int, files: list[WeightFile] | None = None
    ) -> None:
        if not pathlib.Path(directory).is_dir():
            raise WeightsRejectedError(f"{directory} is not a directory")
        if files is not None:
            verify_weight_files(pathlib.Path(directory), files)
        self.weights_version = version

    # A LoRA adapter changes nothing here either: only the version is followed.
    load_adapter = load_weights

    async def load_state_dict(self, state: dict, version: int) -> None:
        """Tensors in memory (the collective transport): only the version is followed."""
        if not state:
            raise WeightsRejectedError("no tensors received")
        self.weights_version = version

    async def close(self) -> None:
        return None


__all__ = ["TrivialEngine", "solve"]
