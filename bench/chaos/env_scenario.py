"""The envs scenario: episodes against a real OpenEnv server and a real ``verifiers`` environment,
under faults of those environments.

A run of its own (``chaos7``, its own nats-server), the usual skeleton (dry learner, one rollout
replica on the trivial engine, two verifier replicas scoring ``env``), but every task is an
episode of ``bench.chaos.env_episodes:Mixed``: even task numbers are played by the rollout's OpenEnv
adapter against the quiz server of tests/openenv_quiz_server.py (openenv-core under uvicorn, its
own process, started and restarted here by PID), odd ones by its verifiers adapter with
``env_episodes.load_environment`` (a ``MultiTurnEnv`` loaded by ``verifiers.load_environment``).
Both ask sums, so the trivial engine plays them; the reward is the environment's (``env``).
``env_timeout_s`` is 6 s, so a silent server or a hung step ends its episode within seconds.

The faults (env_faults.py) each break one of the two environments; after each, ``run_fault`` checks
progress, liveness and custody as for every scenario, and the fault itself checks the end reasons
in the rollout's log. At the end every episode the rollout logged as failed must have been dropped
with a counted reason (``verify_failed``: the verifiers score it ``error``), never trained as a 0.

Quick: ``openenv:server_killed_mid_episode`` and ``verifiers:env_raises``. Full: every kind three
times, in a seeded order.
"""

from __future__ import annotations

import random
import time
import traceback
from pathlib import Path

from bench.chaos import env_faults as EF
from bench.chaos.scenario import Scenario

MIXED = "bench.chaos.env_episodes:Mixed"


def _dataset(url: str) -> dict:
    params = {"openenv": {"url": url, "action": "text", "observation_field": "question", "max_concurrent": 8},
              "verifiers": {"env_id": "bench.chaos.env_episodes"}}
    return {"kind": "arithmetic", "verifier": {"name": "env"},
            "env": {"name": MIXED, "params": params, "max_turns": 4}}


class EnvScenario(Scenario):
    def __init__(self, root: Path, run: str, openenv: EF.QuizServer, **kw) -> None:
        super().__init__(root, run, learn={"dataset": _dataset(openenv.url)}, **kw)
        self.openenv = openenv
        self.faulted: list[tuple[str, int]] = []  # (label, rollout log offset when it began)

    def config(self, name: str, *, learn: dict | None = None, bus: dict | None = None,
               rollout: dict | None = None) -> Path:
        rollout = {"environments": [MIXED], "env_timeout_s": EF.ENV_TIMEOUT_S, **(rollout or {})}
        return super().config(name, learn=learn, bus=bus, rollout=rollout)


def env_plan(rng: random.Random, quick: bool) -> list[tuple[str, object]]:
    if quick:
        return [(k, EF.FAULTS[k]) for k in ("openenv:server_killed_mid_episode", "verifiers:env_raises")]
    plan = [(k, fn) for k, fn in EF.FAULTS.items()] * 3
    rng.shuffle(plan)
    return plan


def run_env_scenario(root: Path, run: str, seed: int, quick: bool, only: list[str] = ()) -> dict:
    from bench.chaos.run import play, scenario_server

    rng = random.Random(seed)
    server = scenario_server(root, run)
    openenv = EF.QuizServer(root).start()
    sc = EnvScenario(root, run, openenv, seed=seed, servers=[server])
    records: list[dict] = []
    result: dict = {"scenario": "envs", "run": run, "seed": seed, "openenv_url": openenv.url}
    try:
        sc.start()
        sc.start_sampling()
        result["warm_s"] = _warm(sc, 180.0)
        records += play(sc, env_plan(rng, quick), rng, only)
        result["episode_ends_outside_faults"] = _outside(sc)
        result["failed_settled_before_finish_s"] = _settle(sc, 60.0)
        result["finish"] = sc.finish()
        fates, found = EF.check_failed(sc)
        result["failed_episodes"] = fates
        sc.violations += found
        result["openenv_server_starts"] = openenv.starts
    except Exception as e:  # the runner's own failure: kept with the faults done so far
        traceback.print_exc()
        sc.violations.append(f"the runner failed: {type(e).__name__}: {e}")
    finally:
        result["faults"] = records
        sc.close()
        openenv.kill()
        server.kill()
        time.sleep(0.5)
        left = EF.children(root)
        if left:
            sc.violations.append(f"{len(left)} processes started by hung environment steps left after the "
                                 f"scenario: {[p.pid for p in left]}")
            for p in left:
                try:
                    p.kill()
                except Exception:  # noqa: BLE001 (gone meanwhile)
                    pass
        result["violations"] = sc.violations
    return result


def _outside(sc: EnvScenario) -> dict[str, int]:
    """Failed episodes logged before the first fault (the environments untouched): reported, not judged
    (a loaded machine may time out a step)."""
    import json

    first = min((o for _, o in sc.faulted), default=None)
    text = sc.sk.log_path(EF.REPLICA).read_bytes()[:first].decode(errors="replace")
    events = []
    for line in text.splitlines():
        if '"env_episode_ended"' in line:
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    return EF._reasons(events)


def _settle(sc: EnvScenario, timeout_s: float) -> float | None:
    """Wait until the committed ledger settles every episode the rollout logged as failed: a group whose
    every sample failed makes no step, so the drain learner (``Scenario.finish``, which counts the steps
    the leftovers need) must not be left waiting for it."""
    from bench.chaos.invariants import read_committed

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        failed = {str(e.get("episode")) for e in EF.log_events(sc, 0, "env_episode_ended")}
        settled = {sid for e in read_committed(sc.out).entries for sid in (*e.trained, *e.dropped)}
        if failed <= settled:
            return round(time.monotonic() - t0, 2)
        time.sleep(0.5)
    return None


def _warm(sc: EnvScenario, timeout_s: float) -> float | None:
    """Wait until samples of both environments reach SCORED: the first episodes load both (openenv's
    import alone takes seconds on a loaded machine), and a fault must meet episodes in play."""
    from bench.chaos.env_episodes import kind_of

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if {kind_of(c.task_id) for c in sc.obs.read_scored().values()} >= {"openenv", "verifiers"}:
            return round(time.monotonic() - t0, 2)
        time.sleep(0.5)
    sc.violations.append(f"no samples of both environments on SCORED within {timeout_s}s of the start")
    return None
