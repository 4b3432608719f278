"""A procedural test scene and an exact ray-caster for it, so NeRF needs no download.

Coloured spheres and boxes stand on a square slab; shading is Lambertian from one fixed
directional light plus ambient light, without shadows. Every pixel is the colour of the
first surface its ray hits (the ray of `get_rays`' convention, through the pixel's corner),
or the background. Cameras sit on a sphere around the scene, above the ground, looking
at a point just above the origin; z is up.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .data import NerfData
from .rays import get_rays_np

__all__ = ["Sphere", "Box", "Scene", "default_scene", "ray_cast", "look_at", "make_scene"]


@dataclass(frozen=True)
class Sphere:
    center: tuple[float, float, float]
    radius: float
    color: tuple[float, float, float]


@dataclass(frozen=True)
class Box:
    """An axis-aligned box between corners ``lo`` and ``hi``."""

    lo: tuple[float, float, float]
    hi: tuple[float, float, float]
    color: tuple[float, float, float]


@dataclass(frozen=True)
class Scene:
    shapes: tuple
    light_dir: tuple[float, float, float] = (0.45, 0.3, 0.85)
    ambient: float = 0.3
    background: float = 0.0


def default_scene(white_background: bool = False) -> Scene:
    """Two spheres and two boxes in four colours on a grey slab."""
    return Scene(
        shapes=(
            Box((-1.2, -1.2, -0.1), (1.2, 1.2, 0.0), (0.6, 0.6, 0.6)),
            Sphere((-0.45, -0.35, 0.4), 0.4, (0.9, 0.15, 0.1)),
            Sphere((0.55, 0.45, 0.3), 0.3, (0.15, 0.3, 0.95)),
            Box((0.1, -0.8, 0.0), (0.7, -0.2, 0.5), (0.2, 0.8, 0.25)),
            Box((-0.75, 0.3, 0.0), (-0.35, 0.7, 0.8), (0.95, 0.8, 0.15)),
        ),
        background=1.0 if white_background else 0.0,
    )


def _hit_sphere(o, d, s: Sphere):
    """Ray parameter of the nearest hit in front of the origin (inf where none), normals."""
    c = np.asarray(s.center)
    oc = o - c
    a = np.einsum("...k,...k->...", d, d)
    b = 2.0 * np.einsum("...k,...k->...", d, oc)
    cc = np.einsum("...k,...k->...", oc, oc) - s.radius**2
    disc = b * b - 4.0 * a * cc
    root = np.sqrt(np.maximum(disc, 0.0))
    t0 = (-b - root) / (2.0 * a)
    t1 = (-b + root) / (2.0 * a)
    t = np.where(t0 > 1e-9, t0, t1)
    t = np.where((disc >= 0.0) & (t > 1e-9), t, np.inf)
    normal = (o + np.where(np.isfinite(t), t, 0.0)[..., None] * d - c) / s.radius
    return t, normal


def _hit_box(o, d, b: Box):
    """Slab test: the entering parameter (inf where missed) and the entered face's normal."""
    lo, hi = np.asarray(b.lo), np.asarray(b.hi)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = 1.0 / d
        ta = (lo - o) * inv
        tb = (hi - o) * inv
    tnear = np.minimum(ta, tb)
    tfar = np.maximum(ta, tb)
    # a zero direction component: inside the slab -> (-inf, inf), outside -> empty
    inside = (o >= lo) & (o <= hi)
    tnear = np.where(d == 0, np.where(inside, -np.inf, np.inf), tnear)
    tfar = np.where(d == 0, np.where(inside, np.inf, -np.inf), tfar)
    t_enter = tnear.max(-1)
    t_exit = tfar.min(-1)
    axis = tnear.argmax(-1)
    hit = (t_enter <= t_exit) & (t_enter > 1e-9)
    t = np.where(hit, t_enter, np.inf)
    normal = np.zeros(o.shape[:-1] + (3,))
    sign = -np.sign(np.take_along_axis(d, axis[..., None], -1))[..., 0]
    np.put_along_axis(normal, axis[..., None], sign[..., None], -1)
    return t, normal


