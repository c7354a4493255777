"""Chat-completions bodies: what is accepted, and each malformed field refused by name."""

from __future__ import annotations

import re

import numpy as np
import pytest

from vlrl.rollout.http_endpoint import missing_images, parse_metrics
from vlrl.rollout.server.wire import MAX_JSON_DEPTH, ApiError, ImageInput, load_json, parse_chat_request

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}, "uuid": "u1"}
REFERENCE = {"type": "image_url", "image_url": None, "uuid": "u1"}


def parse(**body):
    return parse_chat_request(body, default_max_tokens=16)


def test_a_chat_with_images_and_vllm_and_vlrl_extensions():
    chat = parse(
        model="m",
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [IMAGE, {"type": "text", "text": "click"}, REFERENCE]},
        ],
        temperature=0,
        top_p=0.5,
        max_completion_tokens=7,
        stop="<|im_end|>",
        stop_token_ids=[2],
        seed=3,
        logprobs=True,
        return_token_ids=True,
        request_id="r",
        trajectory_id="t",
        user="ignored",
    )
    assert chat.messages[0].content == ("be brief",)
    assert chat.images == (
        ImageInput("messages[1].content[0]", "data:image/png;base64,AAAA", "u1"),
        ImageInput("messages[1].content[2]", None, "u1"),
    )
    s = chat.sampling
    assert (s.temperature, s.top_p, s.max_tokens, s.stop_token_ids, s.seed) == (0.0, 0.5, 7, (2,), 3)
    assert (chat.stop, chat.logprobs, chat.return_token_ids, chat.request_id, chat.trajectory_id) == (
        ("<|im_end|>",), True, True, "r", "t"
    )
    assert chat.prompt_token_ids is None


def test_token_in_takes_ids_and_image_only_messages():
    chat = parse(prompt_token_ids=[1, 2, 3], messages=[{"role": "user", "content": [REFERENCE]}])
    np.testing.assert_array_equal(chat.prompt_token_ids, [1, 2, 3])
    assert chat.prompt_token_ids.dtype == np.int32 and chat.sampling.max_tokens == 16
    assert parse(prompt_token_ids=[5]).messages == ()


