"""Ways to start a training job. The trainer does not know which one started it."""
