"""The figures of a benchmark run and the one table they are printed as. Pure: no I/O, no clock.

Every row is one figure of allocbridge's beside the same figure of a peer measured in the same
run on the same machine, and their ratio, always *allocbridge ÷ peer* in the row's unit: below 1
is less time or memory, above 1 is more throughput. A goal constrains either the value itself
(`p50 < 50 ms`) or that ratio (`≤ 0.2`, i.e. at least 5 times faster), and is `met` or `MISSED`;
a figure that could not be measured is `—` and leaves its goals `n/a`.

The table is Markdown with padded columns, readable in a terminal; `--output` writes it to a file,
kept as a dated result under docs/benchmarks/ (docs/benchmarks.md).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

Better = Literal["lower", "higher"]
Subject = Literal["value", "ratio"]
Op = Literal["<", "<=", ">", ">="]

_OPS: Final[dict[str, Callable[[float, float], bool]]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_SYMBOLS: Final = {"<": "<", "<=": "≤", ">": ">", ">=": "≥"}
MISSING: Final = "—"
TIME_UNITS: Final = frozenset({"ms", "s"})
MEMORY_UNITS: Final = frozenset({"MB", "KB"})


# --- statistics ---------------------------------------------------------------------------------


def percentile(samples: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0-100) with linear interpolation between the closest ranks (the
    "linear" method of numpy and of `statistics.quantiles(method="inclusive")`)."""
    if not samples:
        raise ValueError("percentile of no samples")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is not within 0-100")
    ordered = sorted(samples)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = math.ceil(position)
    if low == high:
        return ordered[low]
    fraction = position - low
    return ordered[low] + (ordered[high] - ordered[low]) * fraction


def median(samples: Sequence[float]) -> float:
    return percentile(samples, 50)


@dataclass(frozen=True)
class Latencies:
    """A series of request times, in seconds."""

    samples: tuple[float, ...]

    @classmethod
    def of(cls, samples: Iterable[float]) -> Latencies:
        values = tuple(samples)
        if not values:
            raise ValueError("a latency series needs at least one sample")
        if any(value < 0 or math.isnan(value) for value in values):
            raise ValueError("latencies are non-negative numbers")
        return cls(values)

    @property
    def n(self) -> int:
        return len(self.samples)

    def ms(self, q: float) -> float:
        """The `q`-th percentile in milliseconds."""
        return percentile(self.samples, q) * 1000


def rate(count: int, seconds: float) -> float:
    """Events per second; zero time is an error rather than infinity."""
    if seconds <= 0:
        raise ValueError("a rate needs a positive duration")
    return count / seconds


def mb(size_bytes: float) -> float:
    """Bytes in MB (10^6), the unit of every memory and throughput figure here."""
    return size_bytes / 1_000_000


# --- rows and goals -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Goal:
    """A target on a row's value or on its ratio; `text` is how the table shows it."""

    subject: Subject
    op: Op
    limit: float
    text: str = ""

    def check(self, value: float | None, ratio: float | None) -> bool | None:
        """True when met, False when missed, None when the figure it needs is missing."""
        actual = value if self.subject == "value" else ratio
        if actual is None:
            return None
        return _OPS[self.op](actual, self.limit)

    def describe(self, unit: str) -> str:
        if self.text:
            return self.text
        if self.subject == "ratio":
            return f"ratio {_SYMBOLS[self.op]} {_number(self.limit)}"
        return f"{_SYMBOLS[self.op]} {format_value(self.limit, unit)}"


def faster_than(times: float) -> Goal:
    """At least `times` as fast as the peer: a time ratio of at most 1/times."""
    return Goal("ratio", "<=", 1 / times, f"≥ {_number(times)}x faster than peer")


def within(times: float) -> Goal:
    """Taking at most `times` the peer's time."""
    return Goal("ratio", "<=", times, f"≤ {_number(times)}x peer's time")


def share_of(fraction: float) -> Goal:
    """At least `fraction` of the peer's throughput."""
    return Goal("ratio", ">=", fraction, f"≥ {_number(fraction)}x peer's throughput")


def rate_times(times: float) -> Goal:
    """At least `times` the peer's rate (requests per second)."""
    return Goal("ratio", ">=", times, f"≥ {_number(times)}x peer's rate")


def below(limit: float, unit: str) -> Goal:
    return Goal("value", "<", limit, f"< {format_value(limit, unit)}")


