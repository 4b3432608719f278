"""`gradstream.nerf`: the pieces of a NeRF training step, fused where it pays."""

from .render import RenderResult, volume_render

__all__ = ["RenderResult", "volume_render"]
