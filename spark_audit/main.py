"""`logkeeper audit`: segment integrity across the fleet, with PySpark.

    logkeeper audit [--master URL] [--out DIR] [--manifest FILE] [--compacted TOPIC]...
                    HOST=PATH ...
    spark-submit [--master URL] spark_audit/main.py [same arguments]

Each HOST=PATH names one log dir (a Kafka or logkeeper `log.dirs` entry) of a broker
host; a host with several disks gives several pairs. PATH must be readable at that
path on the driver and on every executor (see spark_audit.io). The executors import
`native`, `logstore` and `spark_audit`: in local mode from this installation; on a
cluster `pip install` the logkeeper wheel on every worker or ship a packed virtualenv
with --archives (--py-files cannot carry the C extension). See spark_audit/README.md.

Host-local disks without a shared mount: on each host run
`logkeeper audit --scan-only --out SHARED/<host> HOST=PATH ...` (local mode), then once
`logkeeper audit --from-scans SHARED/* --out REPORT` to compare replicas and report.

Without --master the session is local (`local[*]`) unless spark-submit set a master.
Exit codes: 0 no error (warnings allowed), 1 errors found, 2 the audit itself failed
(bad arguments, a HOST=PATH whose PATH is not a directory, Spark failure, output not
writable); the reason goes to stderr.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from collections.abc import Sequence

EXIT_OK, EXIT_FINDINGS, EXIT_FAILED = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 itself: keep it, say why
        self.print_usage(sys.stderr)
        raise SystemExit(f"logkeeper audit: {message}")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = _Parser(prog="logkeeper audit", description=__doc__.split("\n\n")[0])
    p.add_argument("roots", nargs="*", metavar="HOST=PATH", help="a log dir of a host")
    p.add_argument("--manifest", action="append", default=[],
                   help="file of HOST=PATH lines (# comments allowed); repeatable")
    p.add_argument("--master", help="Spark master URL (default: local[*], or spark-submit's)")
    p.add_argument("--out", help="directory for findings/segments Parquet, summary.json, "
                                 "report.txt, report.html")
    p.add_argument("--compacted", action="append", default=[], metavar="TOPIC",
                   help="treat TOPIC as compacted (offset gaps are warnings); repeatable")
    p.add_argument("--buffer-size", type=int, default=1 << 20,
                   help="scan buffer per segment in bytes (default 1 MiB)")
    p.add_argument("--task-bytes", type=int, default=1 << 30,
                   help="segment bytes per Spark task (default 1 GiB; at least one task "
                        "per core when there are enough segments)")
    p.add_argument("--scan-only", action="store_true",
                   help="only list and scan; write the raw tables under --out/raw")
    p.add_argument("--from-scans", nargs="+", metavar="DIR",
                   help="skip scanning: audit the raw tables of earlier --scan-only runs")
    p.add_argument("--quiet", action="store_true", help="print only the one-line summary")
    args = p.parse_args(list(argv))
    if args.scan_only and args.from_scans:
        p.error("--scan-only and --from-scans do not go together")
    if args.scan_only and not args.out:
        p.error("--scan-only needs --out")
    if not args.from_scans and not args.roots and not args.manifest:
        p.error("give HOST=PATH log dirs, --manifest FILE or --from-scans DIR")
    return args


def use_this_python() -> None:
    """A local session's Python workers run this interpreter (a venv's, with the
    audit's dependencies), not whatever `python3` is first on PATH: PySpark starts its
    workers with $PYSPARK_PYTHON, default `python3`, and a session's
    `spark.pyspark.python` is read by spark-submit only. A PYSPARK_PYTHON already set
    is kept."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def build_session(master: str | None):
    """The audit's SparkSession: local[*] unless a master is given or already configured."""
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("logkeeper-audit")
    if not master and SparkSession.getActiveSession() is None \
            and not SparkConf().contains("spark.master"):
        master = "local[*]"
    if master:
        builder = builder.master(master)
    if master and master.startswith("local"):
        # One machine (local[*] by default, or `--master local[N]`): this interpreter's
        # workers, a few shuffle partitions per core, not the cluster default of 200,
        # static plans (adaptive re-planning adds jobs and saves nothing on one host),
        # and no broadcast joins: each broadcast is a Spark job of its own (the findings
        # pass was 11 jobs with them, 1 without), where a shuffle is only a stage.
        use_this_python()
        builder = (builder.config("spark.ui.enabled", "false")
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.sql.adaptive.enabled", "false")
                   .config("spark.sql.autoBroadcastJoinThreshold", "-1")
                   .config("spark.sql.shuffle.partitions", str(2 * (os.cpu_count() or 1))))
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("WARN")
        return spark
    return builder.getOrCreate()