@dataclass(frozen=True)
class Row:
    """One figure beside its peer's."""

    section: str
    name: str
    value: float | None
    unit: str
    peer: str = ""
    peer_value: float | None = None
    better: Better = "lower"
    goals: tuple[Goal, ...] = ()
    note: str = ""

    @property
    def ratio(self) -> float | None:
        """allocbridge ÷ peer; None when either is missing, negative (a difference of two
        readings that came out below zero) or the peer's is zero."""
        if self.value is None or self.peer_value is None:
            return None
        if self.value < 0 or self.peer_value <= 0:
            return None
        return self.value / self.peer_value

    @property
    def verdicts(self) -> tuple[bool | None, ...]:
        return tuple(goal.check(self.value, self.ratio) for goal in self.goals)

    @property
    def result(self) -> str:
        """`met`, `MISSED` (any goal missed), `n/a` (a goal could not be checked) or empty."""
        verdicts = self.verdicts
        if not verdicts:
            return ""
        if False in verdicts:
            return "MISSED"
        if None in verdicts:
            return "n/a"
        return "met"


def ratio_text(row: Row) -> str:
    """The ratio with what it means in words: `0.031 (32x faster)`, `0.85 (0.85x the peer)`."""
    ratio = row.ratio
    if ratio is None:
        return MISSING
    if ratio == 0:
        return "0"
    bigger = ratio >= 1
    factor = ratio if bigger else 1 / ratio
    if row.unit in TIME_UNITS:
        word = "slower" if bigger else "faster"
    elif row.unit in MEMORY_UNITS:
        word = "more" if bigger else "less"
    else:
        word = "higher" if bigger else "lower"
    if math.isclose(ratio, 1.0, rel_tol=0.005):
        return f"{ratio:.2f} (same)"
    return f"{_ratio_number(ratio)} ({_number(factor)}x {word})"


def _ratio_number(ratio: float) -> str:
    return f"{ratio:.3f}" if ratio < 0.1 else f"{ratio:.2f}"


def _number(value: float) -> str:
    """Up to 3 significant digits, no trailing zeros: 5, 0.8, 1.5, 32, 120, 0.2."""
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    text = f"{value:.3g}"
    return text


def format_value(value: float | None, unit: str) -> str:
    """A figure with its unit and a precision that suits its size."""
    if value is None:
        return MISSING
    if unit == "ms":
        digits = 2 if value < 10 else 1 if value < 100 else 0
    elif unit == "s":
        digits = 3 if value < 1 else 2 if value < 10 else 1
    elif unit in ("req/s", "MB/s", "MB", "KB"):
        digits = 1 if value < 1000 else 0
    else:
        digits = 0 if float(value).is_integer() else 2
    text = f"{value:,.{digits}f}"
    return f"{text} {unit}" if unit else text


# --- the table ----------------------------------------------------------------------------------

HEADERS: Final = (
    "Measurement",
    "allocbridge",
    "Peer (same run, same machine)",
    "Peer",
    "Ratio (allocbridge ÷ peer)",
    "Goal",
    "Result",
    "Notes",
)


@dataclass
class Report:
    """Everything printed at the end of a run: heading lines, the rows, the notes below."""

    title: str
    heading: list[str] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        return row

    @property
    def missed(self) -> list[Row]:
        return [row for row in self.rows if row.result == "MISSED"]


def cells(row: Row) -> tuple[str, ...]:
    goals = "; ".join(goal.describe(row.unit) for goal in row.goals)
    return (
        row.name,
        format_value(row.value, row.unit),
        row.peer,
        format_value(row.peer_value, row.unit) if row.peer else "",
        ratio_text(row) if row.peer else "",
        goals,
        row.result,
        row.note,
    )


def render_table(rows: Sequence[Row]) -> str:
    """A padded Markdown table; each new section starts with a bold row of its name."""
    body: list[tuple[str, ...]] = []
    section = None
    for row in rows:
        if row.section != section:
            section = row.section
            body.append((f"**{section}**",) + ("",) * (len(HEADERS) - 1))
        body.append(tuple(_escape(cell) for cell in cells(row)))
    widths = [max(len(line[i]) for line in (HEADERS, *body)) for i in range(len(HEADERS))]

    def line(values: Sequence[str]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(HEADERS), rule, *(line(values) for values in body)])


def render_report(report: Report) -> str:
    parts = [f"## {report.title}", ""]
    parts += [f"- {item}" for item in report.heading]
    parts += ["", render_table(report.rows), ""]
    if report.notes:
        parts += [f"- {note}" for note in report.notes]
        parts.append("")
    return "\n".join(parts)


def _escape(text: str) -> str:
    return text.replace("|", "\\|")
