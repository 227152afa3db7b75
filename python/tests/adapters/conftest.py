import pytest

import capability


@pytest.fixture
def host(tmp_path):
    """A host with its home in the test's directory, receipts and audit in memory, and no
    Cedar file (Python policies only; with none, everything is allowed and audited)."""
    return capability.Host(tmp_path / "home", memory=True)


@pytest.fixture
def events():
    """``events(host, capability)``: that capability's audit events, oldest first, as
    ``(stage, decision, outcome, policy_name)``."""

    def read(host, capability):
        return [(e["event"]["stage"], e["event"]["decision"], e["event"]["outcome"], e["event"]["policy_name"])
                for e in host.audit(capability=capability)]

    return read
