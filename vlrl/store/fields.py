"""Payload fields: which arrays a store accepts, and how a field is cut into row chunks.

Every field is an array whose first axis is its *rows* (tokens for per-token fields, image rows
for pixels). Distributed backends store each field as separate chunks of ``chunk_rows`` rows so
that a column read moves only that field and a range read moves only the chunks it overlaps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vlrl.store.errors import PayloadTypeError, RangeError

SUPPORTED_DTYPES: frozenset[str] = frozenset(
    {"bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"}
)
"""Dtypes every backend (and torch, which TransferQueue uses) round-trips exactly."""


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """Shape, dtype and chunking of one stored field: small metadata, never the array."""

    dtype: str
    shape: tuple[int, ...]
    chunk_rows: int

    @property
    def rows(self) -> int:
        return self.shape[0]

    @property
    def row_nbytes(self) -> int:
        return int(np.prod(self.shape[1:], dtype=np.int64)) * np.dtype(self.dtype).itemsize

    @property
    def nbytes(self) -> int:
        return self.rows * self.row_nbytes

    @property
    def num_chunks(self) -> int:
        return -(-self.rows // self.chunk_rows)

    def chunk_start(self, index: int) -> int:
        return index * self.chunk_rows

    def chunks_overlapping(self, start: int, stop: int) -> range:
        """Indices of the chunks that hold rows ``[start, stop)``."""
        if stop <= start:
            return range(0)
        return range(start // self.chunk_rows, (stop - 1) // self.chunk_rows + 1)


def as_payload_array(key: str, name: str, value: object) -> np.ndarray:
    """Validate one field value and return it as a C-contiguous numpy array.

    Accepts numpy arrays and CPU torch tensors of a supported dtype with at least one axis.
    """
    where = f"store field {key!r}/{name!r}"
    if not isinstance(name, str) or not name or "@" in name:
        raise PayloadTypeError(f"{where}: field names are non-empty strings without '@'")
    if not isinstance(value, np.ndarray):
        value = _tensor_to_numpy(where, value)
    if value.dtype.name not in SUPPORTED_DTYPES:
        raise PayloadTypeError(
            f"{where}: dtype {value.dtype} is not supported; expected one of {sorted(SUPPORTED_DTYPES)}"
        )
    if value.ndim == 0 or value.shape[0] == 0:
        raise PayloadTypeError(
            f"{where}: shape {value.shape}; expected an array with at least one row (shape (n >= 1, ...))"
        )
    return np.ascontiguousarray(value)


def _tensor_to_numpy(where: str, value: object) -> np.ndarray:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a core dependency
        torch = None
    if torch is not None and isinstance(value, torch.Tensor):
        if value.device.type != "cpu":
            raise PayloadTypeError(f"{where}: tensor on {value.device}; move it to the CPU before put")
        if value.dtype == torch.bfloat16:
            raise PayloadTypeError(f"{where}: bfloat16 is not supported; cast to float32 or float16")
        return value.detach().contiguous().numpy()
    raise PayloadTypeError(f"{where}: got {type(value).__name__}; expected a numpy array or a CPU torch tensor")


def spec_for(array: np.ndarray, chunk_rows: int) -> FieldSpec:
    return FieldSpec(dtype=array.dtype.name, shape=tuple(int(d) for d in array.shape), chunk_rows=chunk_rows)


def split_chunks(array: np.ndarray, spec: FieldSpec) -> list[np.ndarray]:
    """Views of ``array`` cut every ``chunk_rows`` rows."""
    return [array[spec.chunk_start(i) : spec.chunk_start(i) + spec.chunk_rows] for i in range(spec.num_chunks)]


def check_range(key: str, name: str, spec: FieldSpec, start: int, stop: int) -> None:
    if not (isinstance(start, (int, np.integer)) and isinstance(stop, (int, np.integer))):
        raise RangeError(f"store range {key!r}/{name!r}: start and stop must be integers, got {start!r}, {stop!r}")
    if not 0 <= start < stop <= spec.rows:
        raise RangeError(
            f"store range {key!r}/{name!r}[{start}:{stop}]: expected 0 <= start < stop <= {spec.rows} "
            f"(the field has {spec.rows} rows)"
        )


def join_chunks(chunks: list[np.ndarray], spec: FieldSpec, first_chunk: int, start: int, stop: int) -> np.ndarray:
    """Rows ``[start, stop)`` from consecutive chunks beginning at chunk ``first_chunk``."""
    offset = spec.chunk_start(first_chunk)
    joined = chunks[0] if len(chunks) == 1 else np.concatenate(chunks, axis=0)
    return joined[start - offset : stop - offset]
