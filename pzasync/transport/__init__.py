"""How data crosses processes on one machine: named shared-memory segments, per-unit transition ring
buffers (and their shards), policy slots, the run's control block (counters and the stop flag), the
observation slots of env workers, and the protocols (`protocols.py`) every transport implements."""
