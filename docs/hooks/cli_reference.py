"""MkDocs hook: the pages that must not drift from the code are generated at build time.

- ``<!-- specrej:cli-reference -->`` (docs/cli.md) becomes every command and option of
  ``specrej.cli.main.build_parser()``: its usage, description, and a table of its options with their
  values, defaults and help, as argparse holds them.
- ``<!-- specrej:method-parameters -->`` (docs/methods.md) becomes one table per built-in method
  (``specrej.methods.built_in()``) from each parameter's ``Param.describe()``.
- ``<!-- specrej:st-bon-departures -->`` (docs/methods.md) becomes the list of ST-BoN's
  departures from the official code, read from the docstring of ``specrej.methods.st_bon``.
- ``workflow/report/figure3-default.png`` (and the grid's ``figure3-grid.png``, ``figure4-grid.png``) is served as ``img/figure3-default.png`` (the README
  shows the same file, so there is one copy).

The functions that make the text are plain (no MkDocs import), so tests/test_docs.py holds the
generated CLI page against the parser without building the site.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `mkdocs build` from a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT))

CLI_MARKER = "<!-- specrej:cli-reference -->"
METHODS_MARKER = "<!-- specrej:method-parameters -->"
ST_BON_MARKER = "<!-- specrej:st-bon-departures -->"
FIGURES = {f"img/{name}": ROOT / "workflow" / "report" / name
           for name in ("figure3-default.png", "figure3-grid.png", "figure4-grid.png")}


# -- text helpers ---------------------------------------------------------------------------------

def _cell(text: object) -> str:
    """Text for one Markdown table cell: one line; pipes, asterisks and angle brackets escaped
    (backticks stay: a help text's `code` shows as code)."""
    text = " ".join(str(text).split())
    return text.replace("|", "\\|").replace("*", "\\*").replace("<", "&lt;").replace(">", "&gt;")


def _code(text: object) -> str:
    """An inline code span for a table cell (a pipe inside still needs its escape)."""
    text = " ".join(str(text).split())
    return f"`{text}`".replace("|", "\\|") if text else ""


def _help(action: argparse.Action, prog: str) -> str:
    """The help text as argparse shows it (its %(...)s expanded), without the default suffix
    that ArgumentDefaultsHelpFormatter adds: the default has its own column."""
    text = action.help or ""
    if "%" in text:
        values = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
        values["prog"] = prog
        if values.get("choices") is not None:
            values["choices"] = ", ".join(map(str, values["choices"]))
        text = text % values
    return text


# -- the CLI reference ----------------------------------------------------------------------------

def subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[argparse.ArgumentParser, str]]:
    """{name: (subparser, its one-line help)} in the order the parser declares them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            return {name: (sub, helps.get(name, "")) for name, sub in action.choices.items()}
    return {}


def _value(action: argparse.Action) -> str:
    if action.nargs == 0:
        return "(flag)"
    if action.choices is not None:
        return "{" + ",".join(map(str, action.choices)) + "}"
    if action.metavar is not None:
        return str(action.metavar)
    if action.option_strings:
        return action.dest.upper()
    return action.dest


def _default(action: argparse.Action) -> str:
    if not action.option_strings:
        return ""
    if action.required:
        return "required"
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS) or action.default == []:
        return ""
    return _code(action.default)


def _options_table(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| option | value | default | meaning |", "|---|---|---|---|"]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        names = ", ".join(_code(name) for name in action.option_strings) or _code(_value(action))
        value = "" if not action.option_strings else _code(_value(action)) if action.nargs != 0 else "(flag)"
        if not action.option_strings and action.nargs in ("+", "*"):
            value = "one or more" if action.nargs == "+" else "any number"
        if isinstance(action, argparse._AppendAction):
            value += " (repeatable)"
        rows.append(f"| {names} | {value} | {_default(action)} | {_cell(_help(action, parser.prog))} |")
    return rows


def _usage(parser: argparse.ArgumentParser, width: int = 100) -> str:
    """The usage lines as argparse wraps them, at a fixed width (not the terminal's)."""
    formatter = parser.formatter_class(prog=parser.prog, width=width)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, prefix="")
    return formatter.format_help().strip("\n")


