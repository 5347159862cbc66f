"""Imported by the fork server alone (first in `processes.FORK_SERVER_PRELOAD`), never by a run's code.

It blocks SIGTERM and SIGINT in the fork server. A scheduler's SIGTERM to the whole process group would
otherwise end the fork server, and with it the runner's view of its children: multiprocessing then reports
every live child as exited (code 255) while the runner stops them gracefully (docs/reliability.md). The
children inherit the blocked mask across the fork, so a signal sent while one starts waits, as with spawn
(`runtime/stop_signals.shielded`), until the child sets its starter's mask (`processes._ForkServerChild`).
"""

import signal

signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGTERM, signal.SIGINT))
