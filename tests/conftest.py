"""Test-wide settings: the cache of parsed sessions goes to a temporary folder, never the user's; the
verdict a completed session prints at its end (an analysis process, ~1 s) is off unless a test turns it
on (``LOGKIT_END_VERDICT=1``, or ``end_verdict=True``): tests/unit/hooks/test_end_verdict.py and
tests/e2e/test_end_verdict.py do."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# Set at import so that subprocesses (the CLI run as a user runs it) inherit it too.
if "LOGKIT_CACHE_DIR" not in os.environ:
    os.environ["LOGKIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="logkit-test-cache-")
    atexit.register(shutil.rmtree, os.environ["LOGKIT_CACHE_DIR"], ignore_errors=True)

os.environ.setdefault("LOGKIT_END_VERDICT", "0")
