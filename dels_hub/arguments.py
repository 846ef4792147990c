"""Command-line values, checked when the command line is parsed: before any model loads.

The ``argparse`` types reject a bad value with argparse's own message (``argument --max-new-tokens: ...``) and exit
status 2, as for any malformed flag. Settings dataclasses derive their flags from their fields (``option`` and
``add_dataclass_arguments``), so a setting, its default and its help text are written once.
"""

import argparse
import dataclasses
import json
import math
import types
import typing


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


def add_fusion_arguments(parser) -> None:
    """``--alpha`` and ``--beta``: the fusion weights of a head, one value or one per fused position (the draft
    positions after the pure prefix)."""
    parser.add_argument("--alpha", type=float, nargs="+", default=None,
                        help="fusion weight of the head: one value, or one per fused position, the draft positions "
                             "after the pure prefix (default: the head's)")
    parser.add_argument("--beta", type=float, nargs="+", default=None,
                        help="fusion weight of the unigram-prior correction, as --alpha (default: the head's)")


def fusion_schedules(args: argparse.Namespace) -> dict:
    """The given ``--alpha``/``--beta`` as fusion schedules: one value is a scalar, several a per-position list."""
    return {name: values[0] if len(values) == 1 else values
            for name, values in (("alpha", args.alpha), ("beta", args.beta)) if values is not None}


# -- flags derived from a settings dataclass ------------------------------------------------------------------


def option(default=dataclasses.MISSING, help: str = "", *, default_factory=dataclasses.MISSING, **flag):
    """A dataclass field that is also a ``--flag`` (peft's ``field(metadata={"help": ...})``).

    ``flag`` holds the ``add_argument`` keywords that the field's type does not imply (``action``, ``metavar``,
    ``choices``, ``name`` for a flag spelled differently from the field, ``cli_default`` for a command-line
    default that differs from the Python API's).
    """
    if "cli_default" in flag:
        flag["default"] = flag.pop("cli_default")
    return dataclasses.field(default=default, default_factory=default_factory, metadata={"help": help, "flag": flag})


def field_type(annotation) -> tuple:
    """``list[int]`` -> (list, int); ``int`` and ``int | None`` -> (int, None)."""
    if typing.get_origin(annotation) is list:
        return list, typing.get_args(annotation)[0]
    if isinstance(annotation, types.UnionType):
        kinds = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(kinds) != 1:
            raise TypeError(f"a field's type must be one type or one type | None, got {annotation}")
        return field_type(kinds[0])
    return annotation, None


def add_dataclass_arguments(parser, config_class, *, defaults: bool = True, groups: dict | None = None) -> None:
    """One ``--field-name`` per field of ``config_class`` that has help metadata, typed by the field.

    ``defaults=False`` leaves a flag that was not given out of the namespace (``argparse.SUPPRESS``), so that a
    recipe's value wins over the dataclass default. ``groups`` maps a field name to the argument group (a mutually
    exclusive one, say) its flag joins; the others join ``parser``.
    """
    for f in dataclasses.fields(config_class):
        if "help" not in f.metadata:
            continue  # a setting of the Python API only (a loaded model, a progress switch)
        flag = dict(f.metadata.get("flag", {}))
        keywords = {"dest": f.name, "help": f.metadata["help"]}
        if not {"action", "type", "nargs"} & flag.keys():
            kind, item = field_type(f.type)
            if kind is bool:
                keywords["action"] = argparse.BooleanOptionalAction
            elif kind is list:
                keywords.update(nargs="*", type=item)
            elif kind is not object:  # object: a value the Python API may also pass loaded (a model)
                keywords["type"] = kind
        if not defaults:
            keywords["default"] = argparse.SUPPRESS
            flag.pop("default", None)
        elif f.default is not dataclasses.MISSING:
            keywords["default"] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            keywords["default"] = f.default_factory()
        else:
            keywords["required"] = True
        keywords.update(flag)
        shown = keywords.get("default")
        unshown = shown is None or shown is False or shown in ([], {}, "") or "(default" in keywords["help"]
        if defaults and not unshown and keywords.get("action") != "append":
            keywords["help"] += f" (default: {shown})"
        name = "--" + keywords.pop("name", f.name).replace("_", "-")
        (groups or {}).get(f.name, parser).add_argument(name, **keywords)
