"""Code that runs inside vLLM's worker processes: the in-place weight update.

vLLM mixes ``WeightLoader`` into every worker (``AsyncEngineArgs(worker_extension_cls=...)``);
``VLLMEngine.update_weights`` calls it on all of them at once through
``AsyncLLM.collective_rpc("vlrl_load_weights", args=(path,))``. Each worker streams the staged
safetensors file tensor by tensor into its model's own ``load_weights``, which maps Hugging Face
checkpoint names to vLLM's modules, fuses q/k/v and gate/up and keeps only this rank's
tensor-parallel shard, writing into the existing parameter storage (so CUDA graphs stay valid).
That holds for unquantized weights; a quantized engine would need vLLM's layerwise reload.

This module is imported by vLLM's workers, never by vlrl's own code paths, and imports no vLLM.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch


class WeightLoader:
    """Mixed into vLLM's ``Worker``: ``self.model_runner`` is the worker's."""

    def vlrl_load_weights(self, path: str) -> int:
        """Load every tensor of the safetensors file at ``path``; returns how many vLLM parameters it set."""
        from safetensors import safe_open

        model = self.model_runner.get_model()  # the model itself, outside any CUDA-graph wrapper

        def tensors(handle) -> Iterator[tuple[str, torch.Tensor]]:
            for name in handle.keys():
                yield name, handle.get_tensor(name)

        with torch.no_grad(), safe_open(path, framework="pt", device="cpu") as handle:
            loaded = model.load_weights(tensors(handle))
        return len(loaded)
