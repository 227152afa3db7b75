"""CapabilityRegistry (reference §1.14, S16)."""

from __future__ import annotations

import pytest

from capability.brane import Capability, CapabilityNotFoundError, CapabilityRegistry


def test_register_get_exists():
    registry = CapabilityRegistry()
    cap = Capability(name="refund", type="tool")
    assert registry.register(cap) is cap
    assert registry.get("refund") is cap and registry.exists("refund")
    assert registry.get("nope") is None and not registry.exists("nope")


def test_register_silently_replaces_same_name():
    registry = CapabilityRegistry()
    old = registry.register(Capability(name="refund", type="tool", risk="low"))
    new = registry.register(Capability(name="refund", type="tool", risk="high"))
    assert registry.get("refund") is new and new is not old
    assert registry.list() == (new,)


def test_require_missing_raises_not_found_key_error():
    registry = CapabilityRegistry()
    with pytest.raises(CapabilityNotFoundError) as info:
        registry.require("ghost")
    assert isinstance(info.value, KeyError)
    assert info.value.args == ("Capability 'ghost' is not registered.",)
    assert str(info.value) == "\"Capability 'ghost' is not registered.\""  # KeyError quotes
    cap = registry.register(Capability(name="ghost", type="tool"))
    assert registry.require("ghost") is cap


def test_list_filters_are_anded_in_insertion_order():
    a = Capability(name="a", type="tool", tenant_id="acme", environment="prod")
    b = Capability(name="b", type="model", tenant_id="acme", environment="dev")
    c = Capability(name="c", type="tool", tenant_id=None, environment="prod")
    d = Capability(name="d", type="tool", tenant_id="globex", environment="prod")
    registry = CapabilityRegistry([a, b, c, d])
    assert isinstance(registry.list(), tuple)
    assert registry.list() == (a, b, c, d)
    assert registry.list(type="tool") == (a, c, d)
    assert registry.list(tenant_id="acme") == (a, b)
    assert registry.list(type="tool", environment="prod", tenant_id="acme") == (a,)
    assert registry.list(environment="staging") == ()
    # None means "don't filter": no way to ask for tenant-less capabilities only.
    assert registry.list(tenant_id=None) == (a, b, c, d)


def test_unregister_returns_removed_or_none():
    registry = CapabilityRegistry()
    cap = registry.register(Capability(name="x", type="tool"))
    assert registry.unregister("x") is cap
    assert registry.unregister("x") is None
    assert not registry.exists("x")


def test_constructor_takes_initial_capabilities_and_last_wins():
    first = Capability(name="x", type="tool")
    second = Capability(name="x", type="model")
    registry = CapabilityRegistry([first, second, Capability(name="y", type="tool")])
    assert registry.get("x") is second
    assert [c.name for c in registry.list()] == ["x", "y"]
    assert CapabilityRegistry().list() == ()
