"""Stages in one run (``[[stages]]``): DeepSeek-R1's cold-start SFT, RL, rejection-sampling SFT
and RL again, one after another under ``rlvr-actor up``, each from the previous one's weights.

``config``: the stage tables and how each stage's ``learn`` overrides merge into ``[learn]``;
``record``: the run's stage record (``stages.json``: where a stopped run resumes);
``runner``: runs them; ``summary``: the table ``up`` prints.
"""
