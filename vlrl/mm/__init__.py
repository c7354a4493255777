"""Multimodal items: canonical image pixels, their content hash, metadata and store rows.

Every image is reduced once, at the edge, to canonical RGB ``uint8`` ``[H, W, 3]``
(``decode_image``). Its identity is the ``content_hash`` of that form; the control plane sees
only ``vlrl.records.MMItemMeta`` (hash, size, store key, patch grid, token count), and the
pixels live once in the payload store under ``records.image_store_key(hash)``, field
``records.PIXELS``.
"""

from vlrl.mm.canonical import require_canonical
from vlrl.mm.content_hash import content_hash
from vlrl.mm.delta import DeltaTracker
from vlrl.mm.errors import ImageError
from vlrl.mm.image_io import (
    ACCEPTED_FORMATS,
    DEFAULT_MAX_PIXELS,
    MAX_SIDE,
    ImageFormat,
    ImageSource,
    decode_image,
    encode_image,
)
from vlrl.mm.item import describe_image
from vlrl.mm.patch_grid import PatchRule, patch_rule_of, smart_resize
from vlrl.mm.store_images import delete_sequences, image_refs, sequence_refs, store_image

__all__ = [
    "ACCEPTED_FORMATS",
    "DEFAULT_MAX_PIXELS",
    "DeltaTracker",
    "MAX_SIDE",
    "ImageError",
    "ImageFormat",
    "ImageSource",
    "PatchRule",
    "patch_rule_of",
    "content_hash",
    "decode_image",
    "describe_image",
    "encode_image",
    "require_canonical",
    "smart_resize",
    "delete_sequences",
    "image_refs",
    "sequence_refs",
    "store_image",
]
