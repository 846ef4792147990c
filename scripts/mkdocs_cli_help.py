"""MkDocs hook: the command-line reference page shows each ``dels-hub`` command's own ``--help``, so it cannot
drift from the parser."""

import os

MARKER = "<!-- dels-hub --help of every command -->"


def on_page_markdown(markdown: str, page, **kwargs) -> str:
    if MARKER not in markdown:
        return markdown
    os.environ["COLUMNS"] = "110"  # argparse wraps help to the terminal's width; fix it for a reproducible page
    from dels_hub.cli import build_parser

    parser = build_parser()
    commands = next(action for action in parser._actions if action.dest == "command")  # argparse's subparsers
    sections = []
    for name, subparser in commands.choices.items():
        sections.append(f"## dels-hub {name}\n\n```text\n{subparser.format_help()}```\n")
    return markdown.replace(MARKER, "\n".join(sections))
