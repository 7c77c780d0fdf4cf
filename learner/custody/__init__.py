"""Every scored sample's fate, exactly once: custody, group assembly and filters, the ledger,
checkpoints, and the lease that keeps one learner per run."""
