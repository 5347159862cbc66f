"""Environments bundled with pzasync; each passes pettingzoo.test checks."""
