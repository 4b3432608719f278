"""gradstream.nerf: encoding, rays, sampling, the model, rendering, the scene, the loader and
the training program, against NumPy formulas and analytic ray-object intersections."""

from __future__ import annotations

import importlib.util
import io
import json
import math
import pickle
import sys

import numpy as np
import pytest
from helpers import assert_close, to_numpy

import gradstream as gs
from gradstream import nn
from gradstream.nerf import (
    DataError,
    NerfData,
    PositionalEncoding,
    TinyNeRF,
    get_rays,
    get_rays_np,
    load_data,
    make_scene,
    positional_encoding,
    ray_cast,
    sample_stratified,
    save_data,
    volume_render,
)
from gradstream.nerf.cli import main
from gradstream.nerf.scene import Box, Scene, Sphere, default_scene, look_at

# ---- encoding ----


@pytest.mark.parametrize("include_input", [True, False])
def test_positional_encoding_matches_formula(include_input):
    x = np.random.default_rng(1).uniform(-2, 2, (5, 7, 3)).astype(np.float32)
    out = positional_encoding(gs.from_numpy(x), 4, include_input)
    parts = [x] if include_input else []
    for i in range(4):
        parts += [np.sin(2.0**i * x), np.cos(2.0**i * x)]
    assert_close(out, np.concatenate(parts, -1).astype(np.float32), atol=1e-5)
    enc = PositionalEncoding(4, include_input)
    assert enc.out_features == out.shape[-1] == 3 * (8 + include_input)


def test_positional_encoding_gradient():
    x = gs.randn(4, 3, dtype=gs.float64, requires_grad=True)
    assert gs.autograd.gradcheck(lambda t: positional_encoding(t, 3), (x,))


# ---- rays ----


def _rays_reference(h, w, f, c2w):
    i, j = np.meshgrid(np.arange(w), np.arange(h), indexing="xy")
    dirs = np.stack([(i - w * 0.5) / f, -(j - h * 0.5) / f, -np.ones_like(i)], -1)
    rays_d = np.sum(dirs[..., None, :] * c2w[:3, :3], -1)
    return np.broadcast_to(c2w[:3, -1], rays_d.shape), rays_d


def test_get_rays_matches_tiny_nerf():
    poses = np.stack([look_at((3.0, 1.0, 2.0)), look_at((-1.0, 4.0, 1.5))]).astype(np.float32)
    o, d = get_rays(6, 5, 4.5, gs.from_numpy(poses))
    assert tuple(o.shape) == tuple(d.shape) == (2, 6, 5, 3)
    for k in range(2):
        ro, rd = _rays_reference(6, 5, 4.5, poses[k].astype(np.float64))
        np.testing.assert_allclose(to_numpy(o)[k], ro, atol=1e-5)
        np.testing.assert_allclose(to_numpy(d)[k], rd, atol=1e-5)
        no, nd = get_rays_np(6, 5, 4.5, poses[k])
        np.testing.assert_allclose(no, ro, atol=1e-5)
        np.testing.assert_allclose(nd, rd, atol=1e-5)


def test_look_at_points_the_camera_at_the_target():
    pose = look_at((4.0, 0.0, 0.0))
    _, d = get_rays_np(4, 4, 2.0, pose)
    np.testing.assert_allclose(d[2, 2], [-1.0, 0.0, 0.0], atol=1e-12)  # the centre pixel
    np.testing.assert_allclose(pose[:3, :3].T @ pose[:3, :3], np.eye(3), atol=1e-12)


# ---- sampling ----


def test_stratified_sampling():
    o = gs.zeros(10, 3)
    d = gs.ones(10, 3)
    pts, z = sample_stratified(o, d, 2.0, 6.0, 8, perturb=False)
    np.testing.assert_allclose(to_numpy(z), np.broadcast_to(np.linspace(2, 6, 8), (10, 8)), 1e-6)
    assert_close(pts, z.unsqueeze(-1).expand(10, 8, 3))
    _, zj = sample_stratified(o, d, 2.0, 6.0, 8, perturb=True)
    zj = to_numpy(zj)
    assert zj.min() >= 2.0 and zj.max() <= 6.0
    assert (np.diff(zj, axis=-1) >= 0).all()
    edges = np.concatenate([[2.0], (np.linspace(2, 6, 8)[1:] + np.linspace(2, 6, 8)[:-1]) / 2, [6]])
    assert ((zj >= edges[:-1] - 1e-6) & (zj <= edges[1:] + 1e-6)).all()  # one per stratum
    assert np.abs(zj - np.linspace(2, 6, 8)).max() > 1e-3
    with pytest.raises(ValueError, match="near < far"):
        sample_stratified(o, d, 6.0, 2.0, 8)


