"""The one held-out evaluation both frameworks get: pass@1 of saved weights.

``pass_at_1(base, weights, task, ...)`` loads the model folder ``base`` (config and tokenizer, which
neither framework changes), replaces its parameters with the safetensors under ``weights`` (an
rlvr-actor export ``weights/v<N>`` or a TRL snapshot, both plain safetensors of the whole model), and
samples ``n`` completions of each held-out prompt with HF generate at the task's temperature (top-k 0,
top-p 1, the task's max tokens), with one fixed seed. pass@1 is the mean share of correct completions
(the verifier's accuracy part), the estimator rlvr-actor's held-out rounds report.
"""

from __future__ import annotations

from pathlib import Path


def load_model(base: Path, weights: Path | None = None):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    if weights is not None:
        files = sorted(Path(weights).glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"no *.safetensors under {weights}")
        state = {}
        for f in files:
            state.update(load_file(f))
        missing, unexpected = model.load_state_dict(state, strict=False)
        missing = [k for k in missing if not (k == "lm_head.weight" and model.config.tie_word_embeddings)]
        if missing or unexpected:
            raise ValueError(f"{weights}: missing {missing[:4]}, unexpected {unexpected[:4]}")
    model.eval()
    return model, AutoTokenizer.from_pretrained(base)


def pass_at_1(base: Path, weights: Path | None, task, *, prompts: int, n: int, seed: int = 1234,
              batch_rows: int = 512) -> float:
    """Held-out pass@1 of ``weights`` (None: the base model itself) on the first ``prompts`` held-out tasks."""
    import torch

    from rlvr.rollout.engines.base import eos_token_ids, render_prompt_ids
    from rlvr.verify.registry import resolve

    from vs_trl.task import score

    model, tok = load_model(base, weights)
    specs = task.heldout[:prompts]
    eos = eos_token_ids(tok, str(base))
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos[0]
    rows = [(i, render_prompt_ids(tok, s.prompt)) for i, s in enumerate(specs) for _ in range(n)]
    verifiers = [resolve(s.verifier) for s in specs]
    torch.manual_seed(seed)
    correct = 0
    for start in range(0, len(rows), batch_rows):
        chunk = rows[start:start + batch_rows]
        width = max(len(r) for _, r in chunk)
        ids = torch.tensor([[pad] * (width - len(r)) + r for _, r in chunk])
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for _, r in chunk])
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=task.temperature,
                                 top_k=0, top_p=1.0, max_new_tokens=task.max_tokens, eos_token_id=eos,
                                 pad_token_id=pad)
        for (i, _), toks in zip(chunk, out[:, width:].tolist()):
            cut = next((j + 1 for j, t in enumerate(toks) if t in eos), len(toks))
            text = tok.decode(toks[:cut], skip_special_tokens=True)
            correct += score(verifiers[i], text, cut, task.max_tokens)[1]
    return correct / len(rows)
