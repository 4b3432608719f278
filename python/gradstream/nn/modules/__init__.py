"""The module classes of `gradstream.nn`."""

from . import (
    activation,
    attention,
    batchnorm,
    container,
    conv,
    distance,
    dropout,
    fold,
    layers,
    linear,
    loss,
    normalization,
    padding,
    pooling,
    rnn,
    shuffle,
    transformer,
    upsampling,
)
from .activation import *  # noqa: F403
from .attention import *  # noqa: F403
from .batchnorm import *  # noqa: F403
from .container import *  # noqa: F403
from .conv import *  # noqa: F403
from .distance import *  # noqa: F403
from .dropout import *  # noqa: F403
from .fold import *  # noqa: F403
from .layers import *  # noqa: F403
from .linear import *  # noqa: F403
from .loss import *  # noqa: F403
from .module import Module
from .normalization import *  # noqa: F403
from .padding import *  # noqa: F403
from .pooling import *  # noqa: F403
from .rnn import *  # noqa: F403
from .shuffle import *  # noqa: F403
from .transformer import *  # noqa: F403
from .upsampling import *  # noqa: F403

__all__ = [
    "Module",
    *container.__all__,
    *linear.__all__,
    *activation.__all__,
    *attention.__all__,
    *layers.__all__,
    *dropout.__all__,
    *normalization.__all__,
    *loss.__all__,
    *distance.__all__,
    *padding.__all__,
    *shuffle.__all__,
    *rnn.__all__,
    *transformer.__all__,
    *conv.__all__,
    *fold.__all__,
    *pooling.__all__,
    *upsampling.__all__,
    *batchnorm.__all__,
]
