"""The Ray backend (docs/distributed.md): learners as Ray actors on any node (host.py), and what runs
inside Ray's processes (workers.py). Needs the `ray` extra."""
