"""The actor's env copies behind one interface (`EnvCopies`, protocol.py): stepped in the actor's own
process (local.py) or in env worker processes (workers.py, with their wire codec in wire.py)."""
