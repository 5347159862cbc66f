"""What `pzasync train ENV` does, as a library (`Trainer`, `train`): the recipe combined with the options given
(choices.py), learners and their options in a TOML file (learner_file.py), the run and its final scores
(trainer.py)."""

from pzasync.training.choices import TrainChoices, learners_from_options, train_choices, with_learner_for
from pzasync.training.trainer import FINAL_EPISODES, FINAL_SHARE, Trainer, TrainResult, train

__all__ = ["FINAL_EPISODES", "FINAL_SHARE", "TrainChoices", "TrainResult", "Trainer",
           "learners_from_options", "train", "train_choices", "with_learner_for"]
