"""Per-phase wall-time lines (shopping_companion/phases.py), as the quickstart prints them."""

from __future__ import annotations

import re

from shopping_companion.phases import peak_rss_bytes, phase, show_phases


def test_each_phase_prints_one_line_as_it_ends():
    lines: list[str] = []
    with show_phases(lines.append) as clock:
        with phase("index"):
            pass
        with phase("synthesis"):
            with phase("tasks"):
                pass
    assert [line.split(":", 1)[0] for line in lines] == ["phase index", "phase synthesis › tasks", "phase synthesis"]
    assert all(re.fullmatch(r"phase [^:]+: \d+\.\ds \(peak memory \d+\.\d\d GB\)", line) for line in lines), lines
    assert [n for n, _ in clock.records] == ["index", "synthesis › tasks", "synthesis"]
    assert clock.summary().startswith("index 0.0s, synthesis ") and "tasks" not in clock.summary()


def test_a_phase_that_raises_is_still_timed_and_outside_nothing_is_printed():
    lines: list[str] = []
    with phase("not shown"):
        pass
    with show_phases(lines.append):
        try:
            with phase("fails"):
                raise ValueError("boom")
        except ValueError:
            pass
    assert len(lines) == 1 and lines[0].startswith("phase fails: ")
    assert peak_rss_bytes() > 10_000_000  # a Python process holds more than 10 MB
