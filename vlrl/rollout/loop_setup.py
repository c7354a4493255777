"""What a loop host builds once at start, for all of its Agent Loops to share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vlrl.rollout.agent_loop import LoopRuntime
from vlrl.rollout.client import InferenceClient
from vlrl.rollout.http_endpoint import OpenAIEndpoint
from vlrl.rollout.ray_endpoint import RayEndpoint


@dataclass(frozen=True, slots=True)
class LoopSetup:
    """Picklable recipe of a loop host's shared state: one tokenizer, one client, one store client.

    Passed to ``HarnessPool.Config.build(loop_setup=...)``; each loop host calls it once.
    """

    model_path: str
    """Checkpoint folder whose processor (tokenizer and image rules) the host loads."""
    engines: tuple[Any, ...]
    """Ray actor handles of the engine replicas."""
    store: Any
    """A store client that can cross processes (RayStore or TransferQueueStore)."""
    client: InferenceClient.Config = field(default_factory=InferenceClient.Config)
    http: tuple[OpenAIEndpoint.Config, ...] = ()
    """Replicas reached over HTTP (``vlrl serve``, or ``vllm serve --enable-scale-out``), served
    beside (or instead of) ``engines``."""

    def __call__(self) -> dict[str, Any]:
        from transformers import AutoProcessor

        from vlrl.mm import patch_rule_of

        processor = AutoProcessor.from_pretrained(self.model_path)
        endpoints = [RayEndpoint(engine, f"engine-{i}") for i, engine in enumerate(self.engines)]
        pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
        endpoints += [config.build(image_token_id=pad) for config in self.http]
        runtime = LoopRuntime(
            client=InferenceClient(endpoints, self.client),
            tokenizer=processor.tokenizer,
            patch_rule=patch_rule_of(processor),
            store=self.store,
            processor=processor,
        )
        return {"runtime": runtime}
