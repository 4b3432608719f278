"""`backends.mps`: not in this build."""


def is_available():
    return False


def is_built():
    return False
