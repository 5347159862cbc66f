"""Transports and learner hosts beyond one machine's shared memory (a runner loads them by name)."""
