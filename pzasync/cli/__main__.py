"""`python -m pzasync.cli`: the `pzasync` command."""

from pzasync.cli import main

main()
