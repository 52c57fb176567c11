"""Writing the audit's results: Parquet tables, summary.json, report.txt, report.html.

Under the output dir: `findings.parquet` (one row per finding), `segments.parquet`
(one row per segment), `health.parquet` (one row per host x log dir), `summary.json`
(counts, the exit code), `report.txt` (readable) and `report.html` (a host x log-dir
health grid and the findings). The findings and segments tables are written by the
findings pass's tasks (spark_audit.output), the rest here on the driver. The text and
HTML reports list at most findings.MAX_LISTED findings (errors first); the Parquet table
has them all. OSErrors writing the files propagate (the audit then exits 2).
"""

from __future__ import annotations

import html
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

from .findings import ERROR, WARNING, Tally
from .output import write_table
from .schema import HEALTH
from .transforms import AuditResult


def summarize(result: AuditResult, *, roots: int | None = None,
              tally: Tally | None = None) -> dict[str, Any]:
    """Counts of everything, the health grid and the first findings (errors first),
    from the findings pass's tally (`tally`, or one Spark action: AuditResult.tally)."""
    if tally is None:
        tally = result.tally()
    health = [dict(zip(HEALTH.fieldNames(), h, strict=True)) for h in tally.health(result.facts.dirs)]
    severity = Counter()
    kinds: dict[str, dict[str, int]] = {ERROR: {}, WARNING: {}}
    hosts: dict[str, dict[str, int]] = {}
    for (host, level, kind), count in tally.kinds.items():
        severity[level] += count
        by_kind = kinds.setdefault(level, {})
        by_kind[kind] = by_kind.get(kind, 0) + count
        by_host = hosts.setdefault(host or "-", {ERROR: 0, WARNING: 0})
        by_host[level] += count
    return {
        "errors": severity[ERROR], "warnings": severity[WARNING],
        "exit_code": 1 if severity[ERROR] else 0,
        "roots": roots if roots is not None else len(health), **tally.summary_totals(),
        "findings_by_kind": kinds, "findings_by_host": hosts,
        "health": health, "listed": [f._asdict() for f in tally.listed_findings()],
        "compacted_topics": result.facts.compacted,
    }


def _where(f: dict[str, Any]) -> str:
    part = f"{f['topic']}-{f['partition']}" if f["topic"] is not None else ""
    place = "/".join(x for x in (part, f["file"] or "") if x)
    at = []
    if f["position"] is not None:
        at.append(f"pos {f['position']}")
    if f["offset_start"] is not None:
        rng = f["offset_start"] if f["offset_start"] == f["offset_end"] else \
            f"{f['offset_start']}-{f['offset_end']}"
        at.append(f"offsets {rng}")
    return f"{f['host']}:{f['dir']} {place} {' '.join(at)}".rstrip()


def render_text(summary: dict[str, Any]) -> str:
    s = summary
    lines = [
        "logkeeper Spark audit",
        f"{s['hosts']} hosts, {len(s['health'])} log dirs, {s['logs']} logs, "
        f"{s['segments']} segments, {s['bytes']} bytes, {s['batches']} batches, "
        f"{s['records']} records",
        f"{s['errors']} errors, {s['warnings']} warnings -> exit {s['exit_code']}",
        "",
        "log dirs:",
    ]
    for h in s["health"]:
        lines.append(f"  {h['status']:<10} {h['host']}:{h['dir']}  segments={h['segments']} "
                     f"bytes={h['bytes']} errors={h['errors']} warnings={h['warnings']}")
    for sev in (ERROR, WARNING):
        if s["findings_by_kind"].get(sev):
            kinds = ", ".join(f"{k}={n}" for k, n in sorted(s["findings_by_kind"][sev].items()))
            lines += ["", f"{sev}s by kind: {kinds}"]
    if s["listed"]:
        lines += ["", "findings:"]
        for f in s["listed"]:
            lines.append(f"  {f['severity'].upper():<7} {f['kind']:<20} {_where(f)}")
            lines.append(f"          {f['detail']}")
        shown = len(s["listed"])
        if shown < s["errors"] + s["warnings"]:
            lines.append(f"  ... {s['errors'] + s['warnings'] - shown} more in findings.parquet")
    return "\n".join(lines) + "\n"


