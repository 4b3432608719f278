"""`Generator`, seeding and generator state, and the random ops (`multinomial`, `bernoulli`,
`uniform_`/`normal_`, the factories) drawing from a generator.

Values drawn cannot match PyTorch's (another generator), so PyTorch is the reference for the
API, shapes, dtypes and error classes, and statistics stand in for values."""

from __future__ import annotations

import numpy as np
import pytest

import gradstream as gs
import gradstream.nn.init as ginit

hypothesis = pytest.importorskip("hypothesis")
from backend_paths import reraise_missing  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def outcome(f):
    """`f()`'s result, or the class name of the exception it raised."""
    try:
        return ("ok", f())
    except Exception as e:  # noqa: BLE001 - the class is what is compared
        reraise_missing(e)
        return ("error", type(e).__name__)


def error_class(f) -> str | None:
    r = outcome(f)
    return r[1] if r[0] == "error" else None


def values(t) -> list:
    return t.detach().numpy().tolist()


# ---------------------------------------------------------------- the Generator object


def test_generator_api_shape(torch_ref):
    g, tg = gs.Generator(), torch_ref.Generator()
    assert isinstance(g, gs.Generator)
    assert str(g.device) == str(tg.device) == "cpu"
    assert g.initial_seed() == tg.initial_seed()
    assert g.manual_seed(7) is g
    assert g.initial_seed() == 7
    state = g.get_state()
    assert isinstance(state, gs.Tensor)
    assert state.dtype == gs.uint8 and state.dim() == 1
    assert g.set_state(state) is g
    s = g.seed()
    assert isinstance(s, int) and 0 <= s < 2**64 and g.initial_seed() == s
    assert gs.Generator("cpu").device == gs.Generator(device=gs.device("cpu")).device


def test_default_generator_is_the_global_one(torch_ref):
    assert isinstance(gs.default_generator, gs.Generator)
    assert gs.manual_seed(11) is gs.default_generator
    assert isinstance(torch_ref.manual_seed(11), torch_ref.Generator)
    assert gs.initial_seed() == gs.default_generator.initial_seed() == 11
    gs.default_generator.manual_seed(12)
    assert gs.initial_seed() == 12
    a = gs.rand(6)
    gs.manual_seed(12)
    assert values(gs.rand(6)) == values(a)


@pytest.mark.parametrize("seed", [0, 1, -1, -(2**63), 2**63, 2**64 - 1, 2**64, -(2**63) - 1])
def test_seed_range_follows_pytorch(torch_ref, seed):
    def initial(lib):
        return lib.Generator().manual_seed(seed).initial_seed()

    assert outcome(lambda: initial(gs)) == outcome(lambda: initial(torch_ref))
    assert error_class(lambda: gs.manual_seed(seed)) == error_class(
        lambda: torch_ref.manual_seed(seed)
    )


def test_seed_argument_errors(torch_ref):
    for bad in (1.5, "3", None):
        assert error_class(lambda bad=bad: gs.Generator().manual_seed(bad)) == error_class(
            lambda bad=bad: torch_ref.Generator().manual_seed(bad)
        )
    # torch.manual_seed takes what int() takes
    gs.manual_seed(3.7)
    assert gs.initial_seed() == 3


def test_set_state_errors(torch_ref):
    for make in (
        lambda lib: lib.zeros(5),  # not uint8
        lambda lib: lib.zeros(5, dtype=lib.uint8),  # wrong size
        lambda lib: 3,
        lambda lib: None,
    ):
        ours = error_class(lambda make=make: gs.Generator().set_state(make(gs)))
        theirs = error_class(lambda make=make: torch_ref.Generator().set_state(make(torch_ref)))
        assert ours is not None and ours == theirs
        assert error_class(lambda make=make: gs.set_rng_state(make(gs))) == error_class(
            lambda make=make: torch_ref.set_rng_state(make(torch_ref))
        )


def test_generator_on_another_device_fails(torch_ref):
    assert error_class(lambda: gs.Generator("cuda")) == "RuntimeError"
    assert error_class(lambda: gs.Generator(3.5)) is not None


# ---------------------------------------------------------------- draws from generators

