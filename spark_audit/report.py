"""Writing the audit's results: Parquet tables, summary.json, report.txt, report.html.

Under the output dir: `findings.parquet` (one row per finding), `segments.parquet`
(one row per segment), `health.parquet` (one row per host x log dir), `summary.json`
(counts, the exit code), `report.txt` (readable) and `report.html` (a host x log-dir
health grid and the findings). The text and HTML reports list at most `max_listed`
findings (errors first); the Parquet table has them all. OSErrors writing the files
propagate (the audit then exits 2).
"""

from __future__ import annotations

import dataclasses
import html
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame

from . import transforms
from .schema import ERROR, FINDING_COLUMNS, FINDINGS, HEALTH, TOTALS, WARNING
from .transforms import AuditResult

MAX_LISTED = 2000


def summarize(result: AuditResult, *, roots: int | None = None,
              max_listed: int = MAX_LISTED) -> dict[str, Any]:
    """Counts of everything, the health grid and the first findings (errors first),
    collected by one Spark action (transforms.summary_rows)."""
    sections: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for r in transforms.summary_rows(result, max_listed=max_listed).collect():
        sections.setdefault(r["section"], []).append((r["n"], json.loads(r["json"])))

    def rows(section: str, columns: list[str]) -> list[dict[str, Any]]:
        # to_json leaves null fields out: put them back, in the table's column order.
        return [{c: d.get(c) for c in columns}
                for _n, d in sorted(sections.get(section, []), key=lambda nd: nd[0])]

    (totals,) = rows("totals", TOTALS) or [dict.fromkeys(TOTALS, 0)]
    health = sorted(rows("health", HEALTH.fieldNames()), key=lambda h: (h["host"], h["dir"]))
    severity = Counter()
    kinds: dict[str, dict[str, int]] = {ERROR: {}, WARNING: {}}
    hosts: dict[str, dict[str, int]] = {}
    for r in rows("counts", ["host", "severity", "kind", "count"]):
        severity[r["severity"]] += r["count"]
        by_kind = kinds.setdefault(r["severity"], {})
        by_kind[r["kind"]] = by_kind.get(r["kind"], 0) + r["count"]
        host = hosts.setdefault(r["host"] or "-", {ERROR: 0, WARNING: 0})
        host[r["severity"]] += r["count"]
    listed = rows("listed", FINDING_COLUMNS)
    return {
        "errors": severity[ERROR], "warnings": severity[WARNING],
        "exit_code": 1 if severity[ERROR] else 0,
        "roots": roots if roots is not None else len(health), **totals,
        "findings_by_kind": kinds, "findings_by_host": hosts,
        "health": health, "listed": listed,
        "compacted_topics": {r["topic"]: r["reason"]
                             for r in rows("compacted", ["topic", "reason"])},
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


def write_findings(findings: DataFrame, out: str | os.PathLike[str]) -> DataFrame:
    """Write the findings under out/findings.parquet and return that table read back.

    This is the one action that runs the findings pass (as transforms.audit's `reuse`):
    the summaries and the report then read the written table, not the plan again.
    """
    path = str(Path(out, "findings.parquet"))
    findings.coalesce(1).write.mode("overwrite").parquet(path)
    return findings.sparkSession.read.schema(FINDINGS).parquet(path)


def write_outputs(result: AuditResult, out: str | os.PathLike[str], *,
                  roots: int | None = None, started: float | None = None,
                  findings_written: bool = False) -> dict[str, Any]:
    """Write every output under `out`; return the summary (as in summary.json).

    Spark actions: the findings (unless `findings_written`: result.findings is then
    already out/findings.parquet, see write_findings), the per-segment table, the
    summary (one collect) and the health table (the summary's rows).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if not findings_written:
        result = dataclasses.replace(result, findings=write_findings(result.findings, out))
    result.segments.write.mode("overwrite").parquet(str(out / "segments.parquet"))
    summary = summarize(result, roots=roots)
    spark = result.findings.sparkSession
    (spark.createDataFrame([tuple(h[c] for c in HEALTH.fieldNames()) for h in summary["health"]],
                           HEALTH)
     .coalesce(1).write.mode("overwrite").parquet(str(out / "health.parquet")))
    if started is not None:
        summary["seconds"] = round(time.time() - started, 3)
    (out / "report.txt").write_text(render_text(summary), encoding="utf-8")
    (out / "report.html").write_text(render_html(summary), encoding="utf-8")
    as_json = {k: v for k, v in summary.items() if k != "listed"}
    (out / "summary.json").write_text(json.dumps(as_json, indent=2, sort_keys=True) + "\n",
                                      encoding="utf-8")
    return summary
