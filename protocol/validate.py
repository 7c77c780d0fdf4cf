"""Checks every consumed message passes after it decodes, before any use.

Decoding (codec.py) proves a payload has the right shape. It does not prove
the values are usable: msgpack carries NaN and ±inf floats, ids of any size,
lists of any length, and two lists that should agree can disagree. A bad
value that gets past here can crash-loop a role (a NaN reward made
``statistics.pstdev`` raise on every replay) or reach the weights.

What a type can say is said by the schema and checked by the decoder, in C:
each token id's range and each log-prob's (``TokenId``, ``LogProb`` in
samples.py), non-negative counts. A per-token check here would cost more than
the decode itself (bench/bus_hop.py). What spans fields, or needs a bound
the schema cannot state, is checked here.

``check_message(msg)`` dispatches on the message type and raises
``MessageInvalidError`` whose ``reason`` names the field and the rule; the
consume loop dead-letters the message with that reason. The bounds are the
constants below: far above any real run, far below what exhausts a role.

``check_token_ids_in_vocab(scored, vocab_size)`` is the one check that needs
something only the learner knows (its model's vocabulary): the learner calls
it before a sample reaches the embedding, where an out-of-range id is a
device-side assert on a GPU.

Not here: whether a message is a duplicate (the ledger and the consume
loop's duplicate check), and whether a verifier's params are right for that
verifier (each verifier's typed params, in verify/).
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from rlvr.protocol.control import Control, DeadLetter, Heartbeat
from rlvr.protocol.groups import BodyRef, SampleGroup, ScoredGroup, body_name
from rlvr.protocol.samples import MAX_INFO_BYTES, MAX_TOKEN_ID, Sample, Scored, Verdict
from rlvr.protocol.tasks import SamplingParams, Task, VerifierSpec
from rlvr.protocol.weights import WeightsAnnouncement

# Group size: completions per task. GRPO uses 4-64; 1024 leaves room for
# pass@k evaluation while bounding what one task can ask of the rollout pool.
MAX_GROUP_SIZE = 1024
# Assistant turns of one episode (EnvSpec.max_turns is bounded by this too).
MAX_TURNS = 256
# Most new tokens per completion (SamplingParams.max_tokens), and the longest
# prompt or completion in tokens: 2 Mi, past the 1M-token contexts of 2026's models,
# so an agent's longest episode is a valid sample (issue 46). These bounds say what a
# sample may be, not what a role holds in memory: that is bounded by the message's
# size, the server's max_payload for an inline group and bus.max_group_bytes for a
# group whose samples travel by reference (actors/bodies.py checks both before reading).
MAX_TOKENS = 2**21
# Tokens of an agent's episode, all its segments' prompts and completions together (Episode.segments).
MAX_EPISODE_TOKENS = 4 * MAX_TOKENS
# Characters of a prompt (all chat messages together) or a completion's text: 16 a token,
# four times what BPE vocabularies average on English text.
MAX_TEXT_CHARS = 16 * MAX_TOKENS
# Chat messages in one prompt; stop strings in one SamplingParams.
MAX_CHAT_MESSAGES = 256
MAX_STOP_STRINGS = 32
# Entries of a ``tests`` list in a verifier's params (code verifiers), and how
# deeply the params may nest (msgpack nesting is what exhausts the stack).
MAX_TESTS = 1_000
MAX_PARAMS_DEPTH = 16
# Characters of an id (run, task_id, group_id, replica, dataset, verifier name).
MAX_ID_CHARS = 512
# Rewards and reward components are O(1) by design; 1e6 bounds a reward an
# advantage can still be computed from in float32 without overflow.
MAX_ABS_REWARD = 1e6
# Named reward components in one verdict.
MAX_COMPONENTS = 64
# Steps a step verifier may score in one completion.
MAX_STEPS = 1024
# Sampling temperature: 0 is greedy; above 100 sampling is uniform noise.
MAX_TEMPERATURE = 100.0
# A LoRA adapter's configuration file (peft's name); the announcement of an adapter carries it.
ADAPTER_CONFIG_FILE = "adapter_config.json"
# Files in one weights announcement.
MAX_WEIGHT_FILES = 10_000


class MessageInvalidError(ValueError):
    """A message that decoded but breaks a rule; ``reason`` names the field."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _fail(reason: str) -> None:
    raise MessageInvalidError(reason)


