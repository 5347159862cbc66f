"""pzasync: an asynchronous actor-learner runtime for any PettingZoo environment."""
__version__ = "0.1.0"
