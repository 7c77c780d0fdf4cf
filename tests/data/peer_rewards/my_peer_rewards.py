"""What a user writes to use open-r1's reward factories: a module that names the functions."""

from tests.data.peer_rewards.open_r1_rewards import get_cosine_scaled_reward, get_repetition_penalty_reward

cosine_scaled_reward = get_cosine_scaled_reward(max_len=400)
repetition_penalty_reward = get_repetition_penalty_reward(ngram_size=3, max_penalty=-1.0)
