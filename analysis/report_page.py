"""The front page of ``snakemake --report``: the workflow's description, Figure 3 and the headline
page (``analysis.summary_page.headline_page``, a page of ``analysis.page`` blocks) rendered as
reStructuredText (``to_rst``), the only markup Snakemake's report renders there (with docutils,
into a narrow column of the report's page).

Tables become ``list-table`` directives: docutils turns them into real ``<table>`` elements whose
cells keep their inline markup (bold labels), without the column-width bookkeeping of grid tables
(the cells hold "≥" and "≈", which a grid table would have to count by display width), and
without raw HTML, which docutils would pass through unchecked.
"""

import base64
import re
import unicodedata
from collections.abc import Iterable

from analysis.page import Block, Bullets, Code, Heading, Paragraph, Strong, Table, Text, text

FRONT_PAGE_ID = "specrej-front-page"
# A <style> element is the one way to lay out this page: the report (a React page, Snakemake
# 9.27's template) inserts its description as HTML into a column of at most 32rem (Tailwind's
# max-w-lg) beside the rule graph, in a view centred in the window. While the view holds this
# page (the <style> element marks it): the view starts at the top left (centred, a page taller
# than the window loses its top, out of scroll's reach), the rule graph wraps below the page, the
# column widens to fit the headline's tables of up to nine columns, and a table scrolls sideways
# only on a screen narrower still.
_PAGE = f":has(#{FRONT_PAGE_ID})"
FRONT_PAGE_STYLE = (
    f".justify-center{_PAGE} {{ align-items: flex-start; justify-content: flex-start; }}\n"
    f".flex:has(> div > .max-w-lg #{FRONT_PAGE_ID}) {{ flex-wrap: wrap; }}\n"
    f".max-w-lg{_PAGE} {{ max-width: min(72rem, 100%); }}\n"
    f".max-w-lg{_PAGE} table {{ display: block; overflow-x: auto; font-size: 0.75rem; }}\n"
    f".max-w-lg{_PAGE} td {{ white-space: nowrap; }}\n"
    f".max-w-lg{_PAGE} :is(td, th) {{ padding: 0.3rem 0.4rem; }}\n"
    f".max-w-lg{_PAGE} img {{ max-width: min(40rem, 100%); }}"
)

# under Figure 3 on the front page; the figure's full caption is with it in the report's Figures
FIGURE3_ALT = "Figure 3: compute against improvement score, per generator / reward pair"
FIGURE3_CAPTION = ("**Figure 3.** Compute relative to the smallest Best-of-N (log scale) against the improvement "
                   "score (paper eq. 8), one panel per generator / reward pair, with 95% intervals; its full "
                   "caption is under Figures.")

_TRAILING_UNDERSCORE = re.compile(r"(?<=\w)_(?=\W|$)")  # RST reads `word_` as a reference
# what RST would read as a list's marker at the start of a table cell: "- x", "1. x", "(a) x", "iv) x"
_ENUMERATOR = r"(\d+|#|[a-zA-Z]|[ivxlcdm]+|[IVXLCDM]+)"
_LIST_MARKER = re.compile(rf"^([-*+•‣⁃]|{_ENUMERATOR}[.)]|\({_ENUMERATOR}\))(\s|$)")


def to_rst(blocks: Iterable[Block]) -> str:
    """``blocks`` as reStructuredText: headings underlined (level 1 with ``=``, 2 with ``-``, 3
    with ``~``), paragraphs and bullets, tables as ``list-table`` directives with their column
    names as the header row."""
    return "\n\n".join("\n".join(_RENDER[type(block)](block)) for block in blocks) + "\n"


def embedded_figure_rst(png: bytes, alt: str, caption: str) -> str:
    """A ``figure`` directive showing ``png`` from a data URI: Snakemake's report description
    cannot link to a file of the run, and a data URI travels inside the report."""
    uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    # docutils refuses a line over 10,000 characters, and joins a URI's lines without their whitespace
    lines = "\n   ".join(uri[i:i + 76] for i in range(0, len(uri), 76))
    return f".. figure:: {lines}\n   :alt: {alt}\n\n   {caption}\n"


def front_page_rst(description: str, headline: Iterable[Block], figure: str = "") -> str:
    """The report's first page: ``description`` (RST that may hold Jinja, which Snakemake
    renders), the style that widens the report's column for the tables, ``figure`` (RST, e.g.
    ``embedded_figure_rst``) and the headline page. The generated part is a Jinja ``raw``
    block, so labels with braces in the headline are never read as Jinja."""
    style = "\n".join("   " + line for line in FRONT_PAGE_STYLE.splitlines())
    figure = figure.rstrip() + "\n\n" if figure else ""
    return (f"{description.rstrip()}\n\n{{% raw %}}\n.. raw:: html\n\n   <style id=\"{FRONT_PAGE_ID}\">\n{style}\n"
            f"   </style>\n\n{figure}{to_rst(headline)}{{% endraw %}}\n")


def _heading(block: Heading) -> list[str]:
    title = _inline(block.text)
    return [title, "=-~^"[min(block.level, 4) - 1] * _display_width(title)]


def _paragraph(block: Paragraph) -> list[str]:
    return [_inline(block.text)]


def _bullets(block: Bullets) -> list[str]:
    return ["- " + _inline(item) for item in block.items]


def _table(block: Table) -> list[str]:
    out = [".. list-table::", "   :header-rows: 1", ""]
    for row in [tuple(text(column) for column in block.columns), *block.rows]:
        first, *rest = [_cell(cell) for cell in row]
        out += [f"   * - {first}".rstrip()] + [f"     - {cell}".rstrip() for cell in rest]
    return out


_RENDER = {Heading: _heading, Paragraph: _paragraph, Bullets: _bullets, Table: _table}


def _cell(spans: Text) -> str:
    """A table cell's text as the body of a list item: a leading list marker escaped."""
    rendered = _inline(spans)
    return "\\" + rendered if _LIST_MARKER.match(rendered) else rendered


def _inline(spans: Text) -> str:
    out = []
    for span in spans:
        if isinstance(span, Strong):
            out.append(f"**{_escape(span.text)}**")
        elif isinstance(span, Code):
            out.append(f"``{span.text}``")
        else:
            out.append(_escape(span))
    return "".join(out)


def _escape(plain: str) -> str:
    """Plain text with what RST would read as markup escaped: a backslash, ``|``, ``*``, a
    backquote and a word's trailing ``_``."""
    for char in ("\\", "|", "*", "`"):
        plain = plain.replace(char, "\\" + char)
    return _TRAILING_UNDERSCORE.sub(r"\\_", plain)


def _display_width(text: str) -> int:
    """Columns ``text`` takes in a fixed-width font, as docutils counts them for underlines."""
    return sum(2 if unicodedata.east_asian_width(char) in "WF" else 1 for char in text)
