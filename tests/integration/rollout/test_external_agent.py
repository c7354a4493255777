"""An agent program that imports only ``openai`` plays through ``ExternalRun``: a real engine (in
process), the real inference client, the traced endpoint over HTTP and the program as a real
subprocess. What the store holds must be exactly what the engine saw and generated; a history
rewrite must make two sequences; a crash, a hang or a garbage reward must fail with its reason
and leave no key."""

from __future__ import annotations

import asyncio
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from transformers import AutoProcessor

from vlrl.config import AgentBehaviour, DataSource, ExternalAgent
from vlrl.mm import patch_rule_of
from vlrl.pool.tenant import TenantContext
from vlrl.records import LOGPROBS, LOSS_MASK, TOKEN_IDS
from vlrl.rollout.agent_loop import LoopRuntime
from vlrl.rollout.client import InferenceClient
from vlrl.rollout.engine import EmbeddedEngine, EngineCore
from vlrl.rollout.external import AgentFailed, ExternalRun
from vlrl.store import LocalStore

AGENT = textwrap.dedent(
    '''
    """A test agent in no one's style: openai and the standard library only."""
    import base64, json, os, struct, sys, time, zlib
    from openai import OpenAI

    def shot(shade):
        rows = b"".join(b"\\x00" + bytes([shade, 255 - shade, 90]) * 64 for _ in range(48))
        def chunk(tag, data):
            return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))
        png = b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 64, 48, 8, 2, 0, 0, 0))
        png += chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
        return {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()}}

    mode, turns = sys.argv[1], int(sys.argv[2])
    if mode == "crash":
        sys.exit("the agent's own bug: KeyError 'button'")
    if mode == "hang":
        import subprocess
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # a child of its own
        time.sleep(600)
    client = OpenAI()
    messages = [{"role": "system", "content": "Click things."}]
    replies = []
    for turn in range(turns):
        messages.append({"role": "user", "content": [shot(40 * turn), {"type": "text", "text": f"turn {turn}"}]})
        if mode == "rewrite" and turn == 2:  # memory: keep the system prompt and this turn only
            messages = [messages[0], messages[-1]]
        answer = client.chat.completions.create(model="policy", messages=messages, max_tokens=6, logprobs=True)
        reply = answer.choices[0].message.content
        replies.append([reply, [t.logprob for t in answer.choices[0].logprobs.content]])
        messages.append({"role": "assistant", "content": reply, "log_probs": None})  # bookkeeping, as AgentLab keeps
    print(json.dumps(replies))
    print("banana" if mode == "garbage" else json.dumps({"reward": 0.5, "success": True}))
    '''
)


@dataclass
class Recording:
    """The engine as an ``Endpoint`` that keeps every request and result it handled."""

    core: EngineCore
    name: str = "engine-0"
    takes_tiles: bool = False
    seen: list = field(default_factory=list)

    async def generate(self, request):
        result = await self.core.generate(request)
        self.seen.append((request, result))
        return result

    async def load(self) -> int:
        return self.core.load()

    async def forget(self, trajectory_id: str) -> None:
        self.core.forget(trajectory_id)


@pytest.fixture(scope="module")
def agent_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("agent") / "agent.py"
    path.write_text(AGENT)
    return path