DRAWS = {
    "rand": lambda g: gs.rand(3, 4, generator=g),
    "randn": lambda g: gs.randn(3, 4, generator=g),
    "rand_like": lambda g: gs.rand_like(gs.zeros(5, dtype=gs.float64), generator=g),
    "randn_like": lambda g: gs.randn_like(gs.zeros(5), generator=g),
    "randint": lambda g: gs.randint(0, 100, (7,), generator=g),
    "randperm": lambda g: gs.randperm(9, generator=g),
    "multinomial": lambda g: gs.multinomial(gs.tensor([0.2, 0.5, 0.3]), 5, True, generator=g),
    "multinomial no_replacement": lambda g: gs.multinomial(gs.ones(2, 6), 4, generator=g),
    "bernoulli": lambda g: gs.bernoulli(gs.full((9,), 0.5), generator=g),
    "bernoulli p": lambda g: gs.bernoulli(gs.zeros(9), 0.5, generator=g),
    "Tensor.bernoulli_": lambda g: gs.zeros(9).bernoulli_(generator=g),
    "Tensor.bernoulli_ tensor": lambda g: gs.zeros(2, 9).bernoulli_(
        gs.full((9,), 0.5), generator=g
    ),
    "Tensor.uniform_": lambda g: gs.zeros(6).uniform_(-2, 3, generator=g),
    "Tensor.normal_": lambda g: gs.zeros(6).normal_(1.0, 2.0, generator=g),
    "init.uniform_": lambda g: ginit.uniform_(gs.zeros(6), -1, 1, generator=g),
    "init.normal_": lambda g: ginit.normal_(gs.zeros(6), generator=g),
    "init.kaiming_uniform_": lambda g: ginit.kaiming_uniform_(gs.zeros(4, 3), generator=g),
    "init.xavier_normal_": lambda g: ginit.xavier_normal_(gs.zeros(4, 3), generator=g),
}


@pytest.mark.parametrize("name", list(DRAWS))
def test_same_seed_same_draws_independent_of_the_global_generator(name):
    draw = DRAWS[name]
    gs.manual_seed(0)
    global_first = values(gs.rand(8))
    global_second = values(gs.rand(8))

    a, b = gs.Generator().manual_seed(42), gs.Generator().manual_seed(42)
    gs.manual_seed(0)
    first = values(draw(a))
    # the global generator did not move
    assert values(gs.rand(8)) == global_first
    # b, seeded alike, replays a's draws though a and the global one drew in between
    again = values(draw(b))
    assert again == first
    assert values(draw(a)) == values(draw(b))
    assert values(gs.rand(8)) == global_second
    # another seed gives other draws (the ops that can repeat by chance draw enough values)
    if name != "multinomial no_replacement":
        assert values(draw(gs.Generator().manual_seed(43))) != first


@pytest.mark.parametrize("name", list(DRAWS))
def test_generator_default_is_the_global_generator(name):
    draw = DRAWS[name]
    gs.manual_seed(5)
    a = values(draw(None))
    gs.manual_seed(5)
    assert values(draw(gs.default_generator)) == a


@pytest.mark.parametrize("name", list(DRAWS))
def test_bad_generator_is_a_type_error_naming_the_op(name):
    op = name.split(".")[-1].split(" ")[0].replace("kaiming_", "").replace("xavier_", "")
    with pytest.raises(TypeError, match=rf"{op}\(\): argument 'generator' must be Generator"):
        DRAWS[name]("not a generator")


def test_bad_generator_error_class_matches_pytorch(torch_ref):
    for lib in (gs, torch_ref):
        with pytest.raises(TypeError):
            lib.rand(3, generator=5)
        with pytest.raises(TypeError):
            lib.multinomial(lib.ones(3), 2, generator="x")
        with pytest.raises(TypeError):
            lib.bernoulli(lib.ones(3), generator=1)
        with pytest.raises(TypeError):
            lib.randperm(4, generator=object())


