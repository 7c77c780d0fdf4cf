"""An agent that asked the model and then answered nothing has given the policy's empty answer: the episode
is ``done`` with the text "", judged by the verifier like any answer, never dropped as ``env_error`` (issue 44:
the policy was never penalised for saying nothing). And a crashing command's traceback keeps its last line,
the one that names the exception, in the episode's detail however long its stderr."""

from __future__ import annotations

import sys

from rlvr.learner.watch.exception_line import exception_line
from rlvr.rollout.agents.config import AgentConfig
from rlvr.rollout.agents.runner import AgentRunner
from tests.factories import make_task
from tests.rollout.agents import agent_scripts

ASKS_THEN_PRINTS_NOTHING = """
import openai
openai.OpenAI(max_retries=0).chat.completions.create(model="m", messages=[{"role": "user", "content": "2+3="}])
"""

CRASHES_AFTER_A_LONG_STDERR = """
import sys
sys.stderr.write("warming up: " + "x" * 3000 + "\\n")
client = None
client.chat()
"""


async def _asks_then_returns_none(client, task):
    import openai

    oa = openai.AsyncOpenAI(base_url=client.openai_base_url, api_key=client.api_key, max_retries=0)
    await oa.chat.completions.create(model=client.model, messages=task["messages"])
    return None


def _check_judged_empty(res) -> None:
    assert res.episode.end_reason == "done", res.episode.detail
    assert res.text == "" and res.finish_reason != "abort"
    assert res.completion.ids and 1 in res.completion.mask  # the model's turn: trained with the verdict's reward


def test_a_command_agent_that_asks_and_prints_nothing_gives_an_empty_answer_not_env_error(endpoint, loop, tmp_path):
    script = agent_scripts.write(tmp_path, "silent.py", ASKS_THEN_PRINTS_NOTHING)
    res = loop.run(AgentRunner(AgentConfig(command=[sys.executable, str(script)]), endpoint).play(make_task(n=1), 0),
                   timeout=60)
    _check_judged_empty(res)


def test_a_callable_agent_that_asks_and_returns_none_gives_an_empty_answer_not_env_error(endpoint, loop):
    runner = AgentRunner(AgentConfig(callable=f"{__name__}:_asks_then_returns_none", timeout_s=60), endpoint)
    _check_judged_empty(loop.run(runner.play(make_task(n=1), 0), timeout=60))


def test_a_command_agent_s_exception_line_survives_a_long_stderr(endpoint, loop, tmp_path):
    script = agent_scripts.write(tmp_path, "crash.py", CRASHES_AFTER_A_LONG_STDERR)
    res = loop.run(AgentRunner(AgentConfig(command=[sys.executable, str(script)]), endpoint).play(make_task(n=1), 0),
                   timeout=60)
    assert res.episode.end_reason == "env_error"
    assert exception_line(res.episode.detail) == "AttributeError: 'NoneType' object has no attribute 'chat'"