def ray_cast(rays_o, rays_d, scene: Scene | None = None):
    """Exact first-hit rendering of ``scene``.

    Args:
        rays_o, rays_d: (..., 3) ray origins and directions (any length).

    Returns:
        (rgb, t, hit): (..., 3) float64 colours, (...) ray parameters of the hits (the hit
        point is ``o + t d``; inf on a miss), and (...) the hit mask.
    """
    scene = scene or default_scene()
    o = np.asarray(rays_o, dtype=np.float64)
    d = np.asarray(rays_d, dtype=np.float64)
    o, d = np.broadcast_arrays(o, d)
    best = np.full(o.shape[:-1], np.inf)
    normal = np.zeros(o.shape)
    albedo = np.zeros(o.shape)
    for shape in scene.shapes:
        t, n = _hit_sphere(o, d, shape) if isinstance(shape, Sphere) else _hit_box(o, d, shape)
        closer = t < best
        best = np.where(closer, t, best)
        normal = np.where(closer[..., None], n, normal)
        albedo = np.where(closer[..., None], np.asarray(shape.color), albedo)
    light = np.asarray(scene.light_dir, dtype=np.float64)
    light = light / np.linalg.norm(light)
    lambert = np.clip(normal @ light, 0.0, None)
    shade = scene.ambient + (1.0 - scene.ambient) * lambert
    hit = np.isfinite(best)
    rgb = np.where(hit[..., None], albedo * shade[..., None], scene.background)
    return np.clip(rgb, 0.0, 1.0), best, hit


def look_at(eye, target=(0.0, 0.0, 0.0), up=(0.0, 0.0, 1.0)) -> np.ndarray:
    """(4, 4) camera-to-world pose at ``eye`` whose -z axis points at ``target``."""
    eye = np.asarray(eye, dtype=np.float64)
    forward = np.asarray(target, dtype=np.float64) - eye
    z = -forward / np.linalg.norm(forward)
    x = np.cross(np.asarray(up, dtype=np.float64), z)
    x = x / np.linalg.norm(x)
    y = np.cross(z, x)
    pose = np.eye(4)
    pose[:3, 0], pose[:3, 1], pose[:3, 2], pose[:3, 3] = x, y, z, eye
    return pose


def _orbit(azimuth: float, elevation: float, radius: float) -> np.ndarray:
    ce = np.cos(elevation)
    eye = radius * np.array([ce * np.cos(azimuth), ce * np.sin(azimuth), np.sin(elevation)])
    return look_at(eye, target=(0.0, 0.0, 0.2))


def make_scene(
    views: int = 40,
    size: int = 64,
    *,
    seed: int = 0,
    white_background: bool = False,
    radius: float = 4.0,
    fov_degrees: float = 40.0,
) -> NerfData:
    """Render ``views`` square images of the default scene in tiny NeRF's layout.

    Training cameras are spread over azimuth (a golden-angle spiral) at random elevations
    between 15 and 65 degrees; the last view, the held-out one, looks from an azimuth
    between training views at 35 degrees.
    """
    if views < 2:
        raise ValueError(f"make_scene: views must be >= 2, got {views}")
    if size < 1:
        raise ValueError(f"make_scene: size must be >= 1, got {size}")
    rng = np.random.default_rng(seed)
    golden = np.pi * (3.0 - np.sqrt(5.0))
    poses = [
        _orbit(k * golden, np.radians(rng.uniform(15.0, 65.0)), radius) for k in range(views - 1)
    ]
    poses.append(_orbit(np.radians(200.0), np.radians(35.0), radius))
    poses = np.stack(poses)
    focal = 0.5 * size / np.tan(0.5 * np.radians(fov_degrees))
    scene = default_scene(white_background)
    rays_o, rays_d = get_rays_np(size, size, focal, poses)
    images, _, _ = ray_cast(rays_o, rays_d, scene)
    return NerfData(images.astype(np.float32), poses.astype(np.float32), float(focal), "scene")