@pytest.mark.parametrize("skip", [0, 1, 3, 17, 64, 101])
def test_get_state_set_state_replays(skip):
    g = gs.Generator().manual_seed(9)
    gs.randn(skip, generator=g)  # randn's rejection sampling leaves odd word positions
    state = g.get_state()
    a = [values(DRAWS[n](g)) for n in DRAWS]
    g.manual_seed(1234)
    gs.rand(5, generator=g)
    g.set_state(state)
    assert g.initial_seed() == 9
    assert [values(DRAWS[n](g)) for n in DRAWS] == a
    # a state moves between generators
    h = gs.Generator().set_state(state)
    assert values(gs.rand(10, generator=h)) == values(gs.rand(10, generator=g.set_state(state)))


def test_global_rng_state_round_trip():
    gs.manual_seed(3)
    gs.rand(5)
    state = gs.get_rng_state()
    assert state.dtype == gs.uint8
    a = values(gs.randn(11))
    gs.rand(3)
    gs.set_rng_state(state)
    assert values(gs.randn(11)) == a
    assert values(gs.default_generator.get_state()) == values(gs.get_rng_state())
    # the state is a copy: drawing does not change it
    saved = values(state)
    gs.rand(4)
    assert values(state) == saved


def test_float64_draws_use_the_full_precision():
    x = gs.rand(1000, dtype=gs.float64, generator=gs.Generator().manual_seed(0)).numpy()
    assert not np.array_equal(x, x.astype(np.float32).astype(np.float64))


# ---------------------------------------------------------------- multinomial


def test_multinomial_frequencies_with_replacement():
    p = np.array([0.1, 0.0, 0.2, 0.3, 0.4])
    w = gs.tensor((p * 5).tolist())  # weights need not sum to 1
    n = 40000
    s = gs.multinomial(w, n, replacement=True, generator=gs.Generator().manual_seed(1)).numpy()
    freq = np.bincount(s, minlength=5) / n
    assert freq[1] == 0
    np.testing.assert_allclose(freq, p, atol=0.015)


def test_multinomial_without_replacement():
    p = np.array([0.1, 0.2, 0.3, 0.4])
    g = gs.Generator().manual_seed(2)
    rows = 20000
    s = gs.multinomial(gs.tensor(np.tile(p, (rows, 1))), 2, generator=g).numpy()
    assert s.shape == (rows, 2)
    assert (s[:, 0] != s[:, 1]).all()
    # the first draw of each row follows p
    np.testing.assert_allclose(np.bincount(s[:, 0], minlength=4) / rows, p, atol=0.015)
    # all categories: a permutation per row
    full = gs.multinomial(gs.ones(50, 6), 6, generator=g).numpy()
    assert (np.sort(full, axis=1) == np.arange(6)).all()
    # zero weights come only after every positive one
    z = gs.multinomial(gs.tensor([[0.0, 1.0, 0.0, 2.0]] * 200), 3, generator=g).numpy()
    assert set(map(tuple, np.sort(z[:, :2], axis=1))) == {(1, 3)}
    assert set(z[:, 2]) <= {0, 2}


@SETTINGS
@given(
    shape=st.lists(st.integers(0, 4), min_size=1, max_size=2),
    num_samples=st.integers(1, 6),
    replacement=st.booleans(),
    dtype=st.sampled_from(["float32", "float64"]),
)
def test_multinomial_shape_dtype_and_errors_match_pytorch(
    torch_ref, shape, num_samples, replacement, dtype
):
    w = np.random.default_rng(0).random(shape) + 0.1

    def run(lib):
        t = lib.tensor(w, dtype=getattr(lib, dtype))
        r = lib.multinomial(t, num_samples, replacement)
        return tuple(r.shape), str(r.dtype).split(".")[-1]

    assert outcome(lambda: run(gs)) == outcome(lambda: run(torch_ref))


BAD_MULTINOMIAL = [
    ([0.2, 0.8], 3, False),  # more samples than categories
    ([0.2, 0.8], 0, True),
    ([0.2, 0.8], -1, True),
    ([-0.2, 0.8], 1, False),
    ([0.0, 0.0], 1, True),
    ([[1.0, 1.0], [0.0, 0.0]], 1, True),
    ([float("inf"), 1.0], 1, False),
    ([float("nan"), 1.0], 1, True),
    ("int", 1, True),
    ("scalar", 1, True),
    ("3d", 1, True),
    ("empty_row", 2, True),
    ("empty_row", 2, False),
]


