"""The repository stands alone: nothing its commands, tests or docs need lies outside it.

A clone used to need `../shared` beside it (the real Kafka fixtures) and its docstrings
cited design documents that were not in the repository. The fixtures now live in
tests/fixtures/kafka (checked against their SHA256SUMS) and the design docs in docs/.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.daemon_helpers import REPO
from tests.install_helpers import checkout_files, clean_env, copy_checkout

FIXTURES = REPO / "tests" / "fixtures" / "kafka"
# Names of documents kept outside the repository, and the way to reach them.
OUTSIDE = re.compile(r"\.\./shared|\bshared/(fixtures|seeds|hooks)\b|"
                     r"\b(ARCHITECTURE|FORMATS|CLUSTER|STYLE)\.md\b")
DOC_CITATION = re.compile(r"\bdocs/[\w./-]+\.md\b")


def repo_text_files() -> dict[str, str]:
    """Every text file of `checkout_files()` outside the fixtures, by path."""
    out = {}
    for rel in checkout_files():
        if rel.startswith("tests/fixtures/"):
            continue
        try:
            out[rel] = (REPO / rel).read_text("utf-8")
        except UnicodeDecodeError:
            continue
    return out


def test_nothing_cites_files_outside_the_checkout() -> None:
    here = Path(__file__).relative_to(REPO).as_posix()
    hits = [f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
            for rel, text in repo_text_files().items() if rel != here
            for m in OUTSIDE.finditer(text)]
    assert not hits, "cited outside the repository:\n" + "\n".join(hits)


def test_every_cited_doc_exists() -> None:
    cited = {m.group(0) for text in repo_text_files().values()
             for m in DOC_CITATION.finditer(text)}
    assert "docs/architecture.md" in cited and "docs/formats.md" in cited
    missing = sorted(c for c in cited if not (REPO / c).is_file())
    assert not missing, f"cited but not in the repository: {missing}"


def test_kafka_fixtures_are_the_recorded_bytes() -> None:
    recorded = {}
    for line in (FIXTURES / "SHA256SUMS").read_text().splitlines():
        digest, rel = line.split(maxsplit=1)
        recorded[rel.removeprefix("./")] = digest
    present = {p.relative_to(FIXTURES).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
               for p in FIXTURES.rglob("*")
               if p.is_file() and p.name not in ("SHA256SUMS", "README.md")}
    assert present == recorded


def test_fixture_tests_pass_in_a_copy_with_nothing_beside_it(tmp_path: Path) -> None:
    """A fresh copy alone in a temp dir (no ../shared) runs the fixture tests."""
    copy = copy_checkout(tmp_path / "alone" / "logkeeper")
    assert not (copy.parent / "shared").exists()
    for built in (REPO / "native").glob("_fastpath*.so"):  # the C build, not in a clone
        shutil.copy2(built, copy / "native" / built.name)
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_fixtures.py"],
        cwd=copy, env=clean_env(PYTHONPATH=str(copy)), capture_output=True, text=True,
        timeout=300)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
