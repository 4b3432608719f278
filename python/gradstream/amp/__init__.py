"""`gradstream.amp`: automatic mixed precision (`autocast`) and loss scaling (`GradScaler`)."""

from .autocast_mode import autocast, get_autocast_dtype, is_autocast_available
from .grad_scaler import GradScaler

__all__ = ["GradScaler", "autocast", "get_autocast_dtype", "is_autocast_available"]
