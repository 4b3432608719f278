"""`backends.openmp`: gradstream's CPU kernels run on rayon threads, not OpenMP."""


def is_available():
    return False
