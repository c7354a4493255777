"""Settings that have moved: each old dotted path and where it lives now.

``--set`` consults this table when a path does not resolve, so an old path fails with an error
naming the new one instead of a bare "unknown key" (``--set trainer.trainer.lr=1e-4`` ->
``optim.lr``). A longer old path matches by its longest listed prefix and keeps the rest:
``trainer.trainer.loss.kind`` -> ``loss.kind``. Entries stay as long as old commands and notes
may still name them.

Recipe code reads and sets the same paths as attributes (``config.warm_start.lr_schedule =
"cosine"``), so the config class at an old path's parent derives from ``moved_fields(parent)``:
reading or setting a name that is no field there raises the ``AttributeError`` of
``moved_attribute``, which names the new path from this same table (a unit test holds every
entry's parent to it).
"""

from __future__ import annotations

from typing import Any, NamedTuple


class Moved(NamedTuple):
    """Where an old path's setting lives now, and what to know when moving a value over."""

    new: str
    note: str = ""


MOVED: dict[str, Moved] = {
    # vlrl train: the trainer's settings, two dots deep at most (``TrainJob.Config``)
    "trainer.trainer.lr": Moved("optim.lr"),
    "trainer.trainer.lr_decay_steps": Moved(
        "optim.schedule", "set optim.schedule=cosine: the rate then decays over the run's steps"
    ),
    "trainer.trainer.lr_min_ratio": Moved("optim.min_lr_ratio"),
    "trainer.trainer.weight_decay": Moved("optim.weight_decay"),
    "trainer.trainer.betas": Moved("optim.betas"),
    "trainer.trainer.max_grad_norm": Moved("optim.max_grad_norm"),
    "trainer.trainer.loss": Moved("loss"),
    "trainer.trainer.micro_batches": Moved("micro_batches"),
    "trainer.trainer.dtype": Moved("trainer.dtype"),
    "trainer.trainer.encode_chunk_tokens": Moved("trainer.encode_chunk_tokens"),
    "trainer.trainer.encoder": Moved("trainer.encoder"),
    "trainer.trainer.reference": Moved("trainer.reference"),
    "trainer.trainer": Moved(
        "trainer",
        "its fields moved up: the optimizer's to optim (optim.lr), loss to loss, micro_batches to"
        " micro_batches, dtype, encoder, reference and encode_chunk_tokens to trainer",
    ),
    "trainer.layout": Moved("layout"),
    # the accept-time hook (sampler, penalties, advantages) is its own section, ``advantage``
    "driver.hook": Moved("advantage"),
    # the warm start's schedule is spelled as the RL stage's (``optim.schedule``)
    "warm_start.lr_schedule": Moved("warm_start.schedule"),
}


def moved(path: str) -> tuple[str, Moved] | None:
    """``(new path, entry)`` for an old ``path`` (or one under an old path); None if it never moved."""
    parts = path.split(".")
    for n in range(len(parts), 0, -1):
        entry = MOVED.get(".".join(parts[:n]))
        if entry is not None:
            rest = parts[n:]
            return ".".join([entry.new, *rest]), entry
    return None


def moved_attribute(owner: str, path: str, name: str) -> AttributeError:
    """The error for reading ``name`` off the config at ``path`` in recipe code
    (``config.trainer.trainer``): the new path when it moved, else Python's own message."""
    found = moved(f"{path}.{name}")
    if found is None:
        return AttributeError(f"{owner!r} object has no attribute {name!r}")
    new, entry = found
    note = f" ({entry.note})" if entry.note else ""
    return AttributeError(f"{owner} has no field {name!r}: config.{path}.{name} has moved to config.{new}{note}")


def moved_fields(path: str) -> type:
    """A base class for the config section at ``path`` (``"warm_start"``) whose reads and sets of a
    name that is no field raise ``moved_attribute``'s error: the new path when the name moved, else
    Python's own message. A slots dataclass refuses such a set with a bare ``AttributeError``; this
    one says where the setting went."""

    def __getattr__(self: Any, name: str) -> Any:
        raise moved_attribute(type(self).__qualname__, path, name)

    def __setattr__(self: Any, name: str, value: Any) -> None:
        try:
            object.__setattr__(self, name, value)
        except AttributeError:
            raise moved_attribute(type(self).__qualname__, path, name) from None

    body = {"__slots__": (), "__getattr__": __getattr__, "__setattr__": __setattr__, "__doc__": moved_fields.__doc__}
    return type(f"MovedFields[{path}]", (), body)
