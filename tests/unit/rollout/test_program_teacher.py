"""An agent program's warm-start teacher: its settings are refused naming the field, a script
loads from its file, a URL teacher's reply is forwarded, and the tracer turns the teacher's
replies into the sequence the policy would have had to write: one multi-turn sequence, the loss
on the teacher's tokens only, and a reply the policy could not write fails the trajectory."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from PIL import Image
from transformers import AutoProcessor

from vlrl.config import AgentBehaviour, ConfigError, validate
from vlrl.mm import patch_rule_of
from vlrl.records import LOSS_MASK, TOKEN_IDS
from vlrl.rollout.external.tracer import ChatTracer
from vlrl.rollout.external.teacher import ProgramTeacher, TeacherFailed, TeacherReplies, check_reachable, load_script
from vlrl.rollout.server.prompt import ChatTemplate
from vlrl.store import LocalStore



def _screen() -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (56, 28), (40, 170, 60)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


SCREEN = _screen()


@pytest.mark.parametrize(
    ("teacher", "message"),
    [
        (ProgramTeacher(), "'script': got None .*expected 'path/to/teacher.py:function'.*one of the two"),
        (ProgramTeacher(script="t.py:f", url="http://x/v1"), "'script'.*one of the two"),
        (ProgramTeacher(script="teacher.py"), "'script': got 'teacher.py'.*expected 'path/to/teacher.py:function'"),
        (ProgramTeacher(url="localhost:8000/v1"), "'url': got 'localhost:8000/v1'.*expected an http"),
    ],
)
def test_a_bad_teacher_is_refused_naming_the_field(teacher, message):
    with pytest.raises(ConfigError, match=message):
        validate(teacher)


def test_a_script_loads_from_its_file_with_its_folder_importable(tmp_path):
    (tmp_path / "helper.py").write_text("POINT = (14, 28)\n")
    (tmp_path / "teacher.py").write_text(
        "from helper import POINT\ndef teacher(messages, seed, task):\n    return f'click{POINT} {seed} {len(messages)}'\n"
    )
    replies = TeacherReplies(ProgramTeacher(script=f"{tmp_path / 'teacher.py'}:teacher"), seed=5, task="")
    assert asyncio.run(replies({"messages": [{"role": "user", "content": "hi"}]})) == "click(14, 28) 5 1"


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("no/such/teacher.py:teacher", "'warm_start.teacher.script'.*a file or module that imports; FileNotFoundError"),
        ("no_such_module_here:teacher", "'warm_start.teacher.script'.*ModuleNotFoundError"),
        ("json:no_such_function", "'warm_start.teacher.script'.*a function named 'no_such_function' in json"),
    ],
)
def test_a_script_that_does_not_load_is_refused_before_anything_starts(script, message):
    with pytest.raises(ConfigError, match=message):
        check_reachable(ProgramTeacher(script=script))


def test_a_reply_that_is_not_text_is_a_teacher_failure(tmp_path):
    (tmp_path / "teacher.py").write_text("def teacher(messages, seed, task):\n    return None\n")
    replies = TeacherReplies(ProgramTeacher(script=f"{tmp_path / 'teacher.py'}:teacher"), seed=0, task="")
    with pytest.raises(TeacherFailed, match="returned NoneType None, not the reply's text"):
        asyncio.run(replies({"messages": []}))


def test_an_unreachable_url_is_refused_naming_the_field():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConfigError, match=r"'warm_start.teacher.url'.*answers GET /models; URLError"):
        check_reachable(ProgramTeacher(url=f"http://127.0.0.1:{port}/v1", timeout_s=2))


class _Teacher(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that answers with the model and message count it was sent."""

    def do_GET(self):
        self._send({"object": "list", "data": [{"id": "teacher"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append((body, self.headers.get("Authorization")))
        self._send({"choices": [{"message": {"role": "assistant", "content": f"{body['model']} {len(body['messages'])}"}}]})

    def _send(self, answer):
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_a_url_teacher_gets_the_request_as_the_program_sent_it(monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Teacher)
    server.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("TEACHER_KEY", "sk-test")
    try:
        teacher = ProgramTeacher(url=f"http://127.0.0.1:{server.server_port}/v1", model="big", api_key_env="TEACHER_KEY")
        check_reachable(teacher)
        body = {"model": "policy", "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}
        assert asyncio.run(TeacherReplies(teacher, seed=0, task="")(body)) == "big 2"
        assert server.seen == [({**body, "model": "big"}, "Bearer sk-test")]
    finally:
        server.shutdown()


@pytest.fixture(scope="module")
def template_and_processor(tiny_path):
    processor = AutoProcessor.from_pretrained(tiny_path)
    return ChatTemplate(processor), processor


def _tracer(template_and_processor, replies, max_tokens=24):
    template, processor = template_and_processor

    async def teacher(body, images):
        replies.append((body, [i.width for i in images]))
        return f"click({7 * len(replies)}, 14)"

    return ChatTracer(
        "demo/t/0",
        client=None,  # a teacher answers: the policy is never asked
        template=template,
        agent=AgentBehaviour(max_turns=4, max_tokens=max_tokens),
        patch_rule=patch_rule_of(processor),
        stop_token_id=processor.tokenizer.convert_tokens_to_ids("<|im_end|>"),
        teacher=teacher,
    )


def _request(messages):
    return json.dumps({"model": "policy", "messages": messages, "max_tokens": 24}).encode()


def test_teacher_replies_trace_as_one_sequence_with_the_loss_on_them(template_and_processor):
    _, processor = template_and_processor
    seen: list = []
    tracer = _tracer(template_and_processor, seen)
    screen = {"type": "image_url", "image_url": {"url": SCREEN}}
    messages = [{"role": "system", "content": "Answer click(x, y)."}, {"role": "user", "content": [screen, {"type": "text", "text": "go"}]}]

    async def two_turns():
        first = await tracer.answer(_request(messages))
        reply = first["choices"][0]["message"]["content"]
        messages.extend([{"role": "assistant", "content": reply}, {"role": "user", "content": [screen, {"type": "text", "text": "again"}]}])
        second = await tracer.answer(_request(messages))
        return reply, second["choices"][0]["message"]["content"]

    replies = asyncio.run(two_turns())
    assert replies == ("click(7, 14)", "click(14, 14)")  # the program reads back what the teacher wrote
    assert [widths for _, widths in seen] == [[56], [56, 56]] and seen[1][0]["messages"][2]["content"] == "click(7, 14)"
    store = LocalStore()
    metas = tracer.trajectory.finish(
        store, key="seq/t", group_id="demo/t/0", source="t", sample_index=0, reward=1.0, success=True,
        finish="done", patch_rule=patch_rule_of(processor), task="",
    )  # fmt: skip
    assert len(metas) == 1 and metas[0].turns == 2  # the second request continued the first: spliced
    row = store.get([metas[0].key], fields=[TOKEN_IDS, LOSS_MASK])[metas[0].key]
    stop = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    taught = [processor.tokenizer.encode(r, add_special_tokens=False) + [stop] for r in replies]
    np.testing.assert_array_equal(row[TOKEN_IDS][row[LOSS_MASK]], np.concatenate(taught))  # the loss: on those only


def test_a_reply_longer_than_the_policy_may_write_fails_the_trajectory(template_and_processor):
    tracer = _tracer(template_and_processor, [], max_tokens=3)
    with pytest.raises(ValueError, match=r"the teacher's reply is \d+ tokens with the end of turn, over agent.max_tokens \(3\)"):
        asyncio.run(tracer.answer(_request([{"role": "user", "content": "go"}])))
    assert "over agent.max_tokens" in tracer.failure
