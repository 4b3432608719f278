"""`backends.cudnn`: not in this build; its switches exist so scripts can set them."""

enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def is_available():
    return False


def version():
    return None
