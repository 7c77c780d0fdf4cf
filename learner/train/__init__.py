"""The optimizer's side: the DeepSpeed engine, the trainer handle, token log-probs,
micro-batch packing, LoRA, step rewards on tokens, data-parallel ranks and their commands, FLOPs."""
