"""The stages scenario: ``rlvr-actor up`` with ``[[stages]]`` (cli/stages/), its learners SIGKILLed.

A run of its own (``chaos8``): ``up`` starts its own nats-server and the built-in example's tiny model
(its preparation step), then the stages, each part a learner, a rollout and a verifier (the ``hf``
engine). The runner is the supervisor: after each kill ``up`` must stop non-zero, and the runner
starts ``up --run-dir`` again with the same config, which resumes from ``stages.json`` and the part's
checkpoints. The kinds (label = kind), each SIGKILL of one stage part's learner process:

- ``stages:sigkill_rejection_sampling``: the rejection_sft stage's sampling learner (a dry learner, one
  sampled batch a step), once this attempt has written ``samples/step-<N>.jsonl`` (N seeded).
- ``stages:sigkill_stage_boundary``, two concrete boundaries (full run):
  *end*: the learner of a finished RL stage (the first), once it has committed the checkpoint of its
  last step (``learner.json`` step == the stage's steps) and before ``stages.json`` marks the stage
  done; it is then in its closing held-out round, before the final checkpoint and summary. The
  resumed stage must train nothing more (its step and ledger stay where they were) and hand on;
  *start*: the first learner of the next stage after a finished one (the final RL stage), as soon
  as it logs ``learner_start`` and before its first checkpoint. The finished stages must not run
  again (their attempts stay), the started one runs whole from its start model.
  A kill that finds the learner already gone (the stage done) is recorded ``hit: false``.
- ``stages:sigkill_rl``: the learner of an RL stage after the checkpoint of step N (seeded, before
  the last), as tests/cli/test_stages_run.py does.

Quick (CI): one ``sigkill_rejection_sampling`` on the cheapest run that has a rejection_sft stage:
the preparation step, then that stage alone (no held-out measurement). Full: the four stages
(sft -> rl -> rejection_sft -> rl) and every kind twice.

After the final ``up`` (rc 0): ``summary.json`` and ``stages.json`` (every stage done, attempts =
1 + the kills that hit it, steps as configured); the chain (the first stage starts from the prepared
model, each next ``model_start`` is the previous ``model_end``); every RL part's ledger against what
its SCORED stream holds (bench/chaos/invariants.py ``check_custody``: nothing trained or dropped
twice, nothing lost below the floor; samples scored past a stage's last step are counted as dropped ``after_last_step``),
its steps and samples trained; the sampling part the same, plus its dumps: every id of the committed
ledger dumped once, ``n`` per group, ``kept_counts.json`` summing to ``sampled`` and its
``dropped_before_the_filters`` equal to what the sampler's ledger dropped (a copy of a dumped sample,
met again after a resume, is no drop). The checks are in stages_checks.py.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import msgspec

from rlvr.learner.custody.checkpoint import LearnerState

# The sampling stage keeps any non-empty completion, cut by the token limit or not: the scenario is about
# kills and custody, and a barely warmed-up model (20-60 SFT steps of a 1-layer model) does not reliably
# end its answers within 7 tokens. CI once sampled 24 of 24 truncated and the stage, rightly, refused to
# train on nothing (this machine: 20 of 24); what the filters keep must not depend on the CPU's numerics.
WIDE = {"name": "regex", "params": {"pattern": ".", "mode": "search"}}
KINDS = ("stages:sigkill_rejection_sampling", "stages:sigkill_stage_boundary", "stages:sigkill_rl")


def stages_config(run: str, quick: bool) -> dict:
    """The built-in example shrunk (tests/cli/stages_helpers.py's tiny run); quick: the rejection stage alone."""
    from rlvr.cli.commands.up import builtin_config_path

    raw = msgspec.toml.decode(builtin_config_path().read_bytes())
    raw.update(run=run, observability={})
    raw["rollout"]["max_inflight_tasks"] = 16
    learn = raw["learn"]
    learn.update(group_size=4, groups_per_step=4, steps=3, checkpoint_every=1, dynamic_sampling=False,
                 group_timeout_s=120.0, progress_every_s=5.0)
    learn["dataset"].update(max_operand=20, holdout=40)
    learn["eval"] = {"prompts": 0 if quick else 16, "n": 2, "ks": [1], "every_steps": 0, "keep_completions": 0}
    learn["prepare"].update(hidden=32, layers=1, heads=1, sft_target_pass_at_1=0.0, sft_check_every=60,
                            sft_max_steps=60, sft_check_prompts=8, sft_batch=64)
    raw["up"] = {"rollout_replicas": 1, "verify_replicas": 1, "learner_threads": 1, "threads_per_process": 1,
                 "display": "plain", "stop_timeout_s": 20.0}
    rejection = {"kind": "rejection_sft", "name": "rejection", "n": 4, "prompts": 8, "prompts_per_batch": 1,
                 "filters": {"max_per_prompt": 2, "dedup": True, "max_tokens": 7, "drop_truncated": False},
                 "sft": {"steps": 4, "batch": 8, "lr": 1e-4}, "learn": {"train_verifier": WIDE}}
    if quick:  # the cheapest: a shorter warm-up, fewer sampling steps, a shorter SFT
        learn["prepare"].update(sft_check_every=20, sft_max_steps=20)
        rejection.update(prompts=6, sft={"steps": 2, "batch": 8, "lr": 1e-4})
    raw["stages"] = [rejection] if quick else [
        {"kind": "sft", "name": "cold-start", "sft": {"steps": 30, "batch": 64, "lr": 1e-3}},
        {"kind": "rl", "name": "reasoning-rl", "learn": {"steps": 3}},
        rejection,
        {"kind": "rl", "name": "final-rl",
         "learn": {"steps": 3, "engine": {"loss": {"kl_coef": 0.001}, "ref_update_every": 2}}},
    ]
    return raw


def stage_plan(rng: random.Random, quick: bool) -> list[dict]:
    """The faults in run order: (label, stage index, part, trigger, at)."""
    def f(label: str, stage: int, part: str, trigger: str, at: int = 0) -> dict:
        return {"kind": f"stages:{label}", "label": f"stages:{label}", "stage": stage, "part": part,
                "trigger": trigger, "at": at}

    if quick:
        return [f("sigkill_rejection_sampling", 0, "sample", "dump", rng.randint(1, 3))]
    return [f("sigkill_rl", 1, "rl", "checkpoint", rng.randint(1, 2)),
            f("sigkill_stage_boundary", 1, "rl", "end", 3),
            f("sigkill_rejection_sampling", 2, "sample", "dump", rng.randint(1, 3)),
            f("sigkill_rejection_sampling", 2, "sample", "dump", rng.randint(5, 7)),
            f("sigkill_stage_boundary", 3, "rl", "start"),
            f("sigkill_rl", 3, "rl", "checkpoint", rng.randint(1, 2))]


# --- processes ----------------------------------------------------------------------------
def _up(config: Path, run_dir: Path, out: Path) -> subprocess.Popen:
    with open(out, "a") as f:
        return subprocess.Popen(
            [sys.executable, "-m", "rlvr.cli", "up", "--config", str(config), "--run-dir", str(run_dir),
             "--display", "plain"],
            stdout=f, stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True)


def _pids_with(text: str, *need: bytes) -> list[int]:
    """Processes whose command line holds ``text`` (and every one of ``need``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parts = cmd.split(b"\0")
        if text.encode() in cmd and all(n in parts for n in need):
            found.append(int(entry.name))
    return found


def _learner_pid(part: Path) -> int | None:
    pids = _pids_with(str(part / "config.json"), b"--role", b"learn")
    return pids[0] if pids else None


def _stop(up: subprocess.Popen | None, run_dir: Path) -> None:
    """``up`` (SIGTERM: it stops its roles and server) and, after it, anything left of this run, by pid."""
    if up is not None and up.poll() is None:
        os.killpg(up.pid, signal.SIGTERM)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
    for pid in _pids_with(str(run_dir)):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# --- what the run wrote -------------------------------------------------------------------
def _state(part: Path) -> LearnerState | None:
    root = part / "checkpoints"
    for _ in range(50):
        try:
            name = (root / "latest").read_text().strip()
            return msgspec.json.decode((root / name / "learner.json").read_bytes(), type=LearnerState)
        except FileNotFoundError:
            if not (root / "latest").exists():
                return None
        except msgspec.DecodeError:
            pass
        time.sleep(0.01)
    return None


def _commits(part: Path) -> int:
    st = _state(part)
    return st.commits if st else 0


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}


def _stage_status(run_dir: Path, i: int) -> str:
    stages = read_json(run_dir / "stages.json").get("stages", [])
    return stages[i]["status"] if i < len(stages) else ""


class Runner:
    def __init__(self, root: Path, run: str, quick: bool) -> None:
        self.root, self.run, self.quick = root, run, quick
        self.run_dir, self.out = root / "run", root / "up.out"
        self.raw = stages_config(run, quick)
        self.config = root / "config.json"
        self.config.write_bytes(msgspec.json.encode(self.raw))
        self.names = [f"{i}-{s['name']}" for i, s in enumerate(self.raw["stages"])]
        self.up: subprocess.Popen | None = None
        self.recover: list[tuple[dict, Path, int, float]] = []  # (record, part, commits at the kill, t)
        self.violations: list[str] = []

    def part(self, i: int, part: str) -> Path:
        return self.run_dir / "stages" / self.names[i] / part

    def start(self) -> None:
        self.up = _up(self.config, self.run_dir, self.out)

    def tail(self) -> str:
        return self.out.read_text(errors="replace")[-1500:] if self.out.exists() else ""

    def _track(self) -> None:
        """A killed part's first commit after the kill ends its stall."""
        now = time.monotonic()
        for item in list(self.recover):
            rec, part, commits, t = item
            if _commits(part) > commits:
                rec["stall_s"] = round(now - t, 2)
                self.recover.remove(item)

    def poll(self, until, timeout_s: float):
        """``until()``'s first truthy value; None when ``up`` exits first or after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            v = until()
            if v:
                return v
            self._track()
            if self.up is None or self.up.poll() is not None:
                return None
            time.sleep(0.05)
        return None

    def trigger(self, f: dict):
        """A predicate: the learner's pid once the fault's moment has come (written by this attempt)."""
        part, t0 = self.part(f["stage"], f["part"]), time.time()
        base = _commits(part)
        log = part / "logs" / "learn-0.log"
        offset = log.stat().st_size if log.exists() else 0
        steps = self.raw["stages"][f["stage"]].get("learn", {}).get("steps", self.raw["learn"]["steps"])

        def moment() -> bool:
            if f["trigger"] == "dump":
                p = part / "samples" / f"step-{f['at']:06d}.jsonl"
                return p.exists() and p.stat().st_mtime >= t0
            if f["trigger"] == "start":
                if not log.exists():
                    return False
                with open(log, "rb") as fh:
                    fh.seek(offset)
                    return b'"learner_start"' in fh.read()
            st = _state(part)
            want = steps if f["trigger"] == "end" else f["at"]
            return st is not None and st.commits > base and st.step >= want

        return lambda: moment() and _learner_pid(part)

    def inject(self, f: dict) -> dict:
        rec = dict(f, stage=self.names[f["stage"]], stall_s=None, hit=False, violations=[])
        before = len(self.violations)
        part = self.part(f["stage"], f["part"])
        if self.up is None:
            self.start()
        pid = self.poll(self.trigger(f), 600)
        if pid is None:
            rc = self.up.poll()
            self.violations.append(f"{f['label']} ({rec['stage']}/{f['part']} {f['trigger']} {f['at']}): the moment "
                                   f"never came (up exit {rc}); up's output: {self.tail()}")
            rec["violations"] = self.violations[before:]
            if rc is not None:
                self.up = None
            return rec
        st = _state(part)
        commits = st.commits if st else 0
        rec.update(pid=pid, step_at_kill=st.step if st else 0, commits_at_kill=commits,
                   first_checkpoint_at_kill=st is not None)
        t = time.monotonic()
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            rec["hit"] = False
            rec["note"] = "the learner was gone before the kill"
            print(f"[chaos] {self.run} {f['label']}: missed ({rec['stage']})", flush=True)
            return rec
        status = self.poll(lambda: _stage_status(self.run_dir, f["stage"]) == "done", 180)
        rc = self.up.poll()
        if status and rc is None:
            rec["note"] = "the learner had exited 0 (the stage is done): the kill found it gone"
        elif rc is None:
            self.violations.append(f"{f['label']}: up did not stop within 180 s of the learner's kill")
        else:
            rec.update(hit=True, up_rc=rc)
            self.up = None
            if rc == 0:
                self.violations.append(f"{f['label']}: up exited 0 after its learner was SIGKILLed in "
                                       f"{rec['stage']}: {self.tail()}")
            if _stage_status(self.run_dir, f["stage"]) != "running":
                self.violations.append(f"{f['label']}: stages.json says {rec['stage']} is "
                                       f"{_stage_status(self.run_dir, f['stage'])!r} after the kill, not 'running'")
            self.recover.append((rec, part, commits, t))
        rec["violations"] = self.violations[before:]
        print(f"[chaos] {self.run} {f['label']}: {rec['stage']}/{f['part']} {f['trigger']} {f['at']} hit "
              f"{rec['hit']} at step {rec['step_at_kill']} up rc {rec.get('up_rc')} "
              f"{'OK' if not rec['violations'] else 'VIOLATIONS ' + str(rec['violations'])[:400]}", flush=True)
        return rec

    def finish(self, timeout_s: float) -> int | None:
        if self.up is None:
            self.start()
        self.poll(lambda: False, timeout_s)
        rc = self.up.poll()
        self._track()
        for rec, *_ in self.recover:
            self.violations.append(f"{rec['label']} ({rec['stage']}): its part never committed again")
        if rc != 0:
            self.violations.append(f"the final up exited {rc} (None: still running after {timeout_s} s): {self.tail()}")
        return rc


def run_stages_scenario(root: Path, run: str, seed: int, quick: bool, only: list[str] = ()) -> dict:
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    r = Runner(root, run, quick)
    records: list[dict] = []
    result: dict = {"scenario": "stages", "run": run, "seed": seed, "run_dir": str(r.run_dir)}
    t0 = time.monotonic()
    try:
        for f in stage_plan(rng, quick):
            if only and not any(f["label"].startswith(o) for o in only):
                continue
            records.append(r.inject(f))
        rc = r.finish(300 if quick else 900)
        result["final_up_rc"] = rc
        if rc == 0:
            from bench.chaos.stages_checks import check_run

            result["finish"], found = check_run(r, records)
            r.violations += found
    except Exception as e:  # the runner's own failure: kept with the faults done so far
        traceback.print_exc()
        r.violations.append(f"the runner failed: {type(e).__name__}: {e}")
    finally:
        _stop(r.up, r.run_dir)
        result["faults"] = records
        result["violations"] = r.violations
        result["wall_s"] = round(time.monotonic() - t0, 1)
    c = result.get("finish", {}).get("custody", {})
    print(f"[chaos] {run} stages: {len(records)} faults, published {c.get('published')} trained {c.get('trained')} "
          f"lost {len(c.get('lost', []))} twice {len(c.get('twice', []))} wall {result['wall_s']} s "
          f"{'OK' if not r.violations else 'VIOLATIONS ' + str(r.violations)[:600]}", flush=True)
    return result
