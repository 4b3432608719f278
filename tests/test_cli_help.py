"""The command lines' --help: every option with a value says its default, once."""

import re

import pytest

from gradstream.bench import __main__ as bench_main
from gradstream.bench.budget_sweep import SWEPT
from gradstream.nerf import cli as nerf_cli


def _options(help_text: str) -> dict[str, str]:
    """Each option's entry in a --help, by its first spelling, whitespace folded."""
    entries: dict[str, str] = {}
    name = None
    for line in help_text.splitlines():
        m = re.match(r"  (-{1,2}[\w-]+)", line)
        if m:
            name = m.group(1)
            entries[name] = line
        elif name and line.startswith("    "):
            entries[name] += " " + line
        else:
            name = None
    return {k: " ".join(v.split()) for k, v in entries.items()}


def _valued(parser) -> list[str]:
    """The options that take a value (not flags, not --help)."""
    return [a.option_strings[0] for a in parser._actions if a.option_strings and a.nargs != 0]


def _help(parser, capsys, argv) -> str:
    with pytest.raises(SystemExit) as e:
        parser(argv)
    assert e.value.code == 0
    return capsys.readouterr().out


def test_bench_help_gives_every_default(capsys):
    text = _help(bench_main.parse_args, capsys, ["--help"])
    options = _options(text)
    valued = ["--threads", "--out", "--timeout", "--preset", "--repeat", "--device"]
    valued += ["--workloads", "--systems", "--steps", "--time-limit", "--cap-rule", "--world"]
    for name in valued:
        assert "default" in options[name], options[name]
        assert options[name].count("default:") == 1, options[name]
    assert "(default: 1800.0)" in options["--timeout"]
    assert "default: bench-out" in options["--out"]
    assert "quick with --quick" in options["--preset"]
    assert "--plot" in options


def test_budget_sweep_help_names_the_workloads_it_sweeps(capsys):
    sweep = _options(_help(bench_main.parse_args, capsys, ["--help"]))["--budget-sweep"]
    assert set(SWEPT) == {"nerf", "mlp", "cnn", "lora"}
    for w in SWEPT:
        assert w in sweep, (w, sweep)


def test_nerf_train_help_documents_every_option(capsys):
    parser = nerf_cli.build_parser()
    text = _help(parser.parse_args, capsys, ["train", "--help"])
    options = _options(text)
    train = parser._subparsers._group_actions[0].choices["train"]
    for name in _valued(train):
        assert options[name].count("default") == 1, options[name]
    for name in ("--steps", "--near", "--far", "--seed"):
        described = options[name].split(" ", 2)[-1]
        assert len(described.split("(default")[0].strip()) > 10, options[name]
    assert "(default: 600)" in options["--steps"] and "(default: 0)" in options["--seed"]
    assert "generated in memory" in options["--data"] and "None" not in options["--data"]
