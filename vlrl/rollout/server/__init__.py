"""``vlrl serve``: an OpenAI-compatible chat-completions server over the embedded engine.

It speaks vLLM's dialect where vLLM has one, so one client (``vlrl.rollout.http_endpoint``)
talks to either server, and adds a token-in extension for RL, where generated text must never be
re-tokenized. Non-streaming only.

Image reuse by uuid (vLLM >= 0.11). An image part may carry a ``uuid``; a later request may send
the part without bytes::

    {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}, "uuid": "3f2a..."}
    {"type": "image_url", "image_url": null, "uuid": "3f2a..."}

A reference the server no longer holds (evicted, or the server restarted) is answered with
HTTP 400 in OpenAI's error shape; the message carries vLLM's sentence for each missing image and
the ``missing_uuids`` field lists them::

    {"error": {"message": "Cache miss for image at index 0 but data is not provided (uuid '3f2a...').
                           Resend those images with their image_url.",
               "type": "BadRequestError", "param": "messages", "code": 400,
               "missing_uuids": ["3f2a..."]}}

Token-in/token-out. ``prompt_token_ids`` (a vlrl extension) is the whole prompt with every image's
``<|image_pad|>`` run already expanded; the ``messages`` then carry only the images, in prompt
order. ``return_token_ids`` (vLLM's flag) adds ``choices[0].token_ids`` and ``prompt_token_ids``;
``logprobs: true`` adds OpenAI's ``choices[0].logprobs.content[i].logprob``: the sampled token's
log-probability under the distribution it was drawn from (temperature and top-p applied, as
vLLM's ``processed_logprobs``; at temperature 1 without top-p the raw policy's, as vLLM's
default). The nucleus and temperature the embedded engine reports beside it are not sent::

    {"model": "m", "prompt_token_ids": [1, 91, ..., 3, 3, 3, ..., 207],
     "messages": [{"role": "user", "content": [
         {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}, "uuid": "3f2a..."}]}],
     "trajectory_id": "traj-7", "max_tokens": 64, "temperature": 1.0, "seed": 0,
     "stop_token_ids": [2], "logprobs": true, "return_token_ids": true}

    {"id": "chatcmpl-...", "object": "chat.completion", "model": "m", "policy_version": 0,
     "choices": [{"index": 0, "message": {"role": "assistant", "content": "click"},
                  "finish_reason": "stop", "token_ids": [55, 2],
                  "logprobs": {"content": [{"token": "click", "logprob": -0.31, "bytes": [...],
                                            "top_logprobs": []}, ...]}}],
     "prompt_token_ids": [1, 91, ...],
     "usage": {"prompt_tokens": 81, "completion_tokens": 2, "total_tokens": 83,
               "prompt_tokens_details": {"cached_tokens": 0}}}

``trajectory_id`` (vlrl) lets a trajectory's turns reuse its cached KV prefix; ``policy_version``
(vlrl) is the weights version that sampled the answer. ``stop`` strings must each be one token
of the model's tokenizer (they become stop token ids); longer ones are refused.
"""

from vlrl.rollout.server.app import OpenAIServer

__all__ = ["OpenAIServer"]
