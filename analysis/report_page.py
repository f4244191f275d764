"""The front page of ``snakemake --report``: the workflow's description, Figure 3 and the headline
page (``results/summary.md``, Markdown) in reStructuredText, the only markup Snakemake's report
renders there (with docutils, into a narrow column of the report's page).

``markdown_to_rst`` reads the Markdown that ``analysis.summary_page`` writes: ``#`` headings,
paragraphs, ``- `` bullets, pipe tables, ``**bold**``, ``*italic*``, `` `code` `` and
``[text](url)`` links. Pipe tables become ``list-table`` directives: docutils turns them into
real ``<table>`` elements whose cells keep their inline markup (bold labels), without the
column-width bookkeeping of grid tables (the cells hold "≥" and "≈", which a grid table would
have to count by display width), and without raw HTML, which docutils would pass through
unchecked.
"""

import base64
import re
import unicodedata

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

_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_CODE = re.compile(r"`([^`]+)`")
_TRAILING_UNDERSCORE = re.compile(r"(?<=\w)_(?=\W|$)")  # RST reads `word_` as a reference
# what RST would read as a list's marker at the start of a table cell: "- x", "1. x", "(a) x", "iv) x"
_ENUMERATOR = r"(\d+|#|[a-zA-Z]|[ivxlcdm]+|[IVXLCDM]+)"
_LIST_MARKER = re.compile(rf"^([-*+•‣⁃]|{_ENUMERATOR}[.)]|\({_ENUMERATOR}\))(\s|$)")


def markdown_to_rst(markdown: str) -> str:
    """``markdown`` (the subset above) as reStructuredText: headings underlined (``#`` with
    ``=``, ``##`` with ``-``, ``###`` with ``~``), paragraphs and bullets kept, pipe tables as
    ``list-table`` directives with their first row as the header."""
    out = []
    for kind, lines in _blocks(markdown.splitlines()):
        out += _RENDER[kind](lines) + [""]
    return "\n".join(out).rstrip("\n") + "\n"


def embedded_figure_rst(png: bytes, alt: str, caption: str) -> str:
    """A ``figure`` directive showing ``png`` from a data URI: Snakemake's report description
    cannot link to a file of the run, and a data URI travels inside the report."""
    uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    # docutils refuses a line over 10,000 characters, and joins a URI's lines without their whitespace
    lines = "\n   ".join(uri[i:i + 76] for i in range(0, len(uri), 76))
    return f".. figure:: {lines}\n   :alt: {alt}\n\n   {caption}\n"


def front_page_rst(description: str, headline_markdown: str, figure: str = "") -> str:
    """The report's first page: ``description`` (RST that may hold Jinja, which Snakemake
    renders), the style that widens the report's column for the tables, ``figure`` (RST, e.g.
    ``embedded_figure_rst``) and the headline page. The generated part is a Jinja ``raw``
    block, so labels with braces in the headline are never read as Jinja."""
    style = "\n".join("   " + line for line in FRONT_PAGE_STYLE.splitlines())
    figure = figure.rstrip() + "\n\n" if figure else ""
    return (f"{description.rstrip()}\n\n{{% raw %}}\n.. raw:: html\n\n   <style id=\"{FRONT_PAGE_ID}\">\n{style}\n"
            f"   </style>\n\n{figure}{markdown_to_rst(headline_markdown)}{{% endraw %}}\n")


# --------------------------------------------------------------------------------------
# blocks
# --------------------------------------------------------------------------------------


def _blocks(lines: list[str]) -> list[tuple[str, list[str]]]:
    """The Markdown's blocks in order, as (kind, lines): "heading", "table", "bullets" or
    "paragraph"."""
    blocks = []
    for line in lines:
        kind = _kind(line)
        previous = blocks[-1] if blocks else None
        if kind is None:  # a blank line ends a block
            blocks.append(("blank", []))
        elif previous and (previous[0], kind) in (("table", "table"), ("bullets", "bullets"),
                                                  ("paragraph", "paragraph"), ("bullets", "paragraph")):
            previous[1].append(line)  # a paragraph line after a bullet continues the bullet
        else:
            blocks.append((kind, [line]))
    return [block for block in blocks if block[0] != "blank"]


def _kind(line: str) -> str | None:
    stripped = line.strip()
    if not stripped:
        return None
    if stripped.startswith("#"):
        return "heading"
    if stripped.startswith("|"):
        return "table"
    if stripped.startswith(("- ", "* ")):
        return "bullets"
    return "paragraph"


def _heading(lines: list[str]) -> list[str]:
    level = len(lines[0]) - len(lines[0].lstrip("#"))
    title = _inline(lines[0].lstrip("#").strip())
    return [title, "=-~^"[min(level, 4) - 1] * _display_width(title)]


def _paragraph(lines: list[str]) -> list[str]:
    return [_inline(line.strip()) for line in lines]


def _bullets(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith(("- ", "* ")):
            out.append("- " + _inline(stripped[2:].strip()))
        else:
            out.append("  " + _inline(stripped))
    return out


def _table(lines: list[str]) -> list[str]:
    rows = [_cells(line) for line in lines if not _is_alignment_row(line)]
    out = [".. list-table::", "   :header-rows: 1", ""]
    for row in rows:
        first, *rest = [_cell(text) for text in row]
        out += [f"   * - {first}".rstrip()] + [f"     - {text}".rstrip() for text in rest]
    return out


_RENDER = {"heading": _heading, "paragraph": _paragraph, "bullets": _bullets, "table": _table}


# --------------------------------------------------------------------------------------
# inline text
# --------------------------------------------------------------------------------------


def _cells(line: str) -> list[str]:
    inner = line.strip().removeprefix("|").removesuffix("|")
    return [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", inner)]


def _is_alignment_row(line: str) -> bool:
    return all(re.fullmatch(r":?-+:?", cell) for cell in _cells(line))


def _cell(text: str) -> str:
    """A table cell's text as the body of a list item: a leading list marker escaped."""
    text = _inline(text)
    return "\\" + text if _LIST_MARKER.match(text) else text


def _inline(text: str) -> str:
    """Markdown inline markup as RST's: bold and italic read the same; code gets double
    backquotes, links RST's anonymous hyperlink form; a ``\\``, a ``|`` or a word's trailing
    ``_``, which RST would read as markup, is escaped."""
    text = text.replace("\\", "\\\\").replace("|", "\\|")
    text = _TRAILING_UNDERSCORE.sub(r"\\_", text)
    pieces = re.split(r"(`[^`]+`|\[[^\]]+\]\([^)\s]+\))", text)  # code and links are not escaped inside
    return "".join(_markup(piece) for piece in pieces)


def _markup(piece: str) -> str:
    if code := _CODE.fullmatch(piece):
        return f"``{_unescape(code.group(1))}``"
    if link := _LINK.fullmatch(piece):
        return f"`{link.group(1)} <{_unescape(link.group(2))}>`__"
    return piece


def _unescape(text: str) -> str:
    return text.replace("\\_", "_").replace("\\|", "|").replace("\\\\", "\\")


def _display_width(text: str) -> int:
    """Columns ``text`` takes in a fixed-width font, as docutils counts them for underlines."""
    return sum(2 if unicodedata.east_asian_width(char) in "WF" else 1 for char in text)
