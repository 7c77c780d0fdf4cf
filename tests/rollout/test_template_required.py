"""A model without a chat template, used for episodes, is a start-up error that names the model
and the key: before issue 33 every task of the replica failed, each dead-lettered as a poison pill
whose reason was "ExceptionGroup: unhandled errors in a TaskGroup (4 sub-exceptions)"."""

from __future__ import annotations

import json
import shutil

import anyio
import pytest

from rlvr.rollout.actor import RolloutActor
from rlvr.rollout.config import RolloutConfig
from rlvr.rollout.engines.base import HFEngineConfig
from rlvr.rollout.transcript import TemplateMissingError


def test_a_model_without_a_chat_template_cannot_start_a_replica_that_plays_episodes(tiny_model, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(tiny_model, bare)
    config = bare / "tokenizer_config.json"
    tok = json.loads(config.read_text())
    tok.pop("chat_template", None)
    config.write_text(json.dumps(tok))
    (bare / "chat_template.jinja").unlink(missing_ok=True)
    cfg = RolloutConfig(engine=HFEngineConfig(model=str(bare)), environments=["calc_env:Calculator"])
    actor = RolloutActor(cfg)

    async def start() -> None:
        await actor.engine.start()
        try:
            actor._check_chat_template()
        finally:
            await actor.engine.close()

    with pytest.raises(TemplateMissingError) as e:
        anyio.run(start)
    assert str(bare) in str(e.value) and "rollout.engine.model" in str(e.value) and "calc_env:Calculator" in str(e.value)
