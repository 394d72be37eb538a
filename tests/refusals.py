"""What the brokers refused: the tests of logins and ACLs (tests/cluster/test_access.py,
test_own.py) assert a call was refused, not that it merely failed."""

import re

# How kafka-python and the Kafka tools say the brokers refused a request.
BROKER_REFUSED = re.compile(r"AuthorizationFailed|AUTHORIZATION_FAILED|[Aa]uthorization failed")


def refused(call, pattern: re.Pattern = BROKER_REFUSED) -> str:
    """The refusal the call met, as text; fails the test if the call went through (or failed
    in a way `pattern` does not name)."""
    try:
        result = call()
    except Exception as e:
        text = f"{type(e).__name__}: {e}"
    else:
        text = repr(result)
    assert pattern.search(text), f"not refused: {text[:400]}"
    return text