def _multinomial_input(lib, data):
    if data == "int":
        return lib.tensor([1, 2])
    if data == "scalar":
        return lib.tensor(1.0)
    if data == "3d":
        return lib.ones(2, 2, 2)
    if data == "empty_row":
        return lib.ones(2, 0)
    return lib.tensor(data)


@SETTINGS
@given(case=st.sampled_from(BAD_MULTINOMIAL))
def test_multinomial_error_classes_match_pytorch(torch_ref, case):
    data, n, replacement = case
    ours = error_class(lambda: gs.multinomial(_multinomial_input(gs, data), n, replacement))
    theirs = error_class(
        lambda: torch_ref.multinomial(_multinomial_input(torch_ref, data), n, replacement)
    )
    assert ours is not None and ours == theirs


def test_multinomial_too_many_samples_is_an_error_not_a_crash():
    with pytest.raises(RuntimeError, match="multinomial"):
        gs.multinomial(gs.ones(3), 2**62, True)
    with pytest.raises(RuntimeError, match="multinomial"):
        gs.multinomial(gs.ones(4, 3), 2**62, True)


def test_multinomial_errors_name_the_op():
    with pytest.raises(RuntimeError, match="multinomial.*without replacement"):
        gs.multinomial(gs.ones(2), 3)
    with pytest.raises(RuntimeError, match="multinomial.*sum of probabilities"):
        gs.multinomial(gs.zeros(2), 1, True)


def test_multinomial_method_and_no_grad():
    w = gs.ones(3, requires_grad=True)
    s = w.multinomial(2, generator=gs.Generator())
    assert s.dtype == gs.int64 and not s.requires_grad


# ---------------------------------------------------------------- bernoulli


def test_bernoulli_frequencies():
    g = gs.Generator().manual_seed(3)
    p = gs.tensor([0.0, 0.2, 0.7, 1.0] * 10000).reshape(10000, 4)
    x = gs.bernoulli(p, generator=g).numpy()
    assert set(np.unique(x)) <= {0.0, 1.0}
    np.testing.assert_allclose(x.mean(axis=0), [0.0, 0.2, 0.7, 1.0], atol=0.015)
    y = gs.bernoulli(gs.zeros(40000), 0.3, generator=g).numpy()
    assert abs(y.mean() - 0.3) < 0.015
    z = gs.zeros(40000, dtype=gs.int64).bernoulli_(0.6, generator=g)
    assert z.dtype == gs.int64 and abs(z.numpy().mean() - 0.6) < 0.015
    w = gs.zeros(20000, 2).bernoulli_(gs.tensor([0.1, 0.9]), generator=g).numpy()
    np.testing.assert_allclose(w.mean(axis=0), [0.1, 0.9], atol=0.015)
    v = gs.zeros(40000).bernoulli_().numpy()
    assert abs(v.mean() - 0.5) < 0.015


@SETTINGS
@given(
    shape=st.lists(st.integers(0, 3), max_size=3),
    dtype=st.sampled_from(["float32", "float64", "float16", "bfloat16"]),
)
def test_bernoulli_shape_and_dtype_match_pytorch(torch_ref, shape, dtype):
    def run(lib):
        p = lib.full(shape, 0.5, dtype=getattr(lib, dtype))
        results = [lib.bernoulli(p), lib.bernoulli(p, 0.25), p.bernoulli(), p.clone().bernoulli_()]
        return [(tuple(r.shape), str(r.dtype).split(".")[-1]) for r in results]

    assert outcome(lambda: run(gs)) == outcome(lambda: run(torch_ref))


BAD_BERNOULLI = [
    lambda lib: lib.bernoulli(lib.tensor([0.5, 1.5])),
    lambda lib: lib.bernoulli(lib.tensor([0.5, -0.5])),
    lambda lib: lib.bernoulli(lib.tensor([0.5, float("nan")])),
    lambda lib: lib.bernoulli(lib.tensor([1, 0])),
    lambda lib: lib.bernoulli(lib.tensor([True])),
    lambda lib: lib.bernoulli(lib.zeros(2), 1.5),
    lambda lib: lib.zeros(3).bernoulli_(1.5),
    lambda lib: lib.zeros(3).bernoulli_(-0.1),
    lambda lib: lib.zeros(3).bernoulli_(lib.tensor([0.1, 0.2])),
    lambda lib: lib.zeros(3).bernoulli_(lib.tensor([0.1, 0.2, 2.0])),
    lambda lib: lib.zeros(3).bernoulli_("x"),
    lambda lib: lib.zeros(3).bernoulli_(lib.zeros(2, 3)),
]