def _finite(path: str, x: float, lo: float = -math.inf, hi: float = math.inf) -> None:
    if not math.isfinite(x):
        _fail(f"{path} must be finite, got {x!r}")
    if not lo <= x <= hi:
        _fail(f"{path} must be in [{lo:g}, {hi:g}], got {x!r}")


def _id(path: str, s: str, *, empty_ok: bool = False) -> None:
    if not s and not empty_ok:
        _fail(f"{path} must not be empty")
    if len(s) > MAX_ID_CHARS:
        _fail(f"{path} is {len(s)} characters, more than {MAX_ID_CHARS}")


def _count(path: str, n: int, most: int) -> None:
    if n > most:
        _fail(f"{path} has {n} entries, more than {most}")


_CONTAINERS = (dict, list, tuple)


def _depth(x: Any, limit: int) -> int:
    """Nesting depth of a decoded params value (a scalar 0, ``{}`` 1), counted level by
    level and stopping once past ``limit``; a flat dict of scalars (most specs) costs
    one pass over its values."""
    depth, level = 0, [x] if isinstance(x, _CONTAINERS) else []
    while level and depth <= limit:
        depth += 1
        inner: list[Any] = []
        for c in level:
            inner.extend(v for v in (c.values() if isinstance(c, dict) else c) if isinstance(v, _CONTAINERS))
        level = inner
    return depth


def check_sampling(p: SamplingParams, path: str = "sampling") -> None:
    _finite(f"{path}.temperature", p.temperature, 0.0, MAX_TEMPERATURE)
    _finite(f"{path}.top_p", p.top_p, 0.0, 1.0)
    if p.top_p <= 0.0:
        _fail(f"{path}.top_p must be > 0, got {p.top_p!r}")
    if p.top_k < -1 or p.top_k > MAX_TOKEN_ID:
        _fail(f"{path}.top_k must be -1, 0 or a positive count, got {p.top_k}")
    if not 1 <= p.max_tokens <= MAX_TOKENS:
        _fail(f"{path}.max_tokens must be in [1, {MAX_TOKENS}], got {p.max_tokens}")
    _count(f"{path}.stop", len(p.stop), MAX_STOP_STRINGS)
    if any(not s or len(s) > MAX_ID_CHARS for s in p.stop):
        _fail(f"{path}.stop strings must be 1-{MAX_ID_CHARS} characters")
    if p.seed is not None and not 0 <= p.seed < 2**63:
        _fail(f"{path}.seed must be in [0, 2**63), got {p.seed}")


def check_verifier_spec(spec: VerifierSpec, path: str = "verifier") -> None:
    _id(f"{path}.name", spec.name)
    if _depth(spec.params, MAX_PARAMS_DEPTH) > MAX_PARAMS_DEPTH:
        _fail(f"{path}.params nests deeper than {MAX_PARAMS_DEPTH} levels")
    tests = spec.params.get("tests")
    if isinstance(tests, (list, tuple)):
        _count(f"{path}.params.tests", len(tests), MAX_TESTS)


def _check_prompt(prompt: str | list | None, path: str = "prompt") -> None:
    if prompt is None:
        return
    if isinstance(prompt, str):
        chars = len(prompt)
    else:
        _count(path, len(prompt), MAX_CHAT_MESSAGES)
        chars = sum(len(m.content) for m in prompt)
    if chars > MAX_TEXT_CHARS:
        _fail(f"{path} is {chars} characters, more than {MAX_TEXT_CHARS}")


def check_record(record: dict, path: str = "record") -> None:
    """A dataset record travelling to reward functions: bounded nesting and count."""
    if _depth(record, MAX_PARAMS_DEPTH) > MAX_PARAMS_DEPTH:
        _fail(f"{path} nests deeper than {MAX_PARAMS_DEPTH} levels")
    _count(path, len(record), MAX_COMPONENTS * 16)


