"""Session-wide test settings."""
import atexit
import os
import shutil
import tempfile

# A private Inductor cache per test session: the shared /tmp/torchinductor_<user> can hold
# code compiled against another checkout's op schema (an older emulated_mm signature), which
# Inductor would load and fail on.
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="mma_emu_inductor_")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
