"""An admin switch's body, screened before the policy reads it: whatever JSON arrives is a 200 or a 400 naming the field.

The policy's own checks (console/overflow/policy.py) take numbers to floats, and JSON's numbers have no
bound: a 400-digit `max_wait_seconds` or `for` is an OverflowError there, which a handler would turn into a
500. Every bound an operator may set is far below `MAX_NUMBER`, so a whole number past it is refused here,
by field, before any conversion; nesting is bounded where the body is read (bounded_json).
"""

from __future__ import annotations

from console.overflow.policy import PolicyError

MAX_NUMBER = 10**15  # the largest bound in a policy is a week in seconds (6e5); no float loses a whole number this size


def screen(body: object) -> None:
    """PolicyError naming the first field whose value is a whole number no float conversion survives."""
    if not isinstance(body, dict):
        return  # the policy says "body: expected a JSON object"
    for field, value in body.items():
        if isinstance(value, int) and not isinstance(value, bool) and not -MAX_NUMBER <= value <= MAX_NUMBER:
            digits = len(str(abs(value)))
            raise PolicyError(
                field or '""', f"got a whole number of {digits} digits; expected one in the field's range"
            )
