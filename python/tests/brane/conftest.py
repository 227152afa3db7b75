"""Shared fixtures of the capability.brane tests."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

PYTHON_DIR = pathlib.Path(__file__).resolve().parents[2]
if importlib.util.find_spec("capability") is None:  # not installed: run from the source tree
    sys.path.insert(0, str(PYTHON_DIR))

import pytest

import capability.brane as brane


@pytest.fixture
def sink() -> brane.InMemoryAuditSink:
    return brane.InMemoryAuditSink()


@pytest.fixture
def runtime(sink: brane.InMemoryAuditSink) -> brane.Runtime:
    """A dev runtime whose audit events land in ``sink``."""
    return brane.Runtime(agent_id="agent-1", audit=sink)

