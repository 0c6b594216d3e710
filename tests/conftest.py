"""Session-wide test settings."""
import os
import tempfile

# A private Inductor cache per test session: the shared /tmp/torchinductor_<user> can hold
# code compiled against another checkout's op schema (an older emulated_mm signature), which
# Inductor would load and fail on.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="mma_emu_inductor_"))
