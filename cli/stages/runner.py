"""``rlvr-actor up`` with ``[[stages]]``: each stage in turn, from the previous one's weights.

One nats-server serves the whole run; every part of a stage that uses the bus has
a run id of its own (``<run>-s<i>``...), so its streams, ledger and checkpoints
are its own. Per stage, under ``<run_dir>/stages/<i>-<name>/``:

- ``sft``: ``python -m rlvr.learner.train.sft`` (the learner's DeepSpeed engine)
  on the pairs, exported to ``model/``; then a held-out measurement.
- ``rl``: the learner, rollout and verifier roles, as ``up`` starts them for a
  single run, with the stage's ``[learn]`` (folder ``rl/``): exactly once through
  its own checkpoints; the reference model is ``model_path``, the stage's start.
  It hands on its last exported weights (``rl/weights/v<N>``) and its held-out
  rounds are its before and after.
- ``rejection_sft``: a dry learner (no engine) with the roles samples ``n``
  completions of ``prompts`` training prompts through the normal path and writes
  each group to ``sample/samples/step-<N>.jsonl``; ``learner/data/rejection.py``
  keeps what the verifier accepted and the filters pass (``kept.jsonl``,
  ``kept_counts.json``); SFT on it; a measurement.

A measurement is a dry learner of one step whose held-out rounds (before and
after its step, the same weights) give pass@1 over ``2 x eval.prompts x eval.n``
completions; it runs only where no stage has measured that model already.
``stages.json`` (``record.py``) says where a stopped run resumes.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from rlvr.cli.children import Child, child_env, spawn_role
from rlvr.cli.cpus import split_for
from rlvr.cli.stages.config import RejectionSFTStage, RLStage, SFTStage, stage_learn, stage_name
from rlvr.cli.stages.record import StageRecord, StageResult, load_record, save_record
from rlvr.cli.stages.summary import stage_lines

if TYPE_CHECKING:
    from rlvr.cli.commands.up import StopRequest
    from rlvr.cli.run_config import Config
    from rlvr.learner.config import LearnConfig


class StageFailedError(RuntimeError):
    """A stage's part failed; the message says which and where its log is."""


class StageStopped(Exception):
    """``up`` was asked to stop (a signal) while a stage ran."""


def run_stages(cfg: Config, run_dir: Path, display, stop: StopRequest, started_at: float) -> int:
    """Run (or resume) every stage; write ``summary.json`` and print the stage table. The exit code."""
    started = time.monotonic()
    runner = StageRunner(cfg, run_dir, display, stop)
    code = 0
    try:
        runner.run()
    except StageStopped:
        display.info("stopped on request; `up --run-dir` with the same config resumes at "
                     f"{runner.current or 'the next stage'}")
    except StageFailedError as e:
        display.error(str(e))
        code = 1
    summary = write_summary(run_dir, runner.record, code, time.monotonic() - started, cfg, started_at)
    for line in stage_lines(summary["stages"]):
        display.info(line)
    display.finish(summary, run_dir)
    return code


def write_summary(run_dir: Path, record: StageRecord | None, code: int, wall: float, cfg: Config,
                  started_at: float) -> dict:
    stages = [msgspec.to_builtins(s) for s in record.stages] if record else []
    # The last RL stage's own summary (its reward, pass@k, drops...), then the run's over it.
    rl = [s for s in stages if s["kind"] == "rl" and s["status"] != "pending"]
    summary = _read_json(run_dir / "stages" / rl[-1]["name"] / "rl" / "learner_summary.json") if rl else {}
    summary |= {"run_dir": str(run_dir), "engine": cfg.rollout.engine.__struct_config__.tag,
               "wall_seconds": round(wall, 1), "exit_code": code, "started_at": started_at, "stages": stages,
               "stages_done": sum(s["status"] == "done" for s in stages)}
    done = [s for s in stages if s["status"] == "done"]
    if done:
        summary["pass_at_1_before"] = stages[0]["pass_at_1_before"]
        summary["pass_at_1_after"] = done[-1]["pass_at_1_after"]
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


