"""Markdown rendered inert (grader/report/markdown_safe.py): a corpus of hostile strings, each
rendered the way the PR comment renders reasons, names and paths, then checked as raw text and as
HTML.

The corpus includes the autolink cases of the GitHub-flavoured Markdown spec, written from its
rules: extended www, URL and e-mail autolinks, angle-bracket autolinks, raw HTML, images, links
and link reference definitions; and what GitHub adds on top of the spec: @mentions, #123 and
GH-123 references, :shortcode: emoji. mistune (pinned through nbconvert) renders the result;
it does not implement every GitHub extension, so the raw text is checked too.
"""

from __future__ import annotations

import re

import pytest

from grader.report import markdown_safe
from grader.report.markdown_safe import WORD_JOINER, clean, code, defang, text
from grader.report.render import summary_markdown
from grader.report.results import RunResult
from grader.tests._fakes import entry, run_json

BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
ZERO_WIDTH = "\u200b\u200c\u200d\u2060\ufeff"

GFM_AUTOLINKS = [
    # extended www autolinks
    "www.commonmark.org",
    "Visit www.commonmark.org/help for more information.",
    "Visit www.commonmark.org.",
    "Visit www.commonmark.org/a.b.",
    "www.google.com/search?q=Markup+(business)",
    "(www.google.com/search?q=Markup+(business))",
    "www.google.com/search?q=commonmark&hl=en",
    "WWW.EXAMPLE.COM",
    # extended URL autolinks
    "http://commonmark.org",
    "https://encrypted.google.com/search?q=Markup+(business)",
    "(Visit https://encrypted.google.com/search?q=Markup+(business))",
    "Anonymous FTP is available at ftp://foo.bar.baz.",
    "HTTPS://EXAMPLE.COM/x",
    "http://example.com/a_b_c?d=e&f=g#frag",
    # extended e-mail autolinks and the protocols GFM adds
    "foo@bar.baz",
    "hello@mail+xyz.example isn't valid, but hello+xyz@mail.example is.",
    "a.b-c_d@a.b",
    "a.b-c_d@a.b.",
    "mailto:foo@bar.baz",
    "xmpp:foo@bar.baz/txt",
    # angle-bracket autolinks
    "<http://foo.bar.baz>",
    "<https://foo.bar.baz/test?q=hello&id=22&boolean>",
    "<irc://foo.bar:2233/baz>",
    "<MAILTO:FOO@BAR.BAZ>",
    "<foo@bar.example.com>",
    "<a+b+c:d>",
    "<made-up-scheme://foo,bar>",
    "<javascript:alert(1)>",
]
RAW_HTML_AND_LINKS = [
    '<a href="http://evil.example">click</a>',
    "<A HREF=//evil.example>x</A>",
    "<img src=x onerror=alert(2)>",
    "<script>alert(1)</script>",
    "<details open><summary>all passed</summary></details>",
    "<!-- hidden --> <?php ?> <![CDATA[x]]>",
    "&lt;img src=x&gt; &#60;img&#62; &#x3C;b&#x3E;",
    "![beacon](https://evil.example/x.png)",
    "![beacon][ref]",
    "[click](javascript:alert(3))",
    "[click]( http://evil.example 'title')",
    "[x]: http://evil.example 'title'",
    "[x][y] [y]: <http://evil.example>",
    "[[nested](http://a)](http://b)",
]
GITHUB_REFERENCES = [
    "@octocat", "@everyone please look", "cc @org/team", "(@octocat)", "a\u200b@octocat",
    "#123", "fixes #1", "owner/repo#12", "GH-123", "gh-7",
    ":smile: :+1: :rocket:", "x:tada:y",
]
STRUCTURE = [
    "| fake | table |",
    "ok |\n| test_x | hidden | 100 / 100 | ✅ passed |",
    "line\n## Score: 100/100\n",
    "**100 / 100** __bold__ ~~strike~~ *em* _em_",
    "`code` `` a ` b `` ``` fence",
    "`", "``", "ends with `", "a \\| b \\\\| c \\",
    "\u2028new line\u2029paragraph\x85next\x0bvtab\x0cff\r\n",
]
INVISIBLE = [
    f"\u202etxt.exe{BIDI}", "\u2066reordered\u2069 text", f"ht{ZERO_WIDTH}tp://evil.example",
    "w\u200bww.evil.example", "@\u200docto\ufeffcat", "#\u200b12", "\U000e0041tag chars",
]
CORPUS = GFM_AUTOLINKS + RAW_HTML_AND_LINKS + GITHUB_REFERENCES + STRUCTURE + INVISIBLE

mistune = pytest.importorskip("mistune")
RENDER = mistune.create_markdown(escape=False, plugins=["strikethrough", "table", "url"])

