"""``vlrl serve`` through the official ``openai`` client: chat, images by uuid, token-in, limits, errors."""

from __future__ import annotations

import base64
import functools
import http.server
import json
import threading
import urllib.error
import urllib.request

import numpy as np
import openai
import pytest

from tests.helpers.chat import part, request, run_core, screen, user_turn
from tests.helpers.running import RunningServer
from vlrl.mm import content_hash, encode_image
from vlrl.rollout.protocol import SamplingParams

KEY = "test-key"
MAX_PIXELS = 400 * 300


@pytest.fixture(scope="module")
def server(tiny_path):
    # An engine image cache of ~one 320x240 screen, so a second image evicts the first.
    running = RunningServer(
        tiny_path,
        engine={"image_cache_mb": 1.5},
        api_key=KEY,
        max_request_mb=1.0,
        max_image_pixels=MAX_PIXELS,
        remote_image_hosts=("127.0.0.1",),
    )
    yield running
    running.close()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)


def data_url(pixels: np.ndarray) -> str:
    return "data:image/png;base64," + base64.b64encode(encode_image(pixels)).decode()


def image(url: str | None, uuid: str) -> dict:
    return {"type": "image_url", "image_url": None if url is None else {"url": url}, "uuid": uuid}


def chat(client, server, content, **options):
    options.setdefault("temperature", 0)
    options.setdefault("max_tokens", 6)
    extra = {"return_token_ids": True, **options.pop("extra_body", {})}
    messages = [{"role": "user", "content": content}]
    return client.chat.completions.create(model=server.model, messages=messages, extra_body=extra, **options)


def test_models_and_a_text_chat_with_logprobs(server, client, processor):
    assert [m.id for m in client.models.list().data] == [server.model]
    answer = chat(client, server, "click the OK button", logprobs=True)
    assert answer.prompt_token_ids == user_turn(processor, "click the OK button", []).tolist()
    choice = answer.choices[0]
    ids = choice.token_ids
    assert len(ids) == answer.usage.completion_tokens == len(choice.logprobs.content)
    assert all(entry.logprob <= 0 and entry.top_logprobs == [] for entry in choice.logprobs.content)
    shown = ids[:-1] if choice.finish_reason == "stop" else ids
    assert choice.message.content == processor.tokenizer.decode(shown, skip_special_tokens=True)


def test_the_server_counts_the_request_body_bytes_it_reads(server, processor):
    body = json.dumps({"model": server.model, "messages": [{"role": "user", "content": "click OK"}], "max_tokens": 2})
    post = urllib.request.Request(server.url + "/v1/chat/completions", data=body.encode(), method="POST")
    post.add_header("Authorization", f"Bearer {KEY}")
    post.add_header("Content-Type", "application/json")
    before = server.metrics()["request_bytes_received"]
    with urllib.request.urlopen(post) as answer:
        assert answer.status == 200
    assert server.metrics()["request_bytes_received"] - before == len(body.encode())


