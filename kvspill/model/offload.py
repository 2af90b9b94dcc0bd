"""Weight offload (`--cpu-offload-gb`, vLLM's name and meaning): whole decoder layers kept in
pinned host memory and copied to the GPU one layer ahead on a copy stream.

The first layers whose weights add up to at least the asked bytes are offloaded (whole layers:
the plan rounds up the same way). Each one's parameters are packed into one pinned buffer, so a
layer moves in one large H2D copy (55 GB/s pinned on the bench hosts, DESIGN.md). Two GPU slots,
each the size of the largest offloaded layer, take turns (double buffer): while layer j runs from
slot j % 2, layer j + 1 is copied into the other; the last offloaded layer starts the copy of the
first one for the next step, which overlaps the resident layers and the lm_head.

Invariants:
- A slot is overwritten only after the compute stream finished the layer that read it
  (`slot_free` events recorded after each layer); a layer runs only after its copy finished
  (`copied` events). Hooks swap the parameters' `.data` to the slot's views before each layer.
- No CUDA graphs with offload (the swaps are host-side); the PCIe copy dominates a step anyway.
- Dense parameters only: a quantized model (model/quant.py) is refused with advice.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from kvspill.errors import InvalidParameterError
from kvspill.model.fp8 import Fp8Linear
from kvspill.model.quant import QuantEmbedding, QuantLinear


def choose_layers(layer_bytes: list[int], offload_bytes: int) -> int:
    """How many leading layers to offload so that at least `offload_bytes` leave the GPU."""
    total, count = 0, 0
    for size in layer_bytes:
        if total >= offload_bytes:
            break
        total += size
        count += 1
    return count


def module_bytes(module: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


class LayerOffloader:
    """Pinned host copies of some layers' weights and the two GPU slots they run from."""

    def __init__(self, layers: list[nn.Module], device: torch.device) -> None:
        assert layers, "nothing to offload"
        self.layers = layers
        self.device = device
        self.params = [list(layer.parameters()) for layer in layers]
        self.host = [self._pack(params) for params in self.params]  # pinned uint8, one per layer
        slot_bytes = max(h.numel() for h in self.host)
        self.slots = [torch.empty(slot_bytes, dtype=torch.uint8, device=device) for _ in range(2)]
        self.copy_stream = torch.cuda.Stream(device)
        self.copied = [torch.cuda.Event() for _ in layers]
        self.slot_free = [torch.cuda.Event() for _ in range(2)]
        self.pending: set[int] = set()  # layers whose copy was issued and not yet waited for
        self.host_bytes = sum(h.numel() for h in self.host)
        for j, layer in enumerate(layers):
            layer.register_forward_pre_hook(lambda _m, _a, j=j: self._before(j))
            layer.register_forward_hook(lambda _m, _a, _o, j=j: self._after(j))

    @staticmethod
    def _pack(params: list[nn.Parameter]) -> Tensor:
        """One pinned buffer holding every parameter's bytes; the parameters become views of it."""
        total = sum(p.numel() * p.element_size() for p in params)
        host = torch.empty(total, dtype=torch.uint8, pin_memory=True)
        offset = 0
        for p in params:
            size = p.numel() * p.element_size()
            view = host[offset : offset + size].view(p.dtype).view(p.shape)
            view.copy_(p.data)
            p.data = view
            offset += size
        return host

    def _bind(self, j: int, slot: Tensor) -> None:
        offset = 0
        for p in self.params[j]:
            size = p.numel() * p.element_size()
            p.data = slot[offset : offset + size].view(p.dtype).view(p.shape)
            offset += size

    def _prefetch(self, j: int) -> None:
        """Copy layer j into slot j % 2 once the layer that last read that slot is done."""
        slot = self.slots[j % 2]
        with torch.cuda.stream(self.copy_stream):
            self.copy_stream.wait_event(self.slot_free[j % 2])
            slot[: self.host[j].numel()].copy_(self.host[j], non_blocking=True)
            self.copied[j].record(self.copy_stream)
        self.pending.add(j)

    def _before(self, j: int) -> None:
        if j not in self.pending:  # the first step, or after a forward that stopped early
            self._prefetch(j)
        torch.cuda.current_stream(self.device).wait_event(self.copied[j])
        self.pending.discard(j)
        self._bind(j, self.slots[j % 2])
        if j + 1 < len(self.layers) and j + 1 not in self.pending:
            self._prefetch(j + 1)  # its slot was last read by layer j - 1, already done or queued

    def _after(self, j: int) -> None:
        self.slot_free[j % 2].record(torch.cuda.current_stream(self.device))
        if j == len(self.layers) - 1 and 0 not in self.pending:
            self._prefetch(0)  # for the next step: after this layer, whichever slot layer 0 takes


def place_with_offload(model: nn.Module, device: torch.device, cpu_offload_bytes: int) -> list[nn.Module]:
    """Give a `meta` model storage: on `device`, except the leading decoder layers that hold at
    least `cpu_offload_bytes`, which go to the CPU (pinned by `offload_layers` once loaded)."""
    layers = model.get_submodule("model.layers")
    assert isinstance(layers, nn.ModuleList)
    count = choose_layers([module_bytes(layer) for layer in layers], cpu_offload_bytes)
    offloaded = [layers[i] for i in range(count)]
    for i in range(count):
        layers[i] = nn.Identity()  # keeps them out of the storage on `device`: they never touch the GPU
    empty_storage(model, device)
    for i, layer in enumerate(offloaded):
        layers[i] = empty_storage(layer, torch.device("cpu"))
    return offloaded


def empty_storage(module: nn.Module, device: torch.device) -> nn.Module:
    """`module.to_empty(device=device)` (uninitialized storage for every parameter and buffer,
    tied ones untied as to_empty leaves them), through torch.empty: to_empty's empty_like of a
    meta tensor imports torch.fx's symbolic shapes and sympy, 1.5 s of a 2-core CPU start
    (bench/results/2026-12-02-startup-cpu)."""
    for sub in module.modules():
        for name, param in sub._parameters.items():
            if param is not None:
                fresh = torch.empty(param.shape, dtype=param.dtype, device=device)
                sub._parameters[name] = nn.Parameter(fresh, requires_grad=param.requires_grad)
        for name, buffer in sub._buffers.items():
            if buffer is not None:
                sub._buffers[name] = torch.empty(buffer.shape, dtype=buffer.dtype, device=device)
    return module


def offload_layers(model: nn.Module, layers: list[nn.Module], device: torch.device) -> LayerOffloader:
    """Pin `layers`' (already loaded, on the CPU) weights and run them through two GPU slots."""
    if any(isinstance(m, (QuantLinear, QuantEmbedding, Fp8Linear)) for m in model.modules()):
        raise InvalidParameterError(
            "cpu_offload_gb",
            "--cpu-offload-gb works on dense weights; a quantized model is small enough to stay on the "
            "GPU: drop --cpu-offload-gb (or pass --quantization none to offload dequantized weights)",
        )
    return LayerOffloader(layers, device)