# ---- model ----


def test_tiny_nerf_parameter_count_and_skip():
    m = TinyNeRF()  # tiny NeRF: 8 x 256, skip after layer 4, 6 octaves
    n_in = 3 + 3 * 2 * 6
    expected = (n_in * 256 + 256) + 7 * (256 * 256 + 256) + n_in * 256 + (256 + 1) + (256 * 3 + 3)
    assert sum(p.numel() for p in m.parameters()) == expected
    assert m.layers[5].in_features == 256 + n_in
    assert [layer.in_features for layer in m.layers].count(256) == 6


def test_tiny_nerf_forward_matches_numpy():
    m = TinyNeRF(depth=3, width=8, num_freqs=2, skip=0)
    x = np.random.default_rng(2).normal(size=(5, 3)).astype(np.float32)
    w = {k: to_numpy(v).astype(np.float64) for k, v in m.state_dict().items()}
    feat = np.concatenate([x] + [f(2.0**i * x) for i in range(2) for f in (np.sin, np.cos)], -1)
    h = feat
    for i in range(3):
        h = np.maximum(h @ w[f"layers.{i}.weight"].T + w[f"layers.{i}.bias"], 0)
        if i == 0:
            h = np.concatenate([h, feat], -1)
    rgb = h @ w["rgb_head.weight"].T + w["rgb_head.bias"]
    sigma = h @ w["sigma_head.weight"].T + w["sigma_head.bias"]
    assert_close(m(gs.from_numpy(x)), np.concatenate([rgb, sigma], -1).astype(np.float32), 1e-4)
    with pytest.raises(ValueError, match="skip"):
        TinyNeRF(depth=3, skip=2)


# ---- volume rendering ----


def test_volume_render_matches_formula():
    rng = np.random.default_rng(3)
    raw = rng.normal(size=(4, 6, 4))
    z = np.sort(rng.uniform(2, 6, (4, 6)), -1)
    rd = rng.normal(size=(4, 3))
    res = volume_render(gs.from_numpy(raw), gs.from_numpy(z), gs.from_numpy(rd))
    rgb = 1 / (1 + np.exp(-raw[..., :3]))
    sigma = np.maximum(raw[..., 3], 0)
    dists = np.concatenate([np.diff(z, axis=-1), np.full((4, 1), 1e10)], -1)
    dists = dists * np.linalg.norm(rd, axis=-1, keepdims=True)
    alpha = 1 - np.exp(-sigma * dists)
    trans = np.cumprod(np.concatenate([np.ones((4, 1)), 1 - alpha + 1e-10], -1), -1)[:, :-1]
    weights = alpha * trans
    assert_close(res.weights, weights, 1e-6, 1e-9)
    assert_close(res.rgb_map, (weights[..., None] * rgb).sum(-2), 1e-6, 1e-9)
    assert_close(res.depth_map, (weights * z).sum(-1), 1e-6, 1e-9)
    assert_close(res.acc_map, weights.sum(-1), 1e-6, 1e-9)
    white = volume_render(gs.from_numpy(raw), gs.from_numpy(z), white_background=True)
    plain = volume_render(gs.from_numpy(raw), gs.from_numpy(z))
    assert_close(white.rgb_map, plain.rgb_map + (1 - plain.acc_map).unsqueeze(-1), 1e-6, 1e-9)


# ---- the scene's ray-caster ----


def _shade(scene: Scene, albedo, normal):
    light = np.asarray(scene.light_dir) / np.linalg.norm(scene.light_dir)
    return np.asarray(albedo) * (scene.ambient + (1 - scene.ambient) * max(0.0, normal @ light))


