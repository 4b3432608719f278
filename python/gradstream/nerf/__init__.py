"""NeRF on gradstream: encoding, the tiny-NeRF MLP, rays, sampling, volume rendering, an
offline procedural scene, a data loader and the ``python -m gradstream.nerf train`` program."""

from .data import DataError, NerfData, load_data, save_data
from .encoding import PositionalEncoding, encoded_size, positional_encoding
from .model import TinyNeRF
from .rays import get_rays, get_rays_np
from .render import RenderResult, volume_render
from .sampling import sample_stratified
from .scene import make_scene, ray_cast
from .train import TrainConfig, render_rays, render_view, train

__all__ = [
    "positional_encoding",
    "encoded_size",
    "PositionalEncoding",
    "TinyNeRF",
    "get_rays",
    "get_rays_np",
    "sample_stratified",
    "volume_render",
    "RenderResult",
    "make_scene",
    "ray_cast",
    "load_data",
    "save_data",
    "DataError",
    "NerfData",
    "TrainConfig",
    "train",
    "render_rays",
    "render_view",
]
