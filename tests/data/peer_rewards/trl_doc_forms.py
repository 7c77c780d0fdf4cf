"""The reward-function forms TRL's GRPOTrainer documentation shows, each as a user copies it.

Standard-format completions are strings; conversational ones are lists of one
message. Examples: rewarding length (``completions, **kwargs``), a format check
on ``completion[0]["content"]``, a reference column (``completions,
ground_truth, **kwargs``), multi-task functions that return ``None`` where they
do not apply, an ``async def`` function, one that reads ``trainer_state``, and
one that reports a metric through ``log_metric``.
"""

import re


def reward_len(completions, **kwargs):
    return [-abs(20 - len(completion)) for completion in completions]


def format_reward_func(completions, **kwargs):
    pattern = r"^<think>.*?</think><answer>.*?</answer>$"
    completion_contents = [completion[0]["content"] for completion in completions]
    matches = [re.match(pattern, content) for content in completion_contents]
    return [1.0 if match else 0.0 for match in matches]


def reward_func(completions, ground_truth, **kwargs):
    # Regular expression to capture content inside \boxed{}
    matches = [re.search(r"\\boxed\{(.*?)\}", completion) for completion in completions]
    contents = [match.group(1) if match else "" for match in matches]
    # Reward 1 if the content is the same as the ground truth, 0 otherwise
    return [1.0 if c == gt else 0.0 for c, gt in zip(contents, ground_truth)]


def math_reward_func(completions, task, ground_truth, **kwargs):
    rewards = []
    for completion, t, gt in zip(completions, task, ground_truth):
        if t == "math":
            rewards.append(1.0 if gt in completion else 0.0)
        else:
            rewards.append(None)  # not a math task: not applicable
    return rewards


async def async_reward_func(prompts, completions, **kwargs):
    return [1.0 if "42" in c else 0.0 for c in completions]


def scheduled_reward(completions, trainer_state, **kwargs):
    weight = 1.0 if trainer_state.global_step < 1000 else 0.5
    return [weight * float("answer" in c) for c in completions]


def logging_reward(completions, log_metric=None, **kwargs):
    rewards = [float(len(c) < 50) for c in completions]
    if log_metric is not None:
        log_metric("short_share", sum(rewards) / len(rewards))
    return rewards


def prompt_aware_reward(prompts, completions, completion_ids, **kwargs):
    return [float(len(ids) <= 32 and p.strip() != "") for p, ids in zip(prompts, completion_ids)]
