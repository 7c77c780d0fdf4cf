"""The learner's training engine: a Hugging Face causal LM under DeepSpeed.

One optimizer step per call: the step's samples are grouped into
micro-batches by token count (batching.py), right-padded (the default)
or packed into one row each (``pack_sequences``), log-probs are recomputed under
the current weights at the sampling temperature, the policy loss (algos/)
is back-propagated micro-batch by micro-batch, and DeepSpeed reduces,
clips and applies the gradients once. The same engine runs the cold-start
SFT warm-up, saves and restores checkpoints (model, optimizer, scheduler,
RNG states and the caller's state), and exports consolidated weights as
safetensors for the rollout replicas.

PPO with a critic (``advantage.name = "gae"``, learner/train/critic.py): a value
head on the policy, in the same engine and optimizer. A step first runs one
pass without gradient for the old log-probs and old values, computes GAE
advantages and returns per token (learner/algos/gae.py, whitened over the
step's policy tokens on every rank), then adds ``critic.loss_coef`` x the
clipped value loss (learner/algos/value_loss.py) to the policy loss. During
``critic.warmup_steps`` only the head trains: the policy loss is weighed 0,
the head reads detached hidden states and the policy's parameter group gets
lr 0 for the step.

Runs on CPU (DeepSpeed's CPU accelerator over gloo) and on GPUs, ZeRO 0-3.
Every rank calls every method: under ZeRO-3 a forward pass, a checkpoint
and an export are collectives.

Guard: a step whose loss or gradient norm is not finite never moves the
weights (``train_step``): a NaN there would go into the weights and, through
the next weight broadcast, into every rollout replica. The step is taken with
lr 0 on zeroed gradients instead (every rank still runs the same collectives),
counted by reason in ``skipped_steps`` and logged as an error.

Not covered: the bus, group assembly and filters, which samples form a step,
and publishing the exported files (the learner actor).
"""

from __future__ import annotations

import math
import os
import random
import shutil
import time
from collections import Counter
from functools import partial
from pathlib import Path

import numpy as np
import torch

from rlvr.actors.logs import get_logger
from rlvr.learner.algos.gae import gae_advantages_returns, token_level_rewards
from rlvr.learner.algos.policy_loss import LossInputs, policy_loss
from rlvr.learner.algos.value_loss import value_loss
from rlvr.learner.train.engine_setup import _all_sum, _Gae, _Metrics, deepspeed_config, ensure_dist_env  # noqa: F401
from rlvr.learner.train.engine_setup import lr_factor, rng_states, set_rng_states  # noqa: F401
from rlvr.learner.train.critic import attach_value_head, param_groups, uses_critic, value_head, without_critic
from rlvr.learner.train.batching import MicroBatch, TrainBatchItem, micro_batches, sft_items
from rlvr.learner.engine_config import TrainEngineConfig
from rlvr.learner.train.flops import sequence_throughput_metrics
from rlvr.learner.train.lora import base_load_kwargs, merged_state_dict, trainable_parameters, with_lora, write_adapter
from rlvr.learner.weights.state_dict import EXPORT_DTYPES, with_tied_head, write_safetensors
from rlvr.learner.train.token_logprobs import micro_batch_logprobs, micro_batch_logprobs_values

LATEST = "LATEST"  # names the committed checkpoint tag; written atomically after the tag is complete
# Why an optimizer step was skipped (``LearnerEngine.skipped_steps`` keys).
SKIP_REASONS = ("nonfinite_loss", "nonfinite_grad_norm")
log = get_logger("rlvr.engine")


class CheckpointLoadError(RuntimeError):
    """A committed checkpoint exists but DeepSpeed could not load it."""


class PackingUnsupportedError(ValueError):
    """``pack_sequences`` is on but the model lets packed samples see each other."""