def _check_episode(s: Sample) -> None:
    e, n = s.episode, len(s.completion.ids)
    _id("episode.environment", e.environment)
    _count("episode.turns", len(e.turns), MAX_TURNS)
    last = 0
    for i, turn in enumerate(e.turns):
        if not last <= turn.start <= turn.end <= n:
            _fail(f"episode.turns[{i}] spans [{turn.start}, {turn.end}), outside the completion or out of order")
        if turn.end - turn.start > s.sampling.max_tokens:  # each turn, not the episode, is one generation
            _fail(f"episode.turns[{i}] has {turn.end - turn.start} tokens, more than sampling.max_tokens="
                  f"{s.sampling.max_tokens}")
        if not s.policy_version <= turn.policy_version <= s.policy_version_max:
            _fail(f"episode.turns[{i}].policy_version {turn.policy_version} is outside the sample's versions")
        last = turn.end
    _count("episode.turn_rewards", len(e.turn_rewards), MAX_TURNS)
    for i, r in enumerate(e.turn_rewards):
        _finite(f"episode.turn_rewards[{i}]", r, -MAX_ABS_REWARD, MAX_ABS_REWARD)
    _finite("episode.env_reward", e.env_reward, -MAX_ABS_REWARD, MAX_ABS_REWARD)
    _finite("episode.env_s", e.env_s, 0.0)
    _count("episode.tool_calls", len(e.tool_calls), MAX_COMPONENTS)
    _count("episode.tool_errors", len(e.tool_errors), MAX_COMPONENTS)
    _count("episode.transcript", len(e.transcript), 4 * MAX_TURNS)
    if sum(len(part) for pair in e.transcript for part in pair) > MAX_TEXT_CHARS:
        _fail(f"episode.transcript is more than {MAX_TEXT_CHARS} characters")
    _check_segments(s)
    _count("episode.info", len(e.info), MAX_TURNS)
    for i, info in enumerate(e.info):
        if _depth(info, MAX_PARAMS_DEPTH) > MAX_PARAMS_DEPTH:
            _fail(f"episode.info[{i}] nests deeper than {MAX_PARAMS_DEPTH} levels")
        if len(msgspec.json.encode(info)) > MAX_INFO_BYTES + 64:  # the rollout's trim marker fits the slack
            _fail(f"episode.info[{i}] is more than {MAX_INFO_BYTES} bytes of JSON")


def _check_segments(s: Sample) -> None:
    """An agent's other segments (``Episode.segments``): each a trainable sequence of its own, bounded
    like the Sample's own prompt and completion; all turns together at most MAX_TURNS."""
    e = s.episode
    _count("episode.segments", len(e.segments), MAX_TURNS)
    _count("episode turns, all segments", len(e.turns) + sum(len(g.turns) for g in e.segments), MAX_TURNS)
    total = len(s.prompt_ids) + len(s.completion.ids)
    for k, g in enumerate(e.segments):
        at, c = f"episode.segments[{k}]", g.completion
        if not g.prompt_ids or not c.ids:
            _fail(f"{at} has an empty prompt or completion")
        _count(f"{at}.prompt_ids", len(g.prompt_ids), MAX_TOKENS)
        _count(f"{at}.completion.ids", len(c.ids), MAX_TOKENS)
        if not len(c.logprobs) == len(c.mask) == len(c.ids):
            _fail(f"{at}.completion has {len(c.ids)} ids, {len(c.logprobs)} log-probs and {len(c.mask)} mask entries")
        if any(m not in (0, 1) for m in c.mask) or not any(c.mask):
            _fail(f"{at}.completion.mask holds values other than 0 and 1, or marks no token as the policy's")
        last = 0
        for i, turn in enumerate(g.turns):
            if not last <= turn.start <= turn.end <= len(c.ids):
                _fail(f"{at}.turns[{i}] spans [{turn.start}, {turn.end}), outside the completion or out of order")
            if turn.end - turn.start > s.sampling.max_tokens:
                _fail(f"{at}.turns[{i}] has {turn.end - turn.start} tokens, more than sampling.max_tokens="
                      f"{s.sampling.max_tokens}")
            if not s.policy_version <= turn.policy_version <= s.policy_version_max:
                _fail(f"{at}.turns[{i}].policy_version {turn.policy_version} is outside the sample's versions")
            last = turn.end
        total += len(g.prompt_ids) + len(c.ids)
    if total > MAX_EPISODE_TOKENS:
        _fail(f"the episode's segments hold {total} tokens, more than {MAX_EPISODE_TOKENS}")


