"""Code that runs inside vLLM's worker processes: the in-place weight update.

vLLM mixes ``WeightLoader`` into every worker (``AsyncEngineArgs(worker_extension_cls=...)``);
``VLLMEngine.update_weights`` calls it on all of them at once through
``AsyncLLM.collective_rpc("vlrl_load_weights", args=(path,))``. Each worker streams the staged
safetensors file tensor by tensor into vLLM's in-place reload (``Worker.reload_weights``), which
maps Hugging Face checkpoint names to vLLM's modules through the model's ``load_weights`` (q/k/v
and gate/up fused, only this rank's tensor-parallel shard kept), writes into the existing
parameter storage (CUDA graphs stay valid) and then redoes what vLLM derived from the weights
after loading. That last step is why the plain ``model.load_weights`` is not enough: on CPU, vLLM
prepacks the linear layers' weights for its GEMM kernels, and ``load_weights`` alone reports
success while the prepacked copies keep serving the old weights.

This module is imported by vLLM's workers, never by vlrl's own code paths, and imports no vLLM.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch


class WeightLoader:
    """Mixed into vLLM's ``Worker`` (GPU or CPU): ``self.reload_weights`` is the worker's."""

    def vlrl_load_weights(self, path: str) -> int:
        """Reload the model in place from every tensor of the safetensors file at ``path``; returns
        how many tensors it read."""
        from safetensors import safe_open

        read = 0

        def tensors(handle) -> Iterator[tuple[str, torch.Tensor]]:
            nonlocal read
            for name in handle.keys():
                read += 1
                yield name, handle.get_tensor(name)

        with torch.no_grad(), safe_open(path, framework="pt", device="cpu") as handle:
            self.reload_weights(weights_iterator=tensors(handle))
        return read