def test_an_image_by_uuid_then_by_reference_then_missed(server, client, processor):
    shot, other = screen(320, 240, 40), screen(320, 240, 41)
    before = server.metrics()
    sent = chat(client, server, [image(data_url(shot), "shot-40"), {"type": "text", "text": "click OK"}])
    reused = chat(client, server, [image(None, "shot-40"), {"type": "text", "text": "click OK"}])
    assert sent.prompt_token_ids == reused.prompt_token_ids == user_turn(processor, "click OK", [shot]).tolist()
    assert sent.choices[0].token_ids == reused.choices[0].token_ids
    after = server.metrics()
    assert after["images_received"] - before["images_received"] == 1
    assert after["image_bytes_received"] - before["image_bytes_received"] == len(encode_image(shot))
    assert after["images_referenced"] - before["images_referenced"] == 1

    # Another image evicts shot-40 from the engine's cache; a uuid never sent is unknown to the server.
    chat(client, server, [image(data_url(other), "shot-41"), {"type": "text", "text": "click OK"}])
    with pytest.raises(openai.BadRequestError) as caught:
        chat(client, server, [image(None, "shot-40"), image(None, "shot-41"), image(None, "never-sent")])
    error = caught.value
    assert error.status_code == 400 and error.body["type"] == "BadRequestError"
    assert error.body["missing_uuids"] == ["never-sent"]  # the server finds unknown uuids before the engine
    assert error.body["message"].startswith("Cache miss for image at index 2 but data is not provided")
    with pytest.raises(openai.BadRequestError) as caught:
        chat(client, server, [image(None, "shot-40"), image(None, "shot-41")])
    assert caught.value.body["missing_uuids"] == ["shot-40"]
    assert "Cache miss for image at index 0 but data is not provided (uuid 'shot-40')." in caught.value.body["message"]
    resent = chat(client, server, [image(data_url(shot), "shot-40"), {"type": "text", "text": "click OK"}])
    assert resent.choices[0].token_ids == sent.choices[0].token_ids


def test_token_in_token_out_matches_the_in_process_engine(server, client, processor, tiny_path):
    shot = screen(200, 150, 42)
    ids = user_turn(processor, "type hello", [shot])
    answer = chat(
        client,
        server,
        [image(data_url(shot), content_hash(shot))],
        logprobs=True,
        extra_body={"prompt_token_ids": ids.tolist(), "trajectory_id": "token-in"},
    )
    assert answer.prompt_token_ids == ids.tolist() and answer.usage.prompt_tokens == len(ids)
    greedy = SamplingParams(temperature=0.0, max_tokens=6)
    expected = run_core(tiny_path, lambda core: core.generate(request(ids, (part(shot),), sampling=greedy)))
    assert answer.choices[0].token_ids == expected.token_ids.tolist()
    logprobs = np.array([entry.logprob for entry in answer.choices[0].logprobs.content], dtype=np.float32)
    np.testing.assert_array_equal(logprobs, expected.logprobs)


def test_every_v1_route_wants_the_api_key(server):
    body = {"model": server.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    for key in (None, "wrong"):
        status, answer = server.post("/v1/chat/completions", body, api_key=key)
        assert status == 401 and answer["error"]["type"] == "AuthenticationError"
        assert "Authorization: Bearer <key>" in answer["error"]["message"]
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0).models.list()
    assert server.post("/v1/chat/completions", body, api_key=KEY)[0] == 200
    for open_route in ("/health", "/metrics"):
        with urllib.request.urlopen(server.url + open_route) as response:
            assert response.status == 200


def test_oversized_bodies_and_images_are_refused(server, client):
    huge = b'{"messages": "' + b"x" * (1 << 20) + b'"}'
    status, answer = server.post("/v1/chat/completions", None, api_key=KEY, raw=huge)
    assert status == 413
    assert answer["error"]["message"] == "request body larger than 1 MiB (the server's --max-request-mb)"
    big = np.zeros((480, 640, 3), np.uint8)  # a few KiB of PNG, but more pixels than allowed
    with pytest.raises(openai.BadRequestError) as caught:
        chat(client, server, [image(data_url(big), "big")])
    assert caught.value.body["param"] == "messages[0].content[0].image_url.url"
    assert f"640x480 = 307200 pixels; at most max_pixels={MAX_PIXELS}" in caught.value.body["message"]
    for url, message in [
        ("data:image/png;base64," + base64.b64encode(b"hello").decode(), "unsupported or unknown format"),
        ("data:image/png;base64,%%%", "not valid base64"),
        ("data:image/png,rawbytes", "expected a base64 data URL"),
    ]:
        with pytest.raises(openai.BadRequestError, match=message):
            chat(client, server, [image(url, "bad")])


