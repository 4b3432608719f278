"""The shipped type stubs describe the built extension."""

import ast
import importlib.util
import pathlib
import subprocess
import sys

import gradstream._core as core

ROOT = pathlib.Path(__file__).resolve().parent.parent
STUB = ROOT / "python" / "gradstream" / "_core.pyi"


def test_stub_parses_and_covers_every_public_name():
    tree = ast.parse(STUB.read_text())
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    names |= {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign)}
    public = {n for n in dir(core) if not n.startswith("__")}
    assert public <= names, sorted(public - names)


def test_stub_is_up_to_date():
    gen = ROOT / "tools" / "gen_stubs.py"
    spec = importlib.util.find_spec("gradstream")
    assert spec is not None
    r = subprocess.run([sys.executable, str(gen), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
