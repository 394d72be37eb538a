"""Logging for the kit's command lines: quiet by default (their printed lines are the report);
`-v` shows each step with its time (a grading's steps, a cluster's nodes), `-vv` everything,
kafka-python's own chatter included."""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(levelname)-5s %(name)s: %(message)s"


def configure(verbosity: int) -> None:
    """0: warnings only; 1: the kit's own steps (INFO); 2: debug, every library included."""
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, format=FORMAT, datefmt="%H:%M:%S")
    if verbosity < 2:   # kafka-python logs every reconnect at INFO; those are not the kit's steps
        logging.getLogger("kafka").setLevel(logging.WARNING)
