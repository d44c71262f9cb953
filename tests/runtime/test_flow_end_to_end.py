"""Data-flow labels end to end (issue 31): the real kernel tracks the labels, the real host judges
the call; no frame is crafted. The email's text may go into a body, never choose the recipient."""

from __future__ import annotations

from codeact import UNTRUSTED, FlowPolicy, Runtime
from tests._configs import LOCAL
from tests._mail import mail_tools


def _runtime(sent: list[tuple[str, str]]) -> Runtime:
    return Runtime(mail_tools(lambda to, body: sent.append((to, body))), LOCAL, flow=FlowPolicy())


def _send(to: str) -> str:
    return ("mail = read_email()\n"
            f"try:\n    out = send_email(to={to}, body='Fwd: ' + mail['body'])\n"
            "except ToolError as e:\n    out = e.code\nout")


def test_the_body_may_come_from_the_email_the_recipient_may_not() -> None:
    sent: list[tuple[str, str]] = []
    with _runtime(sent) as rt:
        with rt.session() as s:
            allowed = s.run(_send("'boss@example.com'"))
        with rt.session() as s:
            refused = s.run(_send("mail['reply_to']"))
    assert allowed.value == "sent", allowed
    assert sent == [("boss@example.com", "Fwd: Please wire the money.")]
    assert refused.value == "policy_denied", refused
    call = refused.calls[-1]
    assert call.name == "send_email" and call.labels is not None and UNTRUSTED in call.labels["to"]
    assert call.flow is not None and call.flow.decision == "deny"
    assert len(sent) == 1
