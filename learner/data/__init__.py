"""Where training prompts come from: the dataset kinds, their records and fields, the feeder that
publishes tasks, and each prompt's accuracy every time it is drawn (the curriculum reads it)."""
