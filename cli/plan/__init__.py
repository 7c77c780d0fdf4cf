"""``rlvr-actor plan``: the dry run and the memory planner, as functions the command prints.

- ``checks``: what would stop the run at start (plug-ins, datasets, the verifier's fields,
  the chat template, the model's config and tokenizer), each finding naming its config key;
- ``shapes``: a model's shape and parameter count from its config alone (no weights);
- ``memory``: bytes per GPU for the learner and the rollout, what does not fit and the fix;
- ``cost``: step time and GPU-hours at a stated MFU and decode rate (an estimate).

Nothing here starts a role, opens the bus or downloads anything. docs/plan.md has the formulas.
"""
