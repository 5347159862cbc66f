"""One run's moving parts: env copies (`copies/`), the actor and its extra processes, the plan (checked
options, auto-tuned counts, allocated transport), learner hosts and the learner loop, the monitor, run
directories, results and stop signals."""
