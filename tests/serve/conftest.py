import signal

import pytest

TEST_TIMEOUT_S = 120


@pytest.fixture(autouse=True)
def _timeout():
    """Every serving test fails after TEST_TIMEOUT_S instead of hanging CI."""
    def expire(*_):
        raise TimeoutError(f"test exceeded {TEST_TIMEOUT_S} s")
    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(TEST_TIMEOUT_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)
