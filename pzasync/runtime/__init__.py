"""One run's moving parts: env copies (`copies/`), the actor and its extra processes, the plan (checked
options), auto-tuning of the "auto" counts (`autotune.py`), the run's shared memory (`allocation.py`),
learner hosts and the learner loop, the monitor, run directories, results and stop signals."""
