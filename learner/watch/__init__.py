"""What a person watches: evaluation rounds and pass@k, reward and step alarms, step records,
metrics and trackers, run totals, and the dump of every trained sample."""