# What a renderer or GitHub's filters could turn into something, in the raw Markdown.
ACTIVE = [
    re.compile(r"(?i)[a-z][a-z0-9+.\-]*://"),  # URL autolinks
    re.compile(r"(?i)www\."),
    re.compile(r"(?i)\b(mailto|xmpp|javascript):"),
    re.compile(r"[A-Za-z0-9_.+\-]@[A-Za-z0-9]"),  # e-mail autolinks
    re.compile(r"(?<![A-Za-z0-9_`])@[A-Za-z0-9]"),  # mentions
    re.compile(r"#[0-9A-Za-z]"),  # issue references (and headings, entities)
    re.compile(r"(?i)\bgh-\d"),
    re.compile(r":[A-Za-z0-9_+\-]+:"),  # emoji shortcodes
    re.compile(r"<[A-Za-z/!?]"),  # raw HTML, angle autolinks
    re.compile(r"\]\(|\]\[|\]:|!\["),  # links, images, references
    re.compile(r"\*\*|__|~~"),
]


def invisible_characters(value: str) -> list[str]:
    found = [ch for ch in value if ch in BIDI or ch in ZERO_WIDTH.replace(WORD_JOINER, "")]
    return found + [ch for ch in value if "\U000e0000" <= ch <= "\U000e007f"]


def assert_inert_html(html: str) -> None:
    for tag in ("<a ", "<a>", "<img", "<script", "<details", "<summary", "<strong", "<em>",
                "<del", "<h1", "<h2", "<iframe", "<!--"):
        assert tag not in html.lower(), f"{tag} in {html!r}"


@pytest.mark.parametrize("hostile", CORPUS)
def test_each_hostile_string_is_inert_as_code_and_as_text(hostile):
    for rendered in (code(hostile), code(hostile, table=False), text(hostile)):
        assert "\n" not in rendered and "\r" not in rendered
        assert not invisible_characters(rendered), rendered
        for pattern in ACTIVE:
            assert not pattern.search(rendered.replace("&amp;", "&")), (pattern, rendered)
        assert_inert_html(RENDER(f"x {rendered}"))


@pytest.mark.parametrize("hostile", CORPUS)
def test_a_hostile_reason_keeps_the_table_to_four_cells(hostile):
    run = RunResult.from_json(run_json([entry(f"test_{hostile}", "failed", reason=hostile)]))
    summary = summary_markdown(run)
    assert not invisible_characters(summary)
    rows = [line for line in summary.splitlines() if line.startswith("| test\\_")]
    assert len(rows) == 1
    body = RENDER(summary).split("<h3>", 1)[1]
    assert_inert_html(body)
    row = body.split("<tbody>", 1)[1].split("</tr>", 1)[0]
    assert row.count("<td") == 4, row


def test_code_span_fence_outgrows_every_backtick_run():
    assert code("a ` b") == "``a ` b``"
    assert code("x ``` y") == "````x ``` y````"
    assert code("`") == "`` ` ``"
    assert code("ends with `") == "`` ends with ` ``"
    assert code("") == "" and code(" \n ") == ""
    html = RENDER(code("a `` b"))
    assert "<code>a `` b</code>" in html


def test_code_spans_show_the_words_as_written():
    reason = "expected 3 messages, got 4: see www.x.org or #12 @ts"
    rendered = code(reason)
    assert rendered.replace(WORD_JOINER, "") == f"`{reason}`"
    assert code("a|b", table=True) == "`a\\|b`" and code("a|b", table=False) == "`a|b`"


def test_a_backslash_cannot_unescape_a_cell_separator():
    for hostile in ("a\\|b", "a\\\\|b", "\\|", "x \\\\\\| y"):
        rendered = code(hostile)
        # GFM splits a row at a `|` preceded by an even number of backslashes.
        unescaped = [m for m in re.finditer(r"(\\*)\|", rendered) if len(m.group(1)) % 2 == 0]
        assert not unescaped, rendered


def test_clean_drops_bidi_and_zero_width_and_joins_lines():
    assert clean(f"a{BIDI}b{ZERO_WIDTH}c") == "abc"
    assert clean("one\ntwo\r\nthree\u2028four\tfive  ") == "one two three four five"


def test_defang_keeps_plain_prose_unchanged():
    for plain in ("rank 2 sent 3 messages to rank 0; a ring only talks to rank 3",
                  "not implemented yet: ring_all_reduce", "got 1.34, expected 1.75",
                  "test_ring_all_reduce[4-float32]", "x < 3 and y > 2", "ratio 1:2"):
        assert defang(plain) == plain


def test_text_is_the_table_cell_escape_of_the_reports():
    assert text("test_a[1|2]") == "test\\_a\\[1\\|2\\]"
    assert text("a <b> & c").replace(WORD_JOINER, "") == "a &lt;b&gt; &amp; c"
    assert markdown_safe.text("@octocat") == f"@{WORD_JOINER}octocat"
