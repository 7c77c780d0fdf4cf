"""The `plain` tool-call grammar (docs/environments.md, "The plain format"): a line that is nothing
but `name(argument)` is a call, and a misspelled tool name is answered with the documented
`error: unknown tool ...`, never passed to the environment's step() as the model's answer."""

from __future__ import annotations

import time

import anyio

from rlvr.protocol import SamplingParams, Task, VerifierSpec
from rlvr.protocol.tasks import EnvSpec
from rlvr.rollout.builtin_tools import calculator
from rlvr.rollout.envs.registry import load_environments
from rlvr.rollout.episodes import EpisodeSettings, run_episode
from rlvr.rollout.tools import call_tool, parse_tool_calls
from tests.rollout.test_episodes import ScriptedEngine

load_environments(["tests.env_fixtures:ToolBoxEnv"])
TOOLS = {calculator.name: calculator}


def test_the_grammar_a_whole_line_is_a_call_a_name_inside_a_sentence_is_not():
    calls, problems = parse_tool_calls("Let me compute.\n  calculator(37 * (8))  \nI get calculator(2).", "plain",
                                       TOOLS)
    assert [(c.name, c.arguments) for c in calls] == [("calculator", {"_": "37 * (8)"})] and problems == []
    calls, _ = parse_tool_calls("calculator(1+1)\ncalculater(2+2)", "plain", TOOLS)
    assert [c.name for c in calls] == ["calculator", "calculater"]  # every such line, in order, whatever its name
    assert parse_tool_calls("296", "plain", TOOLS) == ([], [])


def test_an_unknown_tool_name_gets_the_documented_error():
    (call,), _ = parse_tool_calls("calculater(37*8)", "plain", TOOLS)
    result = anyio.run(call_tool, TOOLS, call, 5.0)
    assert result.content == "error: unknown tool 'calculater' (tools: calculator)" and result.error


def test_in_an_episode_a_misspelled_call_is_told_and_counted_and_does_not_reach_step():
    engine = ScriptedEngine(["calculater(37*8)", "calculator(37*8)", "296"])
    task = Task(run="t", task_id="t-t0", dataset="d", index=0, prompt="What is 37*8?", verifier=VerifierSpec("env"),
                n=1, sampling=SamplingParams(max_tokens=32), policy_version=0, created_at=time.time(),
                env=EnvSpec("tests.env_fixtures:ToolBoxEnv", {}, max_turns=5, max_tokens=4096))
    r = anyio.run(run_episode, engine, task, 0, EpisodeSettings(tool_format="plain", tool_timeout_s=5.0))
    e = r.episode
    # The misspelling did not end the episode as the answer (ToolBoxEnv's step ends it at once).
    assert e.end_reason == "done" and len(e.turns) == 3 and r.text == "296" and e.env_reward == 1.0
    assert e.tool_calls == {"calculater": 1, "calculator": 1} and e.tool_errors == {"calculater": 1}
    assert "tool: error: unknown tool 'calculater' (tools: broken, calculator, hangs, slow)" in engine.prompts[1]
    assert "tool: 296" in engine.prompts[2]