def cli_reference_markdown(parser: argparse.ArgumentParser | None = None) -> str:
    """Every command and option of `specrej` (``specrej.cli.main.build_parser()``) as Markdown."""
    if parser is None:
        from specrej.cli.main import build_parser

        parser = build_parser()
    lines = [("Generated from `specrej.cli.main.build_parser()` when this site was built: "
              "what `specrej --help` and `specrej COMMAND --help` print, as tables."), "",
             "### specrej", "", f"```text\n{_usage(parser)}\n```", "", _cell(parser.description or ""), ""]
    lines += _options_table(parser)
    commands = subcommands(parser)
    lines += ["", "| command | what it does |", "|---|---|"]
    lines += [f"| [`{name}`](#specrej-{name}) | {_cell(summary)} |" for name, (_, summary) in commands.items()]
    for name, (sub, summary) in commands.items():
        lines += ["", f"### specrej {name} {{#specrej-{name}}}", "", f"```text\n{_usage(sub)}\n```", "",
                  _cell(sub.description or summary), ""]
        lines += _options_table(sub)
    return "\n".join(lines) + "\n"


def option_strings(parser: argparse.ArgumentParser | None = None) -> dict[str, set[str]]:
    """{"": the top-level options, command: its option strings} of the parser."""
    if parser is None:
        from specrej.cli.main import build_parser

        parser = build_parser()
    found = {"": {o for a in parser._actions for o in a.option_strings}}
    for name, (sub, _) in subcommands(parser).items():
        found[name] = {o for a in sub._actions for o in a.option_strings}
    return found


# -- the methods' parameters ----------------------------------------------------------------------

def _param_default(described: dict) -> str:
    if described.get("required"):
        return "required"
    default = described.get("default")
    if default is None:
        return "not set (the method decides)"
    if isinstance(default, (tuple, list)) and not default:
        return "none"
    return _code(default)


def method_parameters_markdown(methods: dict | None = None) -> str:
    """One section per built-in method: name, description, record/table label, and a table of
    its parameters from `Param.describe()` with the option that sets each."""
    if methods is None:
        from specrej.methods import built_in

        methods = built_in()
    lines = [("Generated from `specrej.methods.built_in()` when this site was built "
              "(each parameter's `Param.describe()`).")]
    for name, method in methods.items():
        module = getattr(method.run, "__module__", "")
        lines += ["", f"### `{name}` — {method.description} {{#method-{name}}}", ""]
        details = [f"module `{module}`"] if module else []
        if method.record_method and method.record_method != name:
            details.append(f"records say `method: {method.record_method}`")
        if method.batch_param:
            details.append(f"out of memory: retried with half its `{method.batch_param}`")
        if method.setting_keys:
            details.append("setting named by " + ", ".join(f"`{k}`" for k in method.setting_keys))
        lines += ["; ".join(details) + ".", "", "| parameter | set with | type | default | range | meaning |",
                  "|---|---|---|---|---|---|"]
        for param in method.params:
            described = param.describe()
            lines.append(f"| `{param.name}` | {_code(param.option)} | {described['type']} | "
                         f"{_param_default(described)} | {_cell(described.get('range', ''))} | "
                         f"{_cell(described.get('help', ''))} |")
    return "\n".join(lines) + "\n"


def st_bon_departures_markdown() -> str:
    """The bullets under "Where it departs from the official code" in specrej.methods.st_bon's
    docstring, as a Markdown list (an error if the docstring no longer has them)."""
    from specrej.methods import st_bon

    doc = inspect.getdoc(st_bon) or ""
    _, found, tail = doc.partition("Where it departs from the official code:")
    if not found:
        raise ValueError("specrej/methods/st_bon.py's docstring has no 'Where it departs from the official code:'")
    bullets, current = [], None
    for line in tail.strip("\n").splitlines():
        if line.startswith("- "):
            current = [line[2:].strip()]
            bullets.append(current)
        elif line.strip() and current is not None and line.startswith(" "):
            current.append(line.strip())
        elif line.strip():
            break
    if not bullets:
        raise ValueError("specrej/methods/st_bon.py's docstring lists no departures")
    lines = ["From the docstring of `specrej.methods.st_bon`:", ""]
    lines += ["- " + " ".join(parts) for parts in bullets]
    return "\n".join(lines) + "\n"


# -- MkDocs events --------------------------------------------------------------------------------

def on_files(files, config):
    """Serve the figures that live beside the workflow's report, without a copy in docs/."""
    from mkdocs.structure.files import File

    for uri, source in FIGURES.items():
        if not source.is_file():
            raise FileNotFoundError(f"{source} (shown on the site as {uri}) is missing")
        files.append(File.generated(config, uri, abs_src_path=str(source)))
    return files


def on_page_markdown(markdown, page, config, files):
    generated = {CLI_MARKER: cli_reference_markdown, METHODS_MARKER: method_parameters_markdown,
                 ST_BON_MARKER: st_bon_departures_markdown}
    for marker, make in generated.items():
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return markdown