@pytest.mark.parametrize(
    "body, param, message",
    [
        ({}, "messages", "messages: expected a non-empty list"),
        ({"messages": []}, "messages", "messages: expected a non-empty list"),
        ({"messages": ["hi"]}, "messages[0]", "messages[0]: a string; expected an object"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role", "'tool'; expected one of system"),
        ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content", "int; expected a string or a list"),
        ({"messages": [{"role": "user", "content": "x", "tool_calls": []}]}, "messages[0].tool_calls", "unsupported"),
        ({"messages": [{"role": "user", "content": [{"type": "audio"}]}]}, "messages[0].content[0].type", "'audio'"),
        ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages[0].content[0].text", "a string"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": None}]}]},
            "messages[0].content[0].uuid",
            "image_url is null but no uuid",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"link": "x"}}]}]},
            "messages[0].content[0].image_url",
            "expected {'url'",
        ),
        ({"prompt_token_ids": [1], "messages": [{"role": "user", "content": "hi"}]}, "messages[0].content", "text is not allowed"),
        ({"prompt_token_ids": [1, -2]}, "prompt_token_ids", "non-negative integer token ids"),
        ({"prompt_token_ids": []}, "prompt_token_ids", "empty"),
        ({"prompt_token_ids": [1], "temperature": "hot"}, "temperature", "'hot'; expected a number in [0, 2]"),
        ({"prompt_token_ids": [1], "temperature": 3}, "temperature", "3; expected a number in [0, 2]"),
        ({"prompt_token_ids": [1], "top_p": 0}, "top_p", "expected a number in (0, 1]"),
        ({"prompt_token_ids": [1], "max_tokens": 0}, "max_tokens", "expected an integer >= 1"),
        ({"prompt_token_ids": [1], "max_tokens": True}, "max_tokens", "expected an integer >= 1"),
        ({"prompt_token_ids": [1], "seed": 1.5}, "seed", "expected an integer"),
        ({"prompt_token_ids": [1], "seed": 2**63}, "seed", "expected an integer in [0, 9223372036854775807]"),
        ({"prompt_token_ids": [1], "seed": -1}, "seed", "expected an integer in [0, 9223372036854775807]"),
        ({"prompt_token_ids": [1], "temperature": 5e-324}, "temperature", "expected 0 (greedy) or a number in [1e-05, 2]"),
        ({"prompt_token_ids": [1], "temperature": 10**400}, "temperature", "expected a number in [0, 2]"),
        ({"prompt_token_ids": [1], "temperature": float("nan")}, "temperature", "expected a number in [0, 2]"),
        ({"messages": [{"role": "user", "content": "a\ud800"}]}, "messages[0].content.text", "lone UTF-16 surrogate"),
        ({"prompt_token_ids": [1], "stop": ["\udfff"]}, "stop", "lone UTF-16 surrogate"),
        ({"prompt_token_ids": [1], "logprobs": "yes"}, "logprobs", "expected a boolean"),
        ({"prompt_token_ids": [1], "stop": [""]}, "stop", "non-empty string"),
        ({"prompt_token_ids": [1], "stream": True}, "stream", "only non-streaming"),
        ({"prompt_token_ids": [1], "n": 2}, "n", "only n=1"),
        ({"prompt_token_ids": [1], "top_logprobs": 5}, "top_logprobs", "send 0"),
        ({"prompt_token_ids": [1], "tools": []}, "tools", "unsupported field 'tools'"),
        ({"prompt_token_ids": [1], "model": 7}, "model", "expected a string"),
    ],
)
def test_malformed_fields_are_named(body, param, message):
    with pytest.raises(ApiError) as caught:
        parse_chat_request(body, default_max_tokens=16)
    error = caught.value
    assert (error.status, error.param) == (400, param)
    assert message in str(error)
    assert error.body()["error"] == {"message": str(error), "type": "BadRequestError", "param": param, "code": 400}


def test_json_is_refused_when_malformed_or_nested_too_deep():
    assert isinstance(load_json(b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH), list)  # at the limit: accepted
    for raw, message in [
        (b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1), f"deeper than {MAX_JSON_DEPTH} levels"),
        (b'{"a": ' * 100_000 + b"1" + b"}" * 100_000, f"deeper than {MAX_JSON_DEPTH} levels"),  # past recursion
        (b'{"messages": "\xff"}', "not valid JSON ('utf-8' codec can't decode byte 0xff"),
        (b"{not json", "not valid JSON"),
    ]:
        with pytest.raises(ApiError, match=re.escape(message)):
            load_json(raw)


def test_the_body_must_be_an_object():
    with pytest.raises(ApiError, match="the request body is a list; expected a JSON object"):
        parse_chat_request([], default_max_tokens=16)


def test_misses_are_read_from_vlrl_and_from_vllm_answers():
    uuids = ["a", "b", "c"]
    ours = {"error": {"message": "Cache miss for image at index 1 ...", "missing_uuids": ["b"]}}
    vllm = {"error": {"message": "Cache miss for image at index 2 but data is not provided.", "code": 400}}
    assert missing_images(ours, uuids) == ("b",)
    assert missing_images(vllm, uuids) == ("c",)
    assert missing_images({"error": {"message": "max_tokens: too many"}}, uuids) == ()
    assert missing_images("not json", uuids) == ()


def test_prometheus_gauges_are_summed_over_label_sets():
    text = (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="q"} 2.0\n'
        'vllm:num_requests_running{engine="1",model_name="q"} 1.0\n'
        'vllm:num_requests_waiting{engine="0",model_name="q {a}"} 4.0 1700000000\n'
        "process_open_fds 12\n"
    )
    assert parse_metrics(text) == {
        "vllm:num_requests_running": 3.0,
        "vllm:num_requests_waiting": 4.0,
        "process_open_fds": 12.0,
    }
