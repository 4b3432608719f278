"""The shipped type stubs describe the built extension, with real types."""

import ast
import importlib.util
import inspect
import pathlib
import subprocess
import sys
import textwrap

import pytest

import gradstream._core as core

ROOT = pathlib.Path(__file__).resolve().parent.parent
STUB = ROOT / "python" / "gradstream" / "_core.pyi"

# Where `Any` is the honest type: the constructor takes anything `tensor()` does.
ANY_ALLOWED = {"Tensor.__new__.args"}


def _functions(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    yield f"{node.name}.{item.name}", item


def test_stub_parses_and_covers_every_public_name():
    tree = ast.parse(STUB.read_text())
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    names |= {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign)}
    public = {n for n in dir(core) if not n.startswith("__")}
    assert public <= names, sorted(public - names)


def test_every_parameter_has_a_real_type():
    untyped = []
    for name, fn in _functions(ast.parse(STUB.read_text())):
        a = fn.args
        params = a.posonlyargs + a.args + a.kwonlyargs + [p for p in (a.vararg, a.kwarg) if p]
        for p in params:
            if p.arg in ("self", "cls"):
                continue
            ann = ast.unparse(p.annotation) if p.annotation else None
            if (ann is None or ann == "Any") and f"{name}.{p.arg}" not in ANY_ALLOWED:
                untyped.append(f"{name}({p.arg}: {ann})")
        if fn.returns is None:
            untyped.append(f"{name} -> ?")
    assert not untyped, untyped


def test_stub_is_up_to_date():
    gen = ROOT / "tools" / "gen_stubs.py"
    spec = importlib.util.find_spec("gradstream")
    assert spec is not None
    r = subprocess.run([sys.executable, str(gen), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_type_checker_sees_the_ops_types(tmp_path):
    """mypy accepts PyTorch-style code and rejects a wrong argument type through the stub."""
    api = pytest.importorskip("mypy.api")
    program = tmp_path / "program.py"
    program.write_text(
        textwrap.dedent(
            """
            import gradstream._core as g

            x: g.Tensor = g.add(g.ones(2, 3), 1, alpha=2.0)
            y: g.Tensor = x.sum(dim=(0, 1), keepdim=True, dtype=g.float64)
            z: g.Tensor = g.where(x > 0, x, 0.0).softmax(-1).clamp(min=0.0)
            parts: tuple[g.Tensor, ...] = x.split(1, dim=0)
            n: int = x.numel() + x.dim()
            g.sum(x, keepdim="yes")  # an error
            g.atan2(x, 2.0)  # an error: atan2 takes no number, as its row says
            """
        )
    )
    out, _, status = api.run(
        [str(program), "--no-incremental", "--cache-dir", str(tmp_path / "cache")]
    )
    assert status == 1, out
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 2, out
    assert "keepdim" in errors[0] and '"atan2"' in errors[1], out


def test_row_types_describe_the_built_signatures():
    """`_row_types()` (what the stub is typed from) names each row's arguments in the order
    the built function takes them, for the function and for the method."""
    rows = core._row_types()
    assert len(rows) > 300
    for name, kind, params, _ in rows:
        names = [p for p, _ in params]
        built = []
        if kind != "method":
            built.append((getattr(core, name), names))
        if kind != "function":
            built.append((getattr(core.Tensor, name), [p for p in names if p != "input"]))
        for fn, expected in built:
            got = [p for p in inspect.signature(fn).parameters if p != "self"]
            assert got == expected, (name, kind)
