"""Natural-language tasks over GitHub's real OpenAPI description and the operation each one needs.

Written as a user would ask, not copied from the operations' summaries (many name the operation
differently: a branch is created as a git reference, an issue is closed by updating it). Used by the
search-quality test (``tests/tool_stubs/test_search_quality.py``, which skips when the document is not cached)
and by ``make bench``.
"""

from __future__ import annotations

import os
from pathlib import Path

from codeact._paths import cache_dir


def github_document() -> Path:
    """Where GitHub's description is kept: ``$CODEACT_GITHUB_OPENAPI``, else ``bench/api.github.com.json``
    in codeact's cache (``npm pack @octokit/openapi``, then copy ``generated/api.github.com.json``
    there; nothing here downloads it)."""
    return Path(os.environ.get("CODEACT_GITHUB_OPENAPI") or cache_dir() / "bench" / "api.github.com.json")


#: (task, intended operationId)
GITHUB_TASKS: list[tuple[str, str]] = [
    ("create a comment on an issue", "issues/create-comment"),
    ("list the commits of a repository", "repos/list-commits"),
    ("merge a pull request", "pulls/merge"),
    ("create a new repository for the authenticated user", "repos/create-for-authenticated-user"),
    ("add labels to an issue", "issues/add-labels"),
    ("star a repository", "activity/star-repo-for-authenticated-user"),
    ("get the contents of a file in a repository", "repos/get-content"),
    ("create a release", "repos/create-release"),
    ("list workflow runs for a repository", "actions/list-workflow-runs-for-repo"),
    ("search code", "search/code"),
    ("fork a repository", "repos/create-fork"),
    ("request reviewers for a pull request", "pulls/request-reviewers"),
    ("create a gist", "gists/create"),
    ("get the authenticated user", "users/get-authenticated"),
    ("delete a branch protection", "repos/delete-branch-protection"),
    ("list the members of an organization", "orgs/list-members"),
    ("close an issue", "issues/update"),
    ("create a webhook for a repository", "repos/create-webhook"),
    ("list the branches", "repos/list-branches"),
    ("rerun a workflow", "actions/re-run-workflow"),
    ("open a new issue in a repository", "issues/create"),
    ("show the open pull requests of a repo", "pulls/list"),
    ("get the README of a repository", "repos/get-readme"),
    ("create or update a file in a repository", "repos/create-or-update-file-contents"),
    ("delete a file from a repository", "repos/delete-file"),
    ("compare two commits", "repos/compare-commits"),
    ("create a new branch", "git/create-ref"),
    ("search for users by name", "search/users"),
    ("find issues and pull requests matching a query", "search/issues-and-pull-requests"),
    ("list the repositories of an organization", "repos/list-for-org"),
    ("list my own repositories", "repos/list-for-authenticated-user"),
    ("add a collaborator to a repository", "repos/add-collaborator"),
    ("remove a collaborator from a repository", "repos/remove-collaborator"),
    ("list the tags of a repository", "repos/list-tags"),
    ("get the latest release", "repos/get-latest-release"),
    ("list the files attached to a release", "repos/list-release-assets"),
    ("trigger a workflow manually", "actions/create-workflow-dispatch"),
    ("download the logs of a workflow run", "actions/download-workflow-run-logs"),
    ("cancel a running workflow", "actions/cancel-workflow-run"),
    ("list the secrets of a repository", "actions/list-repo-secrets"),
    ("set a secret for GitHub Actions in a repository", "actions/create-or-update-repo-secret"),
    ("lock an issue", "issues/lock"),
    ("assign someone to an issue", "issues/add-assignees"),
    ("create a milestone", "issues/create-milestone"),
    ("list all labels in a repository", "issues/list-labels-for-repo"),
    ("approve a pull request with a review", "pulls/create-review"),
    ("list the files changed in a pull request", "pulls/list-files"),
    ("watch a repository", "activity/set-repo-subscription"),
    ("list my notifications", "activity/list-notifications-for-authenticated-user"),
    ("follow a user", "users/follow"),
    ("add an SSH key to my account", "users/create-public-ssh-key-for-authenticated-user"),
    ("invite someone to an organization", "orgs/create-invitation"),
    ("get the combined status of a commit", "repos/get-combined-status-for-ref"),
    ("create a deployment", "repos/create-deployment"),
    ("transfer a repository to another owner", "repos/transfer"),
    ("list code scanning alerts of a repository", "code-scanning/list-alerts-for-repo"),
    ("list the languages used in a repository", "repos/list-languages"),
    ("check my API rate limit", "rate-limit/get"),
    ("list the contributors of a repository", "repos/list-contributors"),
    ("delete a repository", "repos/delete"),
    ("add a reaction to an issue comment", "reactions/create-for-issue-comment"),
    ("rename a branch", "repos/rename-branch"),
    ("get a single commit", "repos/get-commit"),
    ("who starred a repository", "activity/list-stargazers-for-repo"),
    ("list the forks of a repository", "repos/list-forks"),
    ("open a pull request", "pulls/create"),
    # written after the ranker was tuned on the tasks above, and kept whatever they scored (19 of 20)
    ("get information about an organization", "orgs/get"),
    ("list the teams in an organization", "teams/list"),
    ("create a team", "teams/create"),
    ("list the comments on an issue", "issues/list-comments"),
    ("edit an issue comment", "issues/update-comment"),
    ("delete a release", "repos/delete-release"),
    ("list the deployments of a repository", "repos/list-deployments"),
    ("get the topics of a repository", "repos/get-all-topics"),
    ("replace the topics of a repository", "repos/replace-all-topics"),
    ("list public events", "activity/list-public-events"),
    ("list the reviews on a pull request", "pulls/list-reviews"),
    ("update a pull request's title", "pulls/update"),
    ("list the check runs for a commit", "checks/list-for-ref"),
    ("get a user's profile", "users/get-by-username"),
    ("list the gists of a user", "gists/list-for-user"),
    ("create a label", "issues/create-label"),
    ("list the artifacts of a repository", "actions/list-artifacts-for-repo"),
    ("delete a workflow run", "actions/delete-workflow-run"),
    ("list the environments of a repository", "repos/get-all-environments"),
    ("unstar a repository", "activity/unstar-repo-for-authenticated-user"),
]