class LearnerEngine:
    def __init__(self, cfg: TrainEngineConfig, *, seed: int) -> None:
        ensure_dist_env()
        import deepspeed  # late: a few seconds of import, and only the learner needs it
        from transformers import AutoModelForCausalLM

        self.cfg = cfg
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        self._step = 0
        self._critic = uses_critic(cfg)  # PPO's value head (critic.py)
        self.critic_steps = 0  # optimizer steps trained with the critic: its warm-up counts them
        self.skipped_steps: Counter[str] = Counter()  # optimizer steps skipped, by reason (SKIP_REASONS)
        ds_config = deepspeed_config(cfg)
        # Built before the policy so it is never a ZeRO-3-partitioned module.
        self._ref: torch.nn.Module | None = None
        if cfg.loss.kl_coef > 0:
            self._ref = AutoModelForCausalLM.from_pretrained(
                cfg.model_path, dtype=torch.bfloat16 if cfg.bf16 else torch.float32
            ).eval()
            self._ref.requires_grad_(False)
        # Under ZeRO-3 each rank loads the whole model into CPU memory before
        # deepspeed.initialize partitions it; building inside zero.Init through
        # transformers' HfDeepSpeedConfig would avoid that but needs accelerate.
        model = AutoModelForCausalLM.from_pretrained(cfg.model_path, dtype=torch.float32, **base_load_kwargs(cfg.lora))
        self._tied = bool(getattr(model.config, "tie_word_embeddings", False))
        self.vocab_size = int(model.config.vocab_size)  # token ids must be below it (protocol.validate)
        if not 0 <= cfg.pad_token_id < model.config.vocab_size:
            raise ValueError(
                f"learn.engine.pad_token_id = {cfg.pad_token_id} is not a token of {cfg.model_path} "
                f"(vocab size {model.config.vocab_size})"
            )
        if cfg.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.config.use_cache = False
        if cfg.lora.enabled:  # learner/train/lora.py: base frozen, adapters trainable
            model = with_lora(model, cfg.lora, gradient_checkpointing=cfg.gradient_checkpointing)
        if self._critic:
            attach_value_head(model, cfg)
        opt = cfg.optimizer
        self.ds, _, _, _ = deepspeed.initialize(
            model=model,
            model_parameters=param_groups(model, cfg) if self._critic else trainable_parameters(model),
            config=ds_config,
            optimizer=partial(
                torch.optim.AdamW, lr=opt.lr, betas=opt.betas, weight_decay=opt.weight_decay, eps=opt.eps
            ),
            lr_scheduler=lambda o: torch.optim.lr_scheduler.LambdaLR(o, partial(lr_factor, schedule=cfg.schedule)),
            dist_init_required=None,
        )
        self.rank = int(self.ds.global_rank)
        self._device = self.ds.device
        if self._ref is not None:
            self._ref.to(self._device)
        if cfg.pack_sequences:
            self._check_packing()

    def _check_packing(self) -> None:
        """Refuse packing when this model (its attention implementation) does
        not keep the samples of a packed row apart: the second sample of a
        packed row must get the log-probs it gets padded (a leak shows there:
        it would see the first). One tiny forward per layout, on every rank.
        The bound is the mean over that sample's tokens, so bf16's rounding
        of a single large logit does not trip it."""
        ids = [i % self.vocab_size for i in range(1, 15)]
        first = TrainBatchItem(ids[:4], ids[4:10], [0.0] * 6, 0.0, "first")  # the longer: first in the row
        second = TrainBatchItem(ids[10:11], ids[11:14], [0.0] * 3, 0.0, "second")
        self.ds.eval()
        got = []
        with torch.no_grad():
            for packed in (True, False):
                mb = micro_batches([first, second], 1 << 62, self.cfg.pad_token_id, packed=packed)[0]
                logp, _ = self._token_logprobs(mb, self.ds, 1.0)
                row = mb.sample_ids.index("second")
                got.append(logp[row][mb.loss_mask[row].to(self._device)].float())
        # ZeRO-3 keeps what a forward pass gathered until the next one: give it back now.
        self.ds.empty_partition_cache()
        err = float((got[0] - got[1]).abs().mean())
        if err > (0.1 if self.cfg.bf16 else 1e-4):
            attn = getattr(self.ds.module.config, "_attn_implementation", None)
            self.close()
            raise PackingUnsupportedError(
                f"learn.engine.pack_sequences = true, but {self.cfg.model_path} (attention {attn!r}) gives "
                f"a packed sample log-probs {err:.3g} (mean) away from padded ones: its attention does not "
                "keep packed samples apart; set learn.engine.pack_sequences = false"
            )

    @property
    def step(self) -> int:
        """Optimizer steps taken (RL and SFT together)."""
        return self._step

    @property
    def adapter(self) -> bool:
        """Whether exports (and the weight broadcast) are a LoRA adapter rather than full weights."""
        return self.cfg.lora.enabled

    @property
    def tied_embeddings(self) -> bool:
        """Whether the model ties lm_head to the input embeddings (exports still carry lm_head.weight)."""
        return self._tied

    # ---- forward -------------------------------------------------------
    def _token_logprobs(
        self, mb: MicroBatch, module: torch.nn.Module, temperature: float, with_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """log softmax(logits / T) of each target token: [B, T-1], and the entropy of that distribution."""
        # Chunked over tokens (token_logprobs.py): never [B, T, V] fp32 logits at once.
        return micro_batch_logprobs(module, mb, temperature, self._device, with_entropy=with_entropy)

    def logprobs(self, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
        """Per-token log-probs of ``completion_ids`` at the configured temperature."""
        item = TrainBatchItem(list(prompt_ids), list(completion_ids), [0.0] * len(completion_ids), 0.0, "probe")
        mb = micro_batches([item], 1 << 62, self.cfg.pad_token_id, packed=self.cfg.pack_sequences)[0]
        self.ds.eval()
        with torch.no_grad():
            logp, _ = self._token_logprobs(mb, self.ds, self.cfg.temperature)
        return logp[mb.loss_mask.to(self._device)].tolist()

    # ---- steps ---------------------------------------------------------
    def _grad_norm_before_step(self) -> float | None:
        # DeepSpeed records no norm for ZeRO-0 fp32 (a plain torch optimizer).
        if self.cfg.zero_stage != 0 or self.cfg.bf16:
            return None
        grads = [p.grad for p in self.ds.module.parameters() if p.grad is not None]
        return float(torch.nn.utils.get_total_norm(grads)) if grads else 0.0

    def _agree_on_skip(self, reason: str | None) -> str | None:
        """Every rank skips, or none: ``ds.step`` is a collective under ZeRO."""
        import torch.distributed as dist

        code = SKIP_REASONS.index(reason) + 1 if reason else 0
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            flag = torch.tensor([code], dtype=torch.int64, device=self._device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            code = int(flag.item())
        return SKIP_REASONS[code - 1] if code else None

    def _skip_step(self) -> None:
        """Take the step with lr 0 on zeroed gradients: the weights do not move,
        DeepSpeed's counters and the lr schedule stay aligned, and no NaN
        reaches the optimizer's moments."""
        for p in self.ds.module.parameters():
            if p.grad is not None:
                p.grad.zero_()
        groups = self.ds.optimizer.param_groups
        saved = [g["lr"] for g in groups]
        for g in groups:
            g["lr"] = 0.0
        self.ds.step()
        if self.ds.lr_scheduler is None:
            for g, lr in zip(groups, saved):
                g["lr"] = lr

    def _critic_only_step(self) -> None:
        """The critic's warm-up: the step with the policy's parameter group (group 0,
        critic.param_groups) at lr 0, so only the value head moves; the lr scheduler
        sets every group's lr again after the step."""
        group = self.ds.optimizer.param_groups[0]
        saved = group["lr"]
        group["lr"] = 0.0
        self.ds.step()
        if self.ds.lr_scheduler is None:
            group["lr"] = saved

    def _apply_step(self, started: float, mbs: list[MicroBatch], skip: str | None = None, *,
                    freeze_policy: bool = False) -> dict[str, float]:
        lr = float(self.ds.get_lr()[0])
        norm = self._grad_norm_before_step()
        if skip is None and norm is not None and not math.isfinite(norm):
            skip = "nonfinite_grad_norm"
        skip = self._agree_on_skip(skip)
        if skip is not None:
            self._skip_step()
        elif freeze_policy:
            self._critic_only_step()
        else:
            self.ds.step()
        if norm is None:
            ds_norm = self.ds.get_global_grad_norm()
            norm = float(ds_norm) if ds_norm is not None else math.nan
            # ZeRO-1/2/3 and the bf16 optimizer detect a non-finite norm
            # inside ``step`` and skip the update themselves: count it.
            if skip is None and ds_norm is not None and not math.isfinite(norm):
                skip = "nonfinite_grad_norm"
        if skip is not None:
            self.skipped_steps[skip] += 1
            log.error("optimizer_step_skipped", reason=skip, grad_norm=norm, step=self._step + 1,
                      note="non-finite numbers never reach the weights; the batch is not trained on")
        self._step += 1
        elapsed = time.perf_counter() - started
        tokens = sum(mb.tokens for mb in mbs)  # real tokens only: padding is no work done
        computed = sum(mb.computed_tokens for mb in mbs)
        return {
            "step": float(self._step),
            "lr": lr,
            "grad_norm": norm,
            "samples": float(sum(len(mb.sample_ids) for mb in mbs)),
            "micro_batches": float(len(mbs)),
            "tokens": float(tokens),
            "response_tokens": float(sum(int(mb.loss_mask.sum()) for mb in mbs)),
            "step_time_s": elapsed,
            "tokens_per_s": tokens / max(elapsed, 1e-9),
            # Share of the positions the model ran over that were padding (0 when packed).
            "padding_fraction": (computed - tokens) / max(computed, 1),
            # Model TFLOP/s (6N + attention per token) and, for bf16 on a known GPU, MFU: learner/train/flops.py.
            **sequence_throughput_metrics(self.ds.module, [n for mb in mbs for n in mb.sample_lengths], elapsed,
                                          self._device, bf16=self.cfg.bf16),
            **({"lr_critic": float(self.ds.get_lr()[1])} if self._critic else {}),
            "step_skipped": 1.0 if skip else 0.0,
            **{f"skipped_steps_{k}": float(v) for k, v in self.skipped_steps.items()},
        }

    def train_step(
        self,
        items: list[TrainBatchItem],
        *,
        num_tokens: float | None = None,
        num_sequences: float | None = None,
        min_micro_batches: int = 0,
    ) -> dict[str, float]:
        """``cfg.ppo_epochs`` optimizer steps of the policy loss over all ``items``.

        π_old is the log-prob recomputed by the first pass over the batch
        (detached) and cached: in the first epoch the PPO ratio is 1 in value
        (its gradient is ∇log π), in later epochs it measures how far the
        policy has moved and the asymmetric clip bounds it (clip_frac then
        means something). More epochs = more updates per generated sample.
        Off-policy lag between the rollout weights and π_old is corrected by
        truncated IS against ``behaviour_logprobs``. With the critic (``gae``)
        π_old and the old values come from a pass of their own before the
        first epoch (``_gae_pass``), and the value loss joins the policy loss.

        Data parallel (learner/train/rank_commands.py): ``items`` is this rank's share,
        ``num_tokens``/``num_sequences`` replace its own counts as the loss
        normalisers, and ``min_micro_batches`` pads with empty micro-batches
        so every rank runs as many forward/backward passes as the busiest one
        (a pass is a collective under ZeRO-2/3); the share may then be empty.
        Metrics are those of the last epoch.
        """
        self._maybe_refresh_ref()
        mbs = self._micro_batches(items, min_micro_batches)
        if num_tokens is None:
            num_tokens = float(sum(int(mb.loss_mask.sum()) for mb in mbs))
        if num_sequences is None:
            num_sequences = float(sum(int((mb.loss_mask.sum(-1) > 0).sum()) for mb in mbs))
        self.ds.train()
        passes = mbs + self._padding(min_micro_batches - len(mbs))
        old_logprobs: list[torch.Tensor | None] = [None] * len(passes)
        gae = self._gae_pass(passes) if self._critic else None
        if gae is not None:
            old_logprobs = list(gae.old_logprobs)
        critic = self.cfg.advantage.critic
        head = value_head(self.ds.module) if self._critic else None
        result: dict[str, float] = {}
        for epoch in range(self.cfg.ppo_epochs):
            started = time.perf_counter()
            acc, loss_total = _Metrics(), 0.0
            skip: str | None = None
            warm = self._critic and self.critic_steps < critic.warmup_steps  # only the critic trains
            for j, mb in enumerate(passes):
                logp, entropy, values = micro_batch_logprobs_values(
                    self.ds, mb, self.cfg.temperature, self._device, head, with_entropy=True, detach_values=warm)
                if old_logprobs[j] is None:
                    old_logprobs[j] = logp.detach()
                ref = None
                if self._ref is not None:
                    with torch.no_grad():
                        ref, _ = self._token_logprobs(mb, self._ref, self.cfg.temperature)
                mask = mb.loss_mask.to(self._device)
                out = policy_loss(
                    LossInputs(
                        logprobs=logp,
                        old_logprobs=old_logprobs[j],
                        behaviour_logprobs=mb.behaviour_logprobs.to(self._device),
                        advantages=gae.advantages[j] if gae is not None else mb.advantages.to(self._device),
                        mask=mask,
                        ref_logprobs=ref,
                        entropy=entropy,
                        num_tokens=num_tokens,
                        num_sequences=num_sequences,
                    ),
                    self.cfg.loss,
                )
                loss, metrics = out.loss, out.metrics
                if gae is not None:
                    assert values is not None
                    vloss, vclip = value_loss(values, gae.returns[j], gae.values[j], mask, critic.value_clip,
                                              num_tokens=num_tokens)
                    # Warm-up: the policy loss stays in the graph at weight 0, so every parameter
                    # takes part in the backward pass as in any other step (ZeRO's hooks).
                    loss = (0.0 if warm else 1.0) * loss + critic.loss_coef * vloss
                    # The value loss is a token mean over the step, like the policy loss: per
                    # micro-batch, its share times the step's tokens over this one's.
                    share = num_tokens / max(metrics["tokens"], 1.0)
                    metrics = {**metrics, "value_loss": float(vloss.detach()) * share,
                               "value_clip_frac": float(vclip)}
                if not bool(torch.isfinite(loss.detach())):
                    # A NaN loss back-propagates NaN into every gradient: run a
                    # zero loss instead (same collectives on every rank) and skip the step.
                    skip = "nonfinite_loss"
                    loss = logp.sum() * 0.0 + (values.sum() * 0.0 if values is not None else 0.0)
                # The loss is already this micro-batch's share of the full-batch loss.
                self.ds.backward(loss, scale_wrt_gas=False)
                if mb.sample_ids:  # padding has no metrics
                    acc.add(metrics)
                loss_total += float(loss.detach())
            result = {"loss": loss_total, **acc.result(), **self._apply_step(started, mbs, skip, freeze_policy=warm)}
            if self._critic:
                self.critic_steps += 1
                result["critic_warmup"] = 1.0 if warm else 0.0
        if gae is not None:
            result.update(gae.metrics)
        return {**result, "ppo_epochs": float(self.cfg.ppo_epochs)}

    def _gae_pass(self, passes: list[MicroBatch]) -> _Gae:
        """Old log-probs and old values (no gradient), then GAE advantages and returns per micro-batch,
        the advantages whitened over the step's policy tokens on every rank (``advantage.whiten``)."""
        adv_cfg = self.cfg.advantage
        head = value_head(self.ds.module)
        olds, values, advs, rets, masks = [], [], [], [], []
        with torch.no_grad():
            for mb in passes:
                logp, _, v = micro_batch_logprobs_values(self.ds, mb, self.cfg.temperature, self._device, head)
                assert v is not None
                mask = mb.loss_mask.to(self._device)
                rewards = mb.rewards if mb.rewards is not None else torch.zeros(mask.shape[0])
                adv, ret = gae_advantages_returns(token_level_rewards(rewards.to(self._device), mask), v, mask,
                                                  adv_cfg.gamma, adv_cfg.lam)
                olds.append(logp.detach())
                values.append(v)
                advs.append(adv)
                rets.append(ret)
                masks.append(mask)
        metrics = self._critic_metrics(values, rets, advs, masks)
        if adv_cfg.whiten:
            mean, var = self._masked_mean_var_all_ranks(advs, masks)
            advs = [(a - mean) / math.sqrt(var + 1e-8) for a in advs]
        return _Gae(tuple(olds), tuple(values), tuple(advs), tuple(rets), metrics)

    def _critic_metrics(self, values: list[torch.Tensor], rets: list[torch.Tensor], advs: list[torch.Tensor],
                        masks: list[torch.Tensor]) -> dict[str, float]:
        """Value, return and raw advantage means and the explained variance over the step's policy
        tokens on every rank (sums all-reduced: each rank reports the whole step's figures, equal to
        ``explained_variance`` on the gathered tensors); none when the step has fewer than two."""
        def sums(v: torch.Tensor, r: torch.Tensor, a: torch.Tensor, m: torch.Tensor) -> list[torch.Tensor]:
            v, r, a = v[m].double(), r[m].double(), a[m].double()
            return [m.sum().double(), v.sum(), r.sum(), a.sum(), (r - v).sum(), ((r - v) ** 2).sum(), (r ** 2).sum()]

        parts = [torch.stack(sums(v, r, a, m)) for v, r, a, m in zip(values, rets, advs, masks)]
        total = torch.stack(parts).sum(0) if parts else torch.zeros(7, dtype=torch.float64)
        n, s_v, s_r, s_a, s_d, s_d2, s_r2 = _all_sum(total.to(self._device)).tolist()
        if n < 2:
            return {}
        var_d = (s_d2 - s_d * s_d / n) / (n - 1)  # Bessel-corrected, as explained_variance
        var_r = (s_r2 - s_r * s_r / n) / (n - 1)
        return {"value_mean": s_v / n, "return_mean": s_r / n, "advantage_raw_mean": s_a / n,
                "explained_variance": 1.0 - var_d / (var_r + 1e-5)}

    def _masked_mean_var_all_ranks(self, xs: list[torch.Tensor], masks: list[torch.Tensor]) -> tuple[float, float]:
        """Mean and Bessel-corrected variance of the masked entries of ``xs`` over every rank's
        share (two sums all-reduced), as ``masked_mean_var`` over the whole step would give."""
        first = torch.tensor([sum(float(x[m].double().sum()) for x, m in zip(xs, masks)),
                              sum(float(m.sum()) for m in masks)], dtype=torch.float64, device=self._device)
        total, n = _all_sum(first).tolist()
        mean = total / max(n, 1.0)
        sq = torch.tensor([sum(float(((x[m].double() - mean) ** 2).sum()) for x, m in zip(xs, masks))],
                          dtype=torch.float64, device=self._device)
        return mean, float(_all_sum(sq)[0]) / max(n - 1.0, 1.0)

    def sft_step(
        self, pairs: list[tuple[list[int], list[int]]], *, num_tokens: float | None = None, min_micro_batches: int = 0
    ) -> dict[str, float]:
        """One optimizer step of cross-entropy on the response tokens (token
        mean, T = 1). Data parallel: as ``train_step``."""
        started = time.perf_counter()
        mbs = self._micro_batches(sft_items(pairs), min_micro_batches)
        if num_tokens is None:
            num_tokens = float(sum(int(mb.loss_mask.sum()) for mb in mbs))
        self.ds.train()
        loss_total = 0.0
        for mb in mbs + self._padding(min_micro_batches - len(mbs)):
            logp, _ = self._token_logprobs(mb, self.ds, 1.0)
            loss = -(logp * mb.loss_mask.to(self._device)).sum() / num_tokens
            self.ds.backward(loss, scale_wrt_gas=False)
            loss_total += float(loss.detach())
        return {"loss": loss_total, **self._apply_step(started, mbs)}

    def _micro_batches(self, items: list[TrainBatchItem], min_micro_batches: int) -> list[MicroBatch]:
        if not items and min_micro_batches > 0:
            return []  # a data-parallel rank with no share this step: padding only
        return micro_batches(items, self.cfg.micro_batch_tokens, self.cfg.pad_token_id,
                             packed=self.cfg.pack_sequences)

    def _padding(self, count: int) -> list[MicroBatch]:
        """Empty micro-batches: two pad tokens, no loss token, so the loss is
        exactly 0 and the gradient adds nothing, but the pass still runs."""
        pad = self.cfg.pad_token_id
        empty = MicroBatch(
            input_ids=torch.full((1, 2), pad, dtype=torch.int64),
            attention_mask=torch.ones((1, 2), dtype=torch.int64),
            loss_mask=torch.zeros((1, 1), dtype=torch.bool),
            behaviour_logprobs=torch.zeros((1, 1), dtype=torch.float32),
            advantages=torch.zeros(1, dtype=torch.float32),
            sample_ids=(),
        )
        return [empty] * max(0, count)

    # ---- reference model -----------------------------------------------
    def _maybe_refresh_ref(self) -> None:
        every = self.cfg.ref_update_every
        if self._ref is None or every is None or self._step == 0 or self._step % every:
            return
        state = self.full_state_dict()  # collective under ZeRO-3
        if state is not None:
            self._ref.load_state_dict(with_tied_head(state), strict=False)
        # Other ranks' references are refreshed from rank 0's copy.
        if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
            for p in self._ref.parameters():
                torch.distributed.broadcast(p.data, src=0)

    # ---- weights out ---------------------------------------------------
    def _module_state_dict(self) -> dict[str, torch.Tensor] | None:
        """The policy's tensors on rank 0: never the critic's value head (critic.py)."""
        if self.cfg.zero_stage == 3:
            # Plain state_dict() holds empty partitions under ZeRO-3.
            return without_critic(self.ds._zero3_consolidated_16bit_state_dict())
        return without_critic(self.ds.module.state_dict()) if self.rank == 0 else None

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        """The whole model's state dict on rank 0 (None elsewhere); with LoRA,
        Hugging Face names with the adapters merged in."""
        state = self._module_state_dict()
        if state is not None and self.cfg.lora.enabled:
            state = merged_state_dict(state, self.cfg.lora)
        return state

    def export_weights(self, directory: Path) -> list[tuple[str, str, int]]:
        """Write the consolidated weights as safetensors (rank 0); returns
        (file name, sha256, bytes). ``lm_head.weight`` is always present.
        Call on every rank; ranks other than 0 get []. With LoRA: the adapter
        only (adapter_model.safetensors + adapter_config.json)."""
        if self.cfg.lora.enabled:
            raw = self._module_state_dict()
            dtype = EXPORT_DTYPES[self.cfg.export_dtype or ("bf16" if self.cfg.bf16 else "fp32")]
            return [] if raw is None else write_adapter(self.ds.module, raw, Path(directory), dtype=dtype)
        state = self.full_state_dict()
        if state is None:
            return []
        if self._tied:
            state = with_tied_head(state)
        dtype = EXPORT_DTYPES[self.cfg.export_dtype or ("bf16" if self.cfg.bf16 else "fp32")]
        return write_safetensors(state, Path(directory), dtype=dtype, max_shard_bytes=self.cfg.export_shard_bytes)

    # ---- checkpoints ---------------------------------------------------
    def save_checkpoint(self, directory: Path, client_state: dict, *, keep_last: int = 2) -> None:
        """Save everything needed to continue bit for bit, then commit it.

        DeepSpeed writes ``directory/step-N/``; this rank's RNG states go
        beside it. Only then is ``directory/LATEST`` replaced (atomically)
        to name the new tag, so a kill at any moment leaves the previous
        checkpoint committed. Older tags beyond ``keep_last`` are removed.
        """
        directory = Path(directory)
        tag = f"step-{self._step:08d}"
        extra = {"rlvr_client_state": client_state, "rlvr_step": self._step, "rlvr_critic_steps": self.critic_steps}
        # With LoRA the frozen base is the model folder's, so only the adapter is saved.
        self.ds.save_checkpoint(str(directory), tag=tag, client_state=extra, save_latest=False,
                                exclude_frozen_parameters=self.cfg.lora.enabled)
        torch.save(rng_states(), directory / tag / f"rng_rank{self.rank}.pt")
        if self._ref is not None and self.rank == 0:
            torch.save(self._ref.state_dict(), directory / tag / "ref_model.pt")
        self._barrier()
        if self.rank == 0:
            tmp = directory / f".{LATEST}.tmp"
            tmp.write_text(tag)
            os.replace(tmp, directory / LATEST)
            old = sorted(p for p in directory.glob("step-*") if p.is_dir() and p.name != tag)
            for path in old[: max(0, len(old) - (keep_last - 1))]:
                shutil.rmtree(path, ignore_errors=True)
        self._barrier()

    def load_checkpoint(self, directory: Path) -> dict | None:
        """Restore the committed checkpoint; returns its client_state, or
        None when ``directory`` holds no committed checkpoint."""
        marker = Path(directory) / LATEST
        if not marker.exists():
            return None
        tag = marker.read_text().strip()
        path, extra = self.ds.load_checkpoint(str(directory), tag=tag, load_module_strict=not self.cfg.lora.enabled)
        if path is None:
            raise CheckpointLoadError(f"DeepSpeed could not load checkpoint {directory}/{tag}")
        self._step = int(extra["rlvr_step"])
        self.critic_steps = int(extra.get("rlvr_critic_steps", 0))  # the value head itself is in the module
        set_rng_states(torch.load(Path(directory) / tag / f"rng_rank{self.rank}.pt", weights_only=False))
        ref_path = Path(directory) / tag / "ref_model.pt"
        if self._ref is not None and ref_path.exists():
            self._ref.load_state_dict(torch.load(ref_path, map_location=self._device))
        return extra["rlvr_client_state"]

    def _barrier(self) -> None:
        if torch.distributed.is_initialized():
            torch.distributed.barrier()

    def close(self) -> None:
        """Release DeepSpeed's hooks and buffers (ZeRO-3 registers module hooks)."""
        self.ds.destroy()


__all__ = [
    "CheckpointLoadError",
    "LearnerEngine",
    "PackingUnsupportedError",
    "TrainBatchItem",
    "deepspeed_config",
    "ensure_dist_env",
    "lr_factor",
]
