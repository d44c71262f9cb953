"""A generated OpenAPI 3.0 document shaped like a large real-world API (GitHub-like: tags, slashed
operationIds, shared component schemas, paging defaults, JSON bodies with defaults), with hundreds
of operations. Deterministic; made in the test process, nothing downloaded."""

from __future__ import annotations

from typing import Any

#: tag, singular noun, plural noun, extra actions (verb, summary words)
RESOURCES: list[tuple[str, str, str, list[tuple[str, str]]]] = [
    ("repos", "repository", "repositories", [("archive", "Archive a repository"), ("transfer", "Transfer a repository to another owner")]),
    ("issues", "issue", "issues", [("lock", "Lock an issue conversation"), ("unlock", "Unlock an issue conversation")]),
    ("pulls", "pull request", "pull requests", [("merge", "Merge a pull request"), ("request-reviewers", "Request reviewers for a pull request")]),
    ("comments", "comment", "comments", [("react", "Add a reaction emoji to a comment")]),
    ("labels", "label", "labels", [("add-to-issue", "Add labels to an issue")]),
    ("milestones", "milestone", "milestones", [("close", "Close a milestone")]),
    ("releases", "release", "releases", [("upload-asset", "Upload a release asset file")]),
    ("tags", "git tag", "git tags", [("protect", "Protect a tag pattern")]),
    ("branches", "branch", "branches", [("rename", "Rename a branch"), ("protect", "Set branch protection rules")]),
    ("commits", "commit", "commits", [("compare", "Compare two commits and show the diff")]),
    ("users", "user", "users", [("follow", "Follow a user"), ("block", "Block a user")]),
    ("orgs", "organization", "organizations", [("invite", "Invite a person to an organization")]),
    ("teams", "team", "teams", [("add-member", "Add a member to a team")]),
    ("gists", "gist", "gists", [("star", "Star a gist"), ("fork", "Fork a gist")]),
    ("actions", "workflow run", "workflow runs", [("rerun", "Re-run a workflow run"), ("cancel-run", "Cancel a workflow run")]),
    ("workflows", "workflow", "workflows", [("dispatch", "Trigger a workflow dispatch event"), ("disable", "Disable a workflow")]),
    ("secrets", "secret", "secrets", [("rotate", "Rotate a secret value")]),
    ("variables", "variable", "variables", []),
    ("webhooks", "webhook", "webhooks", [("ping", "Ping a webhook to test delivery"), ("redeliver", "Redeliver a webhook delivery")]),
    ("deployments", "deployment", "deployments", [("set-status", "Create a deployment status")]),
    ("environments", "environment", "environments", []),
    ("packages", "package", "packages", [("restore", "Restore a deleted package")]),
    ("projects", "project board", "project boards", [("move-card", "Move a project card to another column")]),
    ("checks", "check run", "check runs", [("rerequest", "Rerequest a check run")]),
    ("codespaces", "codespace", "codespaces", [("start", "Start a codespace"), ("stop", "Stop a codespace")]),
    ("billing", "billing invoice", "billing invoices", [("usage", "Get billing usage for an organization")]),
    ("keys", "SSH key", "SSH keys", []),
    ("emails", "email address", "email addresses", [("set-primary", "Set the primary email visibility")]),
    ("notifications", "notification thread", "notification threads", [("mark-read", "Mark notifications as read")]),
    ("discussions", "discussion", "discussions", [("answer", "Mark a discussion comment as the answer")]),
    ("wikis", "wiki page", "wiki pages", []),
    ("pages", "Pages site", "Pages sites", [("build", "Request a Pages site build")]),
    ("security", "security advisory", "security advisories", [("publish", "Publish a security advisory")]),
    ("alerts", "code scanning alert", "code scanning alerts", [("dismiss", "Dismiss a code scanning alert")]),
    ("dependabot", "Dependabot alert", "Dependabot alerts", []),
    ("licenses", "license", "licenses", []),
    ("migrations", "migration", "migrations", [("download-archive", "Download a migration archive")]),
    ("invitations", "repository invitation", "repository invitations", [("accept", "Accept a repository invitation")]),
    ("reactions", "reaction", "reactions", []),
    ("stars", "stargazer", "stargazers", []),
    ("forks", "fork", "forks", [("sync", "Sync a fork branch with the upstream repository")]),
    ("runners", "self-hosted runner", "self-hosted runners", [("add-labels", "Add custom labels to a self-hosted runner")]),
    ("artifacts", "workflow artifact", "workflow artifacts", [("download", "Download a workflow artifact zip")]),
    ("caches", "Actions cache", "Actions caches", []),
    ("rulesets", "repository ruleset", "repository rulesets", []),
]
_CRUD = [
    ("list", "get", "List {plural}", "Lists {plural} you can see, newest first. Paged with per_page and page."),
    ("get", "get", "Get a {noun}", "Gets one {noun} by its id, with all its fields."),
    ("create", "post", "Create a {noun}", "Creates a new {noun}. The authenticated user must have write access."),
    ("update", "patch", "Update a {noun}", "Updates fields of an existing {noun}; fields left out keep their value."),
    ("delete", "delete", "Delete a {noun}", "Deletes a {noun} permanently. This cannot be undone."),
]
BASE_URL = "http://127.0.0.1:9"  # never contacted: tests that call use their own server's URL


