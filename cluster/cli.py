"""What the kit's command lines share.

Logging: quiet by default (their printed lines are the report); `-v` shows each step with its
time (a grading's steps, a cluster's nodes), `-vv` everything, kafka-python's chatter included.

SIGTERM (a `kill`, a CI job cancelled, grade-all's deadline) unwinds like Ctrl-C, so every
clean-up runs: a grading's own brokers, its Kafka user and its folders do not outlive it."""

from __future__ import annotations

import logging
import signal

FORMAT = "%(asctime)s %(levelname)-5s %(name)s: %(message)s"


def configure(verbosity: int) -> None:
    """Logging (0: warnings only; 1: the kit's own steps; 2: debug, every library) and SIGTERM."""
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, format=FORMAT, datefmt="%H:%M:%S")
    if verbosity < 2:  # kafka-python logs every reconnect, and a killed broker as ERRORs: expected, not ours
        logging.getLogger("kafka").setLevel(logging.CRITICAL)
        # jupyter_client warns through traitlets' logger when a finished kernel client's ZMQ
        # context is already gone ("Could not destroy zmq context"): harmless, every grading
        logging.getLogger("traitlets").setLevel(logging.ERROR)
    signal.signal(signal.SIGTERM, _interrupt)


def run(parser, argv=None) -> int:
    """A CLI whose subcommands set func(args) (python -m autograder, python -m staff): parse,
    configure logging and SIGTERM, run the subcommand; its return is the exit code."""
    args = parser.parse_args(argv)
    configure(args.verbose)
    return args.func(args)


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")
