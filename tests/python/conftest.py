"""Shared setup of the Python package's tests: a private kernel cache for the session (the C++
library reads FLASHJIT_CACHE_DIR when its first Runtime is made, so it is set before)."""
import os
import tempfile

os.environ["FLASHJIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="flashjit-pytest-cache-")
