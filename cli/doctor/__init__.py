"""``rlvr-actor doctor``: the run for real, briefly, with its own engines, verifier and learner.

- ``agreement``: the rollout engine's distribution against the learner's on the same tokens
  (sampled-token difference, KL, top-k overlap) and the thresholds by dtype;
- ``differences``: what differs between the two sides' settings (the dtype each engine resolved,
  a vLLM ``extra`` that undoes the engine's own arguments), named even when the agreement holds,
  and the likely causes of a gap;
- ``session``: the short run itself: generate a few groups, score them, train a step or two,
  reload the weights, and measure each part;
- ``verdict``: the findings read together: go, or what to fix first;
- ``warmup``: the config's preparation step, its warm-up capped, the prepared model cached.

docs/plan.md has what each figure means.
"""
