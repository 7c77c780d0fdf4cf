"""Generation engines behind one interface (see ``base``): vllm, hf, trivial.

Importing this package imports no torch and no vLLM; ``make_engine`` loads the
chosen backend.
"""

from rlvr.rollout.engines.base import (
    Engine,
    GenerationEngineConfig,
    EngineDeadError,
    Generation,
    GroupResult,
    HFEngineConfig,
    PromptTooLongError,
    TrivialEngineConfig,
    VLLMEngineConfig,
    WeightsRejectedError,
    make_engine,
)

__all__ = [
    "Engine",
    "GenerationEngineConfig",
    "EngineDeadError",
    "Generation",
    "GroupResult",
    "HFEngineConfig",
    "PromptTooLongError",
    "TrivialEngineConfig",
    "VLLMEngineConfig",
    "WeightsRejectedError",
    "make_engine",
]
