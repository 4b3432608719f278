"""``python -m gradstream.nerf`` / ``gradstream-nerf``: ``train`` and ``make-scene``."""

from __future__ import annotations

import argparse
import math
import sys

from .._cli import HelpFormatter
from .data import DataError, save_data
from .train import TrainConfig, train

__all__ = ["main", "build_parser"]


def _number(kind, name: str, low=None, low_inclusive=True):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: {text!r} is not a {kind.__name__}") from None
        if kind is float and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{name}: must be finite, got {text}")
        if low is not None and (value < low or (value == low and not low_inclusive)):
            bound = f">= {low}" if low_inclusive else f"> {low}"
            raise argparse.ArgumentTypeError(f"{name}: must be {bound}, got {text}")
        return value

    parse.__name__ = name  # argparse names the type in its messages
    return parse


positive_int = _number(int, "a positive integer", 1)
nonnegative_int = _number(int, "a non-negative integer", 0)
positive_float = _number(float, "a positive number", 0.0, low_inclusive=False)
nonnegative_float = _number(float, "a non-negative number", 0.0)


def _fraction(text: str) -> float:
    value = positive_float(text)
    if value > 1.0:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    d = TrainConfig()
    parser = argparse.ArgumentParser(
        prog="gradstream-nerf",
        description="Train a tiny NeRF with gradstream (offline: a built-in procedural scene "
        "or your own tiny_nerf_data-style .npz).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{train,make-scene}")

    t = sub.add_parser(
        "train",
        help="train on a scene and render its held-out view",
        formatter_class=HelpFormatter,
    )
    t.set_defaults(subparser=t)  # its usage line for the checks made after parsing
    g = t.add_argument_group("data")
    g.add_argument(
        "--data",
        metavar="NPZ",
        help="a .npz with images, poses, focal (default: the built-in scene, generated in memory)",
    )
    g.add_argument(
        "--views",
        type=positive_int,
        default=d.views,
        help="built-in scene: views, the last one held out",
    )
    g.add_argument(
        "--size",
        type=positive_int,
        default=d.size,
        help="built-in scene: image height and width in pixels",
    )
    g.add_argument(
        "--white-background",
        action="store_true",
        help="composite onto white (and render the built-in scene on white)",
    )
    g = t.add_argument_group("model")
    g.add_argument("--depth", type=positive_int, default=d.depth, help="hidden layers")
    g.add_argument("--width", type=positive_int, default=d.width, help="units per layer")
    g.add_argument(
        "--skip",
        type=int,
        default=d.skip,
        help="concatenate the encoded input after this layer (0-based; -1: none)",
    )
    g.add_argument(
        "--freqs", type=nonnegative_int, default=d.freqs, help="positional-encoding octaves L"
    )
    g = t.add_argument_group("training")
    g.add_argument("--steps", type=positive_int, default=d.steps, help="training steps")
    g.add_argument("--rays", type=positive_int, default=d.rays, help="rays per batch")
    g.add_argument("--samples", type=positive_int, default=d.samples, help="samples per ray")
    g.add_argument(
        "--near",
        type=nonnegative_float,
        default=d.near,
        help="where each ray's samples start, in scene units from the camera",
    )
    g.add_argument(
        "--far",
        type=positive_float,
        default=d.far,
        help="where each ray's samples end (above --near)",
    )
    g.add_argument("--lr", type=positive_float, default=d.lr, help="Adam learning rate")
    g.add_argument(
        "--lr-decay",
        type=_fraction,
        default=d.lr_decay,
        help="the learning rate decays exponentially to lr * this by the last step",
    )
    g.add_argument(
        "--seed",
        type=int,
        default=d.seed,
        help="seed of the initial weights, the ray batches, the samples' jitter and the "
        "built-in scene's cameras",
    )
    g.add_argument(
        "--in-backward",
        action=argparse.BooleanOptionalAction,
        default=d.in_backward,
        help="step each parameter inside backward (Adam(..., in_backward=True))",
    )
    g.add_argument(
        "--chunks",
        type=nonnegative_int,
        default=d.chunks,
        help="activation checkpointing over K chunks of points (0 or 1: off)",
    )
    g = t.add_argument_group("output")
    g.add_argument("--out", default=d.out, help="output directory")
    g.add_argument(
        "--render-chunk",
        type=positive_int,
        default=d.render_chunk,
        help="rays per batch when rendering the held-out view",
    )
    g.add_argument(
        "--log-every",
        type=nonnegative_int,
        default=d.log_every,
        help="progress line interval without tqdm (0: steps/20)",
    )
    g.add_argument(
        "--plain-progress", action="store_true", help="progress lines even when tqdm is installed"
    )

    m = sub.add_parser(
        "make-scene",
        help="write the built-in scene as a tiny_nerf_data-style .npz",
        formatter_class=HelpFormatter,
    )
    m.add_argument("--out", required=True, metavar="NPZ", help="the file to write")
    m.add_argument(
        "--views",
        type=_number(int, "an integer >= 2", 2),
        default=d.views,
        help="views, the last one held out",
    )
    m.add_argument(
        "--size", type=positive_int, default=d.size, help="image height and width in pixels"
    )
    m.add_argument(
        "--seed", type=int, default=d.seed, help="seed of the training cameras' elevations"
    )
    m.add_argument(
        "--white-background", action="store_true", help="render the scene on white, not black"
    )
    return parser


def _check_train(args: argparse.Namespace) -> None:
    sub = args.subparser
    if not -1 <= args.skip <= args.depth - 2:
        sub.error(
            f"argument --skip: must be -1 (none) or in [0, {args.depth - 2}] for --depth "
            f"{args.depth}, got {args.skip}"
        )
    if not args.near < args.far:
        sub.error(f"--near must be below --far, got --near {args.near} --far {args.far}")
    if args.data is None and args.views < 2:
        sub.error(f"argument --views: must be >= 2 (training views + 1 held out), got {args.views}")


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for unusable data, after one
    ``error: ...`` line on stderr). Bad options exit through argparse with status 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "make-scene":
            from .scene import make_scene

            data = make_scene(
                args.views, args.size, seed=args.seed, white_background=args.white_background
            )
            save_data(data, args.out)
            print(
                f"wrote {args.out}: {data.num_views} views of {data.height}x{data.width}, "
                f"focal {data.focal:.3f} (view {data.num_views - 1} is held out)"
            )
            return 0
        _check_train(args)
        cfg = TrainConfig(
            **{k: v for k, v in vars(args).items() if k in TrainConfig.__dataclass_fields__}
        )
        train(cfg)
        return 0
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: gradstream.nerf: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