def check_task(task: Task) -> None:
    _id("run", task.run)
    _id("task_id", task.task_id)
    _id("dataset", task.dataset, empty_ok=True)
    if not 1 <= task.n <= MAX_GROUP_SIZE:
        _fail(f"n must be in [1, {MAX_GROUP_SIZE}], got {task.n}")
    _check_prompt(task.prompt)
    check_sampling(task.sampling)
    check_verifier_spec(task.verifier)
    check_record(task.record)
    if task.env is not None:
        _id("env.name", task.env.name)
        if _depth(task.env.params, MAX_PARAMS_DEPTH) > MAX_PARAMS_DEPTH:
            _fail(f"env.params nests deeper than {MAX_PARAMS_DEPTH} levels")
    _finite("created_at", task.created_at, 0.0)


def check_sample(s: Sample) -> None:
    _id("run", s.run)
    _id("task_id", s.task_id)
    _id("group_id", s.group_id)
    _id("replica", s.replica, empty_ok=True)
    _id("dataset", s.dataset, empty_ok=True)
    if not 1 <= s.group_size <= MAX_GROUP_SIZE:
        _fail(f"group_size must be in [1, {MAX_GROUP_SIZE}], got {s.group_size}")
    if not 0 <= s.sample_index < s.group_size:
        _fail(f"sample_index must be in [0, group_size={s.group_size}), got {s.sample_index}")
    if s.policy_version_max < s.policy_version:
        _fail(f"policy_version_max ({s.policy_version_max}) is below policy_version ({s.policy_version})")
    _count("measures", len(s.measures), MAX_COMPONENTS)
    for k, x in s.measures.items():
        _id("measures key", k)
        _finite(f"measures[{k!r}]", x, -MAX_ABS_REWARD, MAX_ABS_REWARD)
    # Each id's range and each log-prob's are the schema's (TokenId, LogProb in
    # samples.py), checked as the message decodes; here, what spans fields.
    _count("prompt_ids", len(s.prompt_ids), MAX_TOKENS)
    _count("completion.ids", len(s.completion.ids), MAX_TOKENS)
    if len(s.completion.logprobs) != len(s.completion.ids):
        _fail(
            f"completion.logprobs has {len(s.completion.logprobs)} entries for "
            f"{len(s.completion.ids)} completion.ids (one log-prob per token)"
        )
    mask = s.completion.mask
    if mask:
        if len(mask) != len(s.completion.ids):
            _fail(f"completion.mask has {len(mask)} entries for {len(s.completion.ids)} completion.ids")
        if any(m not in (0, 1) for m in mask):
            _fail("completion.mask holds values other than 0 and 1")
        if not any(mask):
            _fail("completion.mask marks no token as the policy's")
    if s.episode is not None:
        _check_episode(s)
    if len(s.text) > MAX_TEXT_CHARS:
        _fail(f"text is {len(s.text)} characters, more than {MAX_TEXT_CHARS}")
    check_verifier_spec(s.verifier)
    check_sampling(s.sampling)
    _check_prompt(s.prompt)
    check_record(s.record)
    if s.episode is None and len(s.completion.ids) > s.sampling.max_tokens:
        _fail(f"completion has {len(s.completion.ids)} tokens, more than sampling.max_tokens={s.sampling.max_tokens}")
    t = s.timings
    _finite("timings.queued_s", t.queued_s, 0.0)
    _finite("timings.generate_s", t.generate_s, 0.0)
    _finite("timings.finished_at", t.finished_at, 0.0)