def resolve_roots(args: argparse.Namespace) -> list:
    """The HOST=PATH roots of the arguments and manifests, repeats dropped
    (io.AuditInputError if one does not parse or its PATH is not a directory)."""
    from . import io

    roots = [io.parse_root(r) for r in args.roots]
    for manifest in args.manifest:
        roots += io.read_manifest(manifest)
    return io.check_roots(roots)


def run(spark, args: argparse.Namespace, roots: list) -> int:
    """The audit on an existing session; returns the exit code (0 or 1)."""
    from . import findings, io, report, transforms

    started = time.time()
    if args.from_scans:
        raw = io.read_raw(spark, args.from_scans)
    else:
        skip = list(findings.INTERNAL_COMPACTED_TOPICS) + list(args.compacted)
        raw = io.scan(spark, roots, buffer_size=args.buffer_size, task_bytes=args.task_bytes,
                      fingerprint_all=args.scan_only, skip_fingerprints=skip)
    try:
        if args.scan_only:
            io.write_raw(raw, args.out)
            print(f"logkeeper audit: raw tables of {len(roots)} log dirs written to "
                  f"{args.out}/raw")
            return EXIT_OK
        # The findings pass runs once: with --out its tasks write the tables and hand
        # back the tally (spark_audit.output), without it only the tally is collected.
        result = transforms.audit(raw.rows, facts=raw.facts, compacted_names=args.compacted)
        if args.out:
            summary = report.write_outputs(result, args.out, roots=len(roots) or None,
                                           started=started)
        else:
            summary = report.summarize(result, roots=len(roots) or None)
        if not args.quiet:
            sys.stdout.write(report.render_text(summary))
        where = f"; results in {args.out}" if args.out else ""
        print(f"logkeeper audit: {summary['errors']} errors, {summary['warnings']} warnings "
              f"in {summary['segments']} segments{where}")
        return EXIT_FINDINGS if summary["errors"] else EXIT_OK
    finally:
        raw.release()


# What the audit imports beyond logkeeper's own dependencies: the `audit` extra.
AUDIT_MODULES = ("pyspark", "pyarrow")


def missing_modules() -> list[str]:
    """The modules of AUDIT_MODULES this interpreter cannot import."""
    missing = []
    for name in AUDIT_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, build the session, run; 0 clean, 1 errors found, 2 the audit failed."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parse_args(argv)
    except SystemExit as err:
        if err.code in (0, None):
            return EXIT_OK  # --help
        if isinstance(err.code, str):
            print(err.code, file=sys.stderr)
        return EXIT_FAILED
    missing = missing_modules()
    if missing:
        print(f"logkeeper audit: {' and '.join(missing)} not installed in {sys.executable}: "
              "the audit needs logkeeper's `audit` extra (PySpark and pyarrow) and a Java "
              "runtime; `make test` installs them into the project venv, or run "
              "`pip install -e '.[audit]'` with that venv's pip", file=sys.stderr)
        return EXIT_FAILED
    from .io import AuditInputError

    try:
        roots = resolve_roots(args)
    except AuditInputError as err:
        print(f"logkeeper audit: {err}", file=sys.stderr)
        return EXIT_FAILED
    spark = None
    owned = False
    try:
        from pyspark.sql import SparkSession

        owned = SparkSession.getActiveSession() is None
        spark = build_session(args.master)
        return run(spark, args, roots)
    except Exception as err:  # any failure of the job itself is exit 2, with its reason
        print(f"logkeeper audit: failed: {type(err).__name__}: {err}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        if spark is not None and owned:
            spark.stop()


if __name__ == "__main__":
    if __package__ in (None, ""):  # spark-submit spark_audit/main.py: run as a script
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        from spark_audit.main import main as _main
    else:
        _main = main
    sys.exit(_main())
