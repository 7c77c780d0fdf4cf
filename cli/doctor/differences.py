"""What differs between the rollout's side and the learner's, read from the settings and from the
engines as they started: each difference named with its keys, whether or not the agreement
figures caught it, and the likely causes of a flagged gap (most likely first).

- ``dtype_difference``: the dtype each side runs in, resolved by the engine itself (the hf
  engine's "auto" is float32, vLLM's "auto" is its own rule), never guessed from the key;
- ``engine_overrides``: vLLM engine arguments in ``rollout.engine.extra`` (applied after the
  engine's own) that change the distribution the rollout samples or reports;
- ``likely_causes``: the above with temperature, sampling cuts and a missed reload.

Not covered: differences the settings do not show (two model folders with different weights,
attention kernels): the agreement figures are what sees those.
"""

from __future__ import annotations

from typing import Any

# vLLM engine arguments that change the distribution the rollout samples from, or the log-probs it
# reports, when ``extra`` sets them: what each does to the agreement.
_DISTRIBUTION_ARGS = {
    "logprobs_mode": "the behaviour log-probs are then not of the processed distribution the rollout "
                     "samples from (raw_logprobs ignores temperature, top-k and top-p)",
    "dtype": "the rollout then runs another dtype than rollout.engine.dtype",
    "quantization": "the rollout then samples from quantized weights; the learner trains the unquantized ones",
    "kv_cache_dtype": "the rollout's attention then reads a KV cache of lower precision than the learner's",
    "logits_processors": "the rollout's logits then pass through processors the learner does not apply",
    "hf_overrides": "the rollout's model config then differs from the learner's",
    "model": "the rollout then serves another model than rollout.engine.model",
    "tokenizer": "the rollout then tokenizes with another tokenizer than the model folder's",
}


def engine_overrides(engine_cfg: Any) -> list[str]:
    """Each key of a vLLM engine's ``extra`` that changes the distribution, with what it does (``[]``
    for other engines and for values equal to what the engine sets itself)."""
    from rlvr.rollout.engines.base import VLLMEngineConfig
    from rlvr.rollout.engines.vllm import LOGPROBS_MODE

    if not isinstance(engine_cfg, VLLMEngineConfig):
        return []
    # What the engine sets itself, or vLLM's default; any other key's unset value is None, {} or [].
    own = {"logprobs_mode": LOGPROBS_MODE, "dtype": engine_cfg.dtype, "model": engine_cfg.model,
           "tokenizer": engine_cfg.model, "kv_cache_dtype": "auto"}
    return [f"rollout.engine.extra.{key} = {value!r} (applied after the engine's own arguments): "
            f"{_DISTRIBUTION_ARGS[key]}"
            for key, value in engine_cfg.extra.items()
            if key in _DISTRIBUTION_ARGS and value != own.get(key) and value not in (None, {}, [])]


def dtype_difference(rollout_dtype: str, learner_dtype: str, rollout_setting: str, learner_bf16: bool) -> str | None:
    """``"dtype differs: ..."`` when the two sides run in different dtypes (as the engines resolved
    them; ``""``: not known, no claim), else None."""
    if not rollout_dtype or not learner_dtype or rollout_dtype == learner_dtype:
        return None
    return (f"dtype differs: the rollout runs {rollout_dtype} (rollout.engine.dtype = {rollout_setting!r}), the "
            f"learner {learner_dtype} (learn.engine.bf16 = {str(learner_bf16).lower()})")


def likely_causes(*, rollout_temperature: float, learner_temperature: float, top_p: float, top_k: int,
                  dtype: str | None, overrides: list[str], before_ok: bool | None, reloaded: bool,
                  same_prompt_ids: bool = True) -> list[str]:
    """What can make the two sides disagree, from the settings (most likely first). ``dtype``:
    ``dtype_difference``'s text; ``overrides``: ``engine_overrides``'."""
    causes = list(overrides)
    if abs(rollout_temperature - learner_temperature) > 1e-9:
        causes.append(f"temperature differs: the rollout samples at {rollout_temperature}, the learner computes "
                      f"log-probs at {learner_temperature} (learn.sampling.temperature, learn.engine.temperature)")
    if top_p < 1.0 or top_k > 0:
        causes.append(f"sampling cuts the distribution on the rollout side only (learn.sampling top_p = {top_p}, "
                      f"top_k = {top_k}); the learner's log-probs are of the full softmax: set top_p = 1, top_k = -1")
    if before_ok and not reloaded:
        causes.append("weights not reloaded: the rollout agreed before the training step and not after it "
                      "(learn.sync_every, learn.weights_transport, the rollout's reload log)")
    if dtype is not None:
        causes.append(dtype)
    if not same_prompt_ids:
        causes.append("the prompt's token ids differ between the sides (a chat-template difference)")
    return causes or ["none found in the settings: compare the two models' folders (rollout.engine.model, "
                      "learn.engine.model_path) and the engines' attention kernels"]


__all__ = ["dtype_difference", "engine_overrides", "likely_causes"]
