"""The commands a Markdown document tells its reader to type, so a test can run them as written.

:func:`commands` takes a section by its heading's text and returns the shell lines of its first
fenced code block in a shell language (``sh``, ``bash``, ``shell``, ``console``): ``\\``
continuations joined, blank lines and comment lines dropped, a leading ``$ `` prompt stripped (in a
``console`` block that shows prompts, the lines without one are output and dropped). A fenced block
may be indented (inside a list item); headings inside fences are not headings. Inline comments
(``cmd  # why``) are left to the shell; heredocs are not supported. :func:`blocks` gives every
fenced block of a section, for a test that needs another than the first.

A section or block that is not there is a :class:`DocsError` naming the file and the heading: the
document changed under the test, and the test says where.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

__all__ = ["SHELL_LANGUAGES", "Block", "DocsError", "blocks", "commands", "section"]

#: the info strings of a fenced block whose lines are shell commands
SHELL_LANGUAGES = ("sh", "bash", "shell", "console")

_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*?)[ \t]*$")
_PROMPT = "$ "


class DocsError(LookupError):
    """The section or code block a test reads is not in the document (as written now)."""


@dataclasses.dataclass(frozen=True)
class Block:
    """A fenced code block: its language (the info string's first word, may be empty), its lines
    (the fence's indentation removed) and the line number of its opening fence (1-based)."""

    language: str
    lines: tuple[str, ...]
    line: int


@dataclasses.dataclass(frozen=True)
class _Line:
    number: int  # 1-based
    text: str
    heading: tuple[int, str] | None  # (level, text) when the line is a heading outside any fence


def _scan(text: str, path: Path) -> list[_Line]:
    """Every line, with the headings found outside fenced blocks."""
    out: list[_Line] = []
    fence: str | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        heading = None
        if fence is None:
            if m := _FENCE.match(raw):
                fence = m["fence"]
            elif m := _HEADING.match(raw):
                heading = (len(m[1]), (m[2] or "").strip())
        elif _closes(raw, fence):
            fence = None
        out.append(_Line(number, raw, heading))
    if fence is not None:
        raise DocsError(f"{path}: a code block opened with {fence} is never closed")
    return out


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return stripped.startswith(fence[0] * len(fence)) and set(stripped) == {fence[0]}


def _section_lines(path: Path, heading: str) -> list[_Line]:
    lines = _scan(path.read_text(encoding="utf-8"), path)
    wanted = heading.lstrip("#").strip()
    for i, line in enumerate(lines):
        if line.heading is None or line.heading[1] != wanted:
            continue
        level = line.heading[0]
        end = next(
            (j for j in range(i + 1, len(lines)) if (h := lines[j].heading) is not None and h[0] <= level),
            len(lines),
        )
        return lines[i + 1 : end]
    raise DocsError(f"{path}: no section with the heading {wanted!r}")


def section(path: Path | str, heading: str) -> str:
    """The text under the heading ``heading`` (its text, with or without the ``#``s), up to the next
    heading of the same or a higher level."""
    return "\n".join(line.text for line in _section_lines(Path(path), heading))


def blocks(path: Path | str, heading: str) -> list[Block]:
    """The fenced code blocks of the section ``heading``, in order."""
    out: list[Block] = []
    opened: tuple[_Line, re.Match[str]] | None = None
    body: list[str] = []
    for line in _section_lines(Path(path), heading):
        if opened is None:
            if m := _FENCE.match(line.text):
                opened, body = (line, m), []
            continue
        start, m = opened
        if _closes(line.text, m["fence"]):
            language = (m["info"].split() or [""])[0].lower()
            out.append(Block(language, tuple(body), start.number))
            opened = None
            continue
        indent = len(m["indent"])
        body.append(line.text[min(indent, len(line.text) - len(line.text.lstrip(" "))) :])
    return out


def commands(
    path: Path | str, heading: str, *, languages: tuple[str, ...] = SHELL_LANGUAGES, index: int = 0
) -> list[str]:
    """The shell commands of the ``index``-th block in one of ``languages`` of the section
    ``heading`` (see the module docstring for what is kept)."""
    found = [b for b in blocks(path, heading) if b.language in languages]
    if len(found) <= index:
        wanted = "/".join(f"```{lang}" for lang in languages)
        raise DocsError(
            f"{path}: the section {heading.lstrip('#').strip()!r} has {len(found)} {wanted} "
            f"block(s), not the {index + 1} asked for"
        )
    block = found[index]
    try:
        return shell_lines(block.lines, console=block.language == "console")
    except ValueError as e:
        raise DocsError(f"{path}, the block at line {block.line}: {e}") from None


def shell_lines(lines: tuple[str, ...] | list[str], *, console: bool = False) -> list[str]:
    """``lines`` as commands: continuations joined, comments and blank lines dropped, ``$ ``
    stripped; ``console``: when some line has a prompt, only prompted lines (and their
    continuations) are commands. ValueError for a continuation that never ends."""
    prompted = console and any(line.lstrip().startswith(_PROMPT) for line in lines)
    out: list[str] = []
    pending: str | None = None  # a command continued on the next line
    for raw in lines:
        line = raw.strip()
        if pending is None:
            if line.startswith(_PROMPT) or line == _PROMPT.strip():
                line = line[len(_PROMPT) :].strip()
            elif prompted:
                continue  # output
            if not line or line.startswith("#"):
                continue
        if line.endswith("\\"):
            pending = f"{pending} {line[:-1].rstrip()}" if pending else line[:-1].rstrip()
            continue
        out.append(f"{pending} {line}".strip() if pending else line)
        pending = None
    if pending is not None:
        raise ValueError(f"the last command ends in a continuation: {pending!r}")
    return out
