"""A page as data: headings, paragraphs, bullets and tables of text spans (plain, ``Strong``,
``Code``), built once (``analysis.summary_page``) and rendered to Markdown here (``to_markdown``,
``results/summary.md``) and to reStructuredText by ``analysis.report_page.to_rst`` (the report's
front page): neither rendering is read back to make the other.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Strong:
    """Bold text."""

    text: str


@dataclass(frozen=True)
class Code:
    """Text set as code."""

    text: str


Span = str | Strong | Code
Text = tuple[Span, ...]


def text(*parts: "Span | Text") -> Text:
    """The spans of ``parts`` in order, nested texts flattened, empty strings dropped."""
    spans: list[Span] = []
    for part in parts:
        for span in (part if isinstance(part, tuple) else (part,)):
            if span != "":
                spans.append(span)
    return tuple(spans)


@dataclass(frozen=True)
class Heading:
    level: int
    text: Text


@dataclass(frozen=True)
class Paragraph:
    text: Text


@dataclass(frozen=True)
class Bullets:
    items: tuple[Text, ...]


@dataclass(frozen=True)
class Table:
    """A table whose first column names the rows (left-aligned), the others right-aligned."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Text, ...], ...]


Block = Heading | Paragraph | Bullets | Table


def to_markdown(blocks: Iterable[Block]) -> str:
    """The page as GitHub-flavoured Markdown, one blank line between blocks."""
    return "\n\n".join(_markdown_block(block) for block in blocks) + "\n"


def _markdown_block(block: Block) -> str:
    if isinstance(block, Heading):
        return "#" * block.level + " " + _markdown_text(block.text)
    if isinstance(block, Paragraph):
        return _markdown_text(block.text)
    if isinstance(block, Bullets):
        return "\n".join("- " + _markdown_text(item) for item in block.items)
    if isinstance(block, Table):
        return _markdown_table(block)
    raise TypeError(f"not a block: {block!r}")


def _markdown_text(spans: Text, in_table: bool = False) -> str:
    out = []
    for span in spans:
        if isinstance(span, Strong):
            out.append(f"**{span.text}**")
        elif isinstance(span, Code):
            out.append(f"`{span.text}`")
        else:
            out.append(span)
    joined = "".join(out)
    return joined.replace("|", "\\|") if in_table else joined


def _markdown_table(table: Table) -> str:
    cells = [list(table.columns)] + [[_markdown_text(cell, in_table=True) for cell in row] for row in table.rows]
    widths = [max(len(row[column]) for row in cells) for column in range(len(table.columns))]

    def line(row: Sequence[str]) -> str:
        padded = [row[0].ljust(widths[0])] + [cell.rjust(width) for cell, width in zip(row[1:], widths[1:])]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join([":" + "-" * (widths[0] + 1), *("-" * (width + 1) + ":" for width in widths[1:])]) + "|"
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])
