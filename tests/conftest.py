"""Session-wide test settings."""
import atexit
import os
import shutil
import tempfile

import torch

# One torch thread for every test that does not test threading (tests/test_cpu_threads.py
# raises it): the CPU kernel runs on torch's intra-op pool, and on two cores shared with
# other jobs the pool's threads waiting on busy cores made the CPU kernel's tests three times
# slower.  Subprocesses the tests start keep torch's default.
torch.set_num_threads(1)

# A private Inductor cache per test session: the shared /tmp/torchinductor_<user> can hold
# code compiled against another checkout's op schema (an older emulated_mm signature), which
# Inductor would load and fail on.
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="mma_emu_inductor_")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
