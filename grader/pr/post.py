"""Step 4 of grading a pull request: post the sticky comment and the check run.

    python -m grader pr-post --repo OWNER/NAME --pr N --sha HEAD_SHA --out OUT

Reads `OUT/comment.md` and `OUT/check.json` (written by pr-comment) and, with the token in
`GITHUB_TOKEN` (or `GH_TOKEN`), talks to the REST API at `GITHUB_API_URL`
(default https://api.github.com):
- finds this bot's earlier comment on the pull request by its `MARKER` and updates it, or
  creates one — one comment per pull request, however many pushes;
- creates a completed check run "mlsys-labs grade" on the head commit whose title is the score.
Nothing else is sent; the token needs `pull-requests: write` and `checks: write` only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from grader.manifest import Course
from grader.pr.comment import MARKER
from grader.report.render import COMMENT_LIMIT

CHECK_NAME = "mlsys-labs grade"
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+$")
_SHA = re.compile(r"^[0-9a-f]{40}$")
MAX_PAGES = 20


class PostError(RuntimeError):
    """The API refused a request, or an argument is malformed."""


class Api:
    """The few REST calls we need, with the token in a header and JSON in and out."""

    def __init__(self, base_url: str, token: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token

    def call(self, method: str, path: str, body: dict | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        # S310: the URL is the runner's GITHUB_API_URL (or the https default), not user input.
        request = urllib.request.Request(self.base_url + path, data=data, method=method)  # noqa: S310
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/vnd.github+json")
        request.add_header("X-GitHub-Api-Version", "2022-11-28")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
                text = response.read().decode("utf-8")
        except urllib.error.HTTPError as exc:
            raise PostError(f"{method} {path}: HTTP {exc.code} {exc.reason}") from exc
        except urllib.error.URLError as exc:
            raise PostError(f"{method} {path}: {exc.reason}") from exc
        return json.loads(text) if text else None


def find_sticky(api: Api, repo: str, pr: int) -> int | None:
    """The id of our earlier comment (a bot's, starting with MARKER), or None."""
    for page in range(1, MAX_PAGES + 1):
        comments = api.call("GET", f"/repos/{repo}/issues/{pr}/comments?per_page=100&page={page}")
        for comment in comments or []:
            user = comment.get("user") or {}
            if user.get("type") == "Bot" and str(comment.get("body", "")).startswith(MARKER):
                return int(comment["id"])
        if not comments or len(comments) < 100:
            return None
    return None


def post(api: Api, repo: str, pr: int, sha: str, comment: str, check: dict) -> str:
    """Update or create the sticky comment, then create the check run. Returns what it did."""
    if not _REPO.match(repo) or not _SHA.match(sha) or pr <= 0:
        raise PostError(f"bad target: repo {repo!r}, pull request {pr}, sha {sha!r}")
    if not comment.startswith(MARKER) or len(comment) > COMMENT_LIMIT:
        raise PostError("the comment is not pr-comment's output (marker or size)")
    existing = find_sticky(api, repo, pr)
    if existing is None:
        api.call("POST", f"/repos/{repo}/issues/{pr}/comments", {"body": comment})
        did = "created the comment"
    else:
        api.call("PATCH", f"/repos/{repo}/issues/comments/{existing}", {"body": comment})
        did = f"updated comment {existing}"
    conclusion = check.get("conclusion")
    if conclusion not in ("success", "neutral", "failure"):
        raise PostError(f"check.json: conclusion {conclusion!r}")
    api.call("POST", f"/repos/{repo}/check-runs", {
        "name": CHECK_NAME, "head_sha": sha, "status": "completed", "conclusion": conclusion,
        "output": {"title": str(check.get("title", ""))[:200],
                   "summary": str(check.get("summary", ""))[:65_000]},
    })
    return did + " and the check run"


# --- command line -----------------------------------------------------------------------------


def register(sub: argparse._SubParsersAction) -> None:
    """`python -m grader pr-post --repo OWNER/NAME --pr N --sha SHA --out OUT`."""
    parser = sub.add_parser("pr-post", help="create or update the sticky PR comment and the "
                            "check run from pr-comment's output")
    parser.add_argument("--repo", required=True, metavar="OWNER/NAME")
    parser.add_argument("--pr", type=int, required=True, help="pull request number")
    parser.add_argument("--sha", required=True, help="head commit of the pull request")
    parser.add_argument("--out", type=Path, required=True,
                        help="folder with comment.md and check.json")
    parser.set_defaults(handler=_command)


def _command(args: argparse.Namespace, course: Course) -> int:
    token = os.environ.get("GITHUB_TOKEN") or os.environ.get("GH_TOKEN")
    if not token:
        print("error: set GITHUB_TOKEN (or GH_TOKEN) for the API", file=sys.stderr)
        return 2
    api = Api(os.environ.get("GITHUB_API_URL", "https://api.github.com"), token)
    try:
        comment = (args.out / "comment.md").read_text(encoding="utf-8")
        check = json.loads((args.out / "check.json").read_text(encoding="utf-8"))
        print(post(api, args.repo, args.pr, args.sha, comment, check))
    except (OSError, ValueError, PostError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