def test_ray_cast_is_exact():
    scene = default_scene()
    red, green = scene.shapes[1], scene.shapes[3]
    cx, cy, cz = red.center
    o = np.array(
        [
            [cx, cy, 5.0],  # straight down onto the red sphere's top
            [0.4, -0.5, 5.0],  # straight down onto the green box's top
            [5.0, -0.5, 0.25],  # horizontally into the green box's +x face
            [5.0, 5.0, 5.0],  # away from everything
            [5.0, 0.0, 0.05],  # axis-parallel, between the boxes' slabs: misses everything
        ]
    )
    d = np.array([[0, 0, -2.0], [0, 0, -1.0], [-1.0, 0, 0], [1.0, 0, 0], [-1.0, 0, 0]])
    rgb, t, hit = ray_cast(o, d, scene)
    np.testing.assert_allclose(t[:3], [(5 - cz - red.radius) / 2, 4.5, 5 - 0.7], atol=1e-12)
    assert hit.tolist() == [True, True, True, False, False]
    up, east = np.array([0, 0, 1.0]), np.array([1.0, 0, 0])
    np.testing.assert_allclose(rgb[0], _shade(scene, red.color, up), atol=1e-12)
    np.testing.assert_allclose(rgb[1], _shade(scene, green.color, up), atol=1e-12)
    np.testing.assert_allclose(rgb[2], _shade(scene, green.color, east), atol=1e-12)
    np.testing.assert_allclose(rgb[3:], 0.0)
    white_rgb, _, _ = ray_cast(o[3:], d[3:], default_scene(white_background=True))
    np.testing.assert_allclose(white_rgb, 1.0)


def test_ray_cast_sphere_through_a_camera():
    sphere = Sphere((0.0, 0.0, 0.0), 1.0, (0.2, 0.6, 0.9))
    scene = Scene((sphere,), light_dir=(1.0, 0.0, 0.0), ambient=0.25)
    o, d = get_rays_np(10, 8, 10.0, look_at((4.0, 0.0, 0.0)))
    rgb, t, hit = ray_cast(o, d, scene)
    # pixel (i=W/2, j=H/2) is the optical axis: it meets the sphere's nearest point
    np.testing.assert_allclose(t[5, 4], 3.0, atol=1e-12)
    np.testing.assert_allclose(rgb[5, 4], sphere.color, atol=1e-12)  # normal = light
    # an off-axis pixel against the quadratic's root
    od, dd = o[3, 5], d[3, 5]
    a, b, c = dd @ dd, 2 * dd @ od, od @ od - 1.0
    root = (-b - math.sqrt(b * b - 4 * a * c)) / (2 * a)
    np.testing.assert_allclose(t[3, 5], root, atol=1e-12)
    assert not hit[0, 0]  # the corner ray passes the unit sphere at distance > 1
    np.testing.assert_allclose(rgb[0, 0], [0, 0, 0])
    box = Box((-1, -1, -1), (1, 1, 1), (1.0, 1.0, 1.0))
    _, tb, _ = ray_cast(o, d, Scene((box,), light_dir=(1.0, 0.0, 0.0)))
    np.testing.assert_allclose(tb[5, 4], 3.0, atol=1e-12)


def test_make_scene_layout():
    data = make_scene(views=5, size=12, seed=3)
    assert data.images.shape == (5, 12, 12, 3) and data.images.dtype == np.float32
    assert data.poses.shape == (5, 4, 4) and data.poses.dtype == np.float32
    assert 0.0 <= data.images.min() and data.images.max() <= 1.0
    assert data.images.max() > 0.3  # the objects are in view
    assert np.allclose(data.poses[:, 3], [0, 0, 0, 1])
    np.testing.assert_array_equal(data.test_image, data.images[-1])


# ---- the loader ----


def _write(path, **arrays):
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return path


def _good(n=3, h=4, w=5):
    return dict(
        images=np.full((n, h, w, 3), 0.5, np.float32),
        poses=np.tile(np.eye(4, dtype=np.float32), (n, 1, 1)),
        focal=np.array(3.0),
    )


def test_loader_round_trip(tmp_path):
    data = make_scene(views=4, size=8)
    save_data(data, tmp_path / "scene.dat")  # no ".npz" appended
    back = load_data(tmp_path / "scene.dat")
    np.testing.assert_array_equal(back.images, data.images)
    np.testing.assert_array_equal(back.poses, data.poses)
    assert back.focal == pytest.approx(data.focal)
    with np.load(tmp_path / "scene.dat") as raw:
        assert raw["focal"].shape == () and raw["focal"].dtype == np.float64