_COLOURS = {"ok": "#c8e6c9", WARNING: "#fff3b0", ERROR: "#f4a6a6", "unreadable": "#b0b0b0"}


def render_html(summary: dict[str, Any]) -> str:
    s = summary
    esc = html.escape
    hosts = sorted({h["host"] for h in s["health"]})
    dirs = sorted({h["dir"] for h in s["health"]})
    cell = {(h["host"], h["dir"]): h for h in s["health"]}
    grid = ["<table class=grid><tr><th>host \\ log dir</th>"
            + "".join(f"<th>{esc(d)}</th>" for d in dirs) + "</tr>"]
    for host in hosts:
        row = [f"<tr><th>{esc(host)}</th>"]
        for d in dirs:
            h = cell.get((host, d))
            if h is None:
                row.append("<td></td>")
                continue
            row.append(f"<td style='background:{_COLOURS[h['status']]}' title='{h['segments']} "
                       f"segments, {h['bytes']} bytes'>{esc(h['status'])}<br>"
                       f"{h['errors']} E / {h['warnings']} W</td>")
        grid.append("".join(row) + "</tr>")
    grid.append("</table>")
    rows = ["<table class=findings><tr><th>severity</th><th>kind</th><th>where</th>"
            "<th>detail</th></tr>"]
    for f in s["listed"]:
        rows.append(f"<tr class={esc(f['severity'])}><td>{esc(f['severity'])}</td>"
                    f"<td>{esc(f['kind'])}</td><td>{esc(_where(f))}</td>"
                    f"<td>{esc(f['detail'])}</td></tr>")
    rows.append("</table>")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>logkeeper audit</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; }}
table {{ border-collapse: collapse; margin-bottom: 1.5em; }}
td, th {{ border: 1px solid #999; padding: 0.3em 0.6em; font-size: 0.9em; }}
table.grid td {{ text-align: center; }}
tr.error td:first-child {{ background: {_COLOURS[ERROR]}; }}
tr.warning td:first-child {{ background: {_COLOURS[WARNING]}; }}
</style></head><body>
<h1>logkeeper audit</h1>
<p>{s['hosts']} hosts, {len(s['health'])} log dirs, {s['logs']} logs, {s['segments']} segments,
{s['bytes']} bytes. <b>{s['errors']} errors, {s['warnings']} warnings</b>
(exit {s['exit_code']}).</p>
<h2>Health</h2>
{''.join(grid)}
<h2>Findings</h2>
{''.join(rows)}
</body></html>
"""


def write_outputs(result: AuditResult, out: str | os.PathLike[str], *,
                  roots: int | None = None, started: float | None = None) -> dict[str, Any]:
    """Write every output under `out`; return the summary (as in summary.json).

    One Spark action: the findings pass, whose tasks write the findings and the
    per-segment tables and hand back the tally (AuditResult.write); the health table
    (the tally's rows) and the reports are written here, on the driver.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(result, roots=roots, tally=result.write(out))
    write_table([tuple(h.values()) for h in summary["health"]], HEALTH,
                out / "health.parquet")
    if started is not None:
        summary["seconds"] = round(time.time() - started, 3)
    (out / "report.txt").write_text(render_text(summary), encoding="utf-8")
    (out / "report.html").write_text(render_html(summary), encoding="utf-8")
    as_json = {k: v for k, v in summary.items() if k != "listed"}
    (out / "summary.json").write_text(json.dumps(as_json, indent=2, sort_keys=True) + "\n",
                                      encoding="utf-8")
    return summary
