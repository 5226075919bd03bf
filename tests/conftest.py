"""Test-wide settings: the cache of parsed sessions goes to a temporary folder, never the user's."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# Set at import so that subprocesses (the CLI run as a user runs it) inherit it too.
if "LOGKIT_CACHE_DIR" not in os.environ:
    os.environ["LOGKIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="logkit-test-cache-")
    atexit.register(shutil.rmtree, os.environ["LOGKIT_CACHE_DIR"], ignore_errors=True)