def test_loader_accepts_uint8_images(tmp_path):
    arrays = _good()
    arrays["images"] = np.full((3, 4, 5, 3), 255, np.uint8)
    data = load_data(_write(tmp_path / "u8.npz", **arrays))
    assert data.images.dtype == np.float32 and data.images.max() == 1.0


def _case(name):
    good = _good()
    if name == "missing key":
        del good["poses"]
    elif name == "images shape":
        good["images"] = good["images"][..., :2]
    elif name == "images ndim":
        good["images"] = good["images"][0]
    elif name == "poses shape":
        good["poses"] = good["poses"][:, :3, :]
    elif name == "view count":
        good["poses"] = good["poses"][:2]
    elif name == "one view":
        good = _good(n=1)
    elif name == "focal negative":
        good["focal"] = np.array(-2.0)
    elif name == "focal nan":
        good["focal"] = np.array(np.nan)
    elif name == "focal vector":
        good["focal"] = np.array([1.0, 2.0])
    elif name == "images nan":
        good["images"][0, 0, 0, 0] = np.nan
    elif name == "images range":
        good["images"][0, 0, 0, 0] = 3.0
    elif name == "poses inf":
        good["poses"][1, 0, 3] = np.inf
    elif name == "images strings":
        good["images"] = np.array(["a", "b"])
    return good


