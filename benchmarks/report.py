"""Paired speed measurements (ours vs a baseline, timed in the same run) and their report.

Used by benchmarks/conftest.py's `ratio` fixture; run as a script
(`python benchmarks/report.py [results.json]`) to print the table of the last runs.

How a pair is timed: each callable is first calibrated to a batch of calls taking at
least `min_sample` seconds; then `rounds` samples of each are taken interleaved
(ours, baseline, baseline, ours, ...) with the garbage collector off, so drift and
noise from other processes hit both sides alike; the per-call median of each side is
kept. The ratio is baseline/ours when higher is better (a speed-up: 2.0 means twice
as fast) and ours/baseline when lower is better (a relative cost: 0.5 means half the
latency); a pair meets its target when the ratio is on the right side of it.

Errors: a callable that raises propagates out of `measure_pair` unchanged (the
benchmark fails, naming the test); an unreadable or malformed results file raises
ValueError naming the path.
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

RESULTS = Path(__file__).with_name("results.json")


@dataclass(frozen=True)
class Pair:
    """One measured pair: median seconds per call of ours and of the baseline."""

    name: str
    ours_s: float
    baseline_s: float
    target: float | None
    higher_is_better: bool = True
    ours_label: str = ""
    baseline_label: str = ""
    unit_bytes: int = 0  # bytes one call processes, for a throughput column; 0 = none

    @property
    def ratio(self) -> float:
        if self.higher_is_better:
            return self.baseline_s / self.ours_s
        return self.ours_s / self.baseline_s

    @property
    def meets_target(self) -> bool | None:
        if self.target is None:
            return None
        return self.ratio >= self.target if self.higher_is_better else self.ratio <= self.target

    def to_json(self) -> dict[str, object]:
        out = asdict(self)
        out.update(ratio=self.ratio, meets_target=self.meets_target)
        return out


def _time_batch(fn: Callable[[], object], n: int, setup: Callable[[], object] | None) -> float:
    if setup is not None:
        setup()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n


def _calibrate(fn: Callable[[], object], min_sample: float,
               setup: Callable[[], object] | None) -> int:
    n = 1
    while True:
        per_call = _time_batch(fn, n, setup)
        if per_call * n >= min_sample or n >= 1 << 24:
            return n
        # Aim a little past min_sample so the next try usually lands.
        n = max(n * 2, int(min_sample * 1.2 / max(per_call, 1e-9)))


def measure_pair(ours: Callable[[], object], baseline: Callable[[], object], *,
                 rounds: int = 21, min_sample: float = 0.002,
                 setup: Callable[[], object] | None = None) -> tuple[float, float, int]:
    """Median seconds per call of ours and baseline, sampled interleaved; also the
    batch size used for ours (so pytest-benchmark can time ours the same way)."""
    ours()  # warm caches, lazy imports and allocators before calibrating
    baseline()
    n_ours = _calibrate(ours, min_sample, setup)
    n_base = _calibrate(baseline, min_sample, setup)
    ours_t: list[float] = []
    base_t: list[float] = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for i in range(rounds):
            if i % 2 == 0:
                ours_t.append(_time_batch(ours, n_ours, setup))
                base_t.append(_time_batch(baseline, n_base, setup))
            else:
                base_t.append(_time_batch(baseline, n_base, setup))
                ours_t.append(_time_batch(ours, n_ours, setup))
    finally:
        if gc_was_enabled:
            gc.enable()
    return statistics.median(ours_t), statistics.median(base_t), n_ours


def _fmt_time(s: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def _fmt_speed(s: float, nbytes: int) -> str:
    return f" ({nbytes / s / 1e9:.2f} GB/s)" if nbytes else ""


def render(pairs: Iterable[Pair]) -> str:
    """A plain-text table: name, ours, baseline, ratio, target (and whether met)."""
    rows = [("benchmark", "ours", "baseline", "ratio", "target")]
    for p in pairs:
        if p.target is None:
            target = "-"
        else:
            sign = ">=" if p.higher_is_better else "<="
            target = f"{sign} {p.target:g} {'ok' if p.meets_target else 'MISSED'}"
        kind = "x faster" if p.higher_is_better else "x cost"
        rows.append((
            p.name,
            f"{_fmt_time(p.ours_s)}{_fmt_speed(p.ours_s, p.unit_bytes)}",
            f"{_fmt_time(p.baseline_s)}{_fmt_speed(p.baseline_s, p.unit_bytes)}"
            + (f" [{p.baseline_label}]" if p.baseline_label else ""),
            f"{p.ratio:.2f}{kind}",
            target,
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def load(path: Path = RESULTS) -> dict[str, dict[str, object]]:
    """Results by name from a results file; empty when it does not exist."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        return {entry["name"]: entry for entry in data["results"]}
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a benchmark results file: {err}") from err


def save(pairs: Iterable[Pair], path: Path = RESULTS) -> None:
    """Merge pairs into the results file by name, so separate runs of different
    benchmark files accumulate; written to a temp file and renamed over."""
    merged = load(path)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    for p in pairs:
        merged[p.name] = {**p.to_json(), "measured_at": stamp}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"results": list(merged.values())}, indent=2) + "\n")
    tmp.replace(path)


def _from_json(entry: dict[str, object]) -> Pair:
    fields = Pair.__dataclass_fields__
    return Pair(**{k: v for k, v in entry.items() if k in fields})  # type: ignore[arg-type]


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else RESULTS
    results = load(path)
    if not results:
        print(f"no results in {path}: run `make bench` first", file=sys.stderr)
        return 1
    print(render(_from_json(e) for e in results.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
