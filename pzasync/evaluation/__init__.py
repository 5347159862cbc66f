"""Scoring policies: games against yardstick players with 95% intervals (evaluate.py), and the
low-priority evaluator process that scores the newest policies while a run trains (evaluator.py)."""
