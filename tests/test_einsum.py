"""einsum against torch.einsum: random equations (contractions, batch labels, outer
products, diagonals, ellipsis, implicit outputs, size-1 broadcasting), values and gradients."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradstream as gs
from tests.helpers import assert_close

torch = pytest.importorskip("torch")

LABELS = "abcdeIJ"


@st.composite
def equations(draw):
    sizes = {c: draw(st.integers(0, 3)) for c in LABELS}
    n_ops = draw(st.integers(1, 3))
    ell = draw(st.lists(st.integers(0, 3), min_size=2, max_size=2))  # ellipsis dims
    use_ell = draw(st.booleans())
    terms, shapes = [], []
    for _ in range(n_ops):
        labels = draw(st.lists(st.sampled_from(LABELS), min_size=0, max_size=3))
        shape = [sizes[c] for c in labels]
        # a size-1 dim broadcasts against the label's size elsewhere
        shape = [1 if draw(st.integers(0, 5)) == 0 else n for n in shape]
        # a repeated label needs equal sizes within the operand
        for i, c in enumerate(labels):
            if c in labels[:i]:
                shape[i] = shape[labels.index(c)]
        term = "".join(labels)
        if use_ell:
            k = draw(st.integers(0, 2))
            e = ell[-k:] if k else []
            at = draw(st.integers(0, len(labels)))
            term = term[:at] + "..." + term[at:]
            shape = shape[:at] + e + shape[at:]
        terms.append(term)
        shapes.append(shape)
    used = sorted({c for t in terms for c in t if c.isalpha()})
    eq = ",".join(terms)
    if draw(st.booleans()):
        out = draw(st.permutations(used))[: draw(st.integers(0, len(used)))]
        eq += "->" + ("..." if use_ell else "") + "".join(out)
    dtype = draw(st.sampled_from([np.float64, np.int64]))
    return eq, shapes, dtype


@settings(max_examples=300, deadline=None)
@given(case=equations(), seed=st.integers(0, 2**16))
def test_einsum_matches_torch(case, seed):
    eq, shapes, dtype = case
    rng = np.random.default_rng(seed)
    arrays = [
        rng.uniform(-1, 1, s).astype(dtype) if dtype == np.float64 else rng.integers(-3, 4, s)
        for s in shapes
    ]
    try:
        expected = torch.einsum(eq, *[torch.tensor(a) for a in arrays])
    except RuntimeError:
        with pytest.raises(RuntimeError):
            gs.einsum(eq, *[gs.tensor(a) for a in arrays])
        return
    grad = dtype == np.float64
    ours = [gs.tensor(a, requires_grad=grad) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=grad) for a in arrays]
    got = gs.einsum(eq, *ours)
    assert_close(got, torch.einsum(eq, *theirs), rtol=1e-10, atol=1e-12)
    if grad and expected.numel():
        w = rng.uniform(-1, 1, tuple(expected.shape))
        (got * gs.tensor(w)).sum().backward()
        (torch.einsum(eq, *theirs) * torch.tensor(w)).sum().backward()
        for o, t in zip(ours, theirs, strict=True):
            assert_close(o.grad, t.grad, rtol=1e-10, atol=1e-12)


def test_einsum_operand_list_and_float32_attention_shapes():
    q, k = np.random.default_rng(0).standard_normal((2, 2, 4, 5, 8)).astype(np.float32)
    got = gs.einsum("bhqd,bhkd->bhqk", [gs.tensor(q), gs.tensor(k)])
    want = torch.einsum("bhqd,bhkd->bhqk", [torch.tensor(q), torch.tensor(k)])
    assert_close(got, want, terms=8)


@pytest.mark.parametrize(
    "eq, shapes",
    [
        ("ij,jk->ik", [(2, 3)]),
        ("ij->ij", [(2, 3), (3,)]),
        ("ijk->ij", [(2, 3)]),
        ("i1->i", [(2, 3)]),
        ("ij->ii", [(2, 2)]),
        ("ij->k", [(2, 2)]),
        ("ii->i", [(2, 3)]),
        ("ij,jk->ik", [(2, 3), (4, 5)]),
        ("...i...->i", [(2, 3)]),
    ],
)
def test_einsum_errors_match_torch(eq, shapes):
    with pytest.raises(RuntimeError):
        torch.einsum(eq, *[torch.zeros(s) for s in shapes])
    with pytest.raises(RuntimeError, match="einsum"):
        gs.einsum(eq, *[gs.zeros(s) for s in shapes])
    with pytest.raises(TypeError):
        gs.einsum("i->i", [1.0])