class StageRunner:
    def __init__(self, cfg: Config, run_dir: Path, display, stop: StopRequest) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.display = display
        self.stop = stop
        self.names = [stage_name(s, i) for i, s in enumerate(cfg.stages)]
        self.record: StageRecord | None = None
        self.current = ""
        self._mark = time.monotonic()

    # --- the plan ---------------------------------------------------------------------
    def run(self) -> None:
        plan = [f"{s.__struct_config__.tag}:{n}" for s, n in zip(self.cfg.stages, self.names)]
        self.record = load_record(self.run_dir, plan)
        if not self.record.model:
            self.record.model = self._start_model()
            self._save()
        for i, stage in enumerate(self.cfg.stages):
            res = self.record.stages[i]
            if res.status == "done":
                continue
            self.current = f"stage {self.names[i]}"
            self._check_stop()
            if res.status == "pending":
                res.model_start = self.record.model
            res.status, res.attempts = "running", res.attempts + 1
            self._mark = time.monotonic()
            self._save()
            self.display.info(f"stage {self.names[i]} ({stage.__struct_config__.tag}) from {res.model_start}"
                              + (f", attempt {res.attempts}" if res.attempts > 1 else ""))
            learn = stage_learn(self.cfg.learn, stage, i)
            folder = self.run_dir / "stages" / self.names[i]
            folder.mkdir(parents=True, exist_ok=True)
            try:
                if isinstance(stage, RLStage):
                    self._rl(i, learn, res, folder)
                elif isinstance(stage, SFTStage):
                    self._sft_stage(i, stage, learn, res, folder)
                else:
                    self._rejection(i, stage, learn, res, folder)
            finally:
                self._save()  # the attempt's seconds count, also when it failed or was stopped
            res.phase = ""
            res.status = "done"
            self.record.model = res.model_end
            self._save()
            self.display.info(f"stage {self.names[i]} done: {res.steps} steps, held-out pass@1 "
                              f"{_pct(res.pass_at_1_before)} -> {_pct(res.pass_at_1_after)}, {res.seconds:.0f} s")
        self.current = ""

    def _start_model(self) -> str:
        """The first stage's model: the preparation step's (the built-in example), else learn.engine.model_path."""
        from rlvr.cli.commands.up import PrepareFailedError, _prepare

        if self.cfg.learn.prepare is None:
            engine = self.cfg.learn.engine
            if engine is None or engine.model_path.startswith("@"):
                raise StageFailedError("stages start from learn.engine.model_path (a model folder) or "
                                       "[learn.prepare]; neither is set")
            return engine.model_path
        try:
            prepared = _prepare(self.cfg, self.run_dir, self.display, self.stop)
        except PrepareFailedError as e:
            self._check_stop()
            raise StageFailedError(str(e)) from None
        assert prepared.learn.engine is not None
        return prepared.learn.engine.model_path

    def _save(self) -> None:
        assert self.record is not None
        now = time.monotonic()
        for res in self.record.stages:
            if res.status == "running":
                res.seconds = round(res.seconds + now - self._mark, 1)
        self._mark = now
        save_record(self.run_dir, self.record)

    def _phase(self, res: StageResult, phase: str) -> None:
        res.phase = phase
        self._save()

    def _check_stop(self) -> None:
        if self.stop.signal is not None:
            raise StageStopped

    # --- the kinds ----------------------------------------------------------------------
    def _rl(self, i: int, learn: LearnConfig, res: StageResult, folder: Path) -> None:
        self._phase(res, "rl")
        out = folder / "rl"
        self._roles(self._phase_config(learn, res.model_start, f"s{i}", out), out)
        summary = _read_json(out / "learner_summary.json")
        res.steps = int(summary.get("steps", 0))
        assert self.record is not None
        # A model already measured keeps its first figure (one number per model in the table);
        # the learner's own round before RL is kept beside it.
        res.pass_at_1_before = self.record.pass_at_1.get(res.model_start, summary.get("pass_at_1_before"))
        res.pass_at_1_after = summary.get("pass_at_1_after")
        res.detail = {"samples_trained": summary.get("samples_trained"), "drops": summary.get("drops", {}),
                      "learner_pass_at_1_before": summary.get("pass_at_1_before"),
                      "learner_wall_seconds": summary.get("learner_wall_seconds")}
        from rlvr.cli.commands.eval import CheckpointNotFoundError, resolve_checkpoint

        try:
            model = resolve_checkpoint(out)
        except CheckpointNotFoundError as e:
            raise StageFailedError(f"stage {self.names[i]}: the learner exported no weights ({e})") from None
        res.model_end = str(model)
        for model_dir, p in ((res.model_start, res.pass_at_1_before), (res.model_end, res.pass_at_1_after)):
            if p is not None:
                self.record.pass_at_1.setdefault(model_dir, p)

    def _sft_stage(self, i: int, stage: SFTStage, learn: LearnConfig, res: StageResult, folder: Path) -> None:
        from rlvr.learner.data.sft_pairs import PairsFileError, pairs_from_dataset, write_pairs
        from rlvr.learner.config import train_dataset

        res.pass_at_1_before = self._measure(i, learn, res.model_start, folder, res)
        data = stage.sft.data
        if data == "@dataset":
            data = str(folder / "sft-data.jsonl")
            try:
                write_pairs(data, pairs_from_dataset(train_dataset(learn), seed=self.cfg.seed, limit=stage.sft.limit))
            except PairsFileError as e:
                raise StageFailedError(f"stage {self.names[i]}: {e}") from None
        self._sft(i, learn, stage.sft, data, res, folder)
        res.pass_at_1_after = self._measure(i, learn, res.model_end, folder, res)

    def _rejection(self, i: int, stage: RejectionSFTStage, learn: LearnConfig, res: StageResult, folder: Path) -> None:
        from rlvr.learner.data.rejection import read_dumps, select, write_kept

        res.pass_at_1_before = self._measure(i, learn, res.model_start, folder, res)
        self._phase(res, "sample")
        per_batch = stage.prompts_per_batch or learn.groups_per_step
        steps = math.ceil(stage.prompts / per_batch)
        sampler = msgspec.structs.replace(
            learn, engine=None, group_size=stage.n, groups_per_step=per_batch, steps=steps,
            dynamic_sampling=False, max_inflight_tasks=0, eval=msgspec.structs.replace(learn.eval, prompts=0),
            samples=msgspec.structs.replace(learn.samples, dump=True, every_steps=1),
            max_staleness=max(learn.max_staleness, 1),
        )
        out = folder / "sample"
        self._roles(self._phase_config(sampler, res.model_start, f"s{i}", out), out)
        self._phase(res, "filter")
        kept, counts = select(read_dumps(out, steps), stage.filters)
        sampled = _read_json(out / "learner_summary.json")
        counts["dropped_before_the_filters"] = dropped_before_the_filters(sampled)
        write_kept(folder, kept, counts)
        res.detail = {"kept": counts}
        self.display.info(f"stage {self.names[i]}: kept {counts['kept']} of {counts['sampled']} samples "
                          f"({', '.join(f'{k} {v}' for k, v in counts.items() if k not in ('sampled', 'kept', 'prompts_kept') and v)})")
        if not kept:
            raise StageFailedError(f"stage {self.names[i]}: rejection sampling kept no sample "
                                   f"({json.dumps(counts)}); see {folder / 'kept_counts.json'}")
        self._sft(i, learn, stage.sft, str(folder / "kept.jsonl"), res, folder)
        res.pass_at_1_after = self._measure(i, learn, res.model_end, folder, res)

    # --- the parts ----------------------------------------------------------------------
    def _sft(self, i: int, learn: LearnConfig, opts, data: str, res: StageResult, folder: Path) -> None:
        from rlvr.learner.train.sft import SFTParams

        self._phase(res, "sft")
        assert learn.engine is not None  # stage_learn checked it
        engine = msgspec.structs.replace(learn.engine, model_path=res.model_start)
        (folder / "sft-engine.json").write_bytes(msgspec.json.encode(engine))
        params = SFTParams(steps=opts.steps, batch=opts.batch, lr=opts.lr, warmup_steps=opts.warmup_steps,
                           seed=self.cfg.seed + i)
        (folder / "logs").mkdir(exist_ok=True)
        env = child_env(PYTHONUNBUFFERED="1")
        threads = self.cfg.up.learner_threads or self.cfg.up.threads_per_process
        if threads:
            env["OMP_NUM_THREADS"] = str(threads)
        log_path = folder / "logs" / "sft.log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-P", "-m", "rlvr.learner.train.sft", "--engine", str(folder / "sft-engine.json"),
                 "--data", data, "--out", str(folder), "--params", msgspec.json.encode(params).decode()],
                stdout=subprocess.PIPE, stderr=log, env=env, start_new_session=True,
            )
            self.stop.prepare = proc  # a signal to `up` terminates it (its handler)
            if self.stop.signal is not None:
                proc.terminate()
            assert proc.stdout is not None
            for raw in proc.stdout:
                log.write(raw)
                line = raw.decode(errors="replace").rstrip()
                if line.startswith("[sft]"):
                    self.display.info(f"{self.names[i]} {line}")
            self.stop.prepare = None
            rc = proc.wait()
        self._check_stop()
        if rc != 0:
            from rlvr.cli.children import last_error

            raise StageFailedError(f"stage {self.names[i]}: SFT exited with {rc}: "
                                   f"{last_error(log_path) or 'no reason logged'}\n  (the whole log: {log_path})")
        info = _read_json(folder / "sft.json")
        res.steps = int(info["steps"])
        res.model_end = info["model"]
        res.detail = {**res.detail, "sft": info}

    def _measure(self, i: int, learn: LearnConfig, model: str, folder: Path, res: StageResult) -> float | None:
        """Held-out pass@1 of ``model`` (cached per model); None without eval prompts."""
        assert self.record is not None
        if learn.eval.prompts == 0:
            return None
        if model in self.record.pass_at_1:
            return self.record.pass_at_1[model]
        self._phase(res, "measure")
        n = sum(1 for _ in folder.glob("measure-*")) + 1  # a fresh run id per try: no old round to mix in
        out = folder / f"measure-{n}"
        dry = msgspec.structs.replace(
            learn, engine=None, steps=1, groups_per_step=1, group_size=2, dynamic_sampling=False,
            max_inflight_tasks=1, samples=msgspec.structs.replace(learn.samples, dump=False),
        )
        self._roles(self._phase_config(dry, model, f"s{i}m{n}", out), out)
        summary = _read_json(out / "learner_summary.json")
        rounds = [e["pass_at_1"] for e in summary.get("evals", []) if e.get("pass_at_1") is not None]
        value = sum(rounds) / len(rounds) if rounds else None
        if value is not None:
            self.record.pass_at_1[model] = value
        return value

    def _phase_config(self, learn: LearnConfig, model: str, suffix: str, out: Path) -> Config:
        from rlvr.cli.run_config import Config

        raw = msgspec.to_builtins(self.cfg)
        raw["stages"] = []
        raw["run"] = f"{self.cfg.run[:48]}-{suffix}"
        lraw = msgspec.to_builtins(learn)
        lraw.update(prepare=None, out_dir=str(out))
        if lraw.get("engine"):
            lraw["engine"]["model_path"] = model
        raw["learn"] = lraw
        raw["rollout"]["engine"]["model"] = model
        return msgspec.convert(raw, Config)

    def _roles(self, cfg: Config, out: Path) -> None:
        """The learner, rollout and verifier roles of one part, until the learner is done."""
        from rlvr.cli.commands.up import _stop_all, _supervise
        from rlvr.cli.run_config import dump_config

        self._check_stop()
        (out / "logs").mkdir(parents=True, exist_ok=True)
        config_file = out / "config.json"
        config_file.write_bytes(dump_config(cfg))
        up = cfg.up
        children: list[Child] = []
        plan = [("learn", 1), ("rollout", up.rollout_replicas), ("verify", max(1, up.verify_replicas))]
        cpus = split_for(up)
        try:
            for role, count in plan:
                threads = up.learner_threads if role == "learn" and up.learner_threads else up.threads_per_process
                for k in range(count):
                    children.append(spawn_role(role, f"{role}-{k}", config_file, out / "logs", threads=threads,
                                               extra_env={"RLVR_RUN_DIR": str(out)}, cpus=cpus))
            code = _supervise(children, self.stop, self.display, None)
        finally:
            _stop_all(children, up.stop_timeout_s, self.display)
        self._check_stop()
        if code != 0:
            raise StageFailedError(f"{self.current}: a role exited with {code} (logs in {out / 'logs'}); "
                                   "`up --run-dir` with the same config resumes here")


COPIES = ("duplicate", "late_duplicate", "conflict")


def dropped_before_the_filters(summary: dict) -> int:
    """Samples the sampling learner dropped (never dumped), from its ``learner_summary.json``: its
    ``samples.dropped``. Copies of a sample (a redelivered or regenerated copy of one that was
    dumped: ``duplicate``, ``late_duplicate``, ``conflict``) are not dropped samples, and a resumed
    sampler meets them after every kill; an older summary without ``samples`` sums the other drops."""
    samples = summary.get("samples")
    if isinstance(samples, dict) and "dropped" in samples:
        return int(samples["dropped"])
    return sum(int(v) for k, v in summary.get("drops", {}).items() if k not in COPIES and isinstance(v, (int, float)))


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}


def _pct(p: float | None) -> str:
    return "n/a" if p is None else f"{100 * p:.1f}%"


__all__ = ["StageFailedError", "run_stages"]
