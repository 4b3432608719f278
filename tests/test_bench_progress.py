"""gradstream.bench's progress: a line per configuration and an estimate of the time left."""

import pytest

from gradstream.bench import progress


def test_time_left_from_the_configurations_done():
    assert progress.time_left([], [("mlp", "torch")]) is None  # nothing to go on yet
    done = [(("mlp", "torch"), 10.0), (("mlp", "gradstream"), 20.0), (("nerf", "torch"), 60.0)]
    # the same configuration (a later --repeat round), else its workload's mean, else all's
    assert progress.time_left(done, [("mlp", "torch")]) == pytest.approx(10.0)
    assert progress.time_left(done, [("mlp", "candle")]) == pytest.approx(15.0)
    assert progress.time_left(done, [("lora", "torch")]) == pytest.approx(30.0)
    left = [("nerf", "gradstream"), ("mlp", "torch"), ("lora", "torch")]
    assert progress.time_left(done, left) == pytest.approx(60.0 + 10.0 + 30.0)
    assert progress.time_left(done, []) == 0.0


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.4, "0 s"), (42, "42 s"), (89, "89 s"), (95, "2 min"), (600, "10 min"),
     (3600, "1 h 00 min"), (3 * 3600 + 5 * 60, "3 h 05 min")],
)  # fmt: skip
def test_duration_for_a_person(seconds, text):
    assert progress.duration(seconds) == text


def test_lines_show_each_configuration_and_the_time_left(monkeypatch, capsys):
    now = [0.0]
    monkeypatch.setattr(progress, "clock", lambda: now[0])
    keys = [("mlp", "torch"), ("mlp", "gradstream"), ("nerf", "torch")]
    bar = progress.bar(len(keys), plain=True, keys=keys)
    bar.set_description("mlp / torch")
    bar.write("mlp / torch: 400.0 MiB, 0.146 s/step")
    now[0] = 30.0
    bar.update()
    bar.set_description("mlp / gradstream")
    now[0] = 40.0
    bar.update()
    bar.set_description("nerf / torch")
    bar.update()
    bar.close()
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "[1/3] mlp / torch ..."  # no estimate before one is done
    assert lines[1] == "    mlp / torch: 400.0 MiB, 0.146 s/step"
    # mlp / gradstream as long as mlp / torch, nerf as the mean of all: 30 s + 30 s
    assert lines[2] == "[2/3] mlp / gradstream ... (about 60 s left)"
    assert lines[3] == "[3/3] nerf / torch ... (about 20 s left)"  # the mean of 30 s and 10 s
    assert lines[4].startswith("[3/3] done in ")
