"""Data-parallel learner ranks on CPU (gloo): rank 0 drives a few steps
through ``Trainer`` (the actor's own command path), rank 1 is a real
``rlvr-actor --role learn`` follower. Followers run every step, the final
weights equal a single-process run on the same full batches, and a killed
(or frozen) rank 0 makes the follower exit non-zero instead of hanging.

Run as a script, this file is the rank-0 driver: ``python -m
tests.learner.test_ranks lead CONFIG OUT MODE`` (see ``_drive``).
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlvr.learner.train.batching import TrainBatchItem
from rlvr.learner.train.rank_commands import Start, Train, decode, encode, merge_metrics, shard_sft, shard_train
from rlvr.learner.train.ranks import EXIT_LEADER_LOST

REPO = Path(__file__).resolve().parents[2]
STEP_SIZES = (5, 1, 4)  # 5: uneven shards; 1: rank 1 has an empty share (padding only)
MICRO_BATCH_TOKENS = 24
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def batch(step: int, size: int, vocab: int) -> list[TrainBatchItem]:
    """``size`` samples of different lengths, seeded by the step."""
    import random

    rng = random.Random(step)
    items = []
    for i in range(size):
        n = rng.randint(2, 9)
        prompt = [rng.randrange(3, vocab) for _ in range(rng.randint(2, 5))]
        completion = [rng.randrange(3, vocab) for _ in range(n)]
        behaviour = [-math.log(vocab) + rng.gauss(0, 0.3) for _ in range(n)]
        items.append(TrainBatchItem(prompt, completion, behaviour, rng.choice((-1.0, -0.5, 0.5, 1.0)), f"s{step}/{i}"))
    return items


# ---- pure pieces ----------------------------------------------------------------


def test_shards_carry_global_normalisers_and_the_busiest_micro_batch_count():
    items = batch(0, 5, 64)
    shards = shard_train(items, 2, MICRO_BATCH_TOKENS)
    assert [s.items for s in shards] == [items[0::2], items[1::2]]
    tokens = sum(len(it.completion_ids) for it in items)
    assert all(s.num_tokens == tokens / 2 and s.num_sequences == 5 / 2 for s in shards)
    from rlvr.learner.train.batching import pack_by_tokens

    counts = [len(pack_by_tokens([len(i.prompt_ids) + len(i.completion_ids) for i in s.items], MICRO_BATCH_TOKENS))
              for s in shards]
    assert all(s.min_micro_batches == max(counts) for s in shards)
    one = shard_train(items[:1], 2, MICRO_BATCH_TOKENS)
    assert one[1] == Train([], one[0].num_tokens, 0.5, 1)  # an empty share: padding only
    assert [decode(encode(s)) for s in shards] == shards  # what travels between the ranks


def test_with_packing_the_shards_count_packed_micro_batches_as_the_engine_cuts_them():
    from rlvr.learner.train.batching import micro_batches

    items = batch(0, 8, 64)
    budget = 3 * max(len(i.prompt_ids) + len(i.completion_ids) for i in items)
    packed = shard_train(items, 2, budget, packed=True)
    padded = shard_train(items, 2, budget)
    cut = [len(micro_batches(s.items, budget, 0, packed=True)) for s in packed]
    assert all(s.min_micro_batches == max(cut) for s in packed)
    assert packed[0].min_micro_batches <= padded[0].min_micro_batches  # never more passes than padded


def test_sft_shards_and_the_start_command_survive_the_wire():
    from rlvr.learner.engine_config import CosineSchedule, TrainEngineConfig

    pairs = [([1, 2], [3, 4, 5]), ([1], [6]), ([2, 2, 2], [7, 8])]
    sft = shard_sft(pairs, 2, MICRO_BATCH_TOKENS)
    assert [s.pairs for s in sft] == [pairs[0::2], pairs[1::2]] and all(s.num_tokens == 6 / 2 for s in sft)
    start = Start(TrainEngineConfig(model_path="/m", zero_stage=3, schedule=CosineSchedule(total_steps=9)), seed=7)
    assert [decode(encode(c)) for c in (*sft, start)] == [*sft, start]


def test_merged_metrics_give_the_batch_loss_and_token_weighted_means():
    rank0 = {"loss": 0.6, "step": 3.0, "lr": 0.1, "grad_norm": 2.0, "samples": 3.0, "tokens": 30.0,
             "response_tokens": 12.0, "micro_batches": 2.0, "step_time_s": 1.0, "tokens_per_s": 30.0,
             "entropy": 1.0, "is_ratio_max": 1.5}
    rank1 = {"loss": 0.2, "step": 3.0, "lr": 0.1, "grad_norm": 2.0, "samples": 2.0, "tokens": 20.0,
             "response_tokens": 4.0, "micro_batches": 1.0, "step_time_s": 2.0, "tokens_per_s": 10.0,
             "entropy": 3.0, "is_ratio_max": 2.5}
    merged = merge_metrics([rank0, rank1])
    assert merged["loss"] == pytest.approx(0.4)  # each rank's loss is W * its share of the batch loss
    assert (merged["samples"], merged["tokens"], merged["response_tokens"]) == (5.0, 50.0, 16.0)
    assert merged["entropy"] == pytest.approx((1.0 * 12 + 3.0 * 4) / 16)
    assert merged["is_ratio_max"] == 2.5
    assert (merged["step_time_s"], merged["tokens_per_s"]) == (2.0, 25.0)
    assert (merged["step"], merged["grad_norm"]) == (3.0, 2.0)


# ---- real ranks ----------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from rlvr.learner.example.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", hidden=64, layers=1, heads=2)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(rank: int | None, world: int, port: int, timeout_s: float = 60.0) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", RLVR_RANK_TIMEOUT_S=str(timeout_s))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    for var in ("MASTER_PORT", "MASTER_ADDR", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(var, None)
    if rank is not None:
        env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
    return env


def _engine_config(tmp_path: Path, model: Path, zero_stage: int) -> Path:
    # AdamW divides each gradient element by its own scale, so an element whose
    # gradient is zero in exact arithmetic (a key bias: softmax ignores a
    # per-query constant) turns summation-order rounding (~1e-10) into an
    # lr-sized step at eps = 1e-8; eps = 1e-4 keeps such noise far below 1e-5.
    path = tmp_path / f"engine-z{zero_stage}.json"
    path.write_text(json.dumps({
        "model_path": str(model), "zero_stage": zero_stage, "micro_batch_tokens": MICRO_BATCH_TOKENS,
        "optimizer": {"lr": 1e-2, "eps": 1e-4}, "export_dtype": "fp32", "pad_token_id": 0,
    }))
    return path


def _lead(tmp_path: Path, name: str, cfg: Path, env: dict, mode: str) -> subprocess.Popen:
    """The rank-0 driver below (``_drive``) in its own process."""
    cmd = [sys.executable, "-m", "tests.learner.test_ranks", "lead", str(cfg), str(tmp_path / name), mode]
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=open(tmp_path / f"{name}.log", "wb"), text=True)


def _follow(tmp_path: Path, name: str, env: dict) -> subprocess.Popen:
    """A real learner process: with RANK=1 the CLI runs the follower (no NATS, no config needed)."""
    return subprocess.Popen([sys.executable, "-m", "rlvr.cli", "--role", "learn"], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"{name}.log", "wb"))


def _events(log: Path, event: str) -> list[dict]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{") and f'"{event}"' in line:
            out.append(json.loads(line))
    return out


def _reap(*procs: subprocess.Popen) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


@pytest.fixture(scope="module")
def single_process(tmp_path_factory, tiny_model):
    """The reference: one process on the full batches (ZeRO-2), started
    once and shared; waiting for it returns its output folder."""
    out = tmp_path_factory.mktemp("single")
    proc = _lead(out, "single", _engine_config(out, tiny_model, 2), _env(None, 1, 0), "train")

    def result() -> Path:
        code = proc.wait(timeout=200)
        assert code == 0, (out / "single.log").read_text()[-3000:]
        return out / "single"

    yield result
    _reap(proc)


def _wait_ready(leader: subprocess.Popen, log: Path) -> None:
    assert leader.stdout is not None
    lines = iter(leader.stdout.readline, "")  # DeepSpeed prints to stdout too; EOF if rank 0 failed
    assert "ready" in (line.strip() for line in lines), log.read_text()[-3000:]


def _assert_same_training(out: Path, single_dir: Path, tiny_model: Path) -> None:
    """(b): rank 0's exported weights and batch metrics equal the single process's."""
    from safetensors.torch import load_file

    rank0 = json.loads((out / "result.json").read_text())
    single = json.loads((single_dir / "result.json").read_text())
    assert rank0["engine_step"] == single["engine_step"] == len(STEP_SIZES)
    w2 = load_file(out / "weights" / "model.safetensors")
    w1 = load_file(single_dir / "weights" / "model.safetensors")
    assert w2.keys() == w1.keys()
    initial = load_file(tiny_model / "model.safetensors")
    assert max(float((w1[k] - initial[k]).abs().max()) for k in initial) > 1e-3  # training moved the weights
    assert max(float((w2[k] - w1[k]).abs().max()) for k in w1) < 1e-5
    for m2, m1 in zip(rank0["metrics"], single["metrics"], strict=True):
        assert (m2["samples"], m2["response_tokens"]) == (m1["samples"], m1["response_tokens"])
        assert m2["loss"] == pytest.approx(m1["loss"], rel=1e-4, abs=1e-6)
        assert m2["entropy"] == pytest.approx(m1["entropy"], rel=1e-4)
    # Both ranks wrote their part of the engine checkpoint.
    tag = (out / "ckpt" / "LATEST").read_text()
    assert {p.name for p in (out / "ckpt" / tag).glob("rng_rank*.pt")} == {"rng_rank0.pt", "rng_rank1.pt"}


TRAINED = {"Start": 1, "Train": len(STEP_SIZES), "Save": 1, "Export": 1}


def _executed(event: dict) -> dict[str, int]:
    return {k: v for k, v in event["executed"].items() if k != "Ping"}  # keep-alives depend on timing


@pytest.mark.timeout(240)
def _signal_leader(tmp_path: Path, model: Path, zero_stage: int, mode: str, timeout_s: float, sig: int):
    """Start rank 0 (``mode``) and one follower, send ``sig`` to rank 0 once
    it is ready, and wait for the follower: its exit code and how long it took."""
    cfg = _engine_config(tmp_path, model, zero_stage)
    port = _free_port()
    leader = _lead(tmp_path, "rank0", cfg, _env(0, 2, port, timeout_s), mode)
    follower = _follow(tmp_path, "rank1", _env(1, 2, port, timeout_s))
    try:
        _wait_ready(leader, tmp_path / "rank0.log")
        os.kill(leader.pid, sig)
        t0 = time.monotonic()
        code = follower.wait(timeout=timeout_s + 30)
        return code, time.monotonic() - t0
    finally:
        _reap(leader, follower)


def test_zero2_ranks_train_like_one_process_and_stop_cleanly(tmp_path, tiny_model, single_process):
    cfg = _engine_config(tmp_path, tiny_model, 2)
    port = _free_port()
    procs = [_lead(tmp_path, "rank0", cfg, _env(0, 2, port), "train"), _follow(tmp_path, "rank1", _env(1, 2, port))]
    try:
        codes = [p.wait(timeout=200) for p in procs]
    finally:
        _reap(*procs)
    assert codes == [0, 0], [(tmp_path / f"{n}.log").read_text()[-3000:] for n in ("rank0", "rank1")]
    # (a) the follower ran every operation rank 0 ran, then stopped when rank 0 closed.
    done = _events(tmp_path / "rank1.log", "follower_done")
    assert len(done) == 1 and done[0]["ok"] is True
    assert _executed(done[0]) == {**TRAINED, "Stop": 1}
    _assert_same_training(tmp_path / "rank0", single_process(), tiny_model)


@pytest.mark.timeout(240)
def test_zero3_ranks_train_like_one_process_and_exit_when_rank0_is_killed(tmp_path, tiny_model, single_process):
    """ZeRO-3 (a forward pass is a collective; rank 1's share of the 1-sample
    step is empty, so it runs padding only), then SIGKILL rank 0 while the
    follower waits for its next command: its sockets close, noticed at once."""
    timeout_s = 8.0
    code, waited = _signal_leader(tmp_path, tiny_model, 3, "train-then-wait", timeout_s, signal.SIGKILL)
    # (c) a non-zero exit within the command timeout, having run every step (a).
    assert code == EXIT_LEADER_LOST and waited < timeout_s
    lost = _events(tmp_path / "rank1.log", "leader_lost")
    assert len(lost) == 1 and _executed(lost[0]) == TRAINED
    _assert_same_training(tmp_path / "rank0", single_process(), tiny_model)


@pytest.mark.timeout(120)
def test_follower_times_out_when_rank0_freezes(tmp_path, tiny_model):
    """SIGSTOP keeps rank 0's sockets open and silent (no keep-alives): only
    the command timeout ends the follower's wait. Rank 0 only joins the
    ranks here (no engine), which keeps the test cheap."""
    timeout_s = 4.0
    code, waited = _signal_leader(tmp_path, tiny_model, 2, "join-then-wait", timeout_s, signal.SIGSTOP)
    assert code == EXIT_LEADER_LOST
    # The last keep-alive came up to a quarter timeout before the freeze.
    assert timeout_s / 2 <= waited < timeout_s + 15
    lost = _events(tmp_path / "rank1.log", "leader_lost")
    assert len(lost) == 1 and "Timed out" in lost[0]["error"] and _executed(lost[0]) == {}


# ---- the rank-0 driver ------------------------------------------------------------


def _drive(cfg_path: str, out: str, mode: str) -> None:
    """Rank 0 (or a single process): the learner actor's Trainer, without the bus.

    ``train``: the steps, a checkpoint, an export, then close (stops the
    followers). ``train-then-wait``: the same but, instead of closing, print
    ``ready`` and block. ``join-then-wait``: only join the ranks (no engine).
    """
    if mode == "join-then-wait":
        from rlvr.learner.train.ranks import lead

        lead()
        print("ready", flush=True)
        sys.stdin.read()  # until the test freezes or kills this process
        return

    import anyio
    import msgspec

    from rlvr.learner.engine_config import TrainEngineConfig
    from rlvr.learner.train.trainer import Trainer

    cfg = msgspec.json.decode(Path(cfg_path).read_bytes(), type=TrainEngineConfig)
    out_dir = Path(out)
    vocab = json.loads((Path(cfg.model_path) / "config.json").read_text())["vocab_size"]

    async def main() -> None:
        trainer = Trainer(cfg, seed=0)
        await trainer.start(None)
        metrics = [await trainer.train_items(batch(s, n, vocab)) for s, n in enumerate(STEP_SIZES)]
        await trainer.save(out_dir / "ckpt")
        await trainer.export(out_dir / "weights")
        (out_dir / "result.json").write_text(json.dumps({"metrics": metrics, "engine_step": trainer.engine.step}))
        if mode == "train":
            await trainer.close()
            return
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.read)  # until the test kills this process

    anyio.run(main)


if __name__ == "__main__":
    _drive(*sys.argv[2:5])
