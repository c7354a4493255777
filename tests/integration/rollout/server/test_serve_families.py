"""``vlrl serve --model PATH`` on checkpoint folders that transformers' own classes wrote, one per
model family, through the official ``openai`` client: an image by data URL, then by its uuid
alone; and an unsupported checkpoint refused before the server starts."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.request

import numpy as np
import openai
import pytest
from transformers import AutoProcessor

from tests.helpers.hf_checkpoints import FAMILIES, build_hf_checkpoint
from tests.helpers.chat import screen
from tests.unit.rollout.server.test_openai_api import data_url, image
from vlrl.cli import main
from vlrl.mm import encode_image
from vlrl.rollout.http_endpoint import parse_metrics


def _metrics(base: str) -> dict[str, float]:
    with urllib.request.urlopen(base + "/metrics") as response:
        metrics = parse_metrics(response.read().decode())
    return {name.removeprefix("vlrl:"): value for name, value in metrics.items()}


def _processor_ids(path: str, shot: np.ndarray, text: str) -> list[int]:
    """The prompt the checkpoint's own processor makes of one image and ``text``."""
    processor = AutoProcessor.from_pretrained(path)
    conversation = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
    rendered = processor.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    return processor(text=[rendered], images=[shot], return_tensors="np")["input_ids"][0].tolist()


def _chat(client: openai.OpenAI, model: str, content: list[dict]) -> object:
    return client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": content}],
        temperature=0,
        max_tokens=4,
        extra_body={"return_token_ids": True},
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_vlrl_serve_answers_an_image_by_data_url_then_by_uuid(family, tmp_path):
    path = str(build_hf_checkpoint(family, tmp_path / family))
    command = [sys.executable, "-m", "vlrl.cli", "serve", "--model", path, "--port", "0"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        banner = server.stdout.readline()
        found = re.search(r"at (http://127\.0\.0\.1:\d+)/v1 ", banner)
        assert found, (banner, server.poll() is not None and server.stderr.read())
        base = found.group(1)
        client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
        shot = screen(320, 240, 7)
        text = {"type": "text", "text": "click OK"}
        sent = _chat(client, path, [image(data_url(shot), f"{family}-shot"), text])
        between = _metrics(base)
        reused = _chat(client, path, [image(None, f"{family}-shot"), text])
        after = _metrics(base)

        for answer in (sent, reused):
            assert answer.usage.completion_tokens >= 1 and answer.choices[0].token_ids
        assert sent.prompt_token_ids == reused.prompt_token_ids == _processor_ids(path, shot, "click OK")
        assert sent.choices[0].token_ids == reused.choices[0].token_ids  # greedy, same prompt and pixels
        # The first request carried the PNG; the second only its uuid, resolved by the server.
        assert between["images_received"] == 1 and between["image_bytes_received"] == len(encode_image(shot))
        assert after["images_received"] == 1 and after["image_bytes_received"] == between["image_bytes_received"]
        assert after["images_referenced"] == between["images_referenced"] + 1
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_an_unsupported_checkpoint_is_refused_before_the_server_starts(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"]}))
    assert main(["serve", "--model", str(tmp_path), "--port", "0"]) == 2
    message = capsys.readouterr().err
    assert message.startswith("error: config field 'model_path'"), message
    assert "model_type='llava'" in message
    assert all(name in message for name in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")), message
    assert "vlrl serve:" not in message