@pytest.fixture(scope="module")
def image_host(tmp_path_factory):
    """A plain HTTP server on 127.0.0.1 with a screenshot and a file over the size limit."""
    root = tmp_path_factory.mktemp("images")
    (root / "shot.png").write_bytes(encode_image(screen(320, 240, 43)))
    (root / "huge.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(1 << 20))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_remote_images_come_only_from_allowed_hosts_and_within_limits(server, client, image_host, processor):
    host_port = image_host.removeprefix("http://")
    for url, message in [
        ("http://example.com/shot.png", "remote image URLs are refused (host 'example.com' is not allowed)"),
        (f"http://localhost:{host_port.split(':')[1]}/shot.png", "(host 'localhost' is not allowed)"),
        ("file:///etc/passwd", "URL scheme 'file'"),
        (f"{image_host}/huge.png", "is larger than 1048576 bytes"),
        (f"{image_host}/missing.png", "answered HTTP 404"),
    ]:
        with pytest.raises(openai.BadRequestError) as caught:
            chat(client, server, [image(url, "remote")])
        assert message in caught.value.body["message"], caught.value.body
    fetched = server.metrics()["remote_images_fetched"]
    answer = chat(client, server, [image(f"{image_host}/shot.png", "remote"), {"type": "text", "text": "hi"}])
    assert answer.prompt_token_ids == user_turn(processor, "hi", [screen(320, 240, 43)]).tolist()
    assert server.metrics()["remote_images_fetched"] == fetched + 1


def test_bad_requests_get_openai_errors_naming_the_problem(server, processor):
    shot = screen(200, 150, 44)
    ids = user_turn(processor, "x", [shot]).tolist()
    text = [{"role": "user", "content": "hi"}]
    cases = [
        (b"{not json", 400, None, "the request body is not valid JSON"),
        ({"model": "other", "messages": text}, 404, "model", "The model `other` does not exist."),
        ({"messages": text, "stop": ["click the"]}, 400, "stop", "'click the' is 2 tokens"),
        ({"messages": text, "max_tokens": 5000}, 400, "max_tokens", "exceed the model's context of 4096 tokens"),
        ({"messages": [{"role": "user", "content": "see <|image_pad|>"}]}, 400, "messages", "1 image placeholder(s)"),
        ({"prompt_token_ids": [10**6]}, 400, "prompt_token_ids", "expected 0 <= id < vocab_size"),
        ({"prompt_token_ids": ids, "messages": [{"role": "user", "content": []}]}, 400, "prompt_token_ids", "1 run(s)"),
        ({"messages": text, "temperature": -1}, 400, "temperature", "-1; expected a number in [0, 2]"),
    ]
    for body, status, param, message in cases:
        raw = body if isinstance(body, bytes) else None
        got, answer = server.post("/v1/chat/completions", body, api_key=KEY, raw=raw)
        error = answer["error"]
        assert (got, error["code"], error["param"]) == (status, status, param), (body, answer)
        assert message in error["message"], (body, error)
    for method, path, status in [("GET", "/v1/nowhere", 404), ("GET", "/v1/chat/completions", 405)]:
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(
                urllib.request.Request(server.url + path, headers={"Authorization": f"Bearer {KEY}"}, method=method)
            )
        assert caught.value.code == status


def test_a_wrong_model_name_gets_a_404_naming_the_model_served(server):
    # An agent program written for vlrl's own endpoint sends model="policy"; `vlrl serve` serves its path.
    got, answer = server.post("/v1/chat/completions", {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}, api_key=KEY)
    message = answer["error"]["message"]
    assert got == 404 and answer["error"]["param"] == "model", answer
    assert message.startswith("The model `policy` does not exist. This server serves"), message
    assert f"`{server.model}`" in message and f"model={server.model!r}" in message, message
    assert "--served-model-name policy" in message, message


def test_the_start_line_names_the_model_requests_send(server):
    line = server._server.start_line(server.url)
    assert line.startswith(f"vlrl serve: {server.model} at {server.url}/v1 "), line
    assert f"requests send model={server.model!r}" in line and "--served-model-name" in line, line
