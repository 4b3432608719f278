"""`gradstream.cuda`: this build runs on the CPU only."""


def is_available() -> bool:
    return False


def device_count() -> int:
    return 0


def manual_seed(seed: int) -> None:
    """Accepted for compatibility; there is no CUDA generator to seed."""


def manual_seed_all(seed: int) -> None:
    """Accepted for compatibility; there is no CUDA generator to seed."""


def synchronize(device=None) -> None:
    """Nothing to wait for on the CPU."""
