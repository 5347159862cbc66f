"""Environments bundled with pzasync; each passes pettingzoo.test checks.

- `forage` (forage_v0): a turn-based gridworld where foragers compete for regrowing food and starve mid-episode.
- `recall` (recall_v0): a turn-based memory test; each agent sees a cue once and must name it `delay` cycles
  later, so feed-forward policies stay at chance (1 / n_cues) and recurrent ones can score 1.
"""
