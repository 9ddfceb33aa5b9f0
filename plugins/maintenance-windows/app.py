"""Fleet module plugin `maintenanceWindow`, written in Python with componentize-py.

A maintenance window is a span of time during which a site is under maintenance.
The plugin describes the kind (group `maintenance`, section `maintenanceWindows`,
ids `mw_...`) and checks its business rules:

- `startsAt` and `endsAt` are RFC 3339 UTC times (`2026-12-01T02:00:00Z`);
- `endsAt` is later than `startsAt`;
- a window lasts at most 7 days.

The check is deterministic: no clock, randomness, files or network, and times are
parsed by hand and compared exactly (to the nanosecond).
"""

import json
import json.scanner
import math
import re
from fractions import Fraction

from wit_world import exports
from wit_world.imports.types import (
    Descriptor,
    Field,
    FieldType_Bool,
    FieldType_Ref,
    FieldType_String,
    Problem,
    Removal,
    Subject,
)

MAX_DAYS = 7

# JSON decoding with the pure-Python scanner: deep nesting then raises RecursionError
# instead of overflowing the WebAssembly stack in the C one (a trap).
_JSON = json.JSONDecoder()
_JSON.scan_once = json.scanner.py_make_scanner(_JSON)

# `YYYY-MM-DDTHH:MM:SS`, optional fractional seconds, `Z`. ASCII digits only
# (`\d` would also match other scripts' digits).
_UTC_TIME = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})"
    r"T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?Z"
)

_DESCRIPTOR = Descriptor(
    group="maintenance",
    kind="maintenanceWindow",
    section="maintenanceWindows",
    id_prefix="mw",
    removal=Removal.DELETE,
    fields=[
        Field("site", FieldType_Ref("site"), required=True, immutable=True),
        Field("startsAt", FieldType_String(), required=True, immutable=False),
        Field("endsAt", FieldType_String(), required=True, immutable=False),
        Field("reason", FieldType_String(), required=False, immutable=False),
        Field("drain", FieldType_Bool(), required=False, immutable=False),
    ],
)


class Plugin(exports.Plugin):
    def describe(self) -> Descriptor:
        return _DESCRIPTOR

    def check(self, subjects: list[Subject]) -> list[Problem]:
        problems = []
        for index, subject in enumerate(subjects):
            for path, message in check_window(subject.object):
                problems.append(Problem(subject=index, path=path, message=message))
        return problems


def check_window(text: str) -> list[tuple[str, str]]:
    """The (path, message) problems of one maintenance window, given as JSON text."""
    try:
        window = _JSON.decode(text)
    except (ValueError, RecursionError):
        window = None
    if not isinstance(window, dict):
        return [("", "a maintenance window must be a JSON object")]

    problems = []
    times = {}
    for field in ("startsAt", "endsAt"):
        value = window.get(field)
        instant, why = parse_utc_time(value)
        if instant is None:
            problems.append((f"/{field}", time_message(field, value, why)))
        else:
            times[field] = instant
    if problems:
        return problems

    length = times["endsAt"] - times["startsAt"]
    if length <= 0:
        problems.append(("/endsAt", "endsAt must be later than startsAt"))
    elif length > MAX_DAYS * 86400:
        problems.append(
            (
                "/endsAt",
                f"a maintenance window lasts at most {MAX_DAYS} days "
                f"(this one lasts {format_hours(length)} hours)",
            )
        )
    return problems


def parse_utc_time(value) -> tuple[Fraction | None, str]:
    """Seconds since 1970-01-01T00:00:00Z of an RFC 3339 UTC time, exactly.

    Returns (seconds, "") or (None, why) where `why` is "" for a malformed text and
    a short explanation for a well-formed one that names no real date or time.
    Leap seconds (`:60`) and more than 9 fractional digits (below a nanosecond)
    are refused.
    """
    if not isinstance(value, str):
        return None, ""
    match = _UTC_TIME.fullmatch(value)
    if match is None:
        return None, ""
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction = match.group(7) or ""
    if not 1 <= month <= 12 or not 1 <= day <= days_in_month(year, month):
        return None, "no such date"
    if hour > 23 or minute > 59 or second > 59:
        return None, "no such time"
    if len(fraction) > 9:
        return None, "at most 9 fractional digits"
    seconds = days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second
    if fraction:
        return seconds + Fraction(int(fraction), 10 ** len(fraction)), ""
    return Fraction(seconds), ""


def is_leap_year(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year: int, month: int) -> int:
    if month == 2:
        return 29 if is_leap_year(year) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)."""
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468


def time_message(field: str, value, why: str) -> str:
    if isinstance(value, str) and len(value) > 64:
        value = value[:61] + "..."
    shown = json.dumps(value, ensure_ascii=False)  # quoted if a string
    message = f"{field} must be an RFC 3339 UTC time (YYYY-MM-DDTHH:MM:SSZ), not {shown}"
    return f"{message}: {why}" if why else message


def format_hours(seconds: Fraction) -> str:
    """Hours, rounded up to at most two decimals: `192`, `168.5`, `168.01`."""
    whole, hundredths = divmod(math.ceil(seconds * 100 / 3600), 100)
    return f"{whole}.{hundredths:02d}".rstrip("0") if hundredths else str(whole)
