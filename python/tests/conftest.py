import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cap_bin():
    """The `cap` CLI of this checkout (CAP_BIN, or target/debug/cap)."""
    path = os.environ.get("CAP_BIN") or str(ROOT / "target" / "debug" / "cap")
    if not os.path.exists(path):
        if os.environ.get("CAPABILITY_TEST_REQUIRE_PYTHON") == "1":
            pytest.fail(f"cap is not built at {path}")
        pytest.skip("cap is not built (cargo build -p cap)")
    return path
