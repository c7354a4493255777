"""Errors of the payload store: each names the key, field or range that was wrong."""


class StoreError(Exception):
    """Base class of every payload-store error."""


class KeyMissingError(StoreError, KeyError):
    """A key that was never written, or was deleted."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


class FieldMissingError(StoreError, KeyError):
    """A field that the key does not have."""

    def __str__(self) -> str:
        return str(self.args[0])


class DuplicateWriteError(StoreError):
    """A second write of the same key/field: payloads are written once."""


class RangeError(StoreError, IndexError):
    """A token range outside the field, or empty/reversed."""


class PayloadTypeError(StoreError, TypeError):
    """A value that is not an array of a supported dtype, or a dtype the caller did not expect."""


class StoreStartupError(StoreError, RuntimeError):
    """A backend that could not start (for example, too few Ray CPUs for its actors)."""


class ShardLostError(StoreError):
    """An index shard died: it owned its keys' payloads, so they are lost (it is not restarted)."""


class StoreTimeoutError(StoreError, TimeoutError):
    """A store call got no answer in time (a shard busy or unreachable); the call may be retried."""


class WritesTakenBackError(StoreError):
    """A write through a ``WriteLedger`` after its owner took the ledger's writes back."""
