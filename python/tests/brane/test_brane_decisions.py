"""allow / deny helpers (reference §1.7)."""

from __future__ import annotations

import pytest

from capability.brane import Decision, allow, deny
from capability.brane.decisions import allow as allow_, deny as deny_


def test_allow_with_and_without_reason():
    d = allow()
    assert isinstance(d, Decision) and d.type == "allow" and d.reason is None
    assert d.allowed and not d.denied
    assert allow("fine").reason == "fine"
    assert allow is allow_ and deny is deny_


def test_deny_requires_a_reason():
    with pytest.raises(TypeError):
        deny()  # type: ignore[call-arg]
    d = deny("too much")
    assert d.type == "deny" and d.reason == "too much" and d.denied and not d.allowed


def test_deny_code_goes_to_metadata():
    assert deny("no", code="limit_exceeded").metadata == {"code": "limit_exceeded"}
    assert deny("no").metadata == {}


def test_deny_code_is_keyword_only_and_ids_are_fresh():
    with pytest.raises(TypeError):
        deny("no", "code")  # type: ignore[misc]
    assert deny("a").decision_id != deny("a").decision_id
    assert deny("a").policy_name is None and deny("a").action_id is None
