"""Token-in/token-out on real chat templates: the model's tokens are kept as sampled, the environment's
messages are the template's delta, and a template that rewrites earlier turns (Qwen3) is detected."""

from __future__ import annotations

import pytest

from rlvr.rollout.transcript import HFChatCodec, Transcript
from tests.rollout.chat_tokenizers import SPECIALS, chat_tokenizer

TEMPLATES = sorted(SPECIALS)
PROMPT = [{"role": "user", "content": "What is 2+3?"}]


def _sampled(tok, text: str) -> list[int]:
    """Ids a model could have sampled for ``text``: one token per character (not how the
    tokenizer would encode it), then its end-of-turn token."""
    ids = [tok.convert_tokens_to_ids(t) for t in tok.convert_ids_to_tokens(tok(text, add_special_tokens=False)["input_ids"])]
    per_char = [i for ch in text for i in tok(ch, add_special_tokens=False)["input_ids"]]
    assert tok.decode(per_char) == text
    return (per_char if per_char != ids else ids) + [tok.eos_token_id]


@pytest.mark.parametrize("name", TEMPLATES)
def test_the_model_s_tokens_stay_as_sampled_and_the_whole_equals_a_fresh_render(name):
    tok = chat_tokenizer(name)
    t = Transcript(HFChatCodec(tok), PROMPT)
    first = _sampled(tok, "The answer is 5.")
    span = t.add_model_turn(first, [-0.25] * len(first), "The answer is 5.")
    assert t.ids[span[0]:span[1]] == first and t.mask == [1] * len(first)  # never decoded and re-encoded
    rewrote = t.add_env_messages([{"role": "user", "content": "Are you sure?"}])
    assert not rewrote and t.extends()
    second = _sampled(tok, "Yes.")
    t.add_model_turn(second, [-0.5] * len(second), "Yes.")
    assert t.ids[-len(second):] == second
    env = [i for i, m in zip(t.ids, t.mask) if m == 0]
    assert env and all(lp == 0.0 for lp, m in zip(t.logprobs, t.mask) if m == 0)
    # What the model saw before its second turn is what the template writes for that conversation.
    assert tok.decode(t.prompt_ids + t.ids[: -len(second)]) == tok.apply_chat_template(
        t.messages[:-1], tokenize=False, add_generation_prompt=True)


def test_qwen3_rewrites_an_earlier_turn_s_reasoning_and_that_is_detected():
    tok = chat_tokenizer("qwen3")
    t = Transcript(HFChatCodec(tok), PROMPT)
    turn = _sampled(tok, "<think>hmm, let me add</think>The answer is 5.")
    t.add_model_turn(turn, [-0.1] * len(turn), "<think>hmm, let me add</think>The answer is 5.")
    assert t.add_env_messages([{"role": "user", "content": "Are you sure?"}]) is True
    assert t.rewrites == 1 and not t.extends()
    # The tokens the model conditioned on are kept: its reasoning is still in the sequence.
    assert "hmm, let me add" in tok.decode(t.ids)
    # The same turn without reasoning extends cleanly.
    plain = Transcript(HFChatCodec(tok), PROMPT)
    ids = _sampled(tok, "The answer is 5.")
    plain.add_model_turn(ids, [-0.1] * len(ids), "The answer is 5.")
    assert plain.add_env_messages([{"role": "user", "content": "Are you sure?"}]) is False


@pytest.mark.parametrize("name", ["qwen2.5", "qwen3", "llama3"])
def test_tool_results_are_appended_as_the_template_s_delta_with_the_tools_offered(name):
    tok = chat_tokenizer(name)
    tools = [{"type": "function", "function": {"name": "calc", "description": "Evaluate arithmetic.",
                                               "parameters": {"type": "object", "properties": {"expr": {"type": "string"}},
                                                              "required": ["expr"]}}}]
    t = Transcript(HFChatCodec(tok, {"date_string": "26 Jul 2024"} if name == "llama3" else None), PROMPT, tools)
    assert "calc" in t.prompt_text  # the template offered the tool
    call = '<tool_call>\n{"name": "calc", "arguments": {"expr": "2+3"}}\n</tool_call>' if name != "llama3" \
        else '{"name": "calc", "parameters": {"expr": "2+3"}}'
    ids = _sampled(tok, call)
    t.add_model_turn(ids, [-0.1] * len(ids), call)
    assert t.add_env_messages([{"role": "tool", "content": "5", "name": "calc"}]) is False
    assert "5" in tok.decode([i for i, m in zip(t.ids, t.mask) if m == 0])  # the result, masked
    assert t.extends()  # the tokens equal the template's render of the call and its result


def test_a_template_without_a_tools_branch_is_warned_about_once_with_the_fix():
    from structlog.testing import capture_logs

    from rlvr.rollout import transcript

    tools = [{"type": "function", "function": {"name": "calc", "description": "Evaluate arithmetic.",
                                               "parameters": {"type": "object", "properties": {}}}}]
    transcript._warned_tools_ignored.clear()
    with capture_logs() as logs:
        smol = [Transcript(HFChatCodec(chat_tokenizer("smollm2")), PROMPT, tools) for _ in range(2)]
        qwen = Transcript(HFChatCodec(chat_tokenizer("qwen2.5")), PROMPT, tools)
        plain = Transcript(HFChatCodec(chat_tokenizer("smollm2")), PROMPT)  # no tools: nothing to warn about
    assert [t.tools_shown for t in smol] == [False, False] and "calc" not in smol[0].prompt_text
    assert qwen.tools_shown and plain.tools_shown
    (warned,) = [e for e in logs if e["event"] == "chat_template_ignores_tools"]
    assert warned["log_level"] == "warning" and warned["tools"] == ["calc"]
    assert "system_prompt" in warned["fix"] and 'tool_format = "plain"' in warned["fix"]