def play(tiny_path, agent_file, mode: str, turns: int = 3, time_limit_s: float = 60.0):
    """One ExternalRun of the test agent; (its metas or its error, the store, what the engine saw)."""
    processor = AutoProcessor.from_pretrained(tiny_path)
    store = LocalStore()
    program = ExternalAgent(command=[sys.executable, str(agent_file), mode, str(turns)], time_limit_s=time_limit_s)
    source = DataSource(name="own", external=program, agent=AgentBehaviour(max_turns=4, max_tokens=6))
    threads = ThreadPoolExecutor(2)

    async def main():
        core = EngineCore(EmbeddedEngine.Config(max_batch=4), str(tiny_path))
        engine = Recording(core)
        runtime = LoopRuntime(
            client=InferenceClient([engine]),
            tokenizer=processor.tokenizer,
            patch_rule=patch_rule_of(processor),
            store=store,
            processor=processor,
        )

        async def blocking(fn, *args):
            return await asyncio.get_running_loop().run_in_executor(threads, fn, *args)

        ctx = TenantContext("own/7/0.1", {"runtime": runtime}, blocking, None)
        try:
            return await ExternalRun(source, seed=7, group_id="own/7", sample_index=0).run(ctx), engine
        except AgentFailed as error:
            return error, engine
        finally:
            await core.close()

    try:
        value, engine = asyncio.run(main())
    finally:
        threads.shutdown()
    return value, store, engine.seen


def test_traced_turns_are_what_the_engine_saw_and_generated(tiny_path, agent_file):
    metas, store, seen = play(tiny_path, agent_file, "chat", turns=3)
    assert len(seen) == 3 and len(metas) == 1  # each reply went back as returned: one sequence
    meta = metas[0]
    assert (meta.turns, meta.reward, meta.success) == (3, 0.5, True)
    row = store.get([meta.key], fields=[TOKEN_IDS, LOGPROBS, LOSS_MASK])[meta.key]
    ids, logprobs, mask = row[TOKEN_IDS], row[LOGPROBS], row[LOSS_MASK]
    assert len(ids) == meta.num_tokens
    for (request, result), start in zip(seen, meta.context_lengths):
        generated = len(result.token_ids)
        # the engine's prompt is the stored prefix, and the turn after it is exactly its sample
        np.testing.assert_array_equal(request.prompt_ids, ids[:start])
        np.testing.assert_array_equal(ids[start : start + generated], result.token_ids)
        np.testing.assert_array_equal(logprobs[start : start + generated], result.logprobs)
        assert mask[start : start + generated].all()
    assert mask.sum() == sum(len(result.token_ids) for _, result in seen) == meta.num_response_tokens
    assert meta.turn_versions == tuple(result.policy_version for _, result in seen)
    assert len(meta.images) == 3  # three distinct screenshots, stored once each by content hash
    delete_all(store, metas)


def test_a_history_rewrite_starts_a_second_sequence_and_the_count_says_so(tiny_path, agent_file):
    metas, store, seen = play(tiny_path, agent_file, "rewrite", turns=4)
    assert [m.turns for m in metas] == [2, 2]  # turns 0-1 continue; turn 2 rewrote; turn 3 continues it
    assert [len(m.images) for m in metas] == [2, 2]
    second = store.get([metas[1].key], fields=[TOKEN_IDS])[metas[1].key][TOKEN_IDS]
    np.testing.assert_array_equal(seen[2][0].prompt_ids, second[: metas[1].context_lengths[0]])
    delete_all(store, metas)


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("crash", r"agent crashed: exit status 1; its stderr ends: the agent's own bug"),
        ("hang", r"agent hung: ran past its time limit of 3 s and was killed"),
        ("garbage", r"agent's reward is garbage: its last stdout line 'banana'"),
    ],
)
def test_a_failed_run_says_why_and_leaves_no_key(tiny_path, agent_file, mode, reason):
    started = time.perf_counter()
    # only the hang runs into its limit; the others get enough to start Python on a loaded machine
    error, store, seen = play(tiny_path, agent_file, mode, turns=2, time_limit_s=3 if mode == "hang" else 120)
    assert isinstance(error, AgentFailed)
    assert __import__("re").search(reason, str(error)), str(error)
    assert store.stats().keys == 0
    assert len(seen) == (2 if mode == "garbage" else 0)
    assert time.perf_counter() - started < 120  # the hang was cut at its limit, not at the child's 600 s


def delete_all(store, metas):
    from vlrl.mm import delete_sequences

    delete_sequences(store, metas)
    assert store.stats().keys == 0