def _slug(text: str) -> str:
    return "-".join(text.lower().replace("self-hosted", "self hosted").split())


def _body(noun: str, update: bool) -> dict[str, Any]:
    props: dict[str, Any] = {
        "name": {"type": "string", "description": f"The name of the {noun}."},
        "description": {"type": "string", "nullable": True, "description": f"A short description of the {noun}."},
        "visibility": {"type": "string", "enum": ["public", "private", "internal"], "default": "public"},
        "notify": {"type": "boolean", "default": True, "description": "Send notifications about the change."},
        "metadata": {"$ref": "#/components/schemas/metadata"},
    }
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if not update:
        schema["required"] = ["name"]
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def big_document(base_url: str = BASE_URL) -> dict[str, Any]:
    """The document; ``len(operations(doc))`` is in the hundreds."""
    paths: dict[str, dict[str, Any]] = {}
    item_ref = {"$ref": "#/components/schemas/item"}
    for tag, noun, plural, extras in RESOURCES:
        collection = f"/repos/{{owner}}/{{repo}}/{_slug(plural)}"
        member = f"{collection}/{{{tag[:-1] if tag.endswith('s') else tag}_id}}"
        owner = [{"$ref": "#/components/parameters/owner"}, {"$ref": "#/components/parameters/repo"}]
        member_id = {"name": member.rsplit("{", 1)[1][:-1], "in": "path", "required": True,
                     "schema": {"type": "integer"}, "description": f"The unique identifier of the {noun}."}
        for verb, method, summary, description in _CRUD:
            op: dict[str, Any] = {
                "operationId": f"{tag}/{verb}-{_slug(plural if verb == 'list' else noun)}",
                "tags": [tag], "summary": summary.format(noun=noun, plural=plural),
                "description": description.format(noun=noun, plural=plural),
                "responses": {"200": {"description": "OK", "content": {"application/json": {
                    "schema": {"type": "array", "items": item_ref} if verb == "list" else item_ref}}}},
            }
            if verb == "list":
                op["parameters"] = [*owner, {"$ref": "#/components/parameters/per_page"},
                                    {"$ref": "#/components/parameters/page"},
                                    {"name": "sort", "in": "query", "schema": {
                                        "type": "string", "enum": ["created", "updated"], "default": "created"}}]
            elif verb == "create":
                op["parameters"] = owner
                op["requestBody"] = _body(noun, update=False)
            else:
                op["parameters"] = [*owner, member_id]
                if verb == "update":
                    op["requestBody"] = _body(noun, update=True)
            target = collection if verb in ("list", "create") else member
            paths.setdefault(target, {})[method] = op
        for verb, summary in extras:
            paths[f"{member}/{verb}"] = {"post": {
                "operationId": f"{tag}/{verb}-{_slug(noun)}", "tags": [tag], "summary": summary,
                "description": f"{summary}. Needs admin rights on the repository.",
                "parameters": [*owner, member_id], "responses": {"204": {"description": "Done"}}}}
    return {
        "openapi": "3.0.3",
        "info": {"title": "Big API", "version": "1.0"},
        "servers": [{"url": base_url}],
        "paths": paths,
        "components": {
            "parameters": {
                "owner": {"name": "owner", "in": "path", "required": True, "schema": {"type": "string"},
                          "description": "The account owner of the repository."},
                "repo": {"name": "repo", "in": "path", "required": True, "schema": {"type": "string"},
                         "description": "The name of the repository."},
                "per_page": {"name": "per_page", "in": "query", "schema": {"type": "integer", "default": 30},
                             "description": "Results per page (max 100)."},
                "page": {"name": "page", "in": "query", "schema": {"type": "integer", "default": 1},
                         "description": "Page number of the results to fetch."},
            },
            "schemas": {
                "item": {"type": "object", "required": ["id"], "properties": {
                    "id": {"type": "integer"}, "name": {"type": "string"}, "owner": {"$ref": "#/components/schemas/user"},
                    "metadata": {"$ref": "#/components/schemas/metadata"}}},
                "user": {"type": "object", "properties": {"login": {"type": "string"}, "id": {"type": "integer"}}},
                "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
    }


#: Natural-language tasks and the operation each one needs (phrased unlike the summaries).
SEARCH_TASKS: list[tuple[str, str]] = [
    ("post a comment on an issue", "comments/create-comment"),
    ("add a new label", "labels/create-label"),
    ("merge the pull request once checks pass", "pulls/merge-pull-request"),
    ("show all open pull requests", "pulls/list-pull-requests"),
    ("remove a webhook that is no longer needed", "webhooks/delete-webhook"),
    ("test that a webhook delivers by pinging it", "webhooks/ping-webhook"),
    ("fetch the details of one release", "releases/get-release"),
    ("attach a binary file to a release", "releases/upload-asset-release"),
    ("rename the main branch", "branches/rename-branch"),
    ("see the difference between two commits", "commits/compare-commit"),
    ("start following a developer account", "users/follow-user"),
    ("invite someone to join my organization", "orgs/invite-organization"),
    ("put a person on a team", "teams/add-member-team"),
    ("star a gist I like", "gists/star-gist"),
    ("run a failed workflow run again", "actions/rerun-workflow-run"),
    ("stop a workflow run that is in progress", "actions/cancel-run-workflow-run"),
    ("trigger a workflow manually", "workflows/dispatch-workflow"),
    ("rotate the value of a secret", "secrets/rotate-secret"),
    ("list the deployment environments", "environments/list-environments"),
    ("bring back a package that was deleted", "packages/restore-package"),
    ("move a card to another column on the project board", "projects/move-card-project-board"),
    ("start my codespace", "codespaces/start-codespace"),
    ("how much did the organization use in billing", "billing/usage-billing-invoice"),
    ("add an SSH key", "keys/create-ssh-key"),
    ("mark all notifications as read", "notifications/mark-read-notification-thread"),
    ("accept the answer in a discussion", "discussions/answer-discussion"),
    ("edit a wiki page", "wikis/update-wiki-page"),
    ("publish a security advisory", "security/publish-security-advisory"),
    ("dismiss a code scanning alert as a false positive", "alerts/dismiss-code-scanning-alert"),
    ("get one dependabot alert", "dependabot/get-dependabot-alert"),
    ("download the archive of a migration", "migrations/download-archive-migration"),
    ("accept an invitation to a repository", "invitations/accept-repository-invitation"),
    ("who starred the repository", "stars/list-stargazers"),
    ("sync my fork with upstream", "forks/sync-fork"),
    ("put custom labels on a self-hosted runner", "runners/add-labels-self-hosted-runner"),
    ("download a build artifact", "artifacts/download-workflow-artifact"),
    ("delete an actions cache", "caches/delete-actions-cache"),
    ("create a ruleset for the repository", "rulesets/create-repository-ruleset"),
    ("archive an old repository", "repos/archive-repository"),
    ("transfer the repository to a new owner", "repos/transfer-repository"),
    ("lock the conversation on an issue", "issues/lock-issue"),
    ("close a milestone", "milestones/close-milestone"),
    ("set protection rules on a branch", "branches/protect-branch"),
    ("request a review on a pull request", "pulls/request-reviewers-pull-request"),
    ("react with an emoji to a comment", "comments/react-comment"),
    ("disable a workflow", "workflows/disable-workflow"),
    ("update a repository variable", "variables/update-variable"),
    ("record a status for a deployment", "deployments/set-status-deployment"),
    ("rerequest a check run", "checks/rerequest-check-run"),
    ("block an abusive user", "users/block-user"),
]