def check_verdict(v: Verdict, path: str = "verdict") -> None:
    _finite(f"{path}.reward", v.reward, -MAX_ABS_REWARD, MAX_ABS_REWARD)
    _count(f"{path}.components", len(v.components), MAX_COMPONENTS)
    for k, x in v.components.items():
        _id(f"{path}.components key", k)
        _finite(f"{path}.components[{k!r}]", x, -MAX_ABS_REWARD, MAX_ABS_REWARD)
    _id(f"{path}.verifier", v.verifier, empty_ok=True)
    _finite(f"{path}.latency_s", v.latency_s, 0.0)
    if v.extracted is not None and len(v.extracted) > MAX_TEXT_CHARS:
        _fail(f"{path}.extracted is {len(v.extracted)} characters, more than {MAX_TEXT_CHARS}")
    if len(v.detail) > MAX_TEXT_CHARS:
        _fail(f"{path}.detail is {len(v.detail)} characters, more than {MAX_TEXT_CHARS}")
    _count(f"{path}.steps", len(v.steps), MAX_STEPS)
    previous = 0
    for i, st in enumerate(v.steps):
        _finite(f"{path}.steps[{i}].reward", st.reward, -MAX_ABS_REWARD, MAX_ABS_REWARD)
        if st.end <= previous:
            _fail(f"{path}.steps[{i}].end = {st.end} does not follow the previous step's end {previous}")
        previous = st.end


def check_scored(sc: Scored) -> None:
    check_sample(sc.sample)
    check_verdict(sc.verdict)
    if sc.verdict.steps and sc.verdict.steps[-1].end > len(sc.sample.text):
        _fail(f"verdict.steps end at {sc.verdict.steps[-1].end}, past the {len(sc.sample.text)} characters of the text")
    _id("replica", sc.replica, empty_ok=True)


def _check_members(run: str, task_id: str, samples: list[Sample]) -> None:
    """A group message holds its task's whole group: samples 0..n-1 of one task, in order."""
    _id("run", run)
    _id("task_id", task_id)
    if not samples:
        _fail("samples is empty: a group message holds every sample of its task")
    n = samples[0].group_size
    if len(samples) != n:
        _fail(f"samples holds {len(samples)} samples of a group of {n}: a group message holds them all")
    for i, s in enumerate(samples):
        if s.run != run or s.task_id != task_id or s.group_id != samples[0].group_id:
            _fail(f"samples[{i}] is of run {s.run!r}, task {s.task_id!r}, group {s.group_id!r}; "
                  f"the message is of run {run!r}, task {task_id!r}, group {samples[0].group_id!r}")
        if s.sample_index != i or s.group_size != n:
            _fail(f"samples[{i}] has sample_index {s.sample_index} and group_size {s.group_size}: "
                  f"a group's samples come in order 0..{n - 1}")
        try:
            check_sample(s)
        except MessageInvalidError as e:
            raise MessageInvalidError(f"samples[{i}].{e.reason}") from None


_HEX = frozenset("0123456789abcdef")


def check_body_ref(task_id: str, ref: BodyRef) -> None:
    """A group's reference to its samples (``BodyRef``) names its own group's body and nothing else:
    ``<task_id>/<sha256>`` of this message's task id, in the run's own bucket (which no name can leave).
    Whether the object exists and holds those bytes is for the reader to check (actors/bodies.py)."""
    if len(ref.sha256) != 64 or not _HEX.issuperset(ref.sha256):
        _fail(f"body.sha256 must be 64 lowercase hex digits, got {ref.sha256[:80]!r}")
    if ref.name != body_name(task_id, ref.sha256):
        _fail(f"body.name {ref.name[:200]!r} is not {body_name(task_id, ref.sha256)!r} ('<task_id>/<sha256>' of "
              "this message): a reference names only its own group's body")
    if ref.size < 1:
        _fail(f"body.size must be positive, got {ref.size}")


def _check_reference(run: str, task_id: str, samples: list[Sample], ref: BodyRef) -> None:
    """A group whose samples are in the bodies bucket: the reference alone, until it is read."""
    _id("run", run)
    _id("task_id", task_id)
    if samples:
        _fail(f"samples holds {len(samples)} samples and body names them too: a group carries one or the other")
    check_body_ref(task_id, ref)


def check_sample_group(g: SampleGroup) -> None:
    """The group, or its reference while its samples are in the bodies bucket; ``actors/bodies.resolve``
    reads them and checks the whole group here again, as if it had come inline."""
    if g.body is not None:
        _check_reference(g.run, g.task_id, g.samples, g.body)
        return
    _check_members(g.run, g.task_id, g.samples)