BAD = {
    "missing key": "missing key 'poses'",
    "images shape": r"'images' has shape \(3, 4, 5, 2\); expected \(N, H, W, 3\)",
    "images ndim": r"'images' has shape \(4, 5, 3\); expected \(N, H, W, 3\)",
    "poses shape": r"'poses' has shape \(3, 3, 4\); expected \(N, 4, 4\)",
    "view count": "'images' has 3 views but 'poses' has 2",
    "one view": r"1 view\(s\); need at least 2",
    "focal negative": "'focal' is -2.0; expected a positive finite number",
    "focal nan": "'focal' is nan",
    "focal vector": r"'focal' has shape \(2,\); expected a scalar",
    "images nan": "'images' has non-finite values",
    "images range": r"'images' values span \[0.5, 3\]; expected values in \[0, 1\]",
    "poses inf": "'poses' has non-finite values",
    "images strings": "'images' has dtype <U1",
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_loader_rejects_malformed_npz(tmp_path, name):
    path = _write(tmp_path / "data.npz", **_case(name))
    with pytest.raises(DataError, match="^gradstream.nerf: data.npz: " + BAD[name]) as e:
        load_data(path)
    assert isinstance(e.value, ValueError) and "\n" not in str(e.value)


def test_loader_rejects_unreadable_files(tmp_path):
    cases = {}
    cases["no such file"] = tmp_path / "absent.npz"
    (tmp_path / "text.npz").write_text("not a zip")
    cases["not an .npz file"] = tmp_path / "text.npz"
    np.save(tmp_path / "array.npy", np.zeros(3))
    cases["not an .npz file "] = tmp_path / "array.npy"
    (tmp_path / "dir.npz").mkdir()
    cases["is a directory"] = tmp_path / "dir.npz"
    _write(tmp_path / "obj.npz", images=np.array([{}], dtype=object), poses=0, focal=1)
    cases["cannot be read as .npz"] = tmp_path / "obj.npz"
    for problem, path in cases.items():
        with pytest.raises(DataError, match=problem.strip()) as e:
            load_data(path)
        assert "\n" not in str(e.value) and path.name in str(e.value)


# ---- the command line ----


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--samples", "0"], "--samples"),
        (["--rays", "0"], "--rays"),
        (["--lr", "0"], "--lr"),
        (["--lr", "-1e-3"], "--lr"),
        (["--lr", "nan"], "--lr"),
        (["--steps", "0"], "--steps"),
        (["--depth", "0"], "--depth"),
        (["--width", "-4"], "--width"),
        (["--freqs", "-1"], "--freqs"),
        (["--chunks", "-2"], "--chunks"),
        (["--depth", "4", "--skip", "3"], "--skip"),
        (["--skip", "-2"], "--skip"),
        (["--near", "6", "--far", "2"], "--near"),
        (["--lr-decay", "1.5"], "--lr-decay"),
        (["--views", "1"], "--views"),
        (["--samples", "many"], "--samples"),
    ],
)
def test_cli_rejects_impossible_options(capsys, argv, named):
    with pytest.raises(SystemExit) as e:
        main(["train", *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: gradstream-nerf train") and named in err


def test_cli_reports_bad_data_in_one_line(tmp_path, capsys):
    _write(tmp_path / "data.npz", **_case("poses shape"))
    cases = {
        "data.npz": "'poses' has shape (3, 3, 4); expected (N, 4, 4)",
        "absent.npz": "no such file",
    }
    for name, problem in cases.items():
        assert main(["train", "--data", str(tmp_path / name), "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert err == f"error: gradstream.nerf: {name}: {problem}\n"


def test_cli_make_scene(tmp_path, capsys):
    out = tmp_path / "scene.npz"
    assert main(["make-scene", "--out", str(out), "--views", "3", "--size", "6"]) == 0
    data = load_data(out)
    assert data.images.shape == (3, 6, 6, 3)
    np.testing.assert_array_equal(data.images, make_scene(3, 6).images)


def test_cli_train_tiny_run(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", "--out", str(out), "--views", "9", "--size", "16", "--steps", "150"]
    argv += ["--rays", "256", "--samples", "16", "--depth", "2", "--width", "32", "--skip", "0"]
    argv += ["--freqs", "3", "--lr", "1e-2", "--plain-progress", "--log-every", "50"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "held-out PSNR" in captured.out and "step 150/150" in captured.err
    names = ["model.pt", "metrics.json"]
    if importlib.util.find_spec("matplotlib") is not None:
        names += ["render.png", "curves.png"]
    for name in names:
        assert (out / name).stat().st_size > 0
    metrics = json.loads((out / "metrics.json").read_text())
    losses = metrics["loss_curve"]
    assert len(losses) == 150 and metrics["options"]["steps"] == 150
    assert np.mean(losses[-20:]) < 0.5 * np.mean(losses[:20])
    assert metrics["heldout_psnr_db"] > metrics["baseline_psnr_db"] + 3
    assert metrics["peak_memory_bytes"] > 0
    state = gs.load(out / "model.pt")
    model = TinyNeRF(depth=2, width=32, num_freqs=3, skip=0)
    model.load_state_dict(state)


def test_cli_train_checkpointed_without_in_backward_or_matplotlib(tmp_path, capsys, monkeypatch):
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)  # as if the plot extra were missing
    out = tmp_path / "run"
    argv = ["train", "--out", str(out), "--views", "3", "--size", "6", "--steps", "3"]
    argv += ["--rays", "32", "--samples", "4", "--depth", "2", "--width", "8", "--skip", "-1"]
    argv += ["--chunks", "3", "--no-in-backward", "--plain-progress"]
    assert main(argv) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if "matplotlib" in line]
    assert len(said) == 1 and "not installed" in said[0]
    assert sorted(p.name for p in out.iterdir()) == ["metrics.json", "model.pt"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["options"]["chunks"] == 3 and metrics["options"]["in_backward"] is False
    assert all(math.isfinite(v) for v in metrics["loss_curve"])


# ---- gradstream.save / gradstream.load ----


def test_save_load_round_trip(tmp_path):
    m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    gs.save(m.state_dict(), tmp_path / "m.pt")
    state = gs.load(tmp_path / "m.pt")
    assert list(state) == list(m.state_dict())
    for k, v in m.state_dict().items():
        assert_close(state[k], v)
    buf = io.BytesIO()
    gs.save({"step": 3, "t": gs.arange(4, dtype=gs.float64)}, buf)
    buf.seek(0)
    back = gs.load(buf)
    assert back["step"] == 3 and back["t"].dtype == gs.float64


class _Payload:
    pass


def test_load_weights_only_refuses_other_globals(tmp_path):
    path = tmp_path / "obj.pt"
    gs.save({"x": _Payload()}, path)
    with pytest.raises(pickle.UnpicklingError, match="weights_only=True refuses"):
        gs.load(path)
    assert isinstance(gs.load(path, weights_only=False)["x"], _Payload)


def test_nerf_data_properties():
    data = NerfData(np.zeros((3, 2, 2, 3), np.float32), np.zeros((3, 4, 4), np.float32), 1.0)
    assert data.train_images.shape[0] == 2 and data.num_views == 3
