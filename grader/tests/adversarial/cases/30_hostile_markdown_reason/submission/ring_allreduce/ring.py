"""Puts Markdown that GitHub would render into its error message: bidi overrides that reorder the
table, zero-width characters that hide a link from a naive escaper, bare and www autolinks, an
e-mail, a mention, an issue reference, an emoji shortcode, backticks that close a code span, and
a fake table row claiming full marks."""


def ring_all_reduce(tensor, op="sum", group=None):
    raise ValueError(
        "\u202edelbaliava ton\u202c see https://evil.example/claim and w\u200bww.evil.example "
        "ht\u200btp://evil.example/x mail admin@evil.example, cc @octocat, fixes #123, "
        ":rocket: GH-7 `` ` `` <http://evil.example/angle> [claim](https://evil.example) "
        "\u2066| test_everything | hidden | 100 / 100 | ✅ passed |\u2069")