def check_scored_group(g: ScoredGroup) -> None:
    """As ``check_sample_group``; a referenced group's verdicts are checked now, their count and their
    steps against each text once its samples are read."""
    if g.body is not None:
        _check_reference(g.run, g.task_id, g.samples, g.body)
        if not 1 <= len(g.verdicts) <= MAX_GROUP_SIZE:
            _fail(f"verdicts holds {len(g.verdicts)} verdicts, not 1 to {MAX_GROUP_SIZE}")
        for i, v in enumerate(g.verdicts):
            check_verdict(v, f"verdicts[{i}]")
        _id("replica", g.replica, empty_ok=True)
        return
    _check_members(g.run, g.task_id, g.samples)
    if len(g.verdicts) != len(g.samples):
        _fail(f"verdicts holds {len(g.verdicts)} verdicts for {len(g.samples)} samples (one each)")
    for i, (s, v) in enumerate(zip(g.samples, g.verdicts)):
        check_verdict(v, f"verdicts[{i}]")
        if v.steps and v.steps[-1].end > len(s.text):
            _fail(f"verdicts[{i}].steps end at {v.steps[-1].end}, past the {len(s.text)} characters of the text")
    _id("replica", g.replica, empty_ok=True)


def check_weights(w: WeightsAnnouncement) -> None:
    _count("files", len(w.files), MAX_WEIGHT_FILES)
    _finite("created_at", w.created_at, 0.0)
    if w.adapter:
        # Object names are ``v<version>/<file>``: the file name is the last part.
        names = [f.name.rsplit("/", 1)[-1] for f in w.files]
        if names.count(ADAPTER_CONFIG_FILE) != 1:
            _fail(f"files: an adapter announcement needs exactly one {ADAPTER_CONFIG_FILE}, got {names[:5]}")
        if not any(n.endswith(".safetensors") for n in names):
            _fail(f"files: an adapter announcement needs a .safetensors file, got {names[:5]}")


def check_message(msg: object) -> None:
    """Validate any wire message; raise ``MessageInvalidError`` naming the field."""
    match msg:
        case Task():
            check_task(msg)
        case Sample():
            check_sample(msg)
        case Scored():
            check_scored(msg)
        case SampleGroup():
            check_sample_group(msg)
        case ScoredGroup():
            check_scored_group(msg)
        case WeightsAnnouncement():
            check_weights(msg)
        case Heartbeat() | Control() | DeadLetter():
            pass  # observed, never acted on as work
        case _:
            raise TypeError(f"{type(msg).__name__} is not a wire message type")


def check_token_ids_in_vocab(scored: Scored, vocab_size: int) -> None:
    """Every prompt and completion id of ``scored`` (its episode's segments too) is below ``vocab_size``.

    The learner calls this before the sample reaches its embedding: on a GPU
    an out-of-range id is a device-side assert that kills the process, and the
    sample would be replayed into it after every restart.
    """
    s = scored.sample
    pairs = [("prompt_ids", s.prompt_ids), ("completion.ids", s.completion.ids)]
    for k, g in enumerate(s.episode.segments if s.episode is not None else []):
        pairs += [(f"episode.segments[{k}].prompt_ids", g.prompt_ids), (f"episode.segments[{k}].completion.ids",
                                                                        g.completion.ids)]
    for path, ids in pairs:
        top = max(ids, default=-1)
        if top >= vocab_size:
            i = ids.index(top)
            _fail(f"{path}[{i}] = {top} is outside the learner's vocabulary of {vocab_size}")


__all__ = [
    "MAX_ABS_REWARD",
    "MAX_GROUP_SIZE",
    "MAX_TEXT_CHARS",
    "MAX_TESTS",
    "MAX_TOKENS",
    "MessageInvalidError",
    "check_body_ref",
    "check_message",
    "check_sample",
    "check_sample_group",
    "check_scored",
    "check_scored_group",
    "check_task",
    "check_token_ids_in_vocab",
    "check_verdict",
]
