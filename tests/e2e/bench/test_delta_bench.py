"""`vlrl bench delta`: bytes counted where they cross, through `vlrl serve` in its own process
(the HTTP half), and the client-side accounting against the engine's own counter."""

from __future__ import annotations

import base64
import itertools

from vlrl.bench import delta_bench
from vlrl.bench.curves import curves_of
from vlrl.bench.delta_http import measure_http, screenshots
from vlrl.mm import encode_image


def test_the_server_counts_each_screenshot_once_under_delta_and_the_whole_history_every_turn_under_full():
    screen, turns = (640, 480), 4
    figures = measure_http(turns=(1, turns), timed=(turns,), runs=2, screens=(screen,))["640x480"]
    png = [len(encode_image(shot)) for shot in screenshots(turns, screen)]
    t = figures[f"T{turns}"]
    assert t["image_bytes_delta"] == t["image_bytes_once"] == sum(png)  # the once-only bound, exactly
    assert t["image_bytes_full"] == sum(itertools.accumulate(png))  # turn k resends k screenshots
    assert (t["images_decoded_delta"], t["images_decoded_full"]) == (turns, turns * (turns + 1) // 2)
    # The body carries the images base64-encoded: at least 4/3 of their bytes crossed the wire.
    assert t["wire_bytes_delta"] >= len(base64.b64encode(b"x" * sum(png))) > sum(png)
    assert t["wire_bytes_full"] - t["wire_bytes_delta"] >= 4 / 3 * (t["image_bytes_full"] - t["image_bytes_delta"])
    one = figures["T1"]  # one turn: both schemes send the same single image
    assert one["image_bytes_full"] == one["image_bytes_delta"] == png[0]
    # The report plots bytes over turns, one line per scheme (as `vlrl bench delta` nests the figures).
    (wire, speedup) = curves_of("delta", {"http": {"screen": "640x480", **figures}})
    assert wire.series == {s: [(1, one[f"wire_bytes_{s}"]), (turns, t[f"wire_bytes_{s}"])] for s in ("full", "delta")}
    assert speedup.series == {"full / delta": [(turns, t["rollout_speedup"])]}  # only T4 was timed


def test_the_engine_receives_exactly_what_the_client_ships(ray_session):
    images = delta_bench.screenshots(6)
    bytes_ = delta_bench.measure_bytes((6,), images)["T6"]
    assert bytes_["bytes_delta"] == bytes_["bytes_lower_bound"] < bytes_["bytes_window5"] < bytes_["bytes_full"]
    rollout = delta_bench.measure_rollout(6, 2, images, reps=1)  # asserts the engine's counter equals the client's
    assert 0 < rollout["delta"]["image_bytes"] < rollout["full"]["image_bytes"]


def test_without_a_vllm_python_the_vllm_rows_say_why(monkeypatch, tmp_path):
    from vlrl.bench.delta_vllm import headline, measure_vllm

    monkeypatch.setenv("VLRL_VLLM_PYTHON", str(tmp_path / "no-python"))
    figures = measure_vllm("smoke")
    assert figures["skipped"].startswith(f"no vLLM Python at {tmp_path / 'no-python'}")
    lead = headline(figures)
    assert set(lead) == {f"vllm_{n}_T{t}" for n in ("wire_full_over_delta", "speedup") for t in (15, 50)}
    assert all(value == f"skipped: {figures['skipped']}" for value in lead.values())