@SETTINGS
@given(case=st.sampled_from(range(len(BAD_BERNOULLI))))
def test_bernoulli_error_classes_match_pytorch(torch_ref, case):
    make = BAD_BERNOULLI[case]
    ours = error_class(lambda: make(gs))
    assert ours is not None and ours == error_class(lambda: make(torch_ref))


def test_bernoulli_errors_name_the_op():
    with pytest.raises(RuntimeError, match="bernoulli.*probabilities"):
        gs.bernoulli(gs.tensor([2.0]))
    with pytest.raises(RuntimeError, match=r"bernoulli_ expects p to be in \[0, 1\]"):
        gs.zeros(2).bernoulli_(3.0)


# ---------------------------------------------------------------- uniform_ / normal_


def test_uniform_and_normal_statistics():
    g = gs.Generator().manual_seed(4)
    u = gs.empty(50000, dtype=gs.float64).uniform_(-2.0, 3.0, generator=g).numpy()
    assert u.min() >= -2.0 and u.max() < 3.0
    assert abs(u.mean() - 0.5) < 0.05 and abs(u.var() - 25 / 12) < 0.05
    n = gs.empty(50000).normal_(1.0, 2.0, generator=g).numpy()
    assert abs(n.mean() - 1.0) < 0.05 and abs(n.std() - 2.0) < 0.05


def test_uniform_normal_methods_follow_pytorch(torch_ref):
    cases = [
        lambda lib: lib.zeros(3).uniform_(),
        lambda lib: lib.zeros(3).uniform_(2.0, 1.0),
        lambda lib: lib.zeros(3).normal_(),
        lambda lib: lib.zeros(3).normal_(0.0, -1.0),
        lambda lib: lib.zeros(3, requires_grad=True).uniform_(),  # a leaf that requires grad
        lambda lib: lib.zeros(3, requires_grad=True).normal_(),
        lambda lib: lib.zeros(3, dtype=lib.float64).normal_().dtype,
    ]
    for make in cases:
        ours = outcome(lambda make=make: make(gs))
        theirs = outcome(lambda make=make: make(torch_ref))
        assert ours[0] == theirs[0]
        if ours[0] == "error":
            assert ours == theirs
    # returns the tensor itself; under no_grad a parameter can be filled
    t = gs.zeros(3)
    assert t.uniform_() is t and t.normal_() is t and t.bernoulli_() is t
    p = gs.nn.Parameter(gs.zeros(4))
    with gs.no_grad():
        p.normal_()
    assert isinstance(p, gs.nn.Parameter) and p.requires_grad


def test_init_uses_the_generator_and_leaves_the_global_one_alone():
    gs.manual_seed(0)
    expected = values(gs.rand(5))
    gs.manual_seed(0)
    lin = gs.nn.Linear(4, 3)  # draws from the global generator
    w = values(lin.weight)
    g = gs.Generator().manual_seed(8)
    ginit.kaiming_uniform_(lin.weight, generator=g)
    gs.manual_seed(0)
    gs.nn.Linear(4, 3)
    assert values(gs.rand(5)) != expected  # Linear drew from the global generator
    gs.manual_seed(0)
    assert values(gs.nn.Linear(4, 3).weight) == w
    # xavier/kaiming pass the generator on: the same seed gives the same weights
    a = ginit.xavier_uniform_(gs.zeros(3, 4), generator=gs.Generator().manual_seed(1))
    b = ginit.xavier_uniform_(gs.zeros(3, 4), generator=gs.Generator().manual_seed(1))
    assert values(a) == values(b)
    with pytest.raises(RuntimeError):
        ginit.uniform_(gs.zeros(2), 1.0, -1.0)
