"""``vlrl serve`` as a user runs it: a process that serves until SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import openai


def test_vlrl_serve_answers_until_sigterm(tiny_path):
    command = [sys.executable, "-m", "vlrl.cli", "serve", "--model", str(tiny_path), "--port", "0"]
    env = {**os.environ, "VLRL_API_KEY": "from-env"}
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        banner = server.stdout.readline()
        found = re.search(r"at (http://127\.0\.0\.1:\d+/v1) ", banner)
        assert found, (banner, server.poll() is not None and server.stderr.read())
        client = openai.OpenAI(base_url=found.group(1), api_key="from-env", max_retries=0)
        assert [model.id for model in client.models.list().data] == [str(tiny_path)]
        answer = client.chat.completions.create(
            model=str(tiny_path), messages=[{"role": "user", "content": "click OK"}], max_tokens=2
        )
        assert answer.usage.completion_tokens >= 1
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
