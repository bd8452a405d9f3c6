"""Markdown that renders inert, from text a submission may have written.

Everything the grader writes into Markdown (summary.md, the pull-request comment) from text it
does not control — failure reasons, test names, file paths of a pull request, the implementation
under test — goes through this module, so nothing a submission writes can add a link, an image,
HTML, a mention, an issue reference, an emoji, a heading, a table row or reordered text under the
course bot's name.

- `clean(text)`: one line, without control, format (Unicode bidi, zero-width, BOM) or
  line-separator characters — what every other function starts from;
- `text(text)`: for a cell or a list item outside code: HTML-escaped, every inline marker
  backslash-escaped, autolinks and references broken (see `defang`);
- `code(text, table=...)`: a code span (fenced by more backticks than any run inside) of the
  defanged text, with `|` escaped when it sits in a table cell.

`defang` puts an invisible WORD JOINER (U+2060) inside every sequence a renderer could turn into
something: URL schemes (`http://`, `mailto:`...), `www.`, `@` before a name (mentions, e-mail
autolinks), `#` and `GH-` before a number (issue references), `:name:` (emoji), `<` before a tag
or autolink, link and image brackets, emphasis runs. Inside a code span GitHub links nothing
anyway; the joiners make sure the raw text holds no such token either, whatever renders it (and
whatever checks it as text). The joiner shows nothing and is not whitespace, so the words still
read as they were written.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["WORD_JOINER", "clean", "code", "defang", "text"]

WORD_JOINER = "\u2060"

# Control (Cc), format (Cf: bidi embeddings, overrides and isolates, zero-width space, joiners,
# BOM, soft hyphen, Unicode tags), line and paragraph separators, unassigned and private-use
# characters: never shown, or shown as something else than what a reader thinks they see.
_DROPPED_CATEGORIES = {"Cf", "Co", "Cn", "Cs"}
_SPACE_CATEGORIES = {"Cc", "Zl", "Zp", "Zs"}


def clean(value: str) -> str:
    """`value` on one line: whitespace runs as one space, invisible characters dropped."""
    out = []
    for ch in value:
        category = unicodedata.category(ch)
        if category in _SPACE_CATEGORIES or ch.isspace():
            out.append(" ")
        elif category not in _DROPPED_CATEGORIES:
            out.append(ch)
    return " ".join("".join(out).split())


_J = WORD_JOINER
_DEFANG = [
    # URL schemes: http://, https://, ftp://, irc://, javascript:..., mailto:, data:, xmpp:
    (re.compile(r"(?i)(?<=[a-z0-9+.\-])(:)(?=//)"), rf"\1{_J}"),
    (re.compile(r"(?i)\b(mailto|xmpp|javascript|vbscript|data|file|tel|sms)(:)"), rf"\1{_J}\2"),
    (re.compile(r"(?i)(www)(\.)"), rf"\1{_J}\2"),  # extended www autolinks (after `_` too)
    (re.compile(r"@(?=[A-Za-z0-9_\-])"), f"@{_J}"),  # @mentions, e-mail autolinks
    (re.compile(r"#(?=[A-Za-z0-9])"), f"#{_J}"),  # #123, owner/repo#123
    (re.compile(r"(?i)\b(gh)(-)(?=\d)"), rf"\1\2{_J}"),  # GH-123
    (re.compile(r":(?=[A-Za-z0-9_+\-]+:)"), f":{_J}"),  # :shortcode: emoji
    (re.compile(r"<(?=[A-Za-z/!?])"), f"<{_J}"),  # raw HTML, <http://...> autolinks
    (re.compile(r"\](?=[(\[:])"), f"]{_J}"),  # [x](y), [x][y], [x]: y
    (re.compile(r"!(?=\[)"), f"!{_J}"),  # ![image]
    (re.compile(r"([*_~])(?=\1)"), rf"\1{_J}"),  # **strong**, __strong__, ~~strike~~
]


def defang(value: str) -> str:
    """`value` with a WORD JOINER inside every autolink, reference, mention, emoji and tag."""
    for pattern, replacement in _DEFANG:
        value = pattern.sub(replacement, value)
    return value


# Inside a cell or list item only inline markup matters: emphasis, code, links, the cell
# separator. (`#`, `-`, `+` mean something only at the start of a line, which these never are.)
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def text(value: str) -> str:
    """`value` as plain Markdown text for a table cell or list item: no markup survives."""
    value = defang(clean(value))
    value = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", value)


_BACKTICKS = re.compile(r"`+")


def code(value: str, *, table: bool = True) -> str:
    """`value` as an inline code span ("" for empty text); `table`: it sits in a table cell."""
    value = defang(clean(value))
    if not value:
        return ""
    if table:
        # A GFM table splits its row before reading code spans: every `|` must be escaped, and
        # must not follow a backslash that would escape that backslash instead.
        value = re.sub(r"\\(?=\|)", "\\\\" + WORD_JOINER, value).replace("|", "\\|")
    longest = max((len(run) for run in _BACKTICKS.findall(value)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value}{pad}{fence}"
