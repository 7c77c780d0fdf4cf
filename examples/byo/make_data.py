"""Write data.parquet: 300 arithmetic word problems in verl's dataset layout.

    python examples/byo/make_data.py

Each row is what verl's own preprocessing scripts write: ``data_source``,
``prompt`` (a list of chat messages), ``ability``, ``reward_model``
(``{"style": "rule", "ground_truth": ...}``) and ``extra_info``
(``{"split", "index", ...}``). rlvr-actor reads the file as it is.
"""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
THINGS = ("apples", "books", "coins", "marbles", "stamps", "shells")


def rows(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b, thing = rng.randint(2, 60), rng.randint(2, 40), rng.choice(THINGS)
        if rng.random() < 0.5:
            q, gold = f"Sam has {a} {thing} and finds {b} more. How many {thing} does Sam have now?", a + b
        else:
            a = max(a, b + 1)
            q, gold = f"Sam has {a} {thing} and gives away {b}. How many {thing} are left?", a - b
        out.append({
            "data_source": "byo/arith_words",
            "prompt": [{"role": "user", "content": q + " Put the final answer in \\boxed{}."}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(gold)},
            "extra_info": {"split": "train", "index": i, "operands": [a, b]},
        })
    return out


if __name__ == "__main__":
    pq.write_table(pa.Table.from_pylist(rows(300)), HERE / "data.parquet")
    print(f"wrote {HERE / 'data.parquet'}")
