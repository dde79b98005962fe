"""argparse types for the verbs' options: a value out of range is refused while parsing.

A ``-n -5`` or ``--limit 0`` used to run and print nothing; now argparse says what is accepted
(exit 2, usage on stderr). Kept free of heavy imports: building the parser must stay fast.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Callable, Iterable

from eventlog.subjects import names_by_category


def int_at_least(low: int, *, what: str = "a whole number") -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what} (give an integer >= {low})") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is too small (give an integer >= {low})")
        return value

    parse.__name__ = f"integer >= {low}"  # argparse names the type in its error after the colon
    return parse


def _port(text: str, low: int) -> int:
    accepted = f"{low}-65535" + (", 0: any free port" if low == 0 else "")
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number ({accepted})") from None
    if not low <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port number ({accepted})")
    return value


def port(text: str) -> int:
    return _port(text, 1)


def port_or_any(text: str) -> int:
    """A port to listen on; 0 lets the OS pick one."""
    return _port(text, 0)


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (give a number > 0)") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is out of range (give a finite number > 0)")
    return value


positive_int = int_at_least(1)
sequence = int_at_least(1, what="a log sequence")


def job_key(text: str) -> str:
    """``NAMESPACE/NAME``: exactly one slash, both sides non-empty."""
    key = text.strip()
    ns, sep, name = key.partition("/")
    if not sep or not ns or not name or "/" in name or any(c.isspace() for c in key):
        raise argparse.ArgumentTypeError(f"{text!r}: give the job as NAMESPACE/NAME, e.g. team-a/train-1")
    return key


def did_you_mean(word: str, choices: Iterable[str], *, n: int = 3) -> str:
    """`` (did you mean: a, b?)`` or the empty string."""
    close = difflib.get_close_matches(word, sorted(set(choices)), n=n, cutoff=0.5)
    return f" (did you mean: {', '.join(close)}?)" if close else ""


# Log subjects: <root>.log.<category>.<type>[.<namespace>.<name> | .<cluster>].
_MAX_TOKENS = 6


def subject_filter(text: str) -> str:
    """A NATS subject filter that some log subject can match; else why not, with the nearest names.

    The root token is not checked here (``--root`` may rename it); ``log`` must be ``log``: the
    inbox (``in``) is not what these verbs read.
    """
    if not text or text != text.strip() or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(f"{text!r}: a subject filter has no spaces, e.g. 'kd.log.decision.>'")
    tokens = text.split(".")
    for i, token in enumerate(tokens):
        if token == "":
            raise argparse.ArgumentTypeError(f"{text!r}: empty token at position {i + 1} ('..' or a dot at an end)")
        if token == ">" and i != len(tokens) - 1:
            raise argparse.ArgumentTypeError(f"{text!r}: '>' matches the rest of a subject, so it must come last")
        if len(token) > 1 and ("*" in token or ">" in token):
            raise argparse.ArgumentTypeError(f"{text!r}: {token!r}: '*' and '>' are whole tokens, not patterns")
    if len(tokens) > _MAX_TOKENS:
        raise argparse.ArgumentTypeError(
            f"{text!r}: log subjects have at most {_MAX_TOKENS} tokens: "
            "<root>.log.<category>.<type>.<namespace>.<name> (or .<cluster>)"
        )
    names = names_by_category()
    if len(tokens) > 1 and tokens[1] not in ("log", "*", ">"):
        raise argparse.ArgumentTypeError(
            f"{text!r}: the second token is 'log' (log subjects are <root>.log.<category>.<type>...)"
            + did_you_mean(tokens[1], ["log"])
        )
    if len(tokens) > 2 and tokens[2] not in ("*", ">") and tokens[2] not in names:
        raise argparse.ArgumentTypeError(
            f"{text!r}: no category {tokens[2]!r}; categories are {', '.join(sorted(names))}"
            + did_you_mean(tokens[2], names)
        )
    if len(tokens) > 3 and tokens[3] not in ("*", ">"):
        allowed = names[tokens[2]] if tokens[2] in names else set().union(*names.values())
        if tokens[3] not in allowed:
            where = f"in category {tokens[2]!r}" if tokens[2] in names else "in any category"
            raise argparse.ArgumentTypeError(
                f"{text!r}: no event type {tokens[3]!r} {where}; types are {', '.join(sorted(allowed))}"
                + did_you_mean(tokens[3], allowed)
            )
    return text


def until(text: str) -> str:
    """``--until``: a log sequence >= 1 or an ISO 8601 time (parsed again when the verb runs)."""
    from reconciler.edge.logsource import parse_until

    try:
        seq, _ = parse_until(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix(f"--until {text.strip()!r}: ")) from None
    if seq is not None and seq < 1:
        raise argparse.ArgumentTypeError(f"{seq}: log sequences start at 1")
    return text
