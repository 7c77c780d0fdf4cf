"""What a user writes to use peers' functions that need a line of their own: open-r1's reward
factories, and verl's prime_code scorer, whose parameter names (completion, test_cases) do not say
how verl calls it, so the module says it (docs/rewards.md#reward-functions-from-verl-and-trl)."""

from functools import partial

from rlvr.verify.reward_fns import reward_function
from tests.data.peer_rewards.open_r1_rewards import get_cosine_scaled_reward, get_repetition_penalty_reward
from tests.data.peer_rewards.verl_prime_code import compute_score as prime_code_score

cosine_scaled_reward = get_cosine_scaled_reward(max_len=400)
repetition_penalty_reward = get_repetition_penalty_reward(ngram_size=3, max_penalty=-1.0)

# As verl's default_compute_score calls it for codecontests, apps, codeforces and taco (no sandbox URL).
PRIME_CODE = reward_function(partial(prime_code_score, continuous=True), "verl_scorer")
