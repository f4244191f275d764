"""The report's front page in a real browser. A small run of the tiny configuration (one pair, on
the tiny random generator of conftest.py: about a minute on 2 cores) makes its headline and
`snakemake --report report.html`; headless Chromium opens the report, takes a screenshot and dumps
the page's DOM after the report's JavaScript has drawn it (the description travels as a string
in a script and is inserted at runtime). On the page's description: the headline's tables are
<table> elements, no preformatted text holds a table's `|`, and Figure 3 is an embedded image.

The same run's output holds the Snakefile's onstart message (messages.study_overview) once.

The browser test needs a Chromium binary (Debian: `apt-get install chromium`; .ci/run installs
it); without one it is skipped, saying so."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

pytest.importorskip("snakemake")
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
TINY_CONFIG = TESTS / "workflow" / "config.yaml"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# the tiny configuration cut to what the headline needs: one pair, Bo2 and Bo4, SR α=0.5, no adaptive SR
SMALL = """
pairs: [{generator: tiny, reward: logprob}]
prompts: {source: tests/workflow/prompts.json, select: [0, 1], chunk_size: 2}
methods:
  - {name: bon, grid: {n: [2, 4]}}
  - {name: sr, grid: {alpha: [0.5], batch_size: [8], min_tokens: [4], max_init_batch: [128]}, memory_budget: 5MB}
correlation: {pairs: null, n: 4, decision_tokens: [2, 4], alphas: [0.5], confidence_level: 0.95, n_resamples: 50}
tables: {table1_reward: logprob, table2_reward: logprob, improvement_normalization: bon_min_range}
"""


def chromium() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def browser_command(browser: str, *args) -> list[str]:
    # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start; the budget lets the
    # report's scripts draw the page before the screenshot or the dump
    return [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
            "--virtual-time-budget=15000", *args]


def run_snakemake(*args, cwd: Path) -> str:
    """Snakemake's output (its log is on stderr) of the small run with `args`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--cores", "2",
               "--configfile", str(TINY_CONFIG), "small.yaml", *args, "--", "results/summary.md"]
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900,
                            check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stderr


@pytest.fixture(scope="module")
def small_run(generator_dir, tmp_path_factory) -> dict:
    """The small run (the headline and what it needs, Figure 3 included), then its report:
    {"report": report.html, "run": the run's output, "report_run": the report's}."""
    workdir = tmp_path_factory.mktemp("report-page")
    generator = f"generators:\n  tiny: {{model: {json.dumps(str(generator_dir))}, label: Tiny}}\n"
    (workdir / "small.yaml").write_text(generator + SMALL)
    run = run_snakemake(cwd=workdir)
    return {"report": workdir / "report.html", "run": run,
            "report_run": run_snakemake("--report", "report.html", cwd=workdir)}


def test_the_run_says_what_it_runs_before_its_first_job(small_run):
    """The Snakefile's onstart: messages.study_overview once, before the first job; not for the report."""
    run = small_run["run"]
    assert run.count("specrej: the study: ") == 1
    assert run.index("specrej: the study: ") < run.index("rule ")
    assert "specrej: the study" not in small_run["report_run"]


class Description(HTMLParser):
    """The report's description as the browser drew it: the <div> whose class holds "prose"
    (Snakemake's template) and everything in it; script text is not page content."""

    def __init__(self):
        super().__init__()
        self.depth = 0  # open <div>s inside the description; 0 outside it
        self.tags, self.pre_texts, self.image_sources = [], [], []
        self._in_pre = self._in_script = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self._in_script |= tag == "script"
        if tag == "div" and (self.depth or "prose" in (attrs.get("class") or "").split()):
            self.depth += 1
        if not self.depth:
            return
        self.tags.append(tag)
        if tag == "pre":
            self._in_pre = True
            self.pre_texts.append("")
        if tag == "img":
            self.image_sources.append(attrs.get("src", ""))

    def handle_endtag(self, tag):
        self._in_script &= tag != "script"
        self._in_pre &= tag != "pre"
        if tag == "div" and self.depth:
            self.depth -= 1

    def handle_data(self, data):
        if self._in_pre and not self._in_script:
            self.pre_texts[-1] += data


def test_the_front_page_shows_real_tables_and_figure_3_in_a_browser(small_run, tmp_path):
    browser, report = chromium(), small_run["report"]
    if browser is None:
        pytest.skip(f"no Chromium on PATH (looked for {', '.join(BROWSERS)}): `apt-get install chromium`")
    screenshot = tmp_path / "front_page.png"
    subprocess.run(browser_command(browser, "--window-size=1400,3000", f"--screenshot={screenshot}",
                                   report.as_uri()), capture_output=True, timeout=180, check=True)
    assert screenshot.stat().st_size > 10_000  # a drawn page, not a blank one
    dom = subprocess.run(browser_command(browser, "--dump-dom", report.as_uri()), capture_output=True, text=True,
                         timeout=180, check=True).stdout
    page = Description()
    page.feed(dom)

    assert page.tags, "the browser drew no description on the report's first page"
    markdown = (report.parent / "results" / "summary.md").read_text(encoding="utf-8").splitlines()
    tables = sum(line.startswith("|") and not before.startswith("|") for before, line in zip([""] + markdown, markdown))
    assert tables and page.tags.count("table") == tables  # each of the headline's tables, as a table
    assert not [text for text in page.pre_texts if "|" in text], "a table is preformatted text"
    assert "h1" in page.tags and "li" in page.tags  # headings and bullet lists, not raw Markdown
    assert [src for src in page.image_sources if src.startswith("data:image/png;base64,")], "no Figure 3"
    print(f"\nfront page screenshot: {screenshot}")
