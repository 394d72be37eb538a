"""The one error type the cluster raises: what happened, and what to do about it."""


class ClusterError(RuntimeError):
    """A cluster operation failed. `str(e)` says what happened; `e.hint` what to do."""

    def __init__(self, message: str, hint: str = "", log_tail: str = ""):
        self.message, self.hint, self.log_tail = message, hint, log_tail
        parts = [message]
        if log_tail:
            parts.append("Last lines of the log:\n" + log_tail)
        if hint:
            parts.append("What to do: " + hint)
        super().__init__("\n".join(parts))
