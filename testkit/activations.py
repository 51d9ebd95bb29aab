"""The activations a training step holds for its backward pass, measured where autograd keeps
them: ``torch.autograd.graph.saved_tensors_hooks`` sees every tensor saved for a backward
pass, and the wrapper this module returns for one is freed with the graph that held it.

A test asserts on this instead of a process's peak RSS, which the allocator, the thread pool
and other tests' processes on a shared machine move by hundreds of MiB; the saved tensors are
what grows with batch size and sequence length, and nothing else does.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class HeldForBackward:
    """Bytes of activations held at once (distinct storages; parameters are not counted)."""

    current: int = 0
    peak: int = 0
    _live: dict[int, list[int]] = field(default_factory=dict)  # storage -> [bytes, references]

    def hold(self, ptr: int, nbytes: int) -> None:
        entry = self._live.setdefault(ptr, [nbytes, 0])
        if entry[1] == 0:
            self.current += nbytes
            self.peak = max(self.peak, self.current)
        entry[1] += 1

    def release(self, ptr: int) -> None:
        entry = self._live[ptr]
        entry[1] -= 1
        if entry[1] == 0:
            self.current -= entry[0]
            del self._live[ptr]


class _Saved:
    __slots__ = ("held", "ptr", "tensor")

    def __init__(self, tensor: Any, held: HeldForBackward, ptr: int) -> None:
        self.tensor, self.held, self.ptr = tensor, held, ptr
        held.hold(ptr, tensor.untyped_storage().nbytes())

    def __del__(self) -> None:
        self.held.release(self.ptr)


def _is_parameter(tensor: Any) -> bool:
    base = tensor._base if tensor._base is not None else tensor
    return bool(base.is_leaf and base.requires_grad)


@contextmanager
def held_for_backward() -> Iterator[HeldForBackward]:
    """Count what every backward pass started inside the block holds (this thread only)."""
    import torch

    held = HeldForBackward()

    def pack(tensor: Any) -> Any:
        if _is_parameter(tensor):
            return tensor
        return _Saved(tensor, held, tensor.untyped_storage().data_ptr())

    def unpack(saved: Any) -> Any:
        return saved.tensor if isinstance(saved, _Saved) else saved

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        yield held
