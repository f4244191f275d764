"""analysis.page and analysis.report_page: one page, rendered to Markdown and to reStructuredText
for the report's front page, each checked against a hand-written text, the RST parsed by docutils
(Snakemake's report renderer) with any warning an error."""

import base64
import re

import pytest

from analysis.page import Bullets, Code, Heading, Paragraph, Strong, Table, text, to_markdown
from analysis.report_page import FRONT_PAGE_ID, embedded_figure_rst, front_page_rst, to_rst

docutils_core = pytest.importorskip("docutils.core")
pytestmark = pytest.mark.filterwarnings("error")

# A page with every kind of block and span, and text RST would misread: a trailing underscore,
# a pipe, an asterisk, a cell that looks like a list's marker.
PAGE = [
    Heading(1, text("Headline")),
    Paragraph(text("Intro with ", Strong("bold"), ", ", Code("code_name"), " and a trailing_ word.")),
    Heading(2, text("Tiny / logprob")),
    Paragraph(text(Strong("SR α=0.5"), " scores 116 [110, 122].")),
    Table(("Setting", "score", "where"), (
        (text(Strong("SR α=0.5"), " (best)"), text("116 [110, 122]"), text("inside")),
        (text("Random SR"), text("--"), text("(a) below")))),
    Bullets((text("Prompts: 2 answered."), text("Out of range: b_init = 8, 2 * 3."))),
    Heading(3, text("Adaptive (paper §6)")),
    Paragraph(text("A | B, right under its heading.")),
]

RST = r"""Headline
========

Intro with **bold**, ``code_name`` and a trailing\_ word.

Tiny / logprob
--------------

**SR α=0.5** scores 116 [110, 122].

.. list-table::
   :header-rows: 1

   * - Setting
     - score
     - where
   * - **SR α=0.5** (best)
     - 116 [110, 122]
     - inside
   * - Random SR
     - --
     - \(a) below

- Prompts: 2 answered.
- Out of range: b_init = 8, 2 \* 3.

Adaptive (paper §6)
~~~~~~~~~~~~~~~~~~~

A \| B, right under its heading.
"""

MARKDOWN = """# Headline

Intro with **bold**, `code_name` and a trailing_ word.

## Tiny / logprob

**SR α=0.5** scores 116 [110, 122].

| Setting             |          score |     where |
|:--------------------|---------------:|----------:|
| **SR α=0.5** (best) | 116 [110, 122] |    inside |
| Random SR           |             -- | (a) below |

- Prompts: 2 answered.
- Out of range: b_init = 8, 2 * 3.

### Adaptive (paper §6)

A | B, right under its heading.
"""


def html_of(rst: str) -> str:
    """The HTML docutils makes of ``rst``, as Snakemake's report does; a warning raises."""
    settings = {"report_level": 2, "halt_level": 2, "warning_stream": False}
    return docutils_core.publish_parts(rst, writer="html", settings_overrides=settings)["html_body"]


def test_the_page_becomes_the_hand_written_rst_and_markdown():
    assert to_rst(PAGE) == RST
    assert to_markdown(PAGE) == MARKDOWN


def test_the_rst_parses_without_warnings_into_a_real_table():
    html = html_of(to_rst(PAGE))
    assert html.count("<table") == 1 and "<pre" not in html and "|" not in html.replace("A | B", "")
    header, *rows = re.findall(r"<tr>(.*?)</tr>", html, flags=re.DOTALL)
    assert re.findall(r"<th[^>]*>(.*?)</th>", header, flags=re.DOTALL) == ["Setting", "score", "where"]
    cells = [re.sub(r"</?p>", "", cell) for cell in re.findall(r"<td>(.*?)</td>", rows[1], flags=re.DOTALL)]
    assert cells == ["Random SR", "--", "(a) below"]  # a cell that looks like a list's marker stays text
    assert "<strong>SR α=0.5</strong> (best)" in rows[0]
    assert "code_name</tt>" in html and "trailing_ word" in html and "2 * 3" in html
    assert html.count("<li>") == 2 and "A | B, right under" in html


def test_an_embedded_figure_carries_its_png_in_lines_docutils_accepts():
    png = bytes(range(256)) * 60  # 15,360 bytes: one line of base64 would exceed docutils' 10,000
    rst = embedded_figure_rst(png, alt="Figure 3", caption="**Figure 3.** Compute against score.")
    assert max(len(line) for line in rst.splitlines()) <= 76 + len(".. figure:: ")
    html = html_of(rst)
    source = re.search(r'<img alt="Figure 3" src="data:image/png;base64,([^"]+)"', html).group(1)
    assert base64.b64decode(source) == png
    assert '<p class="caption"><strong>Figure 3.</strong> Compute against score.</p>' in html


def test_the_front_page_renders_its_description_jinja_but_not_the_headlines():
    jinja2 = pytest.importorskip("jinja2")
    description = "Pairs: {{ pairs }}.\n"
    page = front_page_rst(description, [Heading(1, text("Headline")), Paragraph(text("A label {{ with braces }}."))],
                          embedded_figure_rst(b"png", alt="Figure 3", caption="Figure 3."))
    rendered = jinja2.Template(page).render(pairs="tiny / logprob")  # as Snakemake renders its description
    html = html_of(rendered)
    assert html.index("Pairs: tiny / logprob.") < html.index(f'<style id="{FRONT_PAGE_ID}">') < html.index(
        "<img") < html.index("Headline") < html.index("A label {{ with braces }}.")


def test_the_headline_page_renders_to_both_from_one_build():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from test_analysis_headline import summary_frame, two_alpha_frame

    from analysis.headline import headline_table
    from analysis.summary_page import headline_page, render_headline_markdown

    headline = headline_table(summary_frame(), two_alpha_frame())
    page = headline_page(headline)
    assert to_markdown(page) == render_headline_markdown(headline)
    html = html_of(to_rst(page))
    assert "<strong>SR α=0.5</strong> (best)" in html and html.count("<table") == 1
    assert "above Bo128: ≈ 5.0 (extrapolated)" in html
