"""Command-line values, checked when the command line is parsed: before any model loads.

The ``argparse`` types reject a bad value with argparse's own message (``argument --max-new-tokens: ...``) and exit
status 2, as for any malformed flag.
"""

import argparse
import json
import math


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def temperature(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"expected a temperature >= 0 (0 is greedy), got {text!r}")
    return value


def probability_mass(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a value in (0, 1], got {text!r}")
    return value


def json_object(text: str) -> dict:
    """A JSON object, e.g. ``--target-kwargs '{"gguf_file": "m.gguf"}'``."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not valid JSON ({error}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object such as '{{\"gguf_file\": \"m.gguf\"}}', "
                                         f"got {text!r}")
    return value
