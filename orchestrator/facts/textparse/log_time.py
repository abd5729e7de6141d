"""The time prefixes of kernel-log lines -> what each says about when the line was printed.  Pure.

A line may carry seconds since boot (`[  123.456789]`, a /dev/kmsg record's microseconds), a wall
clock (`dmesg -T` `[Fri Aug 30 11:43:09 2024]`, `dmesg --time-format iso`
`2024-11-15T12:02:03,470068+00:00`, syslog `Feb 14 05:03:41`, journalctl's `short-iso`,
`short-full`, `short-precise` and `short-unix`), or an offset from the line before (`dmesg -H`
`[  +0.000844]` under a `[Nov15 12:02]` line).  Each becomes a `Stamp`; `when` spells the wall
clock in ISO 8601 as far as the text states it: a year-less syslog time is `--MM-DDThh:mm:ss`
(ISO 8601's form without a year), a time without a zone has no offset, and `wall` (epoch seconds)
is set only where the zone was printed, since the host's zone is not known here.  dmesg -H prints
a line's minute when it changes and the offset from the line before otherwise, so an offset line
is known to its minute (`--11-15T12:02`): the seconds of its minute line were never printed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from orchestrator.facts.normalize.budget import figure

# Month abbreviations as syslog and dmesg print them: English, and the locales found in published
# pastes (journalctl follows LC_TIME).  A month not listed leaves the time unknown, with a note.
_MONTHS = {name: i + 1 for names in (
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
    ("янв", "фев", "мар", "апр", "май", "июн", "июл", "авг", "сен", "окт", "ноя", "дек"),
    ("jan", "feb", "mär", "apr", "mai", "jun", "jul", "aug", "sep", "okt", "nov", "dez"),
) for i, name in enumerate(names)}
_WEEKDAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"


@dataclass(frozen=True)
class Stamp:
    t: float | None = None  # seconds since boot
    wall: float | None = None  # epoch seconds (only where the zone was printed)
    when: str | None = None  # the wall clock as printed, ISO 8601 (see the module text)
    rel: float | None = None  # dmesg -H / -d: seconds since the line before
    minute: str | None = None  # a dmesg -H minute line: its `when` to the minute, for the offset lines under it
    zone_known: bool = False

    def merged(self, other: Stamp) -> Stamp:
        """Two prefixes of one line (`[Fri ...] host kernel: [ 12.3]`): each field from whichever set it."""
        return Stamp(t=self.t if self.t is not None else other.t,
                     wall=self.wall if self.wall is not None else other.wall,
                     when=other.when if other.zone_known and not self.zone_known else self.when or other.when,
                     rel=self.rel if self.rel is not None else other.rel,
                     minute=self.minute or other.minute, zone_known=self.zone_known or other.zone_known)


def month(name: str) -> int | None:
    return _MONTHS.get(name.strip(".").lower()[:3])


def _iso(year: int | None, mon: int, day: int, h: int, mi: int, s: int | None, frac: str = "",
         zone: str | None = None) -> str | None:
    """ISO 8601 as far as it is known: `--MM-DD` without a year, no seconds where none were printed."""
    try:
        datetime(year or 2000, mon, day, h, mi, s or 0)  # leap year 2000: Feb 29 is valid without a year
    except ValueError:
        return None
    date = f"{year:04d}-{mon:02d}-{day:02d}" if year else f"--{mon:02d}-{day:02d}"
    sec = f":{s:02d}{'.' + frac if frac else ''}" if s is not None else ""
    return f"{date}T{h:02d}:{mi:02d}{sec}{zone or ''}"


def _zone(text: str | None) -> tuple[str | None, timedelta | None]:
    """'+0800', '+08:00', 'Z', 'UTC' -> ('+08:00', offset); an abbreviation other than UTC/GMT is
    ambiguous (CST is three zones): no offset."""
    if not text:
        return None, None
    if text in ("Z", "UTC", "GMT"):
        return "+00:00", timedelta(0)
    m = re.fullmatch(r"([+-])(\d\d):?(\d\d)", text)
    if not m:
        return None, None
    off = timedelta(hours=int(m.group(2)), minutes=int(m.group(3)))
    return f"{m.group(1)}{m.group(2)}:{m.group(3)}", off if m.group(1) == "+" else -off


def _wall(year: int, mon: int, day: int, h: int, mi: int, s: int, frac: str, off: timedelta) -> float | None:
    try:
        dt = datetime(year, mon, day, h, mi, s, tzinfo=timezone(off))
    except ValueError:
        return None
    return dt.timestamp() + (float("0." + frac) if frac else 0.0)


def from_iso(date: str, clock: str, frac: str | None, zone: str | None) -> Stamp:
    y, mo, d = (int(x) for x in date.split("-"))
    h, mi, s = (int(x) for x in clock.split(":"))
    frac = frac or ""
    ztext, off = _zone(zone)
    when = _iso(y, mo, d, h, mi, s, frac, ztext)
    if when is None:
        return Stamp()
    wall = _wall(y, mo, d, h, mi, s, frac, off) if off is not None else None
    return Stamp(wall=wall, when=when, zone_known=off is not None)


def from_syslog(mon_name: str, day: str, clock: str, frac: str | None) -> Stamp:
    """'Feb 14 05:03:41[.123456]': no year, no zone."""
    mon = month(mon_name)
    if mon is None:
        return Stamp()
    h, mi, s = (int(x) for x in clock.split(":"))
    return Stamp(when=_iso(None, mon, int(day), h, mi, s, frac or ""))


def from_unix(text: str) -> Stamp:
    """journalctl -o short-unix: epoch seconds, zone-free by definition."""
    wall = float(text)
    dt = datetime.fromtimestamp(wall, tz=timezone.utc)
    frac = text.partition(".")[2]
    return Stamp(wall=wall, when=_iso(dt.year, dt.month, dt.day, dt.hour, dt.minute, dt.second, frac, "+00:00"),
                 zone_known=True)


_CTIME = re.compile(_WEEKDAY + r" ([^\W\d_]{3}) +(\d{1,2}) (\d\d):(\d\d):(\d\d) (\d{4})")
_HUMAN = re.compile(r"([^\W\d_]{3})\s?(\d{1,2})\s+(\d\d):(\d\d)(?::(\d\d))?")
_BRACKET_ISO = re.compile(r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(?:[.,](\d+))?(Z|[+-]\d\d:?\d\d)?")


def from_bracket(content: str) -> Stamp | None:
    """The text inside a leading `[...]`: seconds since boot, an offset, a wall clock; None when
    the brackets hold message text (`[drm] ...`)."""
    c = content.strip()
    m = re.fullmatch(r"(\d+\.\d+)(?:\s*<\s*\d+\.\d+\s*>)?", c)  # dmesg, dmesg -d
    if m:
        return Stamp(t=figure(float(m.group(1))))
    m = re.fullmatch(r"\+\s*(\d+\.\d+)|<\s*(\d+\.\d+)\s*>", c)  # dmesg -H / --reltime, dmesg -d -t
    if m:
        return Stamp(rel=figure(float(m.group(1) or m.group(2))))
    m = _CTIME.fullmatch(c)
    if m:
        mon = month(m.group(1))
        if mon is None:
            return Stamp()
        return Stamp(when=_iso(int(m.group(6)), mon, int(m.group(2)), int(m.group(3)), int(m.group(4)),
                               int(m.group(5))))
    m = _BRACKET_ISO.fullmatch(c)
    if m:
        return from_iso(m.group(1), m.group(2), m.group(3), m.group(4))
    m = _HUMAN.fullmatch(c)
    mon = month(m.group(1)) if m else None
    if m and mon is not None:
        sec = int(m.group(5)) if m.group(5) else None
        when = _iso(None, mon, int(m.group(2)), int(m.group(3)), int(m.group(4)), sec)
        return Stamp(when=when, minute=_iso(None, mon, int(m.group(2)), int(m.group(3)), int(m.group(4)), None))
    if re.fullmatch(r"[TC]\d+", c):  # printk caller id (CONFIG_PRINTK_CALLER): not a time
        return Stamp()
    return None


def resolved(stamp: Stamp, minute: str | None) -> Stamp:
    """An offset line of dmesg -H: known to the minute of the minute line above it, else unknown."""
    return Stamp(when=minute)
